"""A multi-node replica group on the test fleet: ns1 (rank 0) and ns2 (rank 1) serve one replica
with the SGLang simulator (a real TCP rendezvous at --dist-init-addr, see tests/sim/README.md).

Shows: deploy.yml brings the group up (rank 0 ready and smoke-tested, rank 1 serving only the dummy
/health; both argvs with their --node-rank, the same --dist-init-addr and the group's --tp-size);
a rerun changes nothing and keeps both PIDs; a change on rank 1 only restarts both ranks; rank 1
failing to start fails the group with rank 1's error, well before the health timeout (with
failures allowed, rank 0 fails naming rank 1); rank 1 killed after ready: the next deploy
restarts the whole group; stop.yml
leaves no process on either host.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from test_deploy import deploy_vars

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(ROOT, 'tests', 'sim')
GROUP = ['ns1', 'ns2']
HEALTH_TIMEOUT = 120
# The group's inventory: rank 0 first. Host-level variables below change one rank only.
GROUP_INVENTORY = '''kimi_tp16:
  hosts:
    ns1:
    ns2:
  vars:
    sglang_server_group_hosts: [ns1, ns2]
'''
_STATE = {}


def group_vars(port, **overrides):
    """deploy_vars (test_deploy) for the group kimi_tp16: no API key, TP 16 over two hosts."""
    settings = dict(
        llmops_hosts='kimi_tp16', sglang_server_api_key='', sglang_server_speculative_depth=4,
        sglang_server_served_model_name='tiny-group', sglang_server_tp_size=16, sglang_server_dist_init_port=port,
        sglang_server_dist_timeout=60, sglang_server_health_timeout=HEALTH_TIMEOUT,
        # A host's own llmops_test_env (inventory host_vars) is added to its server environment.
        sglang_server_env="{{ {'PYTHONPATH': '%s', 'NVSIM_STATE_DIR': '/run/llmops-nvsim', "
                          "'SGLANG_SIM_SPEED': '0.05'} | combine(llmops_test_env | default({})) }}" % SIM)
    settings.update(overrides)
    return deploy_vars(**settings)


def set_rank1_env(inventory, env):
    """Host variables of ns2 only (rank 1)."""
    path = os.path.join(inventory, 'host_vars')
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, 'ns2.yml'), 'w', encoding='utf-8') as f:
        f.write('llmops_test_env: %s\n' % json.dumps(env))


def server_pid(fleet, host):
    data = json.loads(fleet.ssh(host, 'cat /run/llmops/sglang-main.pid 2>/dev/null || echo null').stdout)
    return data['pid'] if data else None


def argv_of(fleet, host):
    pid = server_pid(fleet, host)
    raw = fleet.ssh(host, 'cat /proc/%d/cmdline' % pid).stdout
    return raw.split('\0')


def flag(argv, name):
    return argv[argv.index(name) + 1]


def status_code(fleet, host, path):
    code = ('import urllib.request, urllib.error\n'
            'try:\n    print(urllib.request.urlopen("http://127.0.0.1:30000%s", timeout=10).status)\n'
            'except urllib.error.HTTPError as e:\n    print(e.code)\n' % path)
    return int(fleet.ssh(host, '/usr/bin/python3 -', input=code).stdout.strip())


def server_processes(fleet, host):
    """Command lines of every simulator process (launcher or scheduler) on host."""
    code = ('import os\nfor p in os.listdir("/proc"):\n    if p.isdigit():\n        try:\n'
            '            c = open("/proc/%s/cmdline" % p, "rb").read().replace(b"\\0", b" ").decode()\n'
            '        except OSError:\n            continue\n'
            '        if "sglang" in c:\n            print(c)\n')
    return [line for line in fleet.ssh(host, '/usr/bin/python3 -', input=code).stdout.splitlines() if line.strip()]


def free_port_on(fleet, host):
    code = 'import socket\ns = socket.socket()\ns.bind(("", 0))\nprint(s.getsockname()[1])\n'
    return int(fleet.ssh(host, '/usr/bin/python3 -', input=code).stdout.strip())


@pytest.fixture
def group(fleet, run_playbook, prepare_simulator, request, tmp_path_factory):
    """The group deployed once (the tests below build on its state in order):
    ``(fleet, inventory, port, first deploy result)``."""
    if 'group' not in _STATE:
        request.getfixturevalue('clean_fleet')
        inventory = tmp_path_factory.mktemp('multinode-inventory')
        with open(fleet.inventory, encoding='utf-8') as f:
            (inventory / 'fleet.yml').write_text(f.read())
        (inventory / 'group.yml').write_text(GROUP_INVENTORY)
        port = free_port_on(fleet, 'ns1')
        prepare_simulator(inventory=str(inventory), extra_vars=group_vars(port))
        first = run_playbook('playbooks/deploy.yml', inventory=str(inventory), extra_vars=group_vars(port),
                             expect_rc=0, timeout=600)
        _STATE['group'] = (fleet, str(inventory), port, first)
    return _STATE['group']


def test_group_deploys_with_one_rendezvous_and_rank0_serving(group):
    fleet, dummy, port, result = group
    assert all(result.recap[host]['failed'] == 0 for host in GROUP)
    text = ' '.join(result.stdout.split())
    assert 'ns1: ready (start, process' in text and 'accept length' in text
    addr = '%s:%d' % (fleet.hosts['ns1']['address'], port)
    for rank, host in enumerate(GROUP):
        argv = argv_of(fleet, host)
        assert (flag(argv, '--nnodes'), flag(argv, '--node-rank'), flag(argv, '--dist-init-addr'),
                flag(argv, '--tp-size'), flag(argv, '--dist-timeout')) == ('2', str(rank), addr, '16', '60')
    # rank 0 serves the API and passed the smoke; rank 1 only the dummy health
    log0 = fleet.ssh('ns1', 'cat /var/log/llmops/sglang-main.log').stdout
    assert 'The server is fired up and ready to roll!' in log0 and '"POST /generate HTTP/1.1" 200' in log0
    assert status_code(fleet, 'ns1', '/v1/models') == 200
    assert status_code(fleet, 'ns2', '/health') == 200 and status_code(fleet, 'ns2', '/v1/models') == 404
    # each host holds its share of the group's 16 GPUs: 8 schedulers
    assert sum('sglang::scheduler_TP' in line for line in server_processes(fleet, 'ns2')) == 8


def test_rerun_changes_nothing_and_keeps_both_pids(group, run_playbook):
    fleet, inventory, port, dummy = group
    before = {host: server_pid(fleet, host) for host in GROUP}
    result = run_playbook('playbooks/deploy.yml', inventory=inventory, extra_vars=group_vars(port), expect_rc=0)
    assert {host: result.changed(host) for host in GROUP} == {'ns1': 0, 'ns2': 0}
    assert {host: server_pid(fleet, host) for host in GROUP} == before


def test_a_change_on_rank1_only_restarts_the_whole_group(group, run_playbook):
    fleet, inventory, port, dummy = group
    before = {host: server_pid(fleet, host) for host in GROUP}
    set_rank1_env(inventory, {'LLMOPS_TEST_MARK': 'changed'})
    result = run_playbook('playbooks/deploy.yml', inventory=inventory, extra_vars=group_vars(port), expect_rc=0,
                          timeout=600)
    after = {host: server_pid(fleet, host) for host in GROUP}
    assert all(after[host] != before[host] for host in GROUP), (before, after)
    text = ' '.join(result.stdout.split())
    assert 'ns1: ready (restart, process' in text and 'ns2: ready (restart, process' in text
    assert status_code(fleet, 'ns1', '/v1/models') == 200


def test_rank1_failing_to_start_fails_the_group_with_its_error(group, run_playbook):
    fleet, inventory, port, dummy = group
    set_rank1_env(inventory, {'SGLANG_SIM_FAULT': 'crash:load'})
    began = time.monotonic()
    result = run_playbook('playbooks/deploy.yml', inventory=inventory, extra_vars=group_vars(port), expect_rc=2,
                          timeout=600)
    elapsed = time.monotonic() - began
    assert result.recap['ns2']['failed'] == 1
    text = ' '.join(result.stdout.split())
    assert 'RuntimeError: simulated crash during load (SGLANG_SIM_FAULT=crash:load)' in text
    # rank 0 goes no further: the rollout stops (llmops_max_fail_percentage 0) or, where failures
    # are allowed, rank 0 fails naming the rank that failed
    assert 'ns1: ready' not in text and 'Wait until the server is healthy' not in text
    # rank 0 did not wait for its health timeout
    assert elapsed < HEALTH_TIMEOUT / 2, elapsed


def test_with_failures_allowed_rank0_fails_naming_the_failed_rank(group, run_playbook):
    fleet, inventory, port, dummy = group
    set_rank1_env(inventory, {'SGLANG_SIM_FAULT': 'crash:graphs'})
    result = run_playbook('playbooks/deploy.yml', inventory=inventory,
                          extra_vars=group_vars(port, llmops_max_fail_percentage=100), expect_rc=2, timeout=600)
    assert result.recap['ns2']['failed'] == 1 and result.recap['ns1']['failed'] == 1
    text = ' '.join(result.stdout.split())
    assert 'RuntimeError: simulated crash during graphs (SGLANG_SIM_FAULT=crash:graphs)' in text
    assert 'multi-node group ns1, ns2: ns2 failed (its error is above)' in text


def test_rank1_killed_after_ready_the_next_deploy_restarts_the_group(group, run_playbook):
    fleet, inventory, port, dummy = group
    set_rank1_env(inventory, {})
    run_playbook('playbooks/deploy.yml', inventory=inventory, extra_vars=group_vars(port), expect_rc=0, timeout=600)
    before = {host: server_pid(fleet, host) for host in GROUP}
    fleet.ssh('ns2', 'kill -9 -- -%d' % before['ns2'])
    result = run_playbook('playbooks/deploy.yml', inventory=inventory, extra_vars=group_vars(port), expect_rc=0,
                          timeout=600)
    text = ' '.join(result.stdout.split())
    assert 'ns1: ready (restart, process' in text and 'ns2: ready (start, process' in text
    after = {host: server_pid(fleet, host) for host in GROUP}
    assert all(after[host] != before[host] for host in GROUP), (before, after)
    assert status_code(fleet, 'ns1', '/v1/models') == 200


def test_stop_leaves_no_process_on_any_rank(group, run_playbook):
    fleet, inventory, port, dummy = group
    assert server_processes(fleet, 'ns1')
    run_playbook('playbooks/stop.yml', inventory=inventory, extra_vars=group_vars(port), expect_rc=0)
    for host in GROUP:
        assert server_processes(fleet, host) == [], host
