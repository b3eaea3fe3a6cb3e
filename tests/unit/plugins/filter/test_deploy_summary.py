# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""deploy_summary: one aligned row per targeted host, failed and not reached ones included."""

from __future__ import annotations

import re

from ansible_collections.llmops.serving.plugins.filter.deploy_summary import NOT_REACHED, deploy_summary

READY = {'state': 'ready', 'action': 'restart', 'launcher': 'systemd', 'pid': 41, 'ready_s': 4.06,
         'engine': 'sglang', 'version': '0.5.15.post1', 'depth': 16, 'accept_length': 3.214,
         'url': 'http://10.0.0.1:30000'}


def split(line):
    return re.split(r' {2,}', line)


def test_rows_are_aligned_and_complete():
    hostvars = {
        'gpu-node-01': {'sglang_server_result': READY, 'llmops_simulator': True},
        'n2': {'sglang_server_result': dict(READY, depth=None, accept_length=None, action='none', ready_s=None)},
        'n3': {'llmops_deploy_failure': 'GPU 0 is busy:\n  trainer   holds 100000 MiB'},
        'n4': {'sglang_server_result': dict(READY, state='rolled_back', reason='the drafter is not being accepted'),
               'llmops_deploy_failure': 'rolled_back: the drafter is not being accepted; serving ...'},
        'n5': {},
        'n6': {'sglang_server_result': {'state': 'failed', 'reason': 'exited'}, 'llmops_simulator': True,
               'llmops_deploy_failure': 'failed: exited'},
    }
    lines = deploy_summary(list(hostvars), hostvars)
    assert len(lines) == 7
    # every column starts at the same offset on every line
    starts = [[match.start() for match in re.finditer(r'(?:^|(?<=  ))\S', line)] for line in lines]
    assert all(row[:7] == starts[0][:7] for row in starts), lines
    assert split(lines[0]) == ['host', 'state', 'action', 'ready_s', 'version', 'depth', 'accept', 'url / reason']
    assert split(lines[1]) == ['gpu-node-01', 'ready', 'restart', '4.1', 'sglang 0.5.15.post1 SIMULATOR', '16', '3.21',
                               'http://10.0.0.1:30000']
    assert split(lines[2])[1:7] == ['ready', 'none', '-', 'sglang 0.5.15.post1', 'off', '-']
    # the reason on one line, whitespace collapsed
    assert split(lines[3]) == ['n3', 'failed', '-', '-', '-', '-', '-', 'GPU 0 is busy: trainer holds 100000 MiB']
    assert split(lines[4])[1] == 'rolled_back'
    assert split(lines[4])[-1] == 'serving its last good configuration again; the drafter is not being accepted'
    assert split(lines[5]) == ['n5', 'not reached', '-', '-', '-', '-', '-', NOT_REACHED]
    # no version known: no SIMULATOR mark either
    assert split(lines[6])[1:5] == ['failed', '-', '-', '-']


def test_a_host_that_failed_after_it_became_ready_is_failed():
    hostvars = {'n1': {'sglang_server_result': READY, 'llmops_deploy_failure': 'router did not report it healthy'}}
    row = split(deploy_summary(['n1'], hostvars)[1])
    assert row[1] == 'failed' and row[-1] == 'router did not report it healthy'


def test_long_reason_is_cut_and_canary_report_follows():
    hostvars = {'n1': {'llmops_deploy_failure': 'x' * 1000},
                'n2': {'sglang_server_result': READY, 'deploy_canary_verdict': {'report': ['canary gate: passed']}}}
    lines = deploy_summary(['n1', 'n2'], hostvars)
    assert len(split(lines[1])[-1]) == 300 and lines[1].endswith('...')
    assert lines[-1] == 'n2 canary gate: passed'
    assert all(line == line.rstrip() for line in lines)


def test_a_rank_failed_by_its_group_shows_the_root_cause():
    group = ['r0', 'r1', 'r2']
    crash = 'crashed: RuntimeError: simulated crash during load'
    hostvars = {
        'r0': {'sglang_server_group_hosts': group,
               'llmops_deploy_failure': 'multi-node group r0, r1, r2: r1 failed (its error is above); rank 0 cannot serve'},
        'r1': {'sglang_server_group_hosts': group, 'llmops_deploy_failure': crash},
        'r2': {'sglang_server_group_hosts': group,
               'llmops_deploy_failure': 'multi-node group r0, r1, r2: r1 failed (its error is above); nothing started'},
        'u0': {'sglang_server_group_hosts': ['u0', 'u1'],
               'llmops_deploy_failure': 'multi-node group u0, u1: u1 not in this batch (unreachable, ...)'},
        'u1': {'sglang_server_group_hosts': ['u0', 'u1']},
        'n1': {},
    }
    rows = {split(line)[0]: split(line) for line in deploy_summary(list(hostvars), hostvars)[1:]}
    for rank in ('r0', 'r2'):
        assert rows[rank][1] == 'failed' and rows[rank][-1] == 'multi-node group r0, r1, r2: r1 failed: ' + crash
    assert rows['r1'][1:] == ['failed', '-', '-', '-', '-', '-', crash]
    # no rank failed on its own (u1 was unreachable): the rank's own reason, u1 not reached
    assert rows['u0'][-1] == 'multi-node group u0, u1: u1 not in this batch (unreachable, ...)'
    assert rows['u1'][1] == rows['n1'][1] == 'not reached'


def test_a_release_change_shows_from_and_to():
    hostvars = {
        'n1': {'sglang_server_result': dict(READY, version='0.5.23', previous_version='0.5.15.post1', state='check mode')},
        'n2': {'sglang_server_result': dict(READY, version='0.5.23', previous_version='0.5.23')},
        'n3': {'sglang_server_result': dict(READY, version='0.5.23', previous_version=None)},
    }
    lines = deploy_summary(list(hostvars), hostvars)
    assert [split(line)[4] for line in lines[1:]] == ['sglang 0.5.15.post1 -> 0.5.23', 'sglang 0.5.23', 'sglang 0.5.23']


def test_a_start_line_says_where_the_start_spent_its_time():
    phases = [{'phase': 'launching', 'elapsed': 0.0}, {'phase': 'load_weights', 'elapsed': 57.3},
              {'phase': 'cuda_graphs', 'elapsed': 61.0}, {'phase': 'ready', 'elapsed': 88.6}]
    hostvars = {'a': {'sglang_server_result': {'state': 'ready', 'action': 'restart', 'ready_s': 88.6,
                                               'phases': phases, 'warm_sampled_s': 0.23},
                      'model_stage_warm': {'bytes': 21.28e9, 'seconds': 20.9}},
                'b': {'sglang_server_result': {'state': 'ready', 'action': 'none'}}}
    lines = deploy_summary(['a', 'b'], hostvars)
    assert lines[3:] == ['a start: launching 57.3, load_weights 3.7, cuda_graphs 27.6 (s), ready at 88.6 s; first '
                         'sampled request 0.23 s; page cache warm-up before the stop 21.28 GB in 20.9 s']


def test_a_server_put_back_into_a_router_says_so():
    registered = {'results': [{'router': 'r1', 'action': 'add'}, {'router': 'r2', 'action': 'none'},
                              {'router': 'r3', 'action': 're-add'}]}
    hostvars = {'n1': {'sglang_server_result': dict(READY, action='none'), 'sglang_router_registered': registered},
                'n2': {'sglang_server_result': READY, 'sglang_router_registered': registered},
                'n3': {'sglang_server_result': dict(READY, action='none'),
                       'sglang_router_registered': {'results': [{'router': 'r1', 'action': 'none'}]}}}
    lines = deploy_summary(['n1', 'n2', 'n3'], hostvars)
    assert split(lines[1])[-1] == 're-registered: was out of router r1; http://10.0.0.1:30000'
    assert split(lines[2])[-1] == 'http://10.0.0.1:30000'  # a restarted server is expected to be added back
    assert split(lines[3])[-1] == 'http://10.0.0.1:30000'
