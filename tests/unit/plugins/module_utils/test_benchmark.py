# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of plugins/module_utils/_benchmark.py (parsing, statistics, HTTP client)."""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _benchmark as bm
from ansible_collections.llmops.serving.tests.unit._fake_llm_server import (
    FIXTURES,
    HANG,
    FakeLLMServer,
    FakeServer,
    completion_events,
    cut_short,
    pings,
    sse_body,
    then_close,
)


def fixture(run, name):
    with open(os.path.join(FIXTURES, run, name), 'rb') as handle:
        return handle.read()


class Clock:
    """A clock that advances by ``step`` seconds on every call."""

    def __init__(self, step=0.01):
        self.now = 0.0
        self.step = step

    def __call__(self):
        self.now += self.step
        return self.now


def sse(*events):
    return [b'data: ' + json.dumps(e).encode() for e in events] + [b'', b'data: [DONE]']


# ---------------------------------------------------------------- statistics

@pytest.mark.parametrize('values, pct, expected', [
    ([1.0], 99, 1.0),
    ([1.0, 2.0], 50, 1.5),
    ([1.0, 2.0, 3.0, 4.0, 5.0], 50, 3.0),
    ([1.0, 2.0, 3.0, 4.0, 5.0], 90, 4.6),
    (list(map(float, range(101))), 99, 99.0),
    ([], 50, None),
])
def test_percentile(values, pct, expected):
    assert bm.percentile(values, pct) == pytest.approx(expected) if expected is not None else bm.percentile(values, pct) is None


def test_summarize_scales_and_sorts():
    assert bm.summarize([0.003, 0.001, 0.002], 1000.0) == pytest.approx(
        {'mean': 2.0, 'p50': 2.0, 'p90': 2.8, 'p99': 2.98})
    assert bm.summarize([]) == {'mean': None, 'p50': None, 'p90': None, 'p99': None}


# ---------------------------------------------------------------- prompts

def test_synthetic_prompts_are_reproducible():
    first = bm.synthetic_prompts(3, 16, 32, seed=7)
    assert first == bm.synthetic_prompts(3, 16, 32, seed=7)
    assert first != bm.synthetic_prompts(3, 16, 32, seed=8)
    assert [len(p['prompt'].split()) for p in first] == [16, 16, 16]
    assert {p['output_len'] for p in first} == {32}


def test_load_dataset_mixes_strings_and_objects_and_repeats(tmp_path):
    path = tmp_path / 'prompts.jsonl'
    path.write_text('"hello"\n\n{"prompt": "world", "output_len": 5}\n{"text": "x", "max_tokens": 3}\n')
    prompts = bm.load_dataset(str(path), 7, 99, seed=1)
    assert len(prompts) == 7
    assert {(p['prompt'], p['output_len']) for p in prompts} == {('hello', 99), ('world', 5), ('x', 3)}


@pytest.mark.parametrize('content, message', [
    ('', 'holds no prompts'),
    ('{"prompt": "a"}\nnot json\n', 'line 2 is not JSON'),
    ('{"question": "a"}\n', 'line 1: expected a JSON string or an object with a "prompt"'),
])
def test_load_dataset_errors_name_file_and_line(tmp_path, content, message):
    path = tmp_path / 'bad.jsonl'
    path.write_text(content)
    with pytest.raises(bm.BenchmarkError, match=message):
        bm.load_dataset(str(path), 1, 8, seed=0)


@pytest.mark.parametrize('api, key', [('completions', 'max_tokens'), ('generate', 'sampling_params')])
def test_request_body_asks_for_exact_lengths_and_streaming(api, key):
    body = bm.request_body(api, 'hi', 12, model='m')
    assert body['stream'] is True and key in body
    if api == 'generate':
        assert body['sampling_params'] == {'max_new_tokens': 12, 'temperature': 0.0, 'ignore_eos': True}
    else:
        assert body['model'] == 'm' and body['ignore_eos'] is True
        assert body['stream_options'] == {'include_usage': True, 'continuous_usage_stats': True}


# ---------------------------------------------------------------- stream parsing

def test_recorded_sglang_stream_without_usage_counts_chunks():
    # Real SGLang 0.5.15 /v1/completions stream (asked without stream_options): 8 chunks.
    lines = fixture('eagle3-good-mid', 'stream.txt').splitlines()
    record = bm.consume_stream(lines, bm.RequestRecord('completions', 0.0), Clock())
    assert record.ok and record.chunks == 8 and record.output_tokens == 8 and not record.server_counted
    assert record.ttft == pytest.approx(0.01) and len(record.gaps) == 7


def test_final_usage_chunk_corrects_the_token_count():
    # Same recording plus the include_usage chunk SGLang appends when asked: 32 tokens in 8 chunks.
    lines = fixture('eagle3-good-mid', 'stream.txt').splitlines()
    usage = json.dumps({'choices': [], 'usage': {'prompt_tokens': 5, 'completion_tokens': 32}}).encode()
    done = lines.index(b'data: [DONE]')
    lines = lines[:done] + [b'data: ' + usage] + lines[done:]
    record = bm.consume_stream(lines, bm.RequestRecord('completions', 0.0), Clock())
    assert (record.output_tokens, record.prompt_tokens, record.chunks) == (32, 5, 8)
    assert record.server_counted


def test_continuous_usage_counts_several_tokens_per_chunk():
    choice = [{'index': 0, 'text': 'x'}]
    events = [{'choices': choice, 'usage': {'prompt_tokens': 4, 'completion_tokens': n}} for n in (1, 5, 9, 10)]
    events.append({'choices': [], 'usage': {'prompt_tokens': 4, 'completion_tokens': 10}})
    record = bm.consume_stream(sse(*events), bm.RequestRecord('completions', 0.0), Clock(0.1))
    assert (record.output_tokens, record.chunks) == (10, 4)
    assert record.gaps == pytest.approx([0.1, 0.1, 0.1])
    assert record.tpot == pytest.approx((record.e2e - record.ttft) / 9)


def test_native_generate_stream_is_cumulative_and_gives_acceptance():
    events = [{'text': 'a', 'meta_info': {'prompt_tokens': 6, 'completion_tokens': n}} for n in (1, 6, 11)]
    events.append({'text': 'a', 'meta_info': {'prompt_tokens': 6, 'completion_tokens': 16, 'spec_verify_ct': 4,
                                              'spec_accept_length': 4.0}})
    record = bm.consume_stream(sse(*events), bm.RequestRecord('generate', 0.0), Clock())
    assert (record.output_tokens, record.prompt_tokens, record.chunks) == (16, 6, 4)
    assert record.accept_length == 4.0 and record.verify_ct == 4


def test_recorded_generate_response_acceptance():
    # Real non-streamed /generate response: 64 tokens in 13 verify steps.
    record = bm.consume_stream([b'data: ' + fixture('eagle3-good-mid', 'generate.json')],
                               bm.RequestRecord('generate', 0.0), Clock())
    assert record.output_tokens == 64
    assert record.accept_length == pytest.approx(64 / 13.0)


def test_acceptance_from_verify_count_when_length_is_missing():
    events = [{'meta_info': {'completion_tokens': 12, 'spec_verify_ct': 4}}]
    record = bm.consume_stream(sse(*events), bm.RequestRecord('generate', 0.0), Clock())
    assert record.accept_length == 3.0


@pytest.mark.parametrize('lines, error', [
    ([b'data: [DONE]'], 'stream ended without any token'),
    ([b'data: {"error": {"message": "boom"}}'], 'server error in stream: {"message": "boom"}'),
])
def test_broken_streams_are_failures(lines, error):
    record = bm.consume_stream(lines, bm.RequestRecord('completions', 0.0), Clock())
    assert record.error == error and not record.ok


# ---------------------------------------------------------------- server figures

def test_parse_prometheus_recorded_sglang_metrics():
    metrics = bm.parse_prometheus(fixture('eagle3-good-mid', 'ep.metrics.txt').decode())
    assert metrics['sglang:generation_tokens_total'] == [8.0]
    assert metrics['sglang:prompt_tokens_total'] == [26.0]
    assert metrics['sglang:spec_accept_length'] == [0.0]


def test_vllm_counter_deltas_and_acceptance():
    before = bm.parse_prometheus('vllm:spec_decode_num_drafts_total{model_name="m"} 10\n'
                                 'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 5\n'
                                 'vllm:generation_tokens_total{model_name="m"} 100\n')
    after = bm.parse_prometheus('vllm:spec_decode_num_drafts_total{model_name="m"} 110\n'
                                'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 255\n'
                                'vllm:generation_tokens_total{model_name="m"} 460\n')
    assert bm.counter_deltas(before, after) == {'generation_tokens': 360.0, 'spec_drafts': 100.0,
                                                'spec_accepted_tokens': 250.0}
    assert bm.accept_length_from_metrics(before, after) == pytest.approx(3.5)


@pytest.mark.parametrize('text, expected', [
    ('sglang:spec_accept_length{tp_rank="0"} 3.5\nsglang:spec_accept_length{tp_rank="1"} 3.5\n', 3.5),
    ('sglang:spec_accept_length{tp_rank="0"} 0.0\n', None),
    ('', None),
])
def test_sglang_gauge_acceptance(text, expected):
    assert bm.accept_length_from_metrics({}, bm.parse_prometheus(text)) == expected


@pytest.mark.parametrize('run, expected', [('eagle3-good-mid', None), ('eagle3-random', 1.0), ('plain', None)])
def test_accept_length_from_recorded_server_info(run, expected):
    info = json.loads(fixture(run, 'ep.get_server_info.after.txt'))
    assert bm.accept_length_from_server_info(info) == expected
    assert bm.speculative_enabled(info) is (run != 'plain')


# ---------------------------------------------------------------- aggregate

def _record(ttft, e2e, tokens, prompt=10, accept=None, error=None):
    record = bm.RequestRecord('completions', 0.0)
    record.ttft, record.end, record.output_tokens, record.prompt_tokens = ttft, e2e, tokens, prompt
    record.accept_length, record.error, record.chunks, record.gaps = accept, error, tokens, [0.01] * (tokens - 1)
    return record


def test_aggregate_figures():
    records = [_record(0.1, 1.0, 10, accept=2.0), _record(0.3, 2.0, 30, accept=4.0),
               _record(None, 0.5, 0, error='HTTP 500: x')]
    run = bm.aggregate(records, duration=2.0, concurrency=2, cpu_seconds=0.04)
    assert (run['completed'], run['failed'], run['errors']) == (2, 1, ['HTTP 500: x'])
    assert run['output_tokens'] == 40 and run['input_tokens'] == 20
    assert run['output_throughput'] == 20.0 and run['total_throughput'] == 30.0
    assert run['request_throughput'] == 1.0
    assert run['ttft_ms']['mean'] == pytest.approx(200.0)
    assert run['e2e_ms']['p50'] == pytest.approx(1500.0)
    assert run['tpot_ms']['mean'] == pytest.approx(1000 * (0.9 / 9 + 1.7 / 29) / 2)
    assert (run['accept_length'], run['accept_length_source']) == (3.0, 'per_request')
    assert run['client_cpu_ms_per_1k_tokens'] == pytest.approx(1000.0)
    assert run['client_cpu_utilisation'] == pytest.approx(0.02)


# ---------------------------------------------------------------- against a local server

@pytest.mark.parametrize('library', ['requests', 'http.client'])
@pytest.mark.parametrize('api, accept, source', [
    ('generate', 3.0, 'per_request'),
    ('generate', None, 'server_info'),
    ('completions', None, 'server_info'),
])
def test_benchmark_end_to_end(api, accept, source, library):
    with FakeServer(tokens_per_chunk=3, accept=accept) as server:
        client = bm.Client(server.url, api_key='s3cret', http_library=library)
        prompts = bm.synthetic_prompts(6, 4, 12, seed=0)
        result = bm.benchmark(client, api, prompts, [1, 3], warmup_requests=2, flush_cache=True)
    runs = result['runs']
    assert [r['concurrency'] for r in runs] == [1, 3]
    for run in runs:
        assert (run['completed'], run['failed'], run['output_tokens'], run['input_tokens']) == (6, 0, 72, 18)
        assert run['tokens_per_chunk'] == 3.0
        assert run['output_tokens_counted_by_server'] is True
        assert run['server_counters'] == {'generation_tokens': 72.0}
        assert run['accept_length_source'] == source
        assert run['accept_length'] == (accept or 2.5)
    assert server.flushes == 2
    assert result['server_info']['version'] == '0.5.15.post1'
    if api == 'completions':
        assert result['model'] == 'tiny'
        assert {r[2]['model'] for r in server.requests if r[1] == '/v1/completions'} == {'tiny'}
    assert all(r[2].get('Authorization') == 'Bearer s3cret' for r in server.requests if r[0] == 'GET')
    # warm-up at each run's concurrency (2 at 1, one per slot at 3) + 2 runs x 6 prompts
    assert sum(1 for r in server.requests if r[1] in ('/generate', '/v1/completions')) == 2 + 3 + 12


@pytest.mark.parametrize('library', ['requests', 'http.client'])
def test_failed_requests_are_counted_with_their_error(library):
    with FakeServer(fail_every=3, metrics=False) as server:
        prompts = bm.synthetic_prompts(6, 4, 4, seed=0)
        result = bm.benchmark(bm.Client(server.url, http_library=library), 'completions', prompts, [2], model='m',
                              warmup_requests=0)
    run = result['runs'][0]
    assert (run['completed'], run['failed']) == (4, 2)
    assert run['errors'] == ['HTTP 500: {"error": "overloaded"}']
    assert run['server_counters'] == {}


@pytest.mark.parametrize('library', ['requests', 'http.client'])
def test_the_admin_key_goes_to_flush_cache_only(library):
    with FakeServer() as server:
        client = bm.Client(server.url, api_key='s3cret', http_library=library, admin_api_key='adm1n')
        bm.benchmark(client, 'generate', bm.synthetic_prompts(2, 4, 4, seed=0), [1], warmup_requests=1, flush_cache=True)
        bm.Client(server.url, api_key='s3cret', http_library=library).flush_cache()
    assert server.flush_auth == ['Bearer adm1n', 'Bearer s3cret']
    assert all(r[2].get('Authorization') == 'Bearer s3cret' for r in server.requests if r[0] == 'GET')


def test_flush_cache_missing_endpoint_is_a_clear_error():
    with FakeServer(flush_status=404) as server:
        with pytest.raises(bm.BenchmarkError, match='/flush_cache does not exist.*set flush_cache to false'):
            bm.Client(server.url).flush_cache(deadline_s=1)


@pytest.mark.parametrize('library, error', [('requests', 'ConnectionError'), ('http.client', 'ConnectionRefusedError')])
def test_unreachable_server_fails_every_warmup(library, error):
    client = bm.Client('http://127.0.0.1:9', timeout=2, http_library=library)
    with pytest.raises(bm.BenchmarkError, match='every warm-up request to http://127.0.0.1:9 failed: ' + error):
        bm.benchmark(client, 'generate', bm.synthetic_prompts(1, 1, 1, 0), [1])


def test_auto_falls_back_to_the_standard_library(monkeypatch):
    assert bm.Client('http://h:1').http_library.startswith('requests ')
    monkeypatch.setattr(bm, 'requests', None)
    assert bm.Client('http://h:1').http_library.startswith('http.client')
    with pytest.raises(bm.BenchmarkError, match='"requests" is not installed'):
        bm.Client('http://h:1', http_library='requests')


@pytest.mark.parametrize('library', ['requests', 'http.client'])
def test_events_count_when_they_arrive_on_a_connection_closed_body(library):
    # Like the simulator (HTTP/1.0 style, no chunking): a reader that waited for a full
    # buffer would see the first token only at the end.
    with FakeServer(tokens_per_chunk=1, pause=0.3) as server:
        record = bm.Client(server.url, http_library=library).stream('/generate', bm.request_body('generate', 'x', 4))
    assert record.ok and record.output_tokens == 4
    assert record.ttft < 0.2 <= 0.3 <= record.e2e


# ---------------------------------------------------------------- misbehaving servers (issue 23, items 9-14)

COMPLETION = bm.request_body('completions', 'hi', 4, model='m')
LIBRARIES = ['requests', 'http.client']


@pytest.fixture
def fake():
    servers = []

    def start(routes):
        server = FakeLLMServer(routes)
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.close()


@pytest.mark.parametrize('api, payload, reason', [
    ('completions', b'[1,2,3]', 'expected a JSON object, got [1, 2, 3]'),
    ('completions', b'42', 'expected a JSON object, got 42'),
    ('completions', b'null', 'expected a JSON object, got null'),
    ('completions', b'"error"', 'expected a JSON object, got "error"'),
    ('completions', b'{"choices": [{"text": "x"}], "usage": [1]}', '"usage" is [1], expected an object'),
    ('completions', b'{"choices": [{"text": "x"}], "usage": {"completion_tokens": "3"}}',
     'usage "completion_tokens" is "3", expected a whole number'),
    ('completions', b'{"choices": "x"}', '"choices" is "x", expected a list'),
    ('completions', b'{"choices": [7]}', '"choices" holds 7, expected objects'),
    ('generate', b'{"text": "x", "meta_info": [1]}', '"meta_info" is [1], expected an object'),
    ('generate', b'{"text": "x", "meta_info": {"completion_tokens": 2.5}}',
     'meta_info "completion_tokens" is 2.5, expected a whole number'),
    ('generate', b'{"text": "x", "meta_info": {"completion_tokens": 2, "spec_accept_length": "4"}}',
     'meta_info "spec_accept_length" is "4", expected a number'),
    ('completions', b'{not json', 'malformed event in stream: Expecting property name'),
])
def test_a_non_object_event_fails_that_request_with_a_message(api, payload, reason):
    first = {'text': 'x', 'meta_info': {'completion_tokens': 1}} if api == 'generate' else {
        'choices': [{'text': 'x'}], 'usage': {'completion_tokens': 1}}
    lines = [b'data: ' + json.dumps(first).encode(), b'data: ' + payload, b'data: [DONE]']
    record = bm.consume_stream(lines, bm.RequestRecord(api, 0.0), Clock())
    assert not record.ok
    assert record.error.startswith('malformed event in stream: ') and reason in record.error


@pytest.mark.parametrize('library', LIBRARIES)
def test_a_malformed_event_costs_one_request_not_the_run(fake, library):
    sent = []

    def completions(method, body):
        sent.append(body)
        events = completion_events([2, 4])
        if len(sent) == 2:
            events = [events[0], b'{"choices": [{"text": "x"}], "usage": [1]}']
        return 200, sse_body(*events)
    server = fake({'/v1/completions': completions})
    result = bm.benchmark(bm.Client(server.url, http_library=library), 'completions',
                          bm.synthetic_prompts(4, 2, 4, 0), [1], model='m', warmup_requests=0)
    run = result['runs'][0]
    assert (run['completed'], run['failed'], run['output_tokens']) == (3, 1, 12)
    assert run['errors'] == ['malformed event in stream: "usage" is [1], expected an object']


@pytest.mark.parametrize('library', LIBRARIES)
def test_a_body_cut_short_fails_and_its_connection_is_not_reused(fake, library):
    body = sse_body(*completion_events([2, 4]))
    answers = [cut_short(body, body.index(b'data: ', 10)), (200, body)]
    server = fake({'/v1/completions': lambda method, data: answers.pop(0)})
    client = bm.Client(server.url, http_library=library, timeout=30)
    cut = client.stream('/v1/completions', COMPLETION)
    intact = client.stream('/v1/completions', COMPLETION)
    assert not cut.ok and 'IncompleteRead' in cut.error
    assert intact.ok and intact.output_tokens == 4, intact.error


@pytest.mark.parametrize('library', LIBRARIES)
def test_after_run_figures_survive_a_server_that_closed_idle_connections(fake, library):
    metrics = b'sglang:generation_tokens_total{tp_rank="0"} 7\n'
    info = json.dumps({'version': '0.5.15.post1'}).encode()
    server = fake({'/metrics': lambda method, body: then_close(200, metrics),
                   '/server_info': lambda method, body: then_close(200, info)})
    client = bm.Client(server.url, http_library=library, timeout=30)
    for dummy in range(3):
        assert client.metrics() == {'sglang:generation_tokens_total': [7.0]}
        assert client.server_info() == {'version': '0.5.15.post1'}


@pytest.mark.parametrize('library', LIBRARIES)
@pytest.mark.parametrize('call', ['first_model', 'metrics', 'server_info', 'flush_cache', 'stream', 'benchmark'])
def test_every_request_honours_the_timeout(fake, library, call):
    server = fake({path: lambda method, body: HANG for path in (
        '/v1/models', '/metrics', '/server_info', '/get_server_info', '/flush_cache', '/v1/completions')})
    client = bm.Client(server.url, http_library=library, timeout=1.0)
    start = time.monotonic()
    if call == 'first_model':
        with pytest.raises(bm.BenchmarkError, match=r'/v1/models did not answer within 1 s \(timeout\)'):
            client.first_model()
    elif call == 'flush_cache':
        with pytest.raises(bm.BenchmarkError, match=r'/flush_cache did not answer within 1 s \(timeout\)'):
            client.flush_cache()
    elif call == 'stream':
        record = client.stream('/v1/completions', COMPLETION)
        assert record.error.startswith('timed out: no complete answer within 1 s (timeout)')
    elif call == 'benchmark':
        with pytest.raises(bm.BenchmarkError, match='every warm-up request to .* failed: timed out'):
            bm.benchmark(client, 'completions', bm.synthetic_prompts(1, 1, 1, 0), [1], model='m')
    else:
        assert getattr(client, call)() is None
    # One timeout (a second for a retried GET), not the 30 s that were hard-coded.
    assert time.monotonic() - start < 2.9


@pytest.mark.parametrize('library', LIBRARIES)
def test_a_stream_of_pings_is_bounded_by_the_whole_request_timeout(fake, library):
    server = fake({'/v1/completions': lambda method, body: pings(limit_s=10.0)})
    start = time.monotonic()
    record = bm.Client(server.url, http_library=library, timeout=1.0).stream('/v1/completions', COMPLETION)
    assert time.monotonic() - start < 2.9
    assert record.error.startswith('timed out: no complete answer within 1 s (timeout)')


@pytest.mark.parametrize('library', LIBRARIES)
@pytest.mark.parametrize('body, error', [
    (sse_body(*completion_events([2, 4], finish=False), done=False),
     'stream truncated: it ended after 4 tokens without [DONE] or a finish_reason'),
    (sse_body(*completion_events([2, 3])), 'stream truncated: 3 of the 4 tokens asked for'),
    (sse_body(*completion_events([2, 4]), done=False), None),  # finish_reason, no [DONE]: complete
    (sse_body(*completion_events([2, 4], finish=False)), None),  # [DONE], no finish_reason: complete
])
def test_a_truncated_stream_is_flagged(fake, library, body, error):
    server = fake({'/v1/completions': lambda method, data: (200, body)})
    record = bm.Client(server.url, http_library=library).stream('/v1/completions', COMPLETION)
    assert record.error == error and record.truncated is (error is not None)
    run = bm.aggregate([record], 1.0, 1, 0.0)
    assert (run['completed'], run['failed'], run['truncated']) == ((0, 1, 1) if error else (1, 0, 0))


# ---------------------------------------------------------------- metrics as sglang.bench_serving 0.5.15.post1 defines them

class Times:
    """A clock that returns the given times in turn (one per SSE data line, [DONE] included)."""

    def __init__(self, *times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def recorded_stream(run, counts=None, total=None):
    """The H200 recording of ``run``'s streamed /v1/completions, with the usage SGLang sends when asked:
    cumulative ``counts`` on every chunk (continuous_usage_stats), or only a final ``total`` (include_usage)."""
    lines = [line for line in fixture(run, 'stream.txt').splitlines() if line.startswith(b'data: ')]
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert lines[-1] == b'data: [DONE]'
    for event, count in zip(events, counts or []):
        event['usage'] = {'prompt_tokens': 5, 'completion_tokens': count}
    if total is not None:
        events.append({'choices': [], 'usage': {'prompt_tokens': 5, 'completion_tokens': total}})
    return [b'data: ' + json.dumps(e).encode() for e in events] + [b'data: [DONE]']


def test_metrics_of_the_recorded_depth5_stream_with_4_tokens_per_chunk():
    # eagle3-good-mid: 8 chunks for 32 tokens (4 per chunk); the count comes at the end only.
    times = Times(0.050, 0.060, 0.072, 0.080, 0.090, 0.104, 0.110, 0.120, 0.121, 0.122)
    record = bm.consume_stream(recorded_stream('eagle3-good-mid', total=32), bm.RequestRecord('completions', 0.0),
                               times)
    assert record.ok and (record.output_tokens, record.chunks) == (32, 8)
    run = bm.aggregate([record], duration=0.122, concurrency=1, cpu_seconds=0.0)
    # gaps 10, 12, 8, 10, 14, 6, 10 ms; sorted 6 8 10 10 10 12 14
    assert run['chunk_gap_ms'] == pytest.approx({'mean': 10.0, 'p50': 10.0, 'p90': 12.8, 'p99': 13.88})
    # bench_serving: each gap / its 4 tokens
    assert run['itl_ms'] == pytest.approx({'mean': 2.5, 'p50': 2.5, 'p90': 3.2, 'p99': 3.47})
    assert run['ttft_ms']['p50'] == pytest.approx(50.0)
    assert run['e2e_ms']['p50'] == pytest.approx(122.0)  # at [DONE], as bench_serving's latency
    assert run['tpot_ms']['p50'] == pytest.approx((122.0 - 50.0) / 31)
    assert run['output_throughput'] == pytest.approx(32 / 0.122)
    assert run['request_throughput'] == pytest.approx(1 / 0.122)
    assert run['tokens_per_chunk'] == 4.0


def test_per_token_itl_with_uneven_chunks_as_bench_serving_counts_them():
    # The same recording with a count on every chunk: 5, then 4 4 4 3 5 3 4 new tokens.
    times = Times(0.050, 0.062, 0.070, 0.082, 0.088, 0.103, 0.109, 0.121, 0.122)
    record = bm.consume_stream(recorded_stream('eagle3-good-mid', counts=[5, 9, 13, 17, 20, 25, 28, 32]),
                               bm.RequestRecord('completions', 0.0, expected_tokens=32), times)
    assert record.ok and record.chunks_counted
    # gaps (ms) / tokens: 12/4 8/4 12/4 6/3 15/5 6/3 12/4 -> 3.0 x17 tokens, 2.0 x10 tokens
    assert record.itl() == pytest.approx([0.003] * 4 + [0.002] * 4 + [0.003] * 4 + [0.002] * 3 + [0.003] * 5
                                         + [0.002] * 3 + [0.003] * 4)
    run = bm.aggregate([record], duration=0.122, concurrency=1, cpu_seconds=0.0)
    assert run['itl_ms'] == pytest.approx({'mean': 71.0 / 27, 'p50': 3.0, 'p90': 3.0, 'p99': 3.0})
    assert run['chunk_gap_ms']['mean'] == pytest.approx(71.0 / 7)


def test_one_token_per_chunk_recording_has_itl_equal_to_the_chunk_gap():
    # eagle3-random: 32 chunks for 32 tokens (the random drafter's drafts are all rejected).
    times = Times(*[0.040 + 0.005 * i for i in range(32)] + [0.200, 0.201])
    record = bm.consume_stream(recorded_stream('eagle3-random', total=32), bm.RequestRecord('completions', 0.0),
                               times)
    assert (record.output_tokens, record.chunks) == (32, 32)
    assert record.itl() == pytest.approx(record.gaps) and record.gaps == pytest.approx([0.005] * 31)


def test_accept_length_weights_requests_by_their_verify_steps():
    # Recorded /generate answers: 64 tokens in 13 verify steps (good drafter), 64 in 63 (random drafter).
    records = []
    for run in ('eagle3-good-mid', 'eagle3-random'):
        record = bm.consume_stream([b'data: ' + fixture(run, 'generate.json'), b'data: [DONE]'],
                                   bm.RequestRecord('generate', 0.0, expected_tokens=64), Clock())
        assert record.ok
        records.append(record)
    result = bm.aggregate(records, 1.0, 2, 0.0)
    assert result['accept_length'] == pytest.approx(128 / 76.0)  # the server's own average counts so
    assert result['accept_length_source'] == 'per_request'


def test_goodput_counts_requests_within_every_slo():
    records = [_record(0.1, 1.0, 10), _record(0.3, 2.0, 30), _record(0.05, 3.0, 1), _record(None, 0.5, 0, error='x')]
    # TPOT: 100 ms, 58.6 ms, none (0 as vllm counts it); TTFT: 100, 300, 50 ms
    slo = {'ttft_ms': 200.0, 'tpot_ms': 80.0}
    run = bm.aggregate(records, duration=4.0, concurrency=2, cpu_seconds=0.0, slo=slo)
    assert (run['good_requests'], run['goodput']) == (1, 0.25)
    run = bm.aggregate(records, duration=4.0, concurrency=2, cpu_seconds=0.0, slo={'e2e_ms': 2000.0})
    assert (run['good_requests'], run['goodput']) == (2, 0.5)
    assert bm.aggregate(records, 4.0, 2, 0.0)['goodput'] is None


def test_rounds_report_the_median_and_the_spread():
    rounds = []
    for tp, ttft in ((100.0, 0.3), (130.0, 0.1), (90.0, 0.2)):
        run = bm.aggregate([_record(ttft, 1.0, 10)], duration=10 / tp, concurrency=4, cpu_seconds=0.0)
        run['server_counters'] = {'generation_tokens': 10.0}
        rounds.append(run)
    run = bm.combine_rounds(rounds)
    assert run['output_throughput'] == pytest.approx(100.0)
    assert run['spread']['output_throughput'] == pytest.approx({'min': 90.0, 'median': 100.0, 'max': 130.0})
    assert run['spread']['ttft_ms.p50'] == pytest.approx({'min': 100.0, 'median': 200.0, 'max': 300.0})
    assert run['ttft_ms']['p50'] == pytest.approx(200.0)
    assert (run['num_prompts'], run['completed'], run['output_tokens']) == (3, 3, 30)
    assert run['server_counters'] == {'generation_tokens': 30.0}
    assert [r['round'] for r in run['rounds']] == [1, 2, 3]


def test_a_round_lasts_at_least_min_duration():
    with FakeServer(tokens_per_chunk=2) as server:
        client = bm.Client(server.url, http_library='http.client')
        start = time.monotonic()
        records = bm.run_load(client, 'completions', bm.synthetic_prompts(2, 2, 2, 0), 2, model='m',
                              min_duration=0.5)
        elapsed = time.monotonic() - start
    assert elapsed >= 0.5 and len(records) > 2 and all(r.ok for r in records)
    prompts = [r[2]['prompt'] for r in server.requests if r[1] == '/v1/completions']
    assert len(set(prompts)) == 2 and len(prompts) == len(records)


def test_benchmark_measures_rounds_after_a_warm_up_at_each_concurrency():
    with FakeServer(tokens_per_chunk=2) as server:
        result = bm.benchmark(bm.Client(server.url), 'completions', bm.synthetic_prompts(3, 2, 4, 0), [1, 4],
                              model='m', warmup_requests=2, rounds=3, flush_cache=True)
    assert [(r['concurrency'], r['num_prompts'], len(r['rounds'])) for r in result['runs']] == [(1, 9, 3), (4, 9, 3)]
    assert server.flushes == 6
    # warm-up: 2 at concurrency 1, 4 (one per slot) at concurrency 4; then 2 x 3 rounds x 3 prompts
    assert sum(1 for r in server.requests if r[1] == '/v1/completions') == 2 + 4 + 18


def test_sharegpt_file(tmp_path):
    path = tmp_path / 'sharegpt.json'
    path.write_text(json.dumps([
        {'id': 'a', 'conversations': [{'from': 'human', 'value': 'first?'}, {'from': 'gpt', 'value': 'yes'}]},
        {'id': 'b', 'conversations': [{'from': 'human', 'value': 'alone'}]},
        {'id': 'c', 'conversation': [{'role': 'user', 'content': 'second?'}, {'role': 'assistant', 'content': 'no'}]},
    ]))
    prompts = bm.load_dataset(str(path), 4, 16, seed=3)
    assert sorted(p['prompt'] for p in prompts) == ['first?', 'first?', 'second?', 'second?']
    assert {p['output_len'] for p in prompts} == {16}


@pytest.mark.parametrize('content, message', [
    ('[{"conversations": "x"}]', 'entry 0: expected an object with a "conversations" list'),
    ('[{"conversations": [{"value": 1}, {"value": "a"}]}]', 'entry 0: the first turn has no "value" string'),
    ('[{"conversations": []}]', 'holds no prompts'),
    ('[1, ', 'is not JSON'),
    ('{"prompt": "a", "output_len": "3"}\n', 'line 1: output_len must be a whole number of at least 1, got "3"'),
])
def test_bad_prompt_files_are_named(tmp_path, content, message):
    path = tmp_path / 'p.json'
    path.write_text(content)
    with pytest.raises(bm.BenchmarkError, match=re.escape(str(path)) + '.*' + re.escape(message)):
        bm.load_dataset(str(path), 1, 8, seed=0)
