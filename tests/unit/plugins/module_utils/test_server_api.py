"""plugins/module_utils/_server_api.py: server info, smoke request and acceptance length from the
recorded endpoints."""

from __future__ import annotations

import json
import re

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _server_api as server_api
from ansible_collections.llmops.serving.tests.unit._fake_llm_server import (
    fixture_text,
    open_url_request,
)


# ------------------------------------------------------------------ after ready
@pytest.mark.parametrize('run, expected', [('eagle3-random', 1.016), ('eagle3-good-mid', 4.92), ('plain', None)])
def test_accept_length_from_recorded_generate_meta_info(run, expected):
    meta = json.loads(fixture_text(run, 'generate.json'))['meta_info']
    value = server_api.accept_length_from_meta(meta)
    assert value == pytest.approx(expected, abs=0.01) if expected else value is None


def test_accept_length_from_meta_without_the_ratio_field():
    assert server_api.accept_length_from_meta({'completion_tokens': 64, 'spec_verify_ct': 16}) == 4.0


@pytest.mark.parametrize('run, name, expected', [
    ('eagle3-good-mid', 'ep.get_server_info.after.txt', None),   # avg_spec_accept_length absent
    ('eagle3-random', 'ep.get_server_info.after.txt', 1.0),
    ('eagle3-random', 'ep.get_server_info.txt', None),           # null before traffic
])
def test_server_info_summary_from_recordings(run, name, expected):
    summary = server_api.summarize_server_info(json.loads(fixture_text(run, name)))
    assert summary['engine'] == 'sglang' and summary['version'] == '0.5.15.post1'
    assert (summary['speculative_algorithm'], summary['speculative_depth']) == ('EAGLE3', 5)
    assert summary['avg_spec_accept_length'] == expected


@pytest.mark.parametrize('served, asked, source', [
    # 0.5.15 answers both and logs a deprecation for every /get_server_info: ask /server_info only.
    (('/server_info', '/get_server_info'), ['/server_info'], '/server_info'),
    (('/get_server_info',), ['/server_info', '/get_server_info'], '/get_server_info'),  # an older SGLang
    (('/version',), ['/server_info', '/get_server_info', '/version'], '/version'),    # vLLM
])
def test_server_info_asks_the_current_endpoint_first(served, asked, source):
    body = {'/version': '{"version": "0.32.0"}'}
    calls = []

    def request(method, path, timeout):
        calls.append(path)
        if path not in served:
            return 404, b'{"detail":"Not Found"}'
        return 200, body.get(path, fixture_text('eagle3-random', 'ep.server_info.txt')).encode()

    summary, dummy = server_api.fetch_server_info(request, timeout=1)
    assert calls == asked
    assert summary['source'] == source


def test_sglang_gauge_at_zero_means_no_data():
    metrics = server_api.parse_prometheus(fixture_text('eagle3-random', 'ep.metrics.txt'))
    assert server_api.accept_length_from_metrics_with_source(None, metrics) == (None, None)


def test_vllm_counter_deltas():
    before = server_api.parse_prometheus('vllm:spec_decode_num_drafts_total{model_name="m"} 10.0\n'
                                         'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 5.0\n')
    after = server_api.parse_prometheus('vllm:spec_decode_num_drafts_total{model_name="m"} 30.0\n'
                                        'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 45.0\n')
    value, source = server_api.accept_length_from_metrics_with_source(before, after)
    assert value == 3.0 and source.startswith('metrics:vllm:')
    assert server_api.speculative_enabled({'engine': 'vllm'}, after) is True


@pytest.mark.parametrize('kind, answer, ok, tokens, text', [
    ('generate', (200, fixture_text('eagle3-random', 'generate.json')), True, 64, ''),
    ('completions', (200, {'choices': [{'text': ' Paris'}], 'usage': {'completion_tokens': 2}}), True, 2, ' Paris'),
    ('completions', (200, {'choices': [{'text': ''}], 'usage': {'completion_tokens': 0}}), False, 0, ''),
    ('generate', (500, {'detail': 'boom'}), False, None, None),
])
def test_smoke_request(server, kind, answer, ok, tokens, text):
    server.routes['/generate' if kind == 'generate' else '/v1/completions'] = lambda method, body: answer
    server.routes['/v1/models'] = lambda method, body: (200, fixture_text('eagle3-random', 'ep.v1_models.txt'))
    result = server_api.smoke_request(open_url_request(server.url), kind, 'Hello', 8)
    assert (result['ok'], result['tokens'], result['text']) == (ok, tokens, text)
    if kind == 'completions':
        assert server.requests[-1][3]['model'] == '/tmp/sglmodels/target'


def test_accept_length_message_points_at_the_drafter():
    text = server_api.accept_length_message(1.016, 1.5, 'generate:meta_info',
                                            {'speculative_algorithm': 'EAGLE3', 'speculative_depth': 5})
    assert text.startswith('the drafter is not being accepted: accept length 1.02 < floor 1.50 (EAGLE3, depth 5')
    assert 'wrong layer names or missing lm_head' in text and 'drafter_checkpoint' in text


def test_prometheus_samples_without_labels_and_with_timestamps_are_read():
    text = ('# HELP x a counter\n# TYPE x counter\nsglang:generation_tokens_total 7\n'
            'process_cpu_seconds_total 1.5 1700000000000\nsglang:num_running_reqs{model_name="m"} 2 1700000000000\n'
            'broken_line\n')
    assert server_api.parse_prometheus(text) == {'sglang:generation_tokens_total': [7.0],
                                                 'process_cpu_seconds_total': [1.5],
                                                 'sglang:num_running_reqs': [2.0]}


def test_prometheus_samples_have_their_labels_unescaped():
    text = ('# TYPE m gauge\nm{a="x",b="say \\"hi\\"\\\\n"} 1\nm 2 1700000000000\n'
            'm{path="/a}b"} 3\nbroken{a="x"}\n')
    assert list(server_api.prometheus_samples(text)) == [
        ('m', {'a': 'x', 'b': 'say "hi"\\n'}, 1.0), ('m', {}, 2.0), ('m', {'path': '/a}b'}, 3.0)]


# sglang-router's /metrics: breakers of three workers (one an IPv6 URL whose brackets and dots a regular
# expression would read as syntax), other per-worker metrics, timestamps and a second label set.
ROUTER_METRICS = '''# HELP smg_worker_cb_state Circuit breaker state (0 closed, 1 open, 2 half-open)
# TYPE smg_worker_cb_state gauge
smg_worker_cb_state{worker="http://10.0.0.5:30000"} 0
smg_worker_cb_state{worker="http://[fd00::7]:30000"} 1
smg_worker_cb_state{worker="http://gpu-b.example:30000"} 2 1700000000000
smg_worker_cb_state{worker="http://10.0.0.9:30000",model="m"} 1
smg_worker_cb_consecutive_failures{worker="http://10.0.0.5:30000"} 3
smg_worker_health{worker="http://10.0.0.5:30000"} 1
smg_http_requests_total 12
'''
ROUTER_URLS = ('http://10.0.0.5:30000', 'http://[fd00::7]:30000', 'http://gpu-b.example:30000',
               'http://10.0.0.9:30000', 'http://10.0.0.7:30000', 'http://10.0.0.5:3000')


def _regex_status_breakers(text):
    """What roles/sglang_router/tasks/status.yml read with regex_findall before router_breakers."""
    codes = dict(re.findall(r'^smg_worker_cb_state\{worker="([^"]+)"\} (\d+)', text, re.MULTILINE))
    return dict((url, {'0': 'closed', '1': 'open', '2': 'half-open'}[codes.get(url, '0')]) for url in ROUTER_URLS)


def _regex_breaker_open(text, url):
    """What roles/sglang_router/vars/main.yml's __sglang_router_breaker_open was before router_breakers."""
    codes = re.findall(r'^smg_worker_cb_state\{worker="' + re.escape(url) + r'"\} (\d+)', text, re.MULTILINE)
    return (codes[0] if codes else '0') != '0'


@pytest.mark.parametrize('text', [ROUTER_METRICS, '', 'smg_worker_cb_state{worker="http://10.0.0.5:30000"} 1\n'])
def test_router_breakers_read_what_the_router_role_s_regular_expressions_read(text):
    breakers = server_api.router_breakers(text)
    assert dict((url, breakers.get(url, 'closed')) for url in ROUTER_URLS) == _regex_status_breakers(text)
    assert [breakers.get(url, 'closed') != 'closed' for url in ROUTER_URLS] == [
        _regex_breaker_open(text, url) for url in ROUTER_URLS]


def test_router_breakers_name_each_state():
    assert server_api.router_breakers(ROUTER_METRICS) == {
        'http://10.0.0.5:30000': 'closed', 'http://[fd00::7]:30000': 'open', 'http://gpu-b.example:30000': 'half-open'}
    assert server_api.router_breakers('smg_worker_cb_state{worker="http://a:1"} 3\n') == {'http://a:1': '3'}
