"""llmops.serving.llm_server_info against a fake server answering with the endpoints recorded on the H200."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.modules import llm_server_info as module
from ansible_collections.llmops.serving.tests.unit.plugins.modules._module_runner import record_warnings, run_main
from ansible_collections.llmops.serving.tests.unit._fake_llm_server import FakeLLMServer, fixture_text, free_port

KEY = "k3y'with\\quote"


def recorded(run, name):
    text = fixture_text(run, name)
    return lambda method, body: (200, text)


def sglang_routes(run='eagle3-good-mid', info='ep.server_info.txt'):
    return {
        '/health': lambda method, body: (200, ''),
        '/server_info': recorded(run, info),
        '/v1/models': recorded(run, 'ep.v1_models.txt'),
        '/metrics': recorded(run, 'ep.metrics.txt'),
    }


@pytest.fixture
def serve():
    servers = []

    def start(routes):
        servers.append(FakeLLMServer(routes))
        return servers[-1]
    yield start
    for server in servers:
        server.close()


@pytest.fixture(autouse=True)
def warnings(monkeypatch):
    return record_warnings(monkeypatch)


def run_module(capsys, **args):
    return run_main(module.main, capsys, **args)


@pytest.mark.parametrize('check_mode', [False, True])
def test_sglang_version_depth_and_accept_length_from_metrics_since_start(serve, capsys, check_mode):
    server = serve(sglang_routes())
    result, dummy = run_module(capsys, url=server.url, _ansible_check_mode=check_mode)
    assert not result.get('failed') and result['changed'] is False
    assert result['reachable'] and result['healthy'] and not result['unauthorized']
    assert result['engine'] == 'sglang' and result['version'] == '0.5.15.post1'
    assert result['speculative']['algorithm'] == 'EAGLE3' and result['speculative']['depth'] == 5
    # avg_spec_accept_length is absent from this server info: the counters give 8 tokens / 2 verify calls
    assert result['accept_length'] == 4.0
    assert result['accept_length_source'] == 'metrics:sglang:generation_tokens_total/spec_verify_calls_total'
    assert result['server_info_source'] == '/server_info'
    assert result['status_codes'] == {'/health': 200, '/server_info': 200}
    assert result['model']
    assert [path for dummy, path, dummy2, dummy3 in server.requests] == ['/health', '/server_info', '/v1/models', '/metrics']


def test_accept_length_from_server_info_when_it_has_one(serve, capsys):
    server = serve(sglang_routes('eagle3-random', 'ep.get_server_info.after.txt'))
    result, dummy = run_module(capsys, url=server.url)
    assert result['accept_length'] == 1.0
    assert result['accept_length_source'] == '/server_info:internal_states.avg_spec_accept_length'


def test_older_sglang_answers_get_server_info(serve, capsys):
    routes = sglang_routes()
    routes['/get_server_info'] = routes.pop('/server_info')
    result, dummy = run_module(capsys, url=serve(routes).url)
    assert result['server_info_source'] == '/get_server_info' and result['version'] == '0.5.15.post1'
    assert result['status_codes'] == {'/health': 200, '/server_info': 404, '/get_server_info': 200}


def test_plain_server_has_no_accept_length(serve, capsys):
    result, dummy = run_module(capsys, url=serve(sglang_routes('plain', 'ep.get_server_info.after.txt')).url)
    assert result['speculative']['algorithm'] is None and result['accept_length'] is None


def test_api_key_is_sent_as_bearer_and_never_shown(serve, capsys):
    server = serve(sglang_routes())
    result, out = run_module(capsys, url=server.url, api_key=KEY)
    assert all(headers.get('Authorization') == 'Bearer ' + KEY for dummy, dummy2, headers, dummy3 in server.requests)
    assert KEY not in out and 'with\\\\quote' not in out and not result['unauthorized']


@pytest.mark.parametrize('status', [401, 403])
def test_a_refused_key_is_reported_with_the_variable_to_set(serve, capsys, warnings, status):
    """Issue 23 item 6: without the key the status said healthy=True with empty version and depth."""
    routes = sglang_routes()

    def unauthorized(method, body):
        return status, {'error': 'Unauthorized'}
    routes.update({'/server_info': unauthorized, '/get_server_info': unauthorized, '/v1/models': unauthorized})
    server = serve(routes)
    result, dummy = run_module(capsys, url=server.url)
    assert not result.get('failed')
    assert result['healthy'] and result['unauthorized'] and result['version'] is None
    assert result['status_codes'] == {'/health': 200, '/server_info': status}
    assert 'sglang_server_api_key' in result['msg'] and 'HTTP %d' % status in result['msg']
    assert 'none was sent' in result['msg']
    assert warnings == [result['msg']]
    wrong, dummy = run_module(capsys, url=server.url, api_key='not-the-key')
    assert 'the api_key sent was refused' in wrong['msg']


def test_unreachable_server_is_not_a_failure(capsys):
    result, dummy = run_module(capsys, url='http://127.0.0.1:%d' % free_port(), request_timeout=2)
    assert not result.get('failed')
    assert not result['reachable'] and not result['healthy'] and not result['unauthorized']
    assert result['status_codes'] == {'/health': None} and 'no answer from' in result['msg']


def test_vllm_version_endpoint(serve, capsys):
    routes = {'/health': lambda method, body: (200, ''), '/version': lambda method, body: (200, {'version': '0.32.0'})}
    result, dummy = run_module(capsys, url=serve(routes).url)
    assert result['engine'] == 'vllm' and result['version'] == '0.32.0' and result['server_info_source'] == '/version'
