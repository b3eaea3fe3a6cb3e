# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that read Prometheus text with the parser of ``module_utils/_server_api.py``; each
filter is documented in the YAML file of its name next to this one."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils import _server_api


def router_breakers(metrics_text):
    return _server_api.router_breakers(metrics_text)


class FilterModule:
    def filters(self):
        return {'router_breakers': router_breakers}
