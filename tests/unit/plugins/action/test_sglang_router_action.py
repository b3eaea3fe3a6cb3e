"""The action of sglang_router reads its task's arguments only (and the connection of the hosts they name): it refuses
workers the router cannot have before the module runs."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.action.sglang_router import ActionModule
from ansible_collections.llmops.serving.tests.unit.plugins.action._action_runner import make_action


def run(args, host='r1', connection='ssh', hostvars=None):
    ran = []
    plugin = make_action(ActionModule, 'llmops.serving.sglang_router', args,
                         lambda module_name, module_args, task_vars: ran.append((module_name, module_args)) or {'changed': True})
    task_vars = {'inventory_hostname': host, 'ansible_connection': connection, 'hostvars': hostvars or {}}
    result = plugin.run(task_vars=task_vars)
    return result, ran


def test_refuses_an_empty_group_and_loopback_servers_elsewhere():
    result, ran = run({'workers': {}, 'worker_group': 'gpu'})
    assert result['failed'] and ran == []
    assert result['msg'] == 'no hosts in inventory group gpu (sglang_router_worker_group): the router would have no workers'
    result, ran = run({'workers': {'a': 'http://127.0.0.1:30000', 'r1': 'http://127.0.0.1:30000'}})
    assert result['failed'] and result['msg'].startswith('servers a listen on a loopback address') and ran == []


def test_runs_the_module_with_the_task_s_arguments():
    args = {'workers': {'a': 'http://127.0.0.1:30000'}, 'policy': 'round_robin'}
    hostvars = {'a': {'ansible_connection': 'local'}}
    result, ran = run(args, connection='local', hostvars=hostvars)
    assert not result.get('failed') and ran == [('llmops.serving.sglang_router', args)]
    result, ran = run(args, connection='ssh', hostvars=hostvars)
    assert result['failed'] and ran == []
