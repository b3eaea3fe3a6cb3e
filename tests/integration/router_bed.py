# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The real sglang-router on the systemd host (sd1) in front of servers on the namespace hosts, for tests
that bring their own servers (test_router.py has its own bed, the router on ns3), and the streaming load
client of tests/perf/router_failover.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'perf'))
from router_failover import Load  # noqa: E402,F401  pylint: disable=unused-import,wrong-import-position

ROUTER_HOST = 'sd1'


def router_vars(name, port):
    """The role's variables for a router of its own ``name`` and ``port`` (its metrics on ``port`` - 1000) on sd1."""
    return {'sglang_router_name': name, 'sglang_router_port': port, 'sglang_router_prometheus_port': port - 1000,
            'sglang_router_policy': 'round_robin',
            'sglang_router_wheelhouse': os.path.join(ROOT, '.cache', 'router-wheels'),
            'sglang_router_health_check_interval_secs': 2, 'sglang_router_health_failure_threshold': 2}


@pytest.fixture
def systemd_router(fleet, run_playbook, tmp_path):
    """Yield ``start(servers, extra_vars)``: installs the router's wheelhouse (tests/integration/install_router.sh,
    seconds when it is there), writes the fleet's inventory with groups sglang_servers (``servers``) and
    sglang_routers (sd1), runs playbooks/router.yml with ``extra_vars`` (which name the router, see
    ``router_vars``) and returns ``(inventory path, its groups, the router's URL)``. Stops the routers after
    the test (sd1 is not reset between tests)."""
    names = []

    def start(servers, extra_vars):
        subprocess.run([os.path.join(ROOT, 'tests', 'integration', 'install_router.sh')], check=True, timeout=900)
        with open(fleet.inventory, encoding='utf-8') as f:
            groups = dict(yaml.safe_load(f), sglang_servers={'hosts': {host: None for host in servers}},
                          sglang_routers={'hosts': {ROUTER_HOST: None}})
        inventory = tmp_path / 'router-inventory.yml'
        inventory.write_text(json.dumps({'all': {'children': groups}}))  # JSON is YAML
        names.append(extra_vars['sglang_router_name'])
        run_playbook('playbooks/router.yml', inventory=str(inventory), extra_vars=extra_vars, expect_rc=0, timeout=600)
        return str(inventory), groups, 'http://%s:%d' % (fleet.hosts[ROUTER_HOST]['address'], extra_vars['sglang_router_port'])

    yield start
    for name in names:
        fleet.ssh(ROUTER_HOST, 'systemctl disable --now llmops-sglang-router-%s.service; true' % name)


def healthy_workers(router):
    """The URLs of the workers the router lists as healthy, sorted."""
    with urllib.request.urlopen(router + '/workers', timeout=10) as resp:
        return sorted(w['url'] for w in json.loads(resp.read())['workers'] if w['is_healthy'])
