# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters about the fleet as a whole; each filter is documented in the YAML file of its name
next to this one."""

from __future__ import annotations


def server_hosts(groups, servers='sglang_servers', routers='sglang_routers'):
    """The host pattern of the servers: their group where the inventory has one, else every host
    but the routers."""
    if servers in groups:
        return servers
    return 'all:!%s' % routers if routers in groups else 'all'


class FilterModule:
    def filters(self):
        return {'server_hosts': server_hosts}
