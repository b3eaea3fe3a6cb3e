# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How fast is the llm_benchmark client itself?

Starts a local server that answers instantly (every streamed response is prepared
once, then written in one go) in a separate process pinned to another core, runs the
client of ``plugins/module_utils/_benchmark.py`` pinned to one core, and prints the
streamed output tokens per second and the client's CPU time per 1,000 tokens.

    .venv/bin/python tests/perf/benchmark_client_throughput.py [--tokens-per-chunk 1]
        [--api completions|generate] [--concurrency 8] [--num-prompts 64]
        [--output-len 1024] [--http-library requests|http.client] [--min-tokens-per-s 20000]

Exits 1 when the single-core figure (tokens per client CPU second) is below
``--min-tokens-per-s``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load_benchmark():
    """plugins/module_utils/_benchmark.py through the import root of tests/conftest.py (it imports _server_api)."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    importlib.import_module('tests.conftest')  # links the repository as ansible_collections.llmops.serving
    return importlib.import_module('ansible_collections.llmops.serving.plugins.module_utils._benchmark')


def sse_body(api, output_len, tokens_per_chunk):
    """The whole chunked-encoded SSE response for one request."""
    events = []
    sent = 0
    while sent < output_len:
        step = min(tokens_per_chunk, output_len - sent)
        sent += step
        if api == 'generate':
            event = {'text': ' tok' * sent, 'meta_info': {'id': 'x', 'prompt_tokens': 8, 'completion_tokens': sent,
                                                          'finish_reason': None}}
        else:
            event = {'id': 'cmpl-x', 'object': 'text_completion', 'created': 1, 'model': 'm',
                     'choices': [{'index': 0, 'text': ' tok' * step, 'logprobs': None, 'finish_reason': None}],
                     'usage': {'prompt_tokens': 8, 'completion_tokens': sent, 'total_tokens': 8 + sent}}
        events.append(event)
    if api == 'completions':
        events.append({'id': 'cmpl-x', 'choices': [],
                       'usage': {'prompt_tokens': 8, 'completion_tokens': sent, 'total_tokens': 8 + sent}})
    parts = []
    for event in events:
        data = b'data: ' + json.dumps(event).encode() + b'\n\n'
        parts.append(b'%x\r\n%s\r\n' % (len(data), data))
    parts.append(b'1a\r\ndata: [DONE]\n\n\r\n0\r\n\r\n'.replace(b'1a', b'%x' % len(b'data: [DONE]\n\n')))
    return b''.join(parts)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    bodies = {}

    def log_message(self, *args):
        pass

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
        api = 'generate' if self.path == '/generate' else 'completions'
        output_len = request.get('max_tokens') or request['sampling_params']['max_new_tokens']
        key = (api, output_len)
        if key not in self.bodies:
            self.bodies[key] = sse_body(api, output_len, self.server.tokens_per_chunk)
        self.wfile.write(b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n'
                         b'Transfer-Encoding: chunked\r\n\r\n' + self.bodies[key])

    def do_GET(self):
        self.send_response(404)
        self.send_header('Content-Length', '0')
        self.end_headers()


def serve(port_queue, tokens_per_chunk, cpu):
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    server = ThreadingHTTPServer(('127.0.0.1', 0), _Handler)
    server.tokens_per_chunk = tokens_per_chunk
    port_queue.put(server.server_address[1])
    server.serve_forever()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--api', choices=('completions', 'generate'), default='completions')
    parser.add_argument('--concurrency', type=int, default=8)
    parser.add_argument('--num-prompts', type=int, default=64)
    parser.add_argument('--output-len', type=int, default=1024)
    parser.add_argument('--tokens-per-chunk', type=int, default=1)
    parser.add_argument('--http-library', choices=('requests', 'http.client'), default='requests')
    parser.add_argument('--min-tokens-per-s', type=float, default=20000.0)
    args = parser.parse_args(argv)

    cpus = sorted(os.sched_getaffinity(0))
    client_cpu, server_cpu = cpus[0], (cpus[1] if len(cpus) > 1 else None)
    queue = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(queue, args.tokens_per_chunk, server_cpu), daemon=True)
    server.start()
    try:
        port = queue.get(timeout=30)
        os.sched_setaffinity(0, {client_cpu})
        bench = _load_benchmark()
        client = bench.Client('http://127.0.0.1:%d' % port, http_library=args.http_library)
        prompts = bench.synthetic_prompts(args.num_prompts, 8, args.output_len, seed=0)
        result = bench.benchmark(client, args.api, prompts, [args.concurrency], model='m', warmup_requests=1)
        run = result['runs'][0]
    finally:
        server.terminate()
        server.join(5)
    expected = args.num_prompts * args.output_len
    per_cpu_second = run['output_tokens'] / run['client_cpu_s']
    print('%s, api=%s concurrency=%d prompts=%d output_len=%d tokens_per_chunk=%d'
          % (client.http_library, args.api, args.concurrency, args.num_prompts, args.output_len, args.tokens_per_chunk))
    print('completed %d/%d, output tokens %d (expected %d), tokens per chunk %.2f'
          % (run['completed'], run['num_prompts'], run['output_tokens'], expected, run['tokens_per_chunk']))
    print('wall: %.3f s, %.0f output tokens/s' % (run['duration_s'], run['output_throughput']))
    print('client CPU: %.3f s, %.1f ms per 1,000 tokens, %.0f tokens per CPU second (one core)'
          % (run['client_cpu_s'], run['client_cpu_ms_per_1k_tokens'], per_cpu_second))
    ok = run['failed'] == 0 and run['output_tokens'] == expected and per_cpu_second >= args.min_tokens_per_s
    print('%s: target %.0f tokens/s on one core' % ('PASS' if ok else 'FAIL', args.min_tokens_per_s))
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
