# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the sglang_router role decides from registered results, with the logic of ``module_utils/_router.py``:
its start or restart, its result, the end of a drain's wait;
each filter is documented in the YAML file of its name next to this one."""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.llmops.serving.plugins.module_utils import _router


def router_decision(plan, files, changes, restart=False):
    return _router.decision(plan, files, changes or [], boolean(restart, strict=False))


def router_result(decided, ready):
    return _router.result(decided, ready)


def router_drain_outcome(idle, host, timeout, fail_on_timeout=False):
    return _router.drain_outcome(idle, host, timeout, boolean(fail_on_timeout, strict=False))


class FilterModule:
    def filters(self):
        return {'router_decision': router_decision, 'router_result': router_result,
                'router_drain_outcome': router_drain_outcome}
