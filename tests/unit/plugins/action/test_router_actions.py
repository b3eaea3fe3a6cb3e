"""The router's action plugins read the sglang_router role's variables: router_worker's options, the router's plan."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.action.router_worker import ActionModule as RouterWorker

ROLE = dict(sglang_router_host='0.0.0.0', sglang_router_port=30080, sglang_router_prometheus_host='127.0.0.1',
            sglang_router_prometheus_port=29000, sglang_router_worker_group='servers', sglang_router_api_key='sk-k',
            sglang_router_max_unavailable='2', sglang_router_register_timeout=120)


class Templar:
    def resolve_variable_expression(self, name):
        return ROLE[name]


def action():
    plugin = RouterWorker.__new__(RouterWorker)
    plugin._templar = Templar()
    return plugin


def task_vars(**router_vars):
    hostvars = {
        'r1': dict(router_vars),
        'a': {'sglang_server_host': '0.0.0.0', 'sglang_server_port': 30000, 'ansible_host': '10.0.0.1', '__sglang_router_draining': True},
        'b': {'sglang_router_worker_url': 'http://b:31000', '__sglang_router_draining': True},
        'c': {'sglang_server_host': '10.0.0.3'},
    }
    return {'hostvars': hostvars, 'groups': {'servers': ['a', 'b', 'c']}, 'inventory_hostname': 'a',
            'ansible_play_batch': ['a', 'c', 'r1']}


def test_drain_options_from_the_role_and_the_batch():
    options = action()._defaults('r1', 'absent', task_vars())
    assert options == {'url': 'http://127.0.0.1:30080', 'metrics_url': 'http://127.0.0.1:29000/metrics', 'api_key': 'sk-k',
                       'worker': 'http://10.0.0.1:30000', 'max_unavailable': 2,
                       'workers': {'a': 'http://10.0.0.1:30000', 'b': 'http://b:31000', 'c': 'http://10.0.0.3:30000'},
                       'draining': ['http://10.0.0.1:30000']}  # b is marked but not in this batch


def test_register_options_take_the_router_host_s_own_address():
    options = action()._defaults('r1', 'present', task_vars(sglang_router_host='10.0.0.9', sglang_router_prometheus_port=29100))
    assert options['url'] == 'http://10.0.0.9:30080' and options['metrics_url'] == 'http://127.0.0.1:29100/metrics'
    assert options['timeout'] == 120.0 and 'max_unavailable' not in options


def test_status_options_and_the_router_from_delegate_to(monkeypatch):
    options = action()._defaults('r1', 'status', task_vars())
    assert options['url'] == 'http://127.0.0.1:30080' and 'timeout' not in options and 'max_unavailable' not in options
    plugin, ran = action(), {}

    class Task:
        delegate_to = 'r1'
        args = {'state': 'present'}

    plugin._task = Task()
    monkeypatch.setattr(RouterWorker, 'validate_argument_spec', lambda self, argument_spec: (None, dict(
        dict.fromkeys(argument_spec), state=self._task.args['state'])))
    monkeypatch.setattr(RouterWorker, '_execute_module', lambda self, module_name, module_args, task_vars: ran.update(module_args)
                        or {'changed': False})
    monkeypatch.setattr(RouterWorker, '_remove_tmp_path', lambda self, path: None)
    plugin._connection = type('Connection', (), {'_shell': type('Shell', (), {'tmpdir': None})()})()
    monkeypatch.setattr('ansible.plugins.action.ActionBase.run', lambda self, tmp=None, task_vars=None: {})
    plugin.run(task_vars=task_vars())
    assert ran['router'] == 'r1' and ran['url'] == 'http://127.0.0.1:30080' and ran['timeout'] == 120.0
    Task.delegate_to = None
    plugin.run(task_vars=task_vars())
    assert ran['router'] == 'a'
