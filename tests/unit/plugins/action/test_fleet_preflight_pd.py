"""The action of fleet_preflight with prefill/decode servers: it reads each host's variables and plan (hostvars) and
its own task's arguments (pd_mixed_ok), and refuses before anything stops, naming the hosts and the field."""

from __future__ import annotations

import copy

from ansible_collections.llmops.serving.plugins.action.fleet_preflight import ActionModule
from ansible_collections.llmops.serving.tests.unit.plugins.action._action_runner import make_action

COMMAND = ['/opt/llmops/sglang-0.5.15.post1/bin/python', '/etc/llmops/llmops_launch.py', 'sglang.launch_server',
           '--model-path', '/models/llama', '--speculative-algorithm', 'EAGLE3', '--speculative-draft-model-path',
           '/models/drafter', '--speculative-num-steps', '3', '--speculative-eagle-topk', '1',
           '--speculative-num-draft-tokens', '4']


def plan(command=None, version='0.5.15.post1', action='none', previous_command=None, previous_version=None):
    return {'command': list(command or COMMAND), 'version': version, 'action': action,
            'previous_command': list(previous_command or command or COMMAND),
            'previous_version': previous_version or version}


def fleet():
    """A router r1 in front of a prefill p1 and a decode d1 on one address, and a decode d2 on another."""
    hostvars = {
        'r1': {'group_names': ['sglang_routers']},
        'p1': {'ansible_host': '10.0.0.1', 'sglang_server_disaggregation_mode': 'prefill', 'sglang_server_port': 30000,
               'sglang_server_nccl_port': 31000, 'sglang_server_plan': plan()},
        'd1': {'ansible_host': '10.0.0.1', 'sglang_server_disaggregation_mode': 'decode', 'sglang_server_port': 30001,
               'sglang_server_nccl_port': 31001, 'sglang_server_plan': plan()},
        'd2': {'ansible_host': '10.0.0.2', 'sglang_server_disaggregation_mode': 'decode', 'sglang_server_plan': plan()},
    }
    for host in ('p1', 'd1', 'd2'):
        hostvars[host]['group_names'] = ['sglang_servers']
    return hostvars


def run(hostvars, **args):
    task_args = dict({'hosts': ['p1', 'd1', 'd2'], 'serial': 1}, **args)
    plugin = make_action(ActionModule, 'llmops.serving.fleet_preflight', task_args,
                         lambda *a, **k: {'failed': True, 'msg': 'no module runs'})
    groups = {'sglang_routers': ['r1'], 'sglang_servers': ['p1', 'd1', 'd2']}
    return plugin.run(task_vars={'hostvars': hostvars, 'groups': groups, 'ansible_play_hosts_all': ['p1', 'd1', 'd2']})


def test_a_pd_fleet_that_agrees_passes():
    result = run(fleet())
    assert result['problems'] == [] and not result.get('failed')


def test_a_drafter_that_differs_is_refused_naming_the_hosts():
    hostvars = fleet()
    hostvars['d2']['sglang_server_plan'] = plan([arg.replace('/models/drafter', '/models/other') for arg in COMMAND])
    result = run(hostvars)
    assert result['failed']
    assert result['problems'] == [
        'the prefill and decode servers of router r1 differ in their drafter '
        '(sglang_server_speculative_draft_model_path): /models/drafter on d1 (decode), p1 (prefill); /models/other on '
        'd2 (decode); SGLang would pair them without a word, so every prefill and decode behind one router must share '
        'it']
    assert result['msg'].startswith('the rollout is refused before anything stopped (1 problem): the prefill and decode')


def test_no_decode_left_is_refused():
    hostvars = fleet()
    for host in ('d1', 'd2'):
        hostvars[host]['sglang_server_disaggregation_mode'] = 'prefill'
    problems = run(hostvars)['problems']
    assert problems[0].startswith('router r1 runs in prefill/decode mode (d1, d2, p1 have '
                                  'sglang_server_disaggregation_mode prefill) but has no decode server')


def test_ports_that_clash_on_one_address_are_refused():
    hostvars = fleet()
    hostvars['d1']['sglang_server_nccl_port'] = 31000
    problems = run(hostvars)['problems']
    assert problems == ['d1, p1 share the address 10.0.0.1 and would both listen on port 31000 (sglang_server_nccl_port '
                        'of d1, sglang_server_nccl_port of p1): give each server of a host its own sglang_server_port, '
                        'sglang_server_nccl_port and sglang_server_disaggregation_bootstrap_port']
    # the bootstrap port of the prefill (8998 by default) against the decode's HTTP port
    hostvars = fleet()
    hostvars['d1']['sglang_server_port'] = 8998
    assert 'port 8998 (sglang_server_port of d1, sglang_server_disaggregation_bootstrap_port of p1)' in \
        run(hostvars)['problems'][0]


def test_a_rolling_release_change_is_refused_unless_mixed_ok():
    hostvars = fleet()
    new = [COMMAND[0].replace('0.5.15.post1', '0.5.23')] + COMMAND[1:]
    for host in ('p1', 'd1', 'd2'):
        hostvars[host]['sglang_server_plan'] = plan(new, '0.5.23', 'restart', COMMAND, '0.5.15.post1')
    result = run(copy.deepcopy(hostvars))
    assert result['problems'] == [
        'this deploy changes the engine release of prefill/decode servers of router r1 (d1, d2, p1) one batch at a '
        'time: while it rolls, a server of the new engine release would pair with one of the old through the router '
        '(SGLang does not check it). Deploy the change blue-green behind a second router (README, "Prefill/decode '
        'disaggregation"), or set llmops_pd_mixed_ok: true to roll it anyway']
    assert run(copy.deepcopy(hostvars), pd_mixed_ok=True)['problems'] == []
    # null is unset: false
    assert run(copy.deepcopy(hostvars), pd_mixed_ok=None)['problems'] == result['problems']


def test_servers_without_a_mode_are_not_checked_for_pd():
    hostvars = fleet()
    for host in ('p1', 'd1', 'd2'):
        del hostvars[host]['sglang_server_disaggregation_mode']
    hostvars['d1']['sglang_server_plan'] = plan(COMMAND + ['--page-size', '64'])
    assert run(hostvars)['problems'] == []
