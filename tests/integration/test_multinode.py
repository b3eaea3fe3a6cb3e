"""Two multi-node replica groups on a fleet of four namespace hosts of this module's own: ns1
(rank 0) and ns2 (rank 1) serve one replica, ns3 and ns4 another, with the SGLang simulator (a real
TCP rendezvous at --dist-init-addr, see tests/sim/README.md).

Shows: deploy.yml brings both groups up (rank 0 ready and smoke-tested, rank 1 serving only the
dummy /health; every argv with its --node-rank, its group's --dist-init-addr and --tp-size); a
rerun changes nothing and keeps every PID; in batches of one group, a depth change of one group
restarts both its ranks and leaves the other group alone; a change on rank 1 only restarts both
ranks; rank 1 failing to start fails the group with rank 1's error, well before the health timeout,
and the rollout stops with every host in the summary (both ranks with rank 1's error, the other group
not reached); rank 1 failing its GPU preflight fails rank 0 at the group's gate, before it starts
(with failures allowed, so that rank 0 goes as far as it can); rank 1 killed after ready: status.yml shows
the group broken, and the next deploy restarts the whole group; an unreachable rank fails the group
before anything starts; stop.yml limited to one rank leaves no process on any rank of its group and
the other group running.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

import pytest

import fleet as fleet_lib  # tests/integration/fleet.py
from status_output import status_table
from test_deploy import deploy_vars, summary_rows
from test_gpu_preflight import hold

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(ROOT, 'tests', 'sim')
GROUP = ['ns1', 'ns2']
OTHER_GROUP = ['ns3', 'ns4']
BOTH = GROUP + OTHER_GROUP
HEALTH_TIMEOUT = 120
# The groups' inventory: rank 0 first. Host-level variables below change one rank only.
GROUP_INVENTORY = '''multinode:
  children:
    kimi_tp16:
      hosts:
        ns1:
        ns2:
      vars:
        sglang_server_group_hosts: [ns1, ns2]
    kimi_tp16_b:
      hosts:
        ns3:
        ns4:
      vars:
        sglang_server_group_hosts: [ns3, ns4]
'''
_STATE = {}


@pytest.fixture(scope='module')
def fleet():
    """This module's own fleet of four namespace hosts (two groups of two; the session fleet has
    three), up in about 2 s, torn down after the module's tests."""
    directory = tempfile.mkdtemp(prefix='llf-', dir='/tmp')
    running = fleet_lib.Fleet(directory)
    try:
        yield running.up(ns_hosts=4, die_with_parent=True)
    finally:
        fleet_id = running.id
        running.down()
        left = fleet_lib.leftovers(fleet_id, directory) if fleet_id else []
        shutil.rmtree(directory, ignore_errors=True)
        assert not left, 'fleet %s left behind: %s' % (fleet_id, ', '.join(left))


def group_vars(port, **overrides):
    """deploy_vars (test_deploy) for the group kimi_tp16 (llmops_hosts multinode: both groups): no API
    key, TP 16 over two hosts."""
    settings = dict(
        llmops_hosts='kimi_tp16', llmops_serial=2, sglang_server_api_key='', sglang_server_speculative_depth=4,
        sglang_server_served_model_name='tiny-group', sglang_server_tp_size=16, sglang_server_dist_init_port=port,
        sglang_server_dist_timeout=60, sglang_server_health_timeout=HEALTH_TIMEOUT,
        # A host's own llmops_test_env (inventory host_vars) is added to its server environment.
        sglang_server_env="{{ {'PYTHONPATH': '%s', 'NVSIM_STATE_DIR': '/run/llmops-nvsim', "
                          "'SGLANG_SIM_SPEED': '0.05'} | combine(llmops_test_env | default({})) }}" % SIM)
    settings.update(overrides)
    return deploy_vars(**settings)


def set_rank1_vars(inventory, **variables):
    """Host variables of ns2 only (rank 1), replacing the previous ones."""
    path = os.path.join(inventory, 'host_vars')
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, 'ns2.yml'), 'w', encoding='utf-8') as f:
        f.write(json.dumps(variables))


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
    """Both groups deployed once (the tests below build on its state in order):
    ``(fleet, inventory, port, first deploy result)``."""
    if 'group' not in _STATE:
        request.getfixturevalue('clean_fleet')
        inventory = tmp_path_factory.mktemp('multinode-inventory')
        with open(fleet.inventory, encoding='utf-8') as f:
            (inventory / 'fleet.yml').write_text(f.read())
        (inventory / 'group.yml').write_text(GROUP_INVENTORY)
        port = free_port_on(fleet, 'ns1')
        prepare_simulator(inventory=str(inventory), extra_vars=group_vars(port, llmops_hosts='multinode'))
        first = run_playbook('playbooks/deploy.yml', inventory=str(inventory),
                             extra_vars=group_vars(port, llmops_hosts='multinode'), expect_rc=0, timeout=600)
        _STATE['group'] = (fleet, str(inventory), port, first)
    return _STATE['group']


def test_groups_deploy_with_one_rendezvous_each_and_rank0_serving(group):
    fleet, dummy, port, result = group
    assert all(result.recap[host]['failed'] == 0 for host in BOTH)
    rows = summary_rows(result)
    for rank0 in ('ns1', 'ns3'):
        assert rows[rank0][1:3] == ['ready', 'start'] and float(rows[rank0][6]) > 1, rows
    for hosts in (GROUP, OTHER_GROUP):
        addr = '%s:%d' % (fleet.hosts[hosts[0]]['address'], port)
        for rank, host in enumerate(hosts):
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


def test_rerun_changes_nothing_and_keeps_every_pid(group, run_playbook):
    fleet, inventory, port, dummy = group
    before = {host: server_pid(fleet, host) for host in BOTH}
    result = run_playbook('playbooks/deploy.yml', inventory=inventory,
                          extra_vars=group_vars(port, llmops_hosts='multinode'), expect_rc=0)
    assert {host: result.changed(host) for host in BOTH} == {host: 0 for host in BOTH}
    assert {host: server_pid(fleet, host) for host in BOTH} == before


def test_depth_change_restarts_both_ranks_of_its_group_and_leaves_the_other_alone(group, run_playbook):
    """In batches of one group (llmops_serial 2): ns1, ns2 first, unchanged; then ns3, ns4 at depth 6."""
    fleet, inventory, port, dummy = group
    before = {host: server_pid(fleet, host) for host in BOTH}
    depth = "{{ 6 if inventory_hostname in %s else 4 }}" % OTHER_GROUP
    result = run_playbook('playbooks/deploy.yml', inventory=inventory, timeout=600, expect_rc=0,
                          extra_vars=group_vars(port, llmops_hosts='multinode', sglang_server_speculative_depth=depth))
    after = {host: server_pid(fleet, host) for host in BOTH}
    assert all(after[host] != before[host] for host in OTHER_GROUP), (before, after)
    assert {host: after[host] for host in GROUP} == {host: before[host] for host in GROUP}
    assert all(result.changed(host) == 0 for host in GROUP), result.stdout[-3000:]
    assert result.stdout.count('PLAY [Deploy SGLang servers') == 2  # one per batch
    rows = summary_rows(result)
    assert [rows[host][1:3] for host in OTHER_GROUP] == [['ready', 'restart'], ['ready', 'restart']], rows
    for host in OTHER_GROUP:
        argv = argv_of(fleet, host)
        assert (flag(argv, '--speculative-num-steps'), flag(argv, '--speculative-num-draft-tokens')) == ('5', '6')
    assert flag(argv_of(fleet, 'ns2'), '--speculative-num-steps') == '3'


def test_a_change_on_rank1_only_restarts_the_whole_group(group, run_playbook):
    fleet, inventory, port, dummy = group
    before = {host: server_pid(fleet, host) for host in GROUP}
    set_rank1_vars(inventory, llmops_test_env={'LLMOPS_TEST_MARK': 'changed'})
    result = run_playbook('playbooks/deploy.yml', inventory=inventory, extra_vars=group_vars(port), expect_rc=0,
                          timeout=600)
    after = {host: server_pid(fleet, host) for host in GROUP}
    assert all(after[host] != before[host] for host in GROUP), (before, after)
    rows = summary_rows(result)
    assert rows['ns1'][1:3] == ['ready', 'restart'] and rows['ns2'][1:3] == ['ready', 'restart'], rows
    assert status_code(fleet, 'ns1', '/v1/models') == 200


def test_rank1_failing_to_start_fails_the_group_with_its_error(group, run_playbook):
    """Both groups in batches of one group: the rollout stops at the first, and the summary has a row
    for every host, the root cause in both ranks' rows, the other group not reached and untouched."""
    fleet, inventory, port, dummy = group
    other_before = {host: server_pid(fleet, host) for host in OTHER_GROUP}
    set_rank1_vars(inventory, llmops_test_env={'SGLANG_SIM_FAULT': 'crash:load'})
    began = time.monotonic()
    result = run_playbook('playbooks/deploy.yml', inventory=inventory, extra_vars=group_vars(port, llmops_hosts='multinode'),
                          expect_rc=2, timeout=600)
    elapsed = time.monotonic() - began
    assert result.recap['ns2']['failed'] == 1 and result.recap['ns1']['failed'] == 1, result.recap
    text = ' '.join(result.stdout.split())
    crash = 'RuntimeError: simulated crash during load (SGLANG_SIM_FAULT=crash:load)'
    assert crash in text
    # rank 0 goes no further than naming the rank that failed
    assert 'Wait until the server is healthy' not in text
    rows = summary_rows(result)
    assert sorted(rows) == BOTH, rows
    assert [rows[host][1] for host in BOTH] == ['failed', 'failed', 'not reached', 'not reached'], rows
    assert crash in rows['ns2'][-1], rows['ns2']
    assert rows['ns1'][-1].startswith('multi-node group ns1, ns2: ns2 failed: ') and 'simulated crash during load' in \
        rows['ns1'][-1], rows['ns1']
    # the rollout stopped at the first group: the other group keeps serving as it was
    assert result.stdout.count('PLAY [Deploy SGLang servers') == 1
    assert {host: server_pid(fleet, host) for host in OTHER_GROUP} == other_before
    # rank 0 did not wait for its health timeout
    assert elapsed < HEALTH_TIMEOUT / 2, elapsed


def test_with_failures_allowed_a_rank_failing_before_the_start_fails_the_group_before_it_starts(group, run_playbook):
    """A change restarts the group; rank 1's GPU preflight fails (a stand-in trainer holds its GPU 0)
    after both ranks stopped. With failures allowed, rank 0 goes as far as it can: the group's gate
    before the start, where it fails naming rank 1 instead of starting and waiting for it. Both rows
    of the summary give the trainer as the reason."""
    fleet, inventory, port, dummy = group
    set_rank1_vars(inventory, llmops_test_env={'LLMOPS_TEST_MARK': 'busy'})
    trainer = hold(fleet, '0', 100000, 'trainer', host='ns2')
    try:
        result = run_playbook('playbooks/deploy.yml', inventory=inventory, expect_rc=2, timeout=600,
                              extra_vars=group_vars(port, llmops_max_fail_percentage=100, gpu_preflight_wait_timeout=2))
    finally:
        fleet.ssh('ns2', 'kill %d' % trainer)
    assert result.recap['ns2']['failed'] == 1 and result.recap['ns1']['failed'] == 1
    text = ' '.join(result.stdout.split())
    assert 'multi-node group ns1, ns2: ns2 failed (its error is above); nothing of the group was started' in text
    assert 'Start the server' not in result.stdout and server_processes(fleet, 'ns1') == []
    rows = summary_rows(result)
    assert rows['ns1'][1] == rows['ns2'][1] == 'failed', rows
    assert 'trainer' in rows['ns2'][-1] and rows['ns1'][-1].startswith('multi-node group ns1, ns2: ns2 failed: '), rows
    assert 'trainer' in rows['ns1'][-1], rows


def test_rank1_killed_after_ready_the_next_deploy_restarts_the_group(group, run_playbook):
    fleet, inventory, port, dummy = group
    set_rank1_vars(inventory)
    run_playbook('playbooks/deploy.yml', inventory=inventory, extra_vars=group_vars(port), expect_rc=0, timeout=600)
    before = {host: server_pid(fleet, host) for host in GROUP}
    fleet.ssh('ns2', 'kill -9 -- -%d' % before['ns2'])
    # rank 0 keeps running but cannot serve (its /health answers 503): the group is broken
    table = status_table(run_playbook('playbooks/status.yml', inventory=inventory, extra_vars=group_vars(port),
                                      expect_rc=0).stdout)
    assert [(table[host]['running'], table[host]['healthy']) for host in GROUP] == [('yes', 'broken'), ('no', 'broken')]
    assert table['ns1']['pid'] == str(before['ns1'])
    assert all(table[host]['refused/why'].startswith('group ns1, ns2: ns2 not running; a deploy restarts the whole '
                                                     'group') for host in GROUP), table
    result = run_playbook('playbooks/deploy.yml', inventory=inventory, extra_vars=group_vars(port), expect_rc=0,
                          timeout=600)
    rows = summary_rows(result)
    assert rows['ns1'][1:3] == ['ready', 'restart'] and rows['ns2'][1:3] == ['ready', 'start'], rows
    after = {host: server_pid(fleet, host) for host in GROUP}
    assert all(after[host] != before[host] for host in GROUP), (before, after)
    assert status_code(fleet, 'ns1', '/v1/models') == 200
    table = status_table(run_playbook('playbooks/status.yml', inventory=inventory, extra_vars=group_vars(port),
                                      expect_rc=0).stdout)
    assert [(table[host]['running'], table[host]['healthy'], table[host]['pid']) for host in GROUP] == \
        [('yes', 'yes', str(after['ns1'])), ('yes', 'yes', str(after['ns2']))], table
    assert table['ns1']['depth'] == '4' and table['ns2']['version'] == '-'


def test_an_unreachable_rank_fails_the_group_before_anything_starts(group, run_playbook):
    """ns2 unreachable (an address of TEST-NET-1: the fleet's SSH control master is per address, so a
    closed port alone would reuse it) while a depth change would restart the group; even with failures
    allowed, the fleet preflight ends the run before anything stops."""
    fleet, inventory, port, dummy = group
    before = {host: server_pid(fleet, host) for host in GROUP}
    set_rank1_vars(inventory, ansible_host='192.0.2.1')
    try:
        result = run_playbook('playbooks/deploy.yml', inventory=inventory, timeout=600,
                              extra_vars=group_vars(port, sglang_server_speculative_depth=6, llmops_max_fail_percentage=100))
    finally:
        set_rank1_vars(inventory)
    # the fleet preflight plans every host before the first batch: ns2 does not answer, so the run ends
    # there and nothing of either group stops or starts
    assert result.rc != 0 and result.recap['ns2']['unreachable'] == 1, result.recap
    assert 'TASK [Plan and check every server host' in result.stdout
    assert 'TASK [Deploy the server' not in result.stdout
    assert {host: server_pid(fleet, host) for host in GROUP} == before
    assert flag(argv_of(fleet, 'ns1'), '--speculative-num-steps') == '3'
    assert 'Stop our previous server' not in result.stdout and 'Start the server' not in result.stdout


def test_stop_limited_to_one_rank_stops_its_whole_group_only(group, run_playbook):
    fleet, inventory, port, dummy = group
    assert all(server_processes(fleet, host) for host in BOTH)
    run_playbook('playbooks/stop.yml', inventory=inventory, limit='ns1',
                 extra_vars=group_vars(port, llmops_hosts='multinode'), expect_rc=0)
    assert {host: server_processes(fleet, host) == [] for host in BOTH} == \
        {'ns1': True, 'ns2': True, 'ns3': False, 'ns4': False}
    # limited to rank 1: rank 0, outside the play, is stopped from it
    run_playbook('playbooks/stop.yml', inventory=inventory, limit='ns4',
                 extra_vars=group_vars(port, llmops_hosts='multinode'), expect_rc=0)
    for host in BOTH:
        assert server_processes(fleet, host) == [], host
