# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The speculation guard's remediation of one server (playbooks/remediate.yml): where it takes the
server and what its journal records. Thin wrappers over module_utils/_guard.py; each filter is
documented in the YAML file of its name next to this one."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils import _guard


def remediation_plan(previous, fallback='off', rollback_to='last_good'):
    return _guard.remediation_plan(previous, fallback, rollback_to)


def remediation_start(decision, host, fallback='off', trigger='by hand'):
    return _guard.remediation_start(decision, host, fallback, trigger)


def remediation_outcome(result, plan):
    return _guard.remediation_outcome(result, plan)


class FilterModule:
    def filters(self):
        return {'remediation_plan': remediation_plan, 'remediation_start': remediation_start, 'remediation_outcome': remediation_outcome}
