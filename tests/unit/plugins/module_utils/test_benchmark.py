# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of plugins/module_utils/_benchmark.py (parsing, statistics, HTTP client)."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _benchmark as bm

FIXTURES = os.path.join(os.path.dirname(__file__), '..', 'fixtures', 'sglang-0.5.15.post1-h200')


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

class FakeServer:
    """A tiny SGLang-like server: streams ``tokens_per_chunk`` tokens per chunk."""

    def __init__(self, tokens_per_chunk=2, fail_every=0, flush_status=200, metrics=True, accept=None, pause=0.0):
        self.tokens_per_chunk = tokens_per_chunk
        self.fail_every = fail_every
        self.flush_status = flush_status
        self.with_metrics = metrics
        self.accept = accept
        self.pause = pause  # with a pause: body ended by closing (no chunking), pause after the first event
        self.requests = []
        self.flushes = 0
        self.generated = 0
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'

            def log_message(self, *args):
                pass

            def _send(self, status, body, ctype='application/json'):
                self.send_response(status)
                self.send_header('Content-Type', ctype)
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                owner.requests.append(('GET', self.path, dict(self.headers)))
                if self.path == '/metrics' and owner.with_metrics:
                    self._send(200, ('sglang:generation_tokens_total{m="x"} %d\n' % owner.generated).encode(),
                               'text/plain')
                elif self.path == '/get_server_info':
                    self._send(200, json.dumps({'version': '0.5.15.post1', 'speculative_algorithm': 'EAGLE3',
                                                'internal_states': [{'avg_spec_accept_length': 2.5}]}).encode())
                elif self.path == '/v1/models':
                    self._send(200, b'{"data": [{"id": "tiny"}]}')
                else:
                    self._send(404, b'{"detail": "Not Found"}')

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers['Content-Length'])) or b'null')
                with owner.lock:
                    owner.requests.append(('POST', self.path, body))
                    count = sum(1 for r in owner.requests if r[1] in ('/generate', '/v1/completions'))
                if self.path == '/flush_cache':
                    owner.flushes += 1
                    self._send(owner.flush_status, b'')
                    return
                if owner.fail_every and count % owner.fail_every == 0:
                    self._send(500, b'{"error": "overloaded"}')
                    return
                native = self.path == '/generate'
                total = body['sampling_params']['max_new_tokens'] if native else body['max_tokens']
                chunks, sent = [], 0
                while sent < total:
                    sent = min(total, sent + owner.tokens_per_chunk)
                    if native:
                        meta = {'prompt_tokens': 3, 'completion_tokens': sent}
                        if sent == total and owner.accept:
                            meta.update(spec_verify_ct=int(total / owner.accept), spec_accept_length=owner.accept)
                        chunks.append({'text': 'x', 'meta_info': meta})
                    else:
                        chunks.append({'choices': [{'index': 0, 'text': 'x'}],
                                       'usage': {'prompt_tokens': 3, 'completion_tokens': sent}})
                with owner.lock:
                    owner.generated += total
                events = [b'data: ' + json.dumps(c).encode() + b'\n\n' for c in chunks] + [b'data: [DONE]\n\n']
                if not owner.pause:
                    self._send(200, b''.join(events), 'text/event-stream')
                    return
                self.send_response(200)
                self.send_header('Content-Type', 'text/event-stream')
                self.send_header('Connection', 'close')
                self.end_headers()
                self.wfile.write(events[0])
                self.wfile.flush()
                time.sleep(owner.pause)
                self.wfile.write(b''.join(events[1:]))
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.url = 'http://127.0.0.1:%d' % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


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
    # 2 warm-up requests + 2 runs x 6 prompts
    assert sum(1 for r in server.requests if r[1] in ('/generate', '/v1/completions')) == 14


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
