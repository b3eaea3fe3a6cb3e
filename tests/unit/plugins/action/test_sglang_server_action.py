"""The action of sglang_server reads its task's arguments only: the rollback's plan and outcome, the start the plan
decided, and the stop, each with the module runs it needs on the host."""

from __future__ import annotations

from types import SimpleNamespace

from ansible_collections.llmops.serving.plugins.action.sglang_server import ActionModule


class Task:
    action = 'llmops.serving.sglang_server'
    async_val = 0
    check_mode = False
    diff = False

    def __init__(self, args):
        self.args = args


def run(args, answers=None, host='a', hostvars=None):
    plugin = ActionModule.__new__(ActionModule)
    plugin._task = Task(args)
    plugin._supports_check_mode = True
    plugin._supports_async = False
    plugin._connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir='/tmp/remote'))
    plugin._remove_tmp_path = lambda path: None
    ran = []

    def execute(module_name, module_args, task_vars):
        ran.append((module_name, module_args))
        return dict((answers or {}).get(module_name, {'changed': True}))

    plugin._execute_module = execute
    task_vars = {'inventory_hostname': host, 'hostvars': hostvars or {host: {}}}
    return plugin.run(task_vars=task_vars), ran


def test_the_rollback_plan_reads_nothing_on_the_host():
    restored = {'found': True, 'selected': {'id': 'r1', 'index': 0},
                'metadata': {'launcher': 'process', 'command': ['/x'], 'version': '0.5.1', 'depth': 3}}
    result, ran = run({'state': 'planned', 'restored': restored, 'rollback_reason': 'canary gate', 'name': 'main'})
    assert ran == [] and not result.get('failed')
    assert result['outcome'] == {'state': 'rolled_back', 'record': {'id': 'r1', 'index': 0}, 'reason': 'canary gate'}
    plan = result['plan']
    assert plan['action'] == 'restart' and plan['restored'] and plan['pidfile'] == '/run/llmops/sglang-main.pid'
    assert plan['smoke'] == 'generate' and plan['min_accept_length'] is None
    result, ran = run({'state': 'planned', 'restored': {'found': False}, 'rollback_reason': 'x'})
    assert ran == [] and result['plan'] == {} and result['outcome']['state'] == 'failed'


def test_started_with_nothing_to_change_starts_nothing():
    plan = {'action': 'none', 'enabled': True, 'launcher': 'process', 'pid': 41, 'files_changed': False,
            'users_to_fix': [], 'unit': 'u', 'pidfile': '/p', 'script': '/s'}
    result, ran = run({'state': 'started', 'plan': plan})
    assert ran == [] and result['changed'] is False and result['started'] is False
    assert result['pid'] == 41 and result['process_pid'] == 41 and result['systemd_unit'] is None


def test_a_restored_plan_restarts_the_unit_with_a_reload_and_writes_nothing():
    plan = {'action': 'restart', 'restored': True, 'launcher': 'systemd', 'unit': 'llmops-sglang-main.service',
            'pidfile': '/p', 'script': '/s'}
    answers = {'ansible.builtin.systemd_service': {'changed': True, 'status': {'MainPID': 77}}}
    result, ran = run({'state': 'started', 'plan': plan}, answers)
    assert [name for name, dummy in ran] == ['ansible.builtin.systemd_service', 'ansible.builtin.systemd_service']
    assert ran[0][1] == {'name': 'llmops-sglang-main.service', 'state': 'restarted', 'enabled': True, 'daemon_reload': True}
    assert result['pid'] == 77 and result['systemd_unit'] == 'llmops-sglang-main.service' and result['process_pid'] is None


def test_stopped_stops_the_process_and_the_unit_where_its_file_exists():
    answers = {'ansible.builtin.stat': {'stat': {'exists': False}}, 'llmops.serving.server_process': {'changed': False}}
    result, ran = run({'state': 'stopped', 'name': 'side', 'stop_timeout': 5}, answers)
    assert ran[0] == ('llmops.serving.server_process',
                      {'name': 'side', 'state': 'stopped', 'pidfile': '/run/llmops/sglang-side.pid', 'stop_timeout': 5.0})
    assert [name for name, dummy in ran] == ['llmops.serving.server_process', 'ansible.builtin.stat']
    assert result['changed'] is False
    answers['ansible.builtin.stat'] = {'stat': {'exists': True}}
    result, ran = run({'state': 'stopped', 'launcher': 'systemd'}, answers)
    assert ran[-1] == ('ansible.builtin.systemd_service', {'name': 'llmops-sglang-main.service', 'state': 'stopped',
                                                           'enabled': False})
    assert result['changed'] is True


def test_a_start_needs_a_plan():
    result, ran = run({'state': 'started'})
    assert result['failed'] and ran == [] and 'needs the plan' in result['msg']


def test_status_reads_the_process_the_unit_where_it_exists_and_the_server():
    info = {'healthy': True, 'unauthorized': False, 'version': '0.5.1', 'speculative': {'depth': 3},
            'accept_length': 2.5, 'accept_length_source': 'metrics'}
    answers = {'llmops.serving.server_process': {'running': True, 'pid': 9}, 'ansible.builtin.stat': {'stat': {'exists': False}},
               'llmops.serving.llm_server_info': info}
    result, ran = run({'state': 'status', 'api_key': ''}, answers)
    assert [name for name, dummy in ran] == ['llmops.serving.server_process', 'ansible.builtin.stat', 'llmops.serving.llm_server_info']
    assert ran[-1][1] == {'url': 'http://127.0.0.1:30000', 'api_key': '', 'request_timeout': 10}
    assert result['changed'] is False and result['status']['pid'] == 9 and result['status']['depth'] == 3


def _pd_args(**more):
    return dict({'state': 'planned', 'model_path': '/models/llama', 'tp_size': 1,
                 'speculative_draft_model_path': '/models/drafter', 'speculative_depth': 4,
                 'disaggregation_mode': 'prefill'}, **more)


def test_fake_on_a_prefill_is_refused_before_the_host_is_read():
    result, ran = run(_pd_args(disaggregation_transfer_backend='fake'))
    assert ran == [] and result['failed']
    assert result['msg'].startswith('a: sglang_server_disaggregation_transfer_backend fake is for a decode server only')
    assert result['msg'].endswith('; nothing was stopped or changed')


def test_a_backend_the_installed_release_lacks_is_refused_naming_host_variable_and_release():
    from ansible_collections.llmops.serving.plugins.module_utils import _sglang_args
    from ansible_collections.llmops.serving.tests.releases import releases
    check = {'version': '0.5.11', 'cli': {'options': _sglang_args.parse_help(releases.help_text('0.5.11'), '0.5.11')}}
    result, ran = run(_pd_args(disaggregation_transfer_backend='mooncake_tcp'),
                      {'llmops.serving.sglang_launch_check': check}, host='gpu-a01-prefill')
    assert [name for name, dummy in ran] == ['llmops.serving.sglang_launch_check']
    assert result['failed'] and result['msg'] == ('gpu-a01-prefill: sglang_server_disaggregation_transfer_backend '
                                                  'mooncake_tcp needs SGLang 0.5.13 or newer (this is 0.5.11)')


def test_an_admin_key_on_a_release_without_the_flag_is_refused_naming_the_host_before_anything_is_read():
    check = {'version': '0.5.10', 'cli': {'options': {'--model-path': {'takes_value': True},
                                                      '--api-key': {'takes_value': True}}}, 'missing_paths': {}}
    args = {'state': 'planned', 'model_path': '/m', 'tp_size': 1, 'speculative_algorithm': '', 'admin_api_key': 'sk-adm-secret'}
    result, ran = run(args, answers={'llmops.serving.sglang_launch_check': check}, host='ns1')
    assert result['failed'] and [name for name, dummy in ran] == ['llmops.serving.sglang_launch_check']
    assert result['msg'] == ('ns1: sglang_server_admin_api_key is set, but SGLang 0.5.10 has no --admin-api-key; '
                             'upgrade SGLang or unset sglang_server_admin_api_key for this host; nothing was stopped '
                             'or changed')
    assert 'sk-adm-secret' not in str(result)


def test_the_admin_key_file_is_written_with_a_key_and_removed_without_one():
    plugin = ActionModule.__new__(ActionModule)
    plan = {'env_file': '/etc/llmops/sglang-main.env', 'api_key_file': '/etc/llmops/sglang-main.key',
            'admin_api_key_file': '/etc/llmops/sglang-main.admin.key', 'templates': [], 'switch_user': False}
    options = {'sglang_server_env': {}, 'sglang_server_gpus': [], 'sglang_server_user': 'root',
               'sglang_server_api_key': 'k', 'sglang_server_admin_api_key': 'adm', 'sglang_server_config_dir': '/etc/llmops',
               'sglang_server_log_path': '/var/log/llmops/sglang-main.log', 'sglang_server_user_groups': []}
    rendered = []
    plugin._loader = plugin._templar = None

    class Lookup:
        def run(self, terms, variables, template_vars):
            rendered.append(template_vars)
            return ['rendered']

    import ansible_collections.llmops.serving.plugins.action.sglang_server as action
    saved = action.lookup_loader.get
    action.lookup_loader.get = lambda *a, **k: Lookup()
    try:
        args = plugin.launch_files_args(options, plan, {}, False)
        assert [s['path'] for s in args['secrets']] == [plan['env_file'], plan['api_key_file'], plan['admin_api_key_file']]
        assert args['secrets'][2]['mode'] == '0600' and args['secrets'][2]['content'] == 'adm\n' and args['absent'] == []
        assert rendered[-1]['__sglang_server_admin_api_key_file_env'] == 'LLMOPS_SERVER_ADMIN_API_KEY_FILE'
        args = plugin.launch_files_args(dict(options, sglang_server_admin_api_key=''), plan, {}, False)
        assert [s['path'] for s in args['secrets']] == [plan['env_file'], plan['api_key_file']]
        assert args['absent'] == [plan['admin_api_key_file']]
        assert rendered[-1]['__sglang_server_admin_api_key_file_env'] == ''
        assert 'LLMOPS_SERVER_ADMIN_API_KEY_FILE' not in rendered[-1]['__sglang_server_environment']
    finally:
        action.lookup_loader.get = saved


def test_the_user_is_created_again_where_another_server_of_the_machine_raced_it(monkeypatch):
    """Two servers of one address in one batch both create the user: the loser's useradd fails, its next try finds
    the user there (ansible.builtin.user is idempotent) and the start goes on; a failure every try keeps fails."""
    import ansible_collections.llmops.serving.plugins.action.sglang_server as action
    monkeypatch.setattr(action.time, 'sleep', lambda seconds: None)
    plugin = ActionModule.__new__(ActionModule)
    answers = [{'failed': True, 'msg': 'useradd: cannot lock /etc/passwd; try again later.'}, {'changed': False}]
    calls = []

    def module(name, args, task_vars, check_mode=None, diff=None):
        calls.append((name, args))
        return answers.pop(0)

    plugin.module = module
    options = {'sglang_server_user': 'sglang', 'sglang_server_user_home': '/var/lib/sglang',
               'sglang_server_user_groups': ['video']}
    created = plugin.create_user(options, {})
    assert not created.get('failed') and [name for name, dummy in calls] == ['ansible.builtin.user'] * 2
    assert calls[0][1] == {'name': 'sglang', 'home': '/var/lib/sglang', 'groups': ['video'], 'system': True,
                           'create_home': True, 'shell': '/usr/sbin/nologin', 'append': True}
    answers[:] = [{'changed': True}]
    assert plugin.create_user(options, {})['changed'] is True
    answers[:] = [{'failed': True, 'msg': 'useradd: user sglang exists'}] * action.USER_TRIES
    created = plugin.create_user(options, {})
    assert created['failed'] and created['msg'] == 'useradd: user sglang exists' and not answers
