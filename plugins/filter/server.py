# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that expose what the sglang_server role derives (``module_utils/_server_role.py``) to its tasks;
each filter is documented in the YAML file of its name next to this one."""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.llmops.serving.plugins.module_utils import _server_role
from ansible_collections.llmops.serving.plugins.plugin_utils._filters import as_filter


def server_result(plan, health, rank_health, pid, engine, check_mode=False):
    return _server_role.result(plan, health, rank_health, pid, engine, boolean(check_mode, strict=False))


class FilterModule:
    def filters(self):
        return {name: as_filter(function, (KeyError, TypeError, ValueError)) for name, function in (
            ('server_result', server_result),
        )}
