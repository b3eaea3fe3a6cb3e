# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters about the fleet as a whole; each filter is documented in the YAML file of its name
next to this one."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils import _fleet


def server_hosts(groups, servers='sglang_servers', routers='sglang_routers'):
    """The host pattern of the servers: their group where the inventory has one, else every host
    but the routers."""
    if servers in groups:
        return servers
    return 'all:!%s' % routers if routers in groups else 'all'


def group_gate_problem(group, batch, hostvars, gate):
    """Why the ranks of a multi-node group cannot pass a gate of the deploy together, or ''."""
    marks = dict((h, hostvars[h].get('__deploy_group_gate', '')) for h in group if h in batch)
    return _fleet.group_gate_problem(list(group), list(batch), marks, gate)


def rollout_stops(batch, hostvars, max_fail_percentage=0):
    """Whether the hosts of the batch that failed (``llmops_deploy_failure`` set) end the rollout."""
    failed = len([h for h in batch if hostvars[h].get('llmops_deploy_failure') is not None])
    return _fleet.rollout_stops(failed, len(batch), max_fail_percentage)


class FilterModule:
    def filters(self):
        return {'server_hosts': server_hosts, 'group_gate_problem': group_gate_problem, 'rollout_stops': rollout_stops}
