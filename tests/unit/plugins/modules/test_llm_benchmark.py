# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the llm_benchmark module (argument handling, result shape, failure policy)."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmops.serving.plugins.module_utils import _benchmark as bm
from ansible_collections.llmops.serving.plugins.modules import llm_benchmark

from ansible_collections.llmops.serving.tests.unit._fake_llm_server import FakeServer


@pytest.fixture
def warnings(monkeypatch):
    """module.warn() calls, captured directly: once controller code is imported (another test
    file may do so), ansible routes module warnings to Display instead of the result."""
    seen = []
    monkeypatch.setattr(llm_benchmark.AnsibleModule, 'warn', lambda self, msg, **kwargs: seen.append(msg))
    return seen


def run_module(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            llm_benchmark.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_runs_against_a_server_and_hides_the_api_key(capsys):
    with FakeServer(tokens_per_chunk=4, accept=2.0) as server:
        code, result = run_module(capsys, {'url': server.url, 'api': 'generate', 'num_prompts': 4,
                                           'concurrency': [1, 2], 'output_len': 8, 'flush_cache': True,
                                           'api_key': 'tops3cret'})
    assert code == 0 and result['changed'] is False
    assert [(r['concurrency'], r['completed'], r['output_tokens'], r['accept_length']) for r in result['runs']] == [
        (1, 4, 32, 2.0), (2, 4, 32, 2.0)]
    assert result['server']['version'] == '0.5.15.post1' and 'internal_states' not in result['server']
    assert result['http_library'].startswith('requests ')
    assert 'tops3cret' not in json.dumps(result)


def test_dataset_file(capsys, tmp_path):
    dataset = tmp_path / 'p.jsonl'
    dataset.write_text('{"prompt": "a b c", "output_len": 3}\n')
    with FakeServer(tokens_per_chunk=1) as server:
        code, result = run_module(capsys, {'url': server.url, 'model': 'm', 'dataset': str(dataset),
                                           'num_prompts': 2, 'concurrency': [2], 'warmup_requests': 0})
    assert code == 0 and result['runs'][0]['output_tokens'] == 6
    assert [r[2]['prompt'] for r in server.requests if r[1] == '/v1/completions'] == ['a b c', 'a b c']


@pytest.mark.parametrize('ratio, code', [(0.0, 1), (0.5, 0)])
def test_max_failed_ratio(capsys, ratio, code):
    with FakeServer(fail_every=4) as server:
        rc, result = run_module(capsys, {'url': server.url, 'model': 'm', 'num_prompts': 8, 'concurrency': [1],
                                         'output_len': 2, 'warmup_requests': 0, 'max_failed_ratio': ratio})
    assert rc == code and result['runs'][0]['failed'] == 2
    if code:
        assert result['msg'] == ('2 of 8 requests to %s failed at concurrency 1 (max_failed_ratio 0.0): '
                                 'HTTP 500: {"error": "overloaded"}' % server.url)


def test_repeat_runs_the_whole_benchmark_again_and_returns_each(capsys):
    with FakeServer(tokens_per_chunk=2) as server:
        code, result = run_module(capsys, {'url': server.url, 'model': 'm', 'num_prompts': 2, 'concurrency': [2],
                                           'output_len': 4, 'warmup_requests': 2, 'repeat': 3, 'api_key': 'k3y'})
    assert code == 0 and len(result['repeats']) == 3
    assert [r['runs'][0]['completed'] for r in result['repeats']] == [2, 2, 2]
    assert result['runs'] == result['repeats'][-1]['runs']
    # every repeat warms up again: 3 x (2 warm-up + 2 measured) completions
    assert len([r for r in server.requests if r[1] == '/v1/completions']) == 12
    assert 'k3y' not in json.dumps(result)


def test_repeat_runs_every_repeat_and_names_each_failed_one(capsys):
    with FakeServer(fail_every=4) as server:
        code, result = run_module(capsys, {'url': server.url, 'model': 'm', 'num_prompts': 8, 'concurrency': [1],
                                           'output_len': 2, 'warmup_requests': 0, 'repeat': 2})
    assert code == 1 and len(result['repeats']) == 2 and all(r['failed'] for r in result['repeats'])
    failure = ('2 of 8 requests to %s failed at concurrency 1 (max_failed_ratio 0.0): HTTP 500: {"error": "overloaded"}'
               % server.url)
    assert result['msg'] == 'round 1 of 2: %s; round 2 of 2: %s' % (failure, failure)


def test_repeat_of_an_unreachable_server_fails_each_round(capsys):
    code, result = run_module(capsys, {'url': 'http://127.0.0.1:9', 'model': 'm', 'num_prompts': 1, 'concurrency': [1],
                                       'warmup_requests': 0, 'timeout': 2, 'repeat': 2})
    assert code == 1 and result['msg'].startswith('round 1 of 2: ') and '; round 2 of 2: ' in result['msg']
    assert [r['failed'] for r in result['repeats']] == [True, True]


@pytest.mark.parametrize('args, msg', [
    ({'url': 'localhost:30000'}, 'url must start with http:// or https://, got localhost:30000'),
    ({'url': 'http://x', 'num_prompts': 0}, 'num_prompts must be at least 1, got 0'),
    ({'url': 'http://x', 'repeat': 0}, 'repeat must be at least 1, got 0'),
    ({'url': 'http://x', 'concurrency': [4, 0]}, 'concurrency must list values of at least 1'),
    ({'url': 'http://x', 'dataset': '/nonexistent/p.jsonl'}, "No such file or directory: '/nonexistent/p.jsonl'"),
    ({'url': 'http://x', 'disaggregation_mode': 'decode'},
     'http://x is the decode server of a prefill/decode pair (disaggregation_mode decode), which cannot be benchmarked '
     'alone: SGLang answers it only requests paired through a router in prefill/decode mode (HTTP 400 '
     '"Disaggregated request received without bootstrap room id." to any other)'),
    ({'url': 'http://x', 'disaggregation_mode': 'both'}, "disaggregation_mode must be prefill or decode (or null), got 'both'"),
])
def test_bad_arguments_fail_with_a_clear_message(capsys, args, msg):
    code, result = run_module(capsys, args)
    assert code == 1 and msg in result['msg']


def test_missing_requests_names_the_library_and_the_way_out(capsys, monkeypatch):
    monkeypatch.setattr(bm, 'requests', None)
    code, result = run_module(capsys, {'url': 'http://127.0.0.1:30000', 'http_library': 'requests'})
    assert code == 1
    assert 'requests' in result['msg'] and 'set http_library to auto or http.client' in result['msg']


def test_runs_with_the_standard_library_when_requests_is_missing(capsys, monkeypatch):
    monkeypatch.setattr(bm, 'requests', None)
    with FakeServer(tokens_per_chunk=2) as server:
        code, result = run_module(capsys, {'url': server.url, 'model': 'm', 'num_prompts': 3, 'concurrency': [3],
                                           'output_len': 4, 'warmup_requests': 0})
    assert code == 0 and result['runs'][0]['output_tokens'] == 12
    assert result['http_library'].startswith('http.client')


def test_a_null_disaggregation_mode_is_a_server_that_does_both(capsys):
    # What the sglang_server role passes for a server that is neither prefill nor decode.
    with FakeServer(tokens_per_chunk=2) as server:
        code, result = run_module(capsys, {'url': server.url, 'model': 'm', 'num_prompts': 3, 'concurrency': [3],
                                           'output_len': 4, 'warmup_requests': 0, 'disaggregation_mode': None})
    assert code == 0 and result['runs'][0]['output_tokens'] == 12


def test_busy_client_warns(capsys, monkeypatch, warnings):
    def fake(*args, **kwargs):
        run = bm.aggregate([], 1.0, 8, 0.95)
        run['num_prompts'] = 1
        return {'runs': [run], 'server_info': None, 'model': 'm'}
    monkeypatch.setattr(bm, 'benchmark', fake)
    code, result = run_module(capsys, {'url': 'http://127.0.0.1:1', 'max_failed_ratio': 1.0})
    assert code == 0 and result['runs'][0]['concurrency'] == 8
    assert ('at concurrency 8 the benchmark client used 95% of a CPU core: the figures may be limited by the client, '
            'not the server') in warnings


@pytest.mark.parametrize('info, expected', [
    ({'api_key': 'k', 'admin_api_key': None, 'ssl_keyfile_password': 'p', 'port': 1, 'internal_states': [{}]},
     {'api_key': '********', 'admin_api_key': None, 'ssl_keyfile_password': '********', 'port': 1}),
    (None, {}),
])
def test_server_args_mask_secrets_and_drop_internal_state(info, expected):
    assert llm_benchmark._server_args(info) == expected


def test_warns_when_the_server_gives_no_token_counts(capsys, monkeypatch, warnings):
    def fake(*args, **kwargs):
        record = bm.RequestRecord('completions', 0.0)
        record.ttft, record.end, record.output_tokens, record.chunks = 0.1, 1.0, 8, 8
        run = bm.aggregate([record], 1.0, 2, 0.01)
        run['server_counters'] = {'generation_tokens': 30.0}
        return {'runs': [run], 'server_info': None, 'model': 'm'}
    monkeypatch.setattr(bm, 'benchmark', fake)
    code, result = run_module(capsys, {'url': 'http://127.0.0.1:1'})
    assert code == 0 and result['runs'][0]['output_tokens_counted_by_server'] is False
    assert ('at concurrency 2 the server did not say how many tokens each streamed chunk held (no usage in the '
            'stream), so one token per chunk was counted: 8 tokens, the server counted 30.0') in warnings


def test_rounds_spread_goodput_and_settings_in_the_result(capsys):
    with FakeServer(tokens_per_chunk=2) as server:
        code, result = run_module(capsys, {'url': server.url, 'model': 'm', 'num_prompts': 3, 'concurrency': [2],
                                           'output_len': 4, 'input_len': 5, 'seed': 9, 'rounds': 2,
                                           'warmup_requests': 1, 'slo': {'ttft_ms': 60000}})
    assert code == 0
    run = result['runs'][0]
    assert (run['num_prompts'], run['completed'], len(run['rounds'])) == (6, 6, 2)
    assert run['good_requests'] == 6 and run['goodput'] > 0
    spread = run['spread']['output_throughput']
    assert spread['min'] <= run['output_throughput'] == spread['median'] <= spread['max']
    assert set(run['itl_ms']) == set(run['chunk_gap_ms']) == {'mean', 'p50', 'p90', 'p99'}
    assert result['settings'] == {'num_prompts': 3, 'input_len': 5, 'output_len': 4, 'seed': 9, 'dataset': None,
                                  'rounds': 2, 'min_duration': 0.0, 'warmup_requests': 1, 'temperature': 0.0,
                                  'api': 'completions', 'slo': {'ttft_ms': 60000.0}}


@pytest.mark.parametrize('args, msg', [
    ({'rounds': 0}, 'rounds must be at least 1, got 0'),
    ({'min_duration': -1}, 'min_duration must be at least 0, got -1.0'),
    ({'timeout': 0}, 'timeout must be above 0, got 0.0'),
    ({'slo': {'tpot_ms': 0}}, 'slo.tpot_ms must be above 0 (milliseconds), got 0.0'),
])
def test_bad_run_settings_fail_before_any_request(capsys, args, msg):
    code, result = run_module(capsys, dict(args, url='http://127.0.0.1:1'))
    assert code == 1 and result['msg'] == msg
