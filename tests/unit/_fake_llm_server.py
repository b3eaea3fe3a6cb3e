"""In-process stand-ins for an LLM server's HTTP side, for the wait_for_llm_health tests.

``FakeLLMServer`` answers from a table ``path -> handler`` in a thread on 127.0.0.1; a
handler returns ``(status, body)`` (body: bytes, str or JSON-able) or one of the
special answers ``HANG`` (never answers) and ``RESET`` (closes the connection).
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
