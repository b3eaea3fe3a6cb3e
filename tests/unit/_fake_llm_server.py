"""In-process stand-ins for an LLM server's HTTP side (health and benchmark tests).

``FakeLLMServer`` answers from a table ``path -> handler`` in a thread on 127.0.0.1; a
handler returns ``(status, body)`` (body: bytes, str or JSON-able), one of the
special answers ``HANG`` (never answers) and ``RESET`` (closes the connection), or a
:class:`Raw` writer that misbehaves at the byte level (see :func:`sse_body`).
``FakeServer`` is a small SGLang-like server for the benchmark client.
``open_url_request(base)`` is the HTTP callable _health expects, built like the
module's (``open_url``, HTTP errors returned as statuses).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.error import HTTPError

from ansible.module_utils.urls import open_url

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'fixtures',
                        'sglang-0.5.15.post1-h200')
HANG = object()
RESET = object()


class Raw:
    """A handler answer written by ``write(request_handler, server)`` itself."""

    def __init__(self, write):
        self.write = write


def fixture_text(*parts):
    with open(os.path.join(FIXTURES, *parts), 'rb') as fh:
        return fh.read().decode('utf-8')


class _Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, *args):
        pass

    def _answer(self):
        server = self.server.owner
        length = int(self.headers.get('Content-Length') or 0)
        body = json.loads(self.rfile.read(length) or b'null') if length else None
        server.requests.append((self.command, self.path, dict(self.headers), body))
        handler = server.routes.get(self.path)
        answer = handler(self.command, body) if handler else (404, {'detail': 'Not Found'})
        if answer is HANG:
            server.release.wait(30)
            return
        if answer is RESET:
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if isinstance(answer, Raw):
            answer.write(self, server)
            return
        status, payload = answer
        if not isinstance(payload, (bytes, str)):
            payload = json.dumps(payload)
        if isinstance(payload, str):
            payload = payload.encode('utf-8')
        self.send_response(status)
        self.send_header('Content-Length', str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer


class FakeLLMServer(object):
    def __init__(self, routes=None):
        self.routes = dict(routes or {})
        self.requests = []
        self.release = threading.Event()
        self.httpd = ThreadingHTTPServer(('127.0.0.1', 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.owner = self
        self.url = 'http://127.0.0.1:%d' % self.httpd.server_port
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def health_timeline(*steps):
    """Handler answering ``status`` from ``at`` seconds after creation: (at, status), ..."""
    start = time.monotonic()

    def handler(method, body):
        now = time.monotonic() - start
        status = [s for at, s in steps if now >= at][-1]
        return status if status in (HANG, RESET) else (status, b'')
    return handler


def health_answers(*statuses, then=200):
    """Handler answering each request with the next of ``statuses``, then ``then`` for good: a warm-up that
    ends after so many probes, whatever the machine's load (a timeline in seconds would be missed by a slow
    first probe)."""
    pending = list(statuses)

    def handler(method, body):
        return (pending.pop(0) if pending else then), b''
    return handler


def free_port():
    """A port nothing listens on (connection refused)."""
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def open_url_request(base, headers=None):
    def request(method, path, body=None, timeout=10.0):
        send = dict(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body)
            send['Content-Type'] = 'application/json'
        try:
            response = open_url(base + path, data=data, headers=send, method=method, timeout=timeout, use_proxy=False)
            return response.getcode(), response.read()
        except HTTPError as exc:
            return exc.code, exc.read()
    return request


# ---------------------------------------------------------------- benchmark: misbehaving answers

def sse_body(*events, done=True):
    """SSE bytes of ``events`` (JSON-able, or bytes written after ``data: `` as they are)."""
    out = [b'data: ' + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b'\n\n' for e in events]
    return b''.join(out) + (b'data: [DONE]\n\n' if done else b'')


def completion_events(counts, finish=True):
    """``/v1/completions`` chunks with continuous usage: cumulative token ``counts``."""
    return [{'choices': [{'index': 0, 'text': 'x', 'finish_reason': 'length' if finish and i == len(counts) - 1
                          else None}],
             'usage': {'prompt_tokens': 3, 'completion_tokens': n}} for i, n in enumerate(counts)]


def cut_short(body, keep):
    """Raw answer announcing ``len(body)`` bytes, sending ``keep`` of them, then closing."""
    def write(handler, server):
        handler.send_response(200)
        handler.send_header('Content-Type', 'text/event-stream')
        handler.send_header('Content-Length', str(len(body)))
        handler.end_headers()
        handler.wfile.write(body[:keep])
        handler.wfile.flush()
        handler.close_connection = True
    return Raw(write)


def then_close(status, body):
    """Raw answer that is complete (keep-alive headers), after which the server closes the
    connection, as uvicorn does with idle keep-alive connections after 5 s."""
    def write(handler, server):
        handler.send_response(status)
        handler.send_header('Content-Length', str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        handler.wfile.flush()
        handler.close_connection = True
    return Raw(write)


def pings(limit_s=10.0):
    """Raw answer: SSE ``: ping`` comments and never an event, for ``limit_s`` seconds at most."""
    def write(handler, server):
        handler.send_response(200)
        handler.send_header('Content-Type', 'text/event-stream')
        handler.send_header('Connection', 'close')
        handler.end_headers()
        end = time.monotonic() + limit_s
        try:
            while time.monotonic() < end and not server.release.is_set():
                handler.wfile.write(b': ping\n\n')
                handler.wfile.flush()
                server.release.wait(0.05)  # pacing of the pings, not synchronisation
        except OSError:
            pass  # the client gave up
        handler.close_connection = True
    return Raw(write)


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
        self.flush_auth = []  # the Authorization header of each /flush_cache
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
                    owner.flush_auth.append(self.headers.get('Authorization'))
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
