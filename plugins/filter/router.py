# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The status of sglang-router from what its API answered, with the logic of ``module_utils/_router.py``;
documented in the YAML file of its name next to this one."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils import _router, _server_api


def router_status(readiness, workers, metrics, url, worker_urls):
    """The answers are registered results of ansible.builtin.uri (those of a failed or skipped request included)."""
    listed = ((workers or {}).get('json') or {}).get('workers') or []
    breakers = _server_api.router_breakers((metrics or {}).get('content') or '')
    return _router.status(url, (readiness or {}).get('status', -1), listed, breakers, worker_urls or {})


class FilterModule:
    def filters(self):
        return {'router_status': router_status}
