"""llmops.serving.wait_for_llm_health: the module run in-process against a fake server
(smoke, acceptance floor, secrets, messages) and the action plugin's slice loop
(heartbeats, state carried between slices, check mode)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from unittest.mock import MagicMock

import pytest

from ansible.errors import AnsibleActionFail

from ansible_collections.llmops.serving.plugins.action import wait_for_llm_health as action
from ansible_collections.llmops.serving.plugins.module_utils import _server_api
from ansible_collections.llmops.serving.plugins.modules import wait_for_llm_health as module
from ansible_collections.llmops.serving.tests.unit.plugins.modules._module_runner import record_warnings, run_main
from ansible_collections.llmops.serving.tests.unit._fake_llm_server import FakeLLMServer, fixture_text

SECRET = 'sk-unit-test-not-a-real-key'


@pytest.fixture
def server():
    fake = FakeLLMServer({
        '/health': lambda method, body: (200, b''),
        '/get_server_info': lambda method, body: (200, fixture_text('eagle3-random', 'ep.get_server_info.txt')),
        '/generate': lambda method, body: (200, fixture_text('eagle3-good-mid', 'generate.json')),
    })
    yield fake
    fake.close()


@pytest.fixture(autouse=True)
def warnings(monkeypatch):
    return record_warnings(monkeypatch)


def run_module(capsys, **args):
    return run_main(module.main, capsys, **args)


def test_ready_with_smoke_and_accept_length_floor(server, capsys, warnings):
    result, dummy = run_module(capsys, url=server.url, smoke='generate', min_accept_length=1.5)
    assert not result.get('failed'), result.get('msg')
    assert result['status'] == 'ready' and result['last_http_status'] == 200
    assert result['server_info']['speculative_algorithm'] == 'EAGLE3'
    assert result['server_info']['speculative_depth'] == 5
    assert result['smoke']['accept_length'] == pytest.approx(4.92, abs=0.01)
    assert result['smoke']['accept_length_source'] == 'generate:meta_info'
    assert result['smoke']['tokens'] == 64
    assert warnings == ['the smoke request generated 64 tokens that decode to empty text (special tokens only?)']


def test_warm_sampled_sends_one_sampled_request_after_the_floor_passed(server, capsys):
    seen = []

    def generate(method, body):
        seen.append(body['sampling_params'])
        return 200, fixture_text('eagle3-good-mid', 'generate.json')

    server.routes['/generate'] = generate
    result, dummy = run_module(capsys, url=server.url, smoke='generate', min_accept_length=1.5, warm_sampled=True)
    assert not result.get('failed'), result.get('msg')
    assert [params['temperature'] for params in seen] == [0.0, 1.0]
    assert seen[1]['max_new_tokens'] == 4
    assert result['warm_sampled']['ok'] and result['warm_sampled']['seconds'] >= 0


def test_warm_sampled_is_not_sent_for_a_drafter_below_the_floor_and_its_failure_fails(server, capsys):
    temperatures = []

    def generate(method, body, answer='eagle3-random'):
        temperatures.append(body['sampling_params']['temperature'])
        if temperatures[-1] > 0:
            return 500, b'sampling kernels failed to build'
        return 200, fixture_text(answer, 'generate.json')

    server.routes['/generate'] = generate
    result, dummy = run_module(capsys, url=server.url, smoke='generate', min_accept_length=1.5, warm_sampled=True)
    assert result['failed'] and 'not being accepted' in result['msg'] and temperatures == [0.0]
    server.routes['/generate'] = lambda method, body: generate(method, body, 'eagle3-good-mid')
    result, dummy = run_module(capsys, url=server.url, smoke='generate', min_accept_length=1.5, warm_sampled=True)
    assert result['failed'] and result['msg'].startswith('the smoke passed but the sampled warm-up request (warm_sampled)')
    assert 'HTTP 500' in result['msg'] and result['warm_sampled']['ok'] is False


def test_a_drafter_that_is_not_accepted_fails_with_a_pointer_to_drafter_checkpoint(server, capsys):
    server.routes['/generate'] = lambda method, body: (200, fixture_text('eagle3-random', 'generate.json'))
    result, dummy = run_module(capsys, url=server.url, smoke='generate', min_accept_length=1.5)
    assert result['failed'] and result['status'] == 'ready'
    assert result['msg'].startswith('the drafter is not being accepted: accept length 1.02 < floor 1.50 (EAGLE3, depth 5')
    assert 'drafter_checkpoint' in result['msg']


def test_accept_floor_is_skipped_when_speculative_decoding_is_off(server, capsys):
    server.routes['/get_server_info'] = lambda method, body: (200, fixture_text('plain', 'ep.get_server_info.txt'))
    server.routes['/generate'] = lambda method, body: (200, fixture_text('plain', 'generate.json'))
    result, dummy = run_module(capsys, url=server.url, smoke='generate', min_accept_length=1.5)
    assert not result.get('failed')
    assert result['smoke']['accept_length_check'] == 'skipped: speculative decoding is off'


def test_requests_to_a_pd_server_carry_the_fake_bootstrap_host_and_a_room(server, capsys):
    bodies = []

    def generate(method, body):
        bodies.append(body)
        return 200, fixture_text('eagle3-good-mid', 'generate.json')

    server.routes['/generate'] = generate
    result, dummy = run_module(capsys, url=server.url, smoke='generate', min_accept_length=1.5, disaggregation_mode='decode')
    assert not result.get('failed'), result.get('msg')
    assert [body['sampling_params']['temperature'] for body in bodies] == [0.0, 1.0]  # smoke, then warm_sampled
    for body in bodies:
        assert body['bootstrap_host'] == '2.2.2.2'
        assert isinstance(body['bootstrap_room'], int) and 0 <= body['bootstrap_room'] < 1 << 63
    # the floor still applies on a decode
    assert result['smoke']['accept_length_check'].startswith('passed:')


@pytest.mark.parametrize('mode', [None, ''])
def test_requests_to_a_server_that_is_not_pd_carry_no_bootstrap_fields(server, capsys, mode):
    bodies = []

    def generate(method, body):
        bodies.append(body)
        return 200, fixture_text('eagle3-good-mid', 'generate.json')

    server.routes['/generate'] = generate
    result, dummy = run_module(capsys, url=server.url, smoke='generate', disaggregation_mode=mode)
    assert not result.get('failed'), result.get('msg')
    assert len(bodies) == 2 and not any('bootstrap_room' in body or 'bootstrap_host' in body for body in bodies)


def test_completions_smoke_to_a_prefill_carries_the_fields_and_skips_the_floor(server, capsys):
    bodies = []

    def completions(method, body):
        bodies.append(body)
        return 200, {'choices': [{'text': ' a b'}], 'usage': {'completion_tokens': 2}}

    server.routes.update({
        '/v1/models': lambda method, body: (200, {'data': [{'id': 'tiny'}]}),
        '/v1/completions': completions,
    })
    # a prefill generates no speculative tokens: the floor is skipped, not failed for want of a measure
    result, dummy = run_module(capsys, url=server.url, smoke='completions', min_accept_length=1.5,
                               disaggregation_mode='prefill')
    assert not result.get('failed'), result.get('msg')
    assert result['smoke']['accept_length_check'] == 'skipped: a prefill server generates no speculative tokens'
    assert len(bodies) == 2
    assert all(body['bootstrap_host'] == '2.2.2.2' and isinstance(body['bootstrap_room'], int) for body in bodies)


def test_disaggregation_fields():
    assert _server_api.disaggregation_fields(None) == {}
    assert _server_api.disaggregation_fields('') == {}
    fields = _server_api.disaggregation_fields('prefill')
    assert set(fields) == {'bootstrap_host', 'bootstrap_room'} and fields['bootstrap_host'] == '2.2.2.2'
    rooms = set(_server_api.disaggregation_fields('decode')['bootstrap_room'] for dummy in range(20))
    assert len(rooms) > 1 and all(0 <= room < 1 << 63 for room in rooms)


def test_vllm_completions_smoke_measures_acceptance_from_metric_deltas(server, capsys):
    counters = {'drafts': 0}

    def metrics(method, body):
        counters['drafts'] += 10
        return 200, ('vllm:spec_decode_num_drafts_total{model_name="m"} %d\n'
                     'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} %d\n' % (counters['drafts'], counters['drafts'] // 10))
    del server.routes['/get_server_info']
    server.routes.update({
        '/version': lambda method, body: (200, {'version': '0.32.0'}),
        '/metrics': metrics,
        '/v1/models': lambda method, body: (200, {'data': [{'id': 'tiny'}]}),
        '/v1/completions': lambda method, body: (200, {'choices': [{'text': ' a b'}], 'usage': {'completion_tokens': 2}}),
    })
    result, dummy = run_module(capsys, url=server.url, smoke='completions', min_accept_length=1.5)
    assert result['server_info']['engine'] == 'vllm'
    assert result['smoke']['accept_length'] == pytest.approx(1.1)
    assert result['failed'] and 'accept length 1.10 < floor 1.50' in result['msg']


def test_api_key_is_sent_but_never_printed(server, capsys, tmp_path):
    log = tmp_path / 'server.log'
    log.write_text("server_args=ServerArgs(api_key='%s', port=30000)\nusing key %s\n" % (SECRET, SECRET))
    server.routes['/health'] = lambda method, body: (401, b'')
    result, out = run_module(capsys, url=server.url, api_key=SECRET, log_path=str(log), timeout=0.5,
                             headers={'X-API-Key': 'header-secret'})
    assert result['status'] == 'timeout' and 'check api_key' in result['msg']
    assert server.requests[0][2]['Authorization'] == 'Bearer ' + SECRET
    assert SECRET not in out and 'header-secret' not in out


def test_crash_message_names_the_exit_code_and_shows_the_fatal_lines(server, capsys, tmp_path):
    server.routes['/health'] = lambda method, body: (503, b'')
    log = tmp_path / 'server.log'
    log.write_text('[x] Load weight begin. avail mem=139.09 GB\n[x] Scheduler hit an exception: Traceback (most recent call last):\n'
                   'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n')
    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(0.2); raise SystemExit(1)'])
    try:
        result, dummy = run_module(capsys, url=server.url, pid=child.pid, log_path=str(log), interval=10)
    finally:
        child.wait()
    assert result['status'] == 'crashed' and result['exit_code'] == 1
    lines = result['msg'].split('\n')
    # the root cause first, then what happened; the log lines once, in fatal_line (not in msg)
    assert lines[0] == 'root cause: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB'
    assert lines[1].startswith('the server crashed after 0 s in phase load_weights: PID %d exited, exit code 1' % child.pid)
    assert lines[2] == 'the log from the first fatal line is in fatal_line below (log %s)' % log
    assert 'Load weight begin' not in result['msg']
    assert result['fatal_line'][0].endswith('Traceback (most recent call last):')


def test_fatal_message_names_the_root_cause_of_the_real_vllm_crash(server, capsys, tmp_path):
    server.routes['/health'] = lambda method, body: (503, b'')
    log = tmp_path / 'server.log'
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'fixtures', 'health',
                           'vllm-0.32.0-cpu-crash-draft-model-prefix.log'), 'rb') as fh:
        log.write_bytes(fh.read())
    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])
    try:
        result, dummy = run_module(capsys, url=server.url, pid=child.pid, log_path=str(log), interval=10)
    finally:
        child.kill()
        child.wait()
    assert result['status'] == 'fatal_log'
    lines = result['msg'].split('\n')
    assert lines[0].startswith("root cause: ValueError: There is no module or parameter named 'draft_model' in "
                               "Eagle3LlamaForCausalLM.")
    assert lines[1].startswith('a fatal line appeared in the log ')
    assert lines[3] == "then: RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): " \
                       "{'EngineCore': 1}"
    assert [line[:11] for line in result['exceptions']] == ['ValueError:', 'Exception: ', 'RuntimeErro']


def test_one_slice_returns_waiting_with_state_to_resume(server, capsys, tmp_path):
    server.routes['/health'] = lambda method, body: (503, b'')
    log = tmp_path / 'server.log'
    log.write_text('[x] KV Cache is allocated. #tokens: 1\n')
    result, dummy = run_module(capsys, url=server.url, log_path=str(log), _resume={'slice': 0.3, 'elapsed': 12.0})
    assert result['status'] == 'waiting' and not result.get('failed')
    assert result['elapsed'] >= 12.3 and result['phase'] == 'warmup'
    assert result['new_lines'] == ['[x] KV Cache is allocated. #tokens: 1']
    assert result['state']['log']['offset'] == log.stat().st_size


NO_READY_NOTE = '/ready answered HTTP 404 (no such route: SGLang before 0.5.20, vLLM or a node rank >= 1): readiness from /health'


def test_readiness_from_health_when_ready_is_missing_is_said_in_the_verdict_also_after_a_later_slice(server, capsys):
    server.routes['/health'] = lambda method, body: (503, b'')  # this server has no /ready (404)
    first, dummy = run_module(capsys, url=server.url, _resume={'slice': 0.3})
    assert first['status'] == 'waiting' and first['health_path'] == '/health' and first['notes'] == [NO_READY_NOTE]
    # every later slice says it too: the verdict may be the action plugin's timeout on a waiting slice
    second, dummy = run_module(capsys, url=server.url, _resume={'slice': 0.3, 'elapsed': 0.3, 'state': first['state']})
    assert second['status'] == 'waiting' and second['notes'] == [NO_READY_NOTE]
    server.routes['/health'] = lambda method, body: (200, b'')
    verdict, dummy = run_module(capsys, url=server.url, _resume={'slice': 5, 'elapsed': 0.6, 'state': second['state']})
    assert verdict['status'] == 'ready' and verdict['health_path'] == '/health'
    assert verdict['notes'] == [NO_READY_NOTE]


def test_readiness_from_ready_where_the_server_has_it(server, capsys):
    server.routes['/health'] = lambda method, body: (503, b'')  # a health generation that does not answer in time
    server.routes['/ready'] = lambda method, body: (200, b'')
    result, dummy = run_module(capsys, url=server.url, timeout=5)
    assert result['status'] == 'ready' and not result.get('failed'), result.get('msg')
    assert result['health_path'] == '/ready' and result['notes'] == []


@pytest.mark.parametrize('args, message', [
    ({'min_accept_length': 1.5}, 'min_accept_length needs traffic to measure: set smoke'),
    ({'extra_fatal_patterns': ['(oops']}, "fatal_patterns / extra_fatal_patterns: fatal pattern '(oops' is not a valid regular expression"),
    ({'interval': 0}, 'interval must be greater than 0, got 0.0'),
    ({'disaggregation_mode': 'both'}, "disaggregation_mode must be prefill, decode or null, got 'both'"),
])
def test_argument_errors_say_what_to_change(server, capsys, args, message):
    result, dummy = run_module(capsys, url=server.url, **args)
    assert result['failed'] and result['msg'].startswith(message)


# ------------------------------------------------------------------ action plugin
def make_action(args, module_results, check_mode=False, delegate_to=None):
    task = MagicMock(args=args, check_mode=check_mode, async_val=0, delegate_to=delegate_to,
                     action='llmops.serving.wait_for_llm_health')
    connection = MagicMock()
    connection._shell.tmpdir = None
    plugin = action.ActionModule(task, connection, MagicMock(), loader=None, templar=None)
    plugin._load_name = 'llmops.serving.wait_for_llm_health'
    calls = []

    def execute_module(module_name, module_args, task_vars):
        calls.append(json.loads(json.dumps(module_args)))
        return dict(module_results.pop(0))
    plugin._execute_module = execute_module
    plugin._remove_tmp_path = lambda path: None
    plugin._early_needs_tmp_path = lambda: False
    return plugin, calls


def slice_result(status, phase, lines, state, **extra):
    result = dict(status=status, phase=phase, elapsed=1.0, health='connection refused (not listening yet)',
                  new_lines=lines, notes=[], state=state, changed=False)
    result.update(extra)
    return result


def test_action_runs_slices_prints_heartbeats_and_carries_state(monkeypatch):
    printed = []
    monkeypatch.setattr(action.display, 'display', lambda msg, *a, **k: printed.append(msg))
    results = [
        slice_result('waiting', 'load_weights', ['line %d' % i for i in range(4)] + ['x' * 500], {'log': {'offset': 10}}),
        slice_result('waiting', 'cuda_graphs', [], {'log': {'offset': 20}}, notes=['pidfile /run/x.pid does not exist (yet)']),
        slice_result('ready', 'ready', ['ready line'], {'log': {'offset': 30}}, invocation={'module_args': {}}),
    ]
    plugin, calls = make_action({'url': 'http://h:30000', 'heartbeat_interval': 5, 'log_lines': 3, 'api_key': SECRET},
                                results)
    result = plugin.run(task_vars={'inventory_hostname': 'gpu1'})
    assert result['status'] == 'ready' and 'state' not in result and 'new_lines' not in result and 'invocation' not in result
    assert [c['_resume']['state'] for c in calls] == [None, {'log': {'offset': 10}}, {'log': {'offset': 20}}]
    assert all(c['_resume']['slice'] == 5 for c in calls)
    assert printed[0].split('\n') == [
        '[gpu1] wait_for_llm_health: 1 s, phase load_weights, health: connection refused (not listening yet); '
        '5 new log lines (2 earlier not shown)',
        '    | line 2', '    | line 3', '    | ' + 'x' * 400 + ' [...]']
    assert printed[1].split('\n') == [
        '[gpu1] wait_for_llm_health: 1 s, phase cuda_graphs, health: connection refused (not listening yet); no new log lines',
        '    note: pidfile /run/x.pid does not exist (yet)']
    assert len(printed) == 2
    assert not any(SECRET in line for line in printed)


def test_action_prints_a_note_once_and_the_verdict_keeps_it(monkeypatch):
    printed = []
    monkeypatch.setattr(action.display, 'display', lambda msg, *a, **k: printed.append(msg))
    results = [slice_result('waiting', 'warmup', [], {}, notes=[NO_READY_NOTE]),
               slice_result('waiting', 'warmup', [], {}, notes=[NO_READY_NOTE, 'pidfile /run/x.pid does not exist (yet)']),
               slice_result('ready', 'ready', [], {}, notes=[NO_READY_NOTE])]
    plugin, dummy = make_action({'url': 'http://h:30000', 'heartbeat_interval': 5}, results)
    result = plugin.run(task_vars={'inventory_hostname': 'gpu1'})
    assert [line for text in printed for line in text.split('\n') if 'note:' in line] == [
        '    note: ' + NO_READY_NOTE, '    note: pidfile /run/x.pid does not exist (yet)']
    assert result['status'] == 'ready' and result['notes'] == [NO_READY_NOTE]


def test_action_passes_a_failed_verdict_through():
    results = [slice_result('crashed', 'cuda_graphs', [], {}, failed=True, msg='the server crashed', exit_code=1)]
    plugin, dummy = make_action({'url': 'http://h:30000'}, results, delegate_to='localhost')
    result = plugin.run(task_vars={'inventory_hostname': 'gpu1'})
    assert result['failed'] and result['status'] == 'crashed' and result['exit_code'] == 1


def test_action_returns_module_errors_that_have_no_status():
    plugin, dummy = make_action({'url': 'http://h:30000'}, [{'failed': True, 'msg': 'No Python interpreter'}])
    assert plugin.run(task_vars={})['msg'] == 'No Python interpreter'


def test_action_skips_in_check_mode_and_validates_arguments_first():
    plugin, calls = make_action({'url': 'http://h:30000'}, [], check_mode=True)
    result = plugin.run(task_vars={})
    assert result['skipped'] and calls == []
    plugin, calls = make_action({'url': 'http://h:30000', 'smoke': 'sometimes'}, [], check_mode=True)
    with pytest.raises(AnsibleActionFail, match='smoke'):
        plugin.run(task_vars={})
