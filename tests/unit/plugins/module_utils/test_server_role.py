# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the sglang_server role derives from its options and its probes (module_utils/_server_role.py)."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils import _server_role

NAMES = _server_role.names('main', '/etc/llmops', '/run/llmops', '0.0.0.0', 30000)
PLAN = dict(NAMES, launcher='process', version='0.5.15', command=['/opt/py', '/etc/llmops/llmops_launch.py'],
            speculative={'depth': 3, 'adaptive': False}, switch_user=True, home='/var/lib/sglang')


def options(**overrides):
    values = {'sglang_server_name': 'main', 'sglang_server_config_dir': '/etc/llmops', 'sglang_server_run_dir': '/run/llmops',
              'sglang_server_host': '127.0.0.1', 'sglang_server_port': 30000, 'sglang_server_user': 'sglang',
              'sglang_server_user_home': '/var/lib/sglang', 'sglang_server_state_dir': '/var/lib/llmops/last-good',
              'sglang_server_speculative_draft_model_path': '/models/drafter', 'sglang_server_python': '/opt/py',
              'sglang_server_engine': 'sglang'}
    values.update(('sglang_server_' + name, value) for name, value in overrides.items())
    return values


def test_names_of_the_unit_files_pidfile_and_url():
    assert NAMES == {'unit': 'llmops-sglang-main.service', 'unit_file': '/etc/systemd/system/llmops-sglang-main.service',
                     'env_file': '/etc/llmops/sglang-main.env', 'script': '/etc/llmops/sglang-main.sh',
                     'shim': '/etc/llmops/llmops_launch.py', 'api_key_file': '/etc/llmops/sglang-main.key',
                     'admin_api_key_file': '/etc/llmops/sglang-main.admin.key', 'pidfile': '/run/llmops/sglang-main.pid', 'url': 'http://127.0.0.1:30000'}


def test_root_needs_no_switch_and_keeps_its_home():
    assert _server_role.server_user('sglang', '/var/lib/sglang') == {'switch_user': True, 'home': '/var/lib/sglang'}
    for user in ('', 'root', None):
        assert _server_role.server_user(user, '/var/lib/sglang') == {'switch_user': False, 'home': '/root'}


def test_role_plan_templates_and_last_good_record():
    added = _server_role.role_plan(options(), PLAN)
    assert [t['dest'] for t in added['templates']] == ['/etc/llmops/llmops_launch.py', '/etc/llmops/sglang-main.sh']
    assert added['last_good'] == {
        'name': 'main', 'state_dir': '/var/lib/llmops/last-good',
        'files': ['/etc/llmops/sglang-main.env', '/etc/llmops/llmops_launch.py', '/etc/llmops/sglang-main.sh'],
        'fingerprints': ['/models/drafter'],
        'metadata': {'python': '/opt/py', 'launcher': 'process', 'command': PLAN['command'], 'engine': 'sglang',
                     'version': '0.5.15', 'depth': 3, 'drafter': '/models/drafter'}}
    unit = _server_role.role_plan(options(speculative_draft_model_path='', user='root'), dict(PLAN, launcher='systemd'))
    assert unit['templates'][1] == {'src': 'sglang.service.j2', 'dest': NAMES['unit_file'], 'mode': '0644'}
    assert unit['last_good']['fingerprints'] == [] and unit['last_good']['metadata']['drafter'] == ''
    assert unit['home'] == '/root'


def test_environment_always_names_the_key_file():
    env = _server_role.environment({'HF_HOME': '/cache', 'CUDA_VISIBLE_DEVICES': '7'}, [0, 1], 'sglang', PLAN, 'KEY', 'USER')
    assert env == {'HF_HOME': '/cache', 'CUDA_VISIBLE_DEVICES': '0,1', 'KEY': NAMES['api_key_file'], 'USER': 'sglang'}
    assert _server_role.environment({}, [], 'root', dict(PLAN, switch_user=False), 'KEY', 'USER') == {'KEY': NAMES['api_key_file']}


def test_decision():
    files = {'changed_files': [], 'users_to_fix': [], 'last_good': {'current': True, 'version': '0.5.14'}}
    down = _server_role.decision(PLAN, {'running': False, 'pid': None}, {'skipped': True}, files, False)
    assert (down['action'], down['running'], down['enabled'], down['previous_version']) == ('start', False, True, '0.5.14')
    up = _server_role.decision(PLAN, {'running': True, 'pid': 42}, {'skipped': True}, files, False)
    assert (up['action'], up['pid'], up['last_good_current'], up['files_changed']) == ('none', 42, True, False)
    assert _server_role.decision(PLAN, {'running': True}, {}, files, True)['action'] == 'restart'
    changed = dict(files, changed_files=['/etc/llmops/sglang-main.sh'])
    assert _server_role.decision(PLAN, {'running': True}, {}, changed, False)['action'] == 'restart'
    unit = dict(PLAN, launcher='systemd')
    status = {'status': {'ActiveState': 'activating', 'MainPID': '7', 'UnitFileState': 'disabled'}}
    planned = _server_role.decision(unit, {'skipped': True}, status, {'changed_files': [], 'users_to_fix': []}, False)
    assert (planned['action'], planned['pid'], planned['enabled'], planned['previous_version']) == ('none', '7', False, None)
    assert _server_role.decision(unit, {}, {'status': {}}, files, False)['action'] == 'start'


def test_result_state_from_rank_0_else_the_rank_else_started():
    plan = dict(PLAN, action='restart')
    health = {'status': 'ready', 'elapsed': 12.5, 'phases': [{'phase': 'load'}], 'warm_sampled': {'seconds': 0.4},
              'smoke': {'accept_length': 2.9}}
    result = _server_role.result(plan, health, {'skipped': True}, 42, 'sglang', False)
    assert result == {'state': 'ready', 'action': 'restart', 'launcher': 'process', 'pid': 42, 'engine': 'sglang',
                      'version': '0.5.15', 'previous_version': None, 'depth': 3, 'adaptive': False, 'ready_s': 12.5,
                      'phases': [{'phase': 'load'}], 'warm_sampled_s': 0.4, 'accept_length': 2.9, 'url': NAMES['url']}
    assert _server_role.result(plan, {'skipped': True}, {'status': 'ready'}, 1, 'sglang', False)['state'] == 'ready'
    skipped = _server_role.result(plan, {'skipped': True}, {}, None, 'vllm', False)
    assert (skipped['state'], skipped['ready_s'], skipped['phases'], skipped['accept_length']) == ('started', None, [], None)
    assert _server_role.result(plan, {}, None, None, 'sglang', True)['state'] == 'check mode'


def test_status():
    info = {'healthy': True, 'unauthorized': False, 'version': '0.5.15', 'speculative': {'depth': 3},
            'accept_length': 2.9, 'accept_length_source': 'metrics'}
    unit = _server_role.status({'running': False, 'pid': None}, {'status': {'ActiveState': 'active', 'MainPID': '4242'}}, info)
    assert unit == {'running': True, 'pid': 4242, 'healthy': True, 'unauthorized': False, 'version': '0.5.15', 'depth': 3,
                    'adaptive': False, 'accept_length': 2.9, 'accept_length_source': 'metrics', 'msg': ''}
    down = _server_role.status({'running': False, 'pid': None}, {'skipped': True}, dict(info, msg='refused'))
    assert (down['running'], down['pid'], down['msg']) == (False, None, 'refused')
    assert _server_role.status({'running': True, 'pid': 7}, {}, info)['pid'] == 7


def test_benchmark_args():
    values = {'sglang_server_engine': 'sglang', 'sglang_server_served_model_name': '', 'sglang_server_api_key': '',
              'sglang_server_host': '0.0.0.0', 'sglang_server_port': 30000, 'sglang_server_benchmark_rounds': 3,
              'sglang_server_benchmark_num_prompts': 16, 'sglang_server_benchmark_concurrency': 4,
              'sglang_server_benchmark_input_len': 64, 'sglang_server_benchmark_output_len': 128,
              'sglang_server_benchmark_timeout': 120}
    assert _server_role.benchmark_args(values) == {
        'url': 'http://127.0.0.1:30000', 'api': 'generate', 'num_prompts': 16, 'concurrency': [4], 'input_len': 64,
        'output_len': 128, 'warmup_requests': 4, 'flush_cache': True, 'timeout': 120, 'max_failed_ratio': 0}
    vllm = _server_role.benchmark_args(dict(values, sglang_server_engine='vllm', sglang_server_served_model_name='m',
                                            sglang_server_api_key='k'))
    assert (vllm['api'], vllm['flush_cache'], vllm['model'], vllm['api_key']) == ('completions', False, 'm', 'k')


def test_role_options_fill_the_role_defaults_for_null():
    options = _server_role.role_options({'name': 'side', 'port': None, 'user': None, 'log_path': None, 'gpus': None})
    assert options['sglang_server_port'] == 30000
    assert options['sglang_server_gpus'] == []
    # a null user is root (no switch), as the role's plan always took it
    assert options['sglang_server_user'] is None
    assert options['sglang_server_log_path'] == '/var/log/llmops/sglang-side.log'
    assert _server_role.role_options({'name': None, 'log_path': '/l/x.log'})['sglang_server_log_path'] == '/l/x.log'


def test_start_follows_the_plan():
    assert _server_role.start({'action': 'restart'}) == 'restarted'
    assert _server_role.start({'action': 'start'}) == 'started'
    assert _server_role.start({'action': 'none'}) is None
    # a unit that runs but is not enabled is started (enabled) again; state=restarted restarts in any case
    assert _server_role.start({'action': 'none', 'enabled': False}) == 'started'
    assert _server_role.start({'action': 'none'}, restart=True) == 'restarted'


def test_restored_plan_is_the_record_s_restarted():
    layout = {'group': ['a', 'b'], 'nnodes': 2, 'node_rank': 1, 'dist_init_addr': 'a:20000'}
    names = _server_role.names('main', '/etc/llmops', '/run/llmops', '127.0.0.1', 30000)
    restored = {'metadata': {'launcher': 'process', 'command': ['x'], 'version': '0.5.1', 'depth': 3}}
    plan = _server_role.restored_plan(layout, names, restored)
    assert plan['action'] == 'restart' and plan['restored'] is True and plan['node_rank'] == 1
    assert plan['pidfile'] == '/run/llmops/sglang-main.pid' and plan['speculative'] == {'depth': 3}
    assert _server_role.start(plan) == 'restarted'


def test_rollback_outcome_words():
    ok = _server_role.rollback_outcome({'found': True, 'selected': {'id': 'r1'}}, 'canary gate: slow')
    assert ok == {'state': 'rolled_back', 'record': {'id': 'r1'}, 'reason': 'canary gate: slow'}
    none = _server_role.rollback_outcome({'found': False}, 'x')
    assert none['state'] == 'failed' and none['record'] == {}
    assert none['reason'] == 'x; no last good configuration was recorded, the server is left stopped'
    gone = _server_role.rollback_outcome({'found': True, 'failed': True, 'msg': 'its engine is gone'}, 'x')
    assert gone['reason'] == 'x; its engine is gone; the server is left stopped'


def test_health_settings():
    options = _server_role.role_options({'engine': 'vllm', 'smoke': None, 'speculative_draft_model_path': '',
                                         'min_accept_length': 2.0, 'name': None, 'log_path': None})
    assert _server_role.health_settings(options) == {'smoke': 'completions', 'min_accept_length': None}
    options.update(sglang_server_engine='sglang', sglang_server_speculative_draft_model_path='/d')
    assert _server_role.health_settings(options) == {'smoke': 'generate', 'min_accept_length': 2.0}
    options['sglang_server_disaggregation_mode'] = 'decode'
    assert _server_role.health_settings(options) == {'smoke': 'generate', 'min_accept_length': 2.0}
    # a prefill generates no speculative tokens: acceptance shows on the decode only
    options['sglang_server_disaggregation_mode'] = 'prefill'
    assert _server_role.health_settings(options) == {'smoke': 'generate', 'min_accept_length': None}
    options['sglang_server_smoke'] = False
    assert _server_role.health_settings(options)['smoke'] == 'none'


def test_environment_names_the_admin_key_file_only_with_an_admin_key():
    plan = dict(PLAN, switch_user=False)
    assert _server_role.environment({}, [], 'root', plan, 'KEY', 'USER', '') == {'KEY': NAMES['api_key_file']}
    assert _server_role.environment({}, [], 'root', plan, 'KEY', 'USER', 'ADMIN') == {
        'KEY': NAMES['api_key_file'], 'ADMIN': NAMES['admin_api_key_file']}
