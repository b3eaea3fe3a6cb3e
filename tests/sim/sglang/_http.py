# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""HTTP endpoints of the simulated SGLang (TEST DOUBLE). Field names follow the 0.5.15.post1 recordings."""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang import _args, _pd, _weights
from sglang._engine import token_text

UNAUTHORIZED = {'error': 'Unauthorized'}
FORBIDDEN = {'error': 'Forbidden'}
# The auth level of each route served here that is not NORMAL, as SGLang 0.5.15.post1 marks them
# (``@auth_level`` in entrypoints/http_server.py; FACTS.md): ADMIN_OPTIONAL takes --admin-api-key
# when it is set, else --api-key, else anyone. ADMIN_FORCE (403 without an admin key) marks none of
# the routes served here. The release fixtures record each release's key-free prefixes but not the
# levels of its routes: every release is played with 0.5.15.post1's levels.
ADMIN_OPTIONAL = frozenset(('/flush_cache', '/pause_generation', '/continue_generation', '/weights_checker'))
ADMIN_FORCE = frozenset()
HEALTH_CHECK_TIMEOUT = 20.0
HEALTH_CHECK_INTERVAL = 1.0
SLOW_HEALTH_SECONDS = 1.5
FLUSHED = ('Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, '
           'the operation will not be performed.)\n')
REASONS = {200: 'OK', 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 405: 'Method Not Allowed',
           500: 'Internal Server Error', 503: 'Service Unavailable'}
DEPRECATED = {'/get_server_info': '/server_info', '/get_model_info': '/model_info'}


def access_log(server, client, method, path, status, version='HTTP/1.1'):
    server.log('INFO:     %s - "%s %s %s" %d %s' % (client, method, path, version, status, REASONS.get(status, '')))


def _dumps(data):
    return json.dumps(data, separators=(',', ':'))


def _usage(prompt, completion):
    return {'prompt_tokens': prompt, 'total_tokens': prompt + completion, 'completion_tokens': completion,
            'prompt_tokens_details': None, 'reasoning_tokens': 0}


def _prompt_tokens(text):
    return max(1, len(text.encode('utf-8')) // 4 + 1)


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    sim = None  # the Server, set by make_server

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass

    def version_string(self):
        return 'uvicorn'  # recorded ``server: uvicorn`` (http.server would append the Python version)

    def end_headers(self):
        # As recorded (SGLang's CORS middleware, uvicorn answering a client that asked to close).
        self.send_header('vary', 'Origin')
        if self.close_connection:
            self.send_header('connection', 'close')
        BaseHTTPRequestHandler.end_headers(self)

    # ------------------------------------------------------------ plumbing
    def _send(self, status, body=b'', content_type='application/json'):
        if isinstance(body, (dict, list)):
            body = _dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        if content_type:
            self.send_header('content-type', content_type)
        self.send_header('content-length', str(len(body)))
        # uvicorn logs the access line as the response starts, so it is in the log before the
        # client has the body.
        self._logged(status)
        self.end_headers()
        self.wfile.write(body)

    def _logged(self, status):
        path = self.path.split('?')[0]
        self.sim.metrics_count(path, self.command, status)
        access_log(self.sim, '%s:%d' % self.client_address[:2], self.command, path, status, self.request_version)

    def _body(self):
        return json.loads(self._raw.decode('utf-8') or '{}')

    def _holds(self, key):
        # SGLang's check: ``Authorization: Bearer K`` (scheme in any case) or ``x-api-key: K``.
        scheme, dummy, token = (self.headers.get('Authorization') or '').partition(' ')
        return (scheme.lower() == 'bearer' and token == key) or self.headers.get('x-api-key') == key

    def _auth_status(self, path):
        """None where the request may pass, else the refusal's status (401, or 403 for an ADMIN_FORCE route of
        a server without an admin key), as SGLang 0.5.15.post1's decide_request_auth."""
        if self.command == 'OPTIONS' or any(path.startswith(prefix) for prefix in self.sim.http['auth_free_prefixes']):
            return None
        key, admin_key = self.sim.args['api_key'], self.sim.args.get('admin_api_key')
        if path in ADMIN_FORCE:
            return 403 if not admin_key else None if self._holds(admin_key) else 401
        if path in ADMIN_OPTIONAL and admin_key:
            return None if self._holds(admin_key) else 401
        if key:
            return None if self._holds(key) else 401
        return None

    def do_GET(self):  # pylint: disable=invalid-name
        self._route('GET')

    def do_POST(self):  # pylint: disable=invalid-name
        self._route('POST')

    def _route(self, method):
        # Read the body first: on a kept-alive HTTP/1.1 connection an unread body would be taken
        # for the next request.
        length = int(self.headers.get('content-length') or 0)
        self._raw = self.rfile.read(length) if length else b''
        path = self.path.split('?')[0]
        if self.server.dummy:
            # SGLang's launch_dummy_health_check_server on node ranks >= 1: always 200 (no /ready).
            if path in self.sim.http['rank_routes'] or path == '/metrics':
                return self._send(200, content_type=None)
            return self._send(404, {'detail': 'Not Found'})
        refused = self._auth_status(path)
        if refused:
            return self._send(refused, UNAUTHORIZED if refused == 401 else FORBIDDEN)
        routes = {
            '/health': ('GET', self.health), '/health_generate': ('GET', self.health),
            '/get_server_info': ('GET', self.server_info), '/server_info': ('GET', self.server_info),
            '/get_model_info': ('GET', self.model_info), '/model_info': ('GET', self.model_info),
            '/v1/models': ('GET', self.models), '/metrics': ('GET', self.metrics),
            '/generate': ('POST', self.generate), '/v1/completions': ('POST', self.completions),
            '/v1/chat/completions': ('POST', self.chat), '/flush_cache': (None, self.flush_cache),
            '/pause_generation': ('POST', self.pause), '/continue_generation': ('POST', self.resume),
        }
        if self.sim.http['ready']:  # SGLang 0.5.20 and later
            routes['/ready'] = ('GET', self.ready)
        if '/get_load' in self.sim.http['routes']:  # up to 0.5.20
            routes['/get_load'] = ('GET', self.get_load)
        if '/weights_checker' in self.sim.http['routes']:  # 0.5.11 and later: GET and POST
            routes['/weights_checker'] = (None, self.weights_checker)
        if path not in routes or path == '/metrics' and not self.sim.args['enable_metrics']:
            return self._send(404, {'detail': 'Not Found'})
        allowed, handler = routes[path]
        if allowed and allowed != method:
            return self._send(405, {'detail': 'Method Not Allowed'})
        if path in DEPRECATED and self.sim.deprecations:
            self.sim.log("Endpoint '%s' is deprecated and will be removed in a future version. Please use '%s' instead."
                         % (path, DEPRECATED[path]))
        try:
            body = self._body() if method == 'POST' else {}
        except ValueError as exc:
            return self._send(400, {'object': 'error', 'message': 'Invalid JSON: %s' % exc, 'type': 'BadRequestError',
                                    'param': None, 'code': 400})
        return handler(body)

    # ------------------------------------------------------------ endpoints
    def ready(self, body):
        # TokenizerManager.is_ready: warm-up passed (status Up, which a timed-out health
        # generation takes away), not paused, not shutting down
        sim = self.sim
        ok = sim.status == 'ready' and not sim.unhealthy and not sim.paused and not sim.stopping
        return self._send(200 if ok else 503, content_type=None)

    def pause(self, body):
        self.sim.paused = True
        return self._send(200, {'message': 'Generation paused successfully.', 'status': 'ok'})

    def resume(self, body):
        self.sim.paused = False
        return self._send(200, {'message': 'Generation continued successfully.', 'status': 'ok'})

    def health(self, body):
        sim = self.sim
        if sim.stopping:
            sim.log('Health check request received during shutdown. Returning 503.')
            return self._send(503, content_type=None)
        fault = sim.config.fault
        if fault == 'slow_health':
            time.sleep(SLOW_HEALTH_SECONDS)
        with sim.lock:
            sim.health_calls += 1
            calls = sim.health_calls
        if sim.status != 'ready' or calls <= sim.config.unhealthy_probes:
            return self._send(503, content_type=None)
        if fault == 'health_flap' and calls % 2 == 0:
            return self._send(503, content_type=None)
        # SGLang runs a 1-token generation and looks for its output once a second: a healthy
        # answer takes at least one such interval (recorded: 1.003 s), scaled here by the speed.
        began = time.monotonic()
        req = sim.engine.submit(1, 1, counted=False)
        deadline = began + HEALTH_CHECK_TIMEOUT
        while not req.done and time.monotonic() < deadline:
            req.next_chunk(0.5)
        time.sleep(max(0.0, began + HEALTH_CHECK_INTERVAL * sim.config.speed - time.monotonic()))
        sim.unhealthy = not req.done  # ServerStatus.UnHealthy after a timeout, Up after a success
        return self._send(200 if req.done else 503, content_type=None)

    def get_load(self, body):
        # live, unlike the gauges: the scheduler's running + waiting requests, one entry per DP rank
        eng = self.sim.engine
        with eng.cond:
            running, waiting = list(eng.running), list(eng.waiting)
        return self._send(200, [{'dp_rank': 0, 'num_reqs': len(running) + len(waiting), 'num_waiting_reqs': len(waiting),
                                 'num_tokens': sum(r.prompt_tokens + r.output for r in running)}])

    def server_info(self, body):
        sim = self.sim
        return self._send(200, _args.server_info(sim.args, sim.version, sim.context_length, sim.max_total_num_tokens,
                                                 sim.engine, sim.memory_usage))

    def model_info(self, body):
        config = _args.read_model_config(self.sim.args['model_path'])
        return self._send(200, {
            'model_path': self.sim.args['model_path'], 'tokenizer_path': self.sim.args['tokenizer_path'],
            'is_generation': True, 'preferred_sampling_params': None, 'weight_version': 'default',
            'has_image_understanding': False, 'has_audio_understanding': False,
            'model_type': config.get('model_type', 'llama'),
            'architectures': config.get('architectures') or ['LlamaForCausalLM']})

    def models(self, body):
        name = self.sim.args['served_model_name']
        return self._send(200, {'object': 'list', 'data': [{
            'id': name, 'object': 'model', 'created': int(time.time()), 'owned_by': 'sglang', 'root': name,
            'parent': None, 'max_model_len': self.sim.context_length}]})

    def flush_cache(self, body):
        self.sim.engine.flush()
        self.sim.log('Cache flushed successfully!')
        return self._send(200, FLUSHED, 'text/plain; charset=utf-8')

    def weights_checker(self, body):
        status, data = _weights.answer(body, self.sim.weights_checksum)
        return self._send(status, data)

    def metrics(self, body):
        return self._send(200, self.sim.metrics_text(), 'text/plain; version=0.0.4; charset=utf-8')

    # ------------------------------------------------------------ generation
    def _run(self, prompt_tokens, max_new_tokens, on_chunk=None, pd=None):
        req = self.sim.engine.submit(prompt_tokens, max_new_tokens, stream=on_chunk is not None)
        text = self._wait(req, on_chunk)
        if pd:  # the prefill of a PD pair: its KV goes to the decode before it answers (_pd.py)
            pd()
        return req, text

    def _pd_begin(self, body, max_new, openai=False):
        """PD mode (_pd.py): ``(handle, max_new_tokens)`` once the request may run (a prefill makes one token),
        or ``(False, None)`` after answering HTTP 400 where it is refused (no bootstrap room) or HTTP 500 where
        its pair failed."""
        pd = self.sim.pd
        if pd is None:
            return None, max_new
        try:
            handle = pd.begin(body, uuid.uuid4().hex)
        except _pd.RequestRefused as exc:
            # the scheduler aborts it with BAD_REQUEST; the tokenizer manager raises ValueError, which /generate
            # answers as {"error": {"message"}} and the OpenAI routes as their error object
            if openai:
                self._send(400, {'object': 'error', 'message': str(exc), 'type': 'BadRequestError', 'param': None,
                                 'code': 400})
            else:
                self._send(400, {'error': {'message': str(exc)}})
            return False, None
        except _pd.TransferError as exc:
            self._send(500, {'object': 'error', 'message': str(exc), 'type': 'InternalServerError', 'param': None,
                             'code': 500})
            return False, None
        if pd.mode == 'prefill' and body.get('bootstrap_room') is not None:
            max_new = 1
        return handle, max_new

    @staticmethod
    def _wait(req, on_chunk=None):
        """Follow one request to its end; return its text."""
        produced = 0
        while True:
            item = req.next_chunk(60.0)
            if item is None:
                continue
            count, last = item
            if count and on_chunk:
                on_chunk(req, ''.join(token_text(i) for i in range(produced, produced + count)), last)
            produced += count
            if last or req.done and not req.chunks:
                if on_chunk and not count:
                    on_chunk(req, '', True)
                break
        return ''.join(token_text(i) for i in range(produced))

    def _meta(self, req, prompt_tokens):
        meta = {'id': req.rid, 'finish_reason': {'type': 'length', 'length': req.max_new_tokens},
                'prompt_tokens': prompt_tokens, 'weight_version': 'default', 'num_retractions': 0, 'queue_time': 0.0,
                'reasoning_tokens': 0, 'completion_tokens': req.output, 'cached_tokens': 0,
                'cached_tokens_details': {'device': 0, 'host': 0}, 'dp_rank': None,
                'e2e_latency': (req.finished or time.time()) - req.received}
        if self.sim.spec:
            meta.update(spec_accept_rate=req.accepted / req.proposed if req.proposed else 0.0,
                        spec_accept_length=req.output / req.verify_ct if req.verify_ct else 1.0,
                        spec_num_correct_drafts=req.accepted, spec_num_proposed_drafts=req.proposed,
                        spec_verify_ct=req.verify_ct, spec_accepted_drafts=req.accepted,
                        spec_proposed_drafts=req.proposed, spec_correct_drafts_histogram=list(req.histogram),
                        spec_accept_histogram=list(req.histogram))
        now = time.time()
        meta.update(request_received_ts=req.received, api_server_dispatch_finish_ts=req.received + 0.0005,
                    request_finished_ts=req.finished or now,
                    decode_throughput=req.output / max(1e-9, (req.finished or now) - req.received),
                    response_sent_to_client_ts=now)
        return meta

    def _stream_start(self):
        self.send_response(200)
        self.send_header('content-type', 'text/event-stream; charset=utf-8')
        self.close_connection = True
        self.end_headers()
        self._logged(200)

    def _event(self, data):
        self.wfile.write(('data: %s\n\n' % (data if isinstance(data, str) else _dumps(data))).encode())
        self.wfile.flush()

    def generate(self, body):
        params = body.get('sampling_params') or {}
        max_new = params.get('max_new_tokens', 128)
        ids, text = body.get('input_ids'), body.get('text')
        if not body.get('stream') and (isinstance(text, list) or ids and isinstance(ids[0], list)):
            prompts = [len(i) for i in ids] if ids else [_prompt_tokens(t) for t in text]
            reqs = self.sim.engine.submit_many(prompts, max_new)
            results = [{'text': self._wait(req), 'output_ids': [100 + i % 50 for i in range(req.output)]} for req in reqs]
            for result, req, prompt in zip(results, reqs, prompts):
                result['meta_info'] = self._meta(req, prompt)
            return self._send(200, results)
        prompt = len(ids) if ids else _prompt_tokens(text or '')
        pd, max_new = self._pd_begin(body, max_new)
        if pd is False:
            return None
        if body.get('stream'):
            self._stream_start()
            text = []

            def chunk(req, piece, last):
                text.append(piece)
                ids = [100 + i % 50 for i in range(req.output)]
                self._event({'text': ''.join(text), 'output_ids': ids, 'meta_info': self._meta(req, prompt)})

            self._run(prompt, max_new, chunk, pd)
            self._event('[DONE]')
            return None
        req, text = self._run(prompt, max_new, pd=pd)
        return self._send(200, {'text': text, 'output_ids': [100 + i % 50 for i in range(req.output)],
                                'meta_info': self._meta(req, prompt)})

    def _openai(self, body, chat):
        if chat:
            prompt = 10 + sum(_prompt_tokens(str(m.get('content') or '')) for m in body.get('messages') or [])
            max_new = body.get('max_completion_tokens') or body.get('max_tokens') or 128
        else:
            text = body.get('prompt') or ''
            prompt = _prompt_tokens(text if isinstance(text, str) else ' '.join(map(str, text)))
            max_new = body.get('max_tokens') or 16
        model = body.get('model') or self.sim.args['served_model_name']
        rid = uuid.uuid4().hex
        created = int(time.time())
        obj = 'chat.completion' if chat else 'text_completion'
        pd, max_new = self._pd_begin(body, max_new, openai=True)
        if pd is False:
            return None
        if body.get('stream'):
            # SGLang's should_include_usage: a final usage chunk with include_usage, usage on
            # every chunk with continuous_usage_stats (each independently of the other).
            options = body.get('stream_options') or {}
            self._stream_start()
            first = [True]

            def chunk(req, piece, last):
                if chat:
                    delta = {'role': 'assistant', 'content': piece, 'reasoning_content': None, 'tool_calls': None}
                    if not first[0]:
                        delta['role'] = None
                    choice = {'index': 0, 'delta': delta, 'logprobs': None,
                              'finish_reason': 'length' if last else None, 'matched_stop': None}
                else:
                    choice = {'index': 0, 'text': piece, 'logprobs': None, 'finish_reason': 'length' if last else None,
                              'matched_stop': None}
                first[0] = False
                usage = _usage(prompt, req.output) if options.get('continuous_usage_stats') else None
                self._event({'id': rid, 'object': obj + ('.chunk' if chat else ''), 'created': created, 'model': model,
                             'choices': [choice], 'usage': usage})

            req = self._run(prompt, max_new, chunk, pd)[0]
            if options.get('include_usage'):
                usage = dict((k, v) for k, v in _usage(prompt, req.output).items() if v is not None)
                self._event({'id': rid, 'object': obj + ('.chunk' if chat else ''), 'created': created, 'model': model,
                             'choices': [], 'usage': usage})
            self._event('[DONE]')
            return None
        req, text = self._run(prompt, max_new, pd=pd)
        if chat:
            choice = {'index': 0, 'message': {'role': 'assistant', 'content': text, 'reasoning_content': None,
                                              'tool_calls': None},
                      'logprobs': None, 'finish_reason': 'length', 'matched_stop': None}
        else:
            choice = {'index': 0, 'text': text, 'logprobs': None, 'finish_reason': 'length', 'matched_stop': None}
        return self._send(200, {'id': rid, 'object': obj, 'created': created, 'model': model, 'choices': [choice],
                                'usage': _usage(prompt, req.output),
                                'metadata': {'weight_version': 'default'}})

    def completions(self, body):
        return self._openai(body, chat=False)

    def chat(self, body):
        return self._openai(body, chat=True)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 2048  # uvicorn's backlog; socketserver's 5 drops bursts of connections
    dummy = False
    ssl_context = None  # uvicorn's --ssl-certfile/--ssl-keyfile: TLS handshake in each connection's thread

    def process_request_thread(self, request, client_address):
        if self.ssl_context is not None:
            try:
                request = self.ssl_context.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                self.shutdown_request(request)  # a client that does not trust the certificate (uvicorn logs nothing)
                return
        try:
            self.finish_request(request, client_address)
        except Exception:  # pylint: disable=broad-except
            self.handle_error(request, client_address)
        finally:
            if isinstance(request, ssl.SSLSocket):
                # close_notify before the close, as uvicorn does: a stream ends with the connection, and a client
                # that reads to the close (sglang-router) drops the last events of a TLS connection cut without it.
                try:
                    request.settimeout(2.0)
                    request = request.unwrap()
                except (ssl.SSLError, OSError, ValueError):
                    pass
            self.shutdown_request(request)

    def handle_error(self, request, client_address):
        """A client that goes away mid-stream is normal; say nothing (like uvicorn)."""


def make_server(sim, host, port, dummy=False, tls=None):
    """The HTTP server; ``tls`` ``{certfile, keyfile, ca_certs, refresh}`` serves HTTPS like uvicorn does with
    SGLang's --ssl-* flags (the CA loaded, client certificates not required: SGLang has no --ssl-cert-reqs), and
    with ``refresh`` (--enable-ssl-refresh) reloads the certificate and key when their files change."""
    handler = type('BoundHandler', (Handler,), {'sim': sim})
    httpd = _HTTPServer((host, port), handler)
    httpd.dummy = dummy
    if tls and tls.get('certfile'):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls['certfile'], tls['keyfile'])
        if tls.get('ca_certs'):
            context.load_verify_locations(tls['ca_certs'])
        httpd.ssl_context = context
        if tls.get('refresh'):
            threading.Thread(target=_refresh_certificates, args=(context, tls['certfile'], tls['keyfile']),
                             name='ssl-refresh', daemon=True).start()
    return httpd


def _mtimes(*paths):
    try:
        return tuple(os.stat(path).st_mtime_ns for path in paths)
    except OSError:
        return None


def _refresh_certificates(context, certfile, keyfile, interval=1.0):
    """--enable-ssl-refresh: new handshakes use the certificate and key from the moment both files changed."""
    seen = _mtimes(certfile, keyfile)
    while True:
        time.sleep(interval)
        now = _mtimes(certfile, keyfile)
        if now and now != seen:
            try:
                context.load_cert_chain(certfile, keyfile)
                seen = now
            except (ssl.SSLError, OSError):
                pass  # half written: try again on the next tick


def metrics_text(sim):
    """Prometheus text in the recorded format (a subset of the real metric families)."""
    model = sim.args['served_model_name']
    base = 'engine_type="unified",model_name="%s"' % model
    rank = base + ',moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    eng = sim.engine
    lines = []

    def family(name, kind, text, samples):
        lines.append('# HELP sglang:%s %s' % (name, text))
        lines.append('# TYPE sglang:%s %s' % (name, kind))
        for labels, value in samples:
            lines.append('sglang:%s{%s} %s' % (name, labels, repr(float(value))))

    with sim.lock:
        requests = sorted(sim.http_counts.items())
    totals = {}
    for (path, method, dummy), count in requests:
        totals[(path, method)] = totals.get((path, method), 0) + count
    family('http_requests_total', 'counter', 'Total number of HTTP requests by endpoint and method',
           [('endpoint="%s",method="%s"' % k, v) for k, v in totals.items()])
    family('http_responses_total', 'counter', 'Total number of HTTP responses by endpoint and status code',
           [('endpoint="%s",method="%s",status_code="%d"' % k, v) for k, v in requests])
    with eng.metrics.lock:
        counts = dict(eng.metrics.counters)
        histograms = [(name, text, h.samples({'engine_type': 'unified', 'model_name': model}))
                      for name, text, h in (
                          ('time_to_first_token_seconds', 'Histogram of time to first token in seconds.',
                           eng.metrics.ttft),
                          ('inter_token_latency_seconds', 'Histogram of inter-token latency in seconds.',
                           eng.metrics.itl),
                          ('e2e_request_latency_seconds', 'Histogram of End-to-end request latency in seconds',
                           eng.metrics.e2e)) if h.observed]
    family('prompt_tokens_total', 'counter', 'Number of prefill tokens processed.', [(base, counts['prompt_tokens'])])
    family('generation_tokens_total', 'counter', 'Number of generation tokens processed.',
           [(base, counts['generation_tokens'])])
    if sim.spec:
        family('spec_verify_calls_total', 'counter', 'Number of speculative decoding verification calls.',
               [(base, counts['verify_calls'])])
    family('num_requests_total', 'counter', 'Number of requests processed.', [(base, counts['requests'])])
    family('max_total_num_tokens', 'gauge', 'Maximum total number of tokens in the KV cache pool.',
           [(rank, sim.max_total_num_tokens)])
    family('context_len', 'gauge', 'Maximum context length.', [(rank, sim.context_length)])
    family('num_running_reqs', 'gauge', 'The number of running requests.', [(rank, eng.gauges[0])])
    family('num_queue_reqs', 'gauge', 'The number of requests in the waiting queue.', [(rank, eng.gauges[1])])
    if sim.pd is not None:  # SGLang's collector has them in every mode; the simulator shows them in PD mode only
        for name, text, value in sim.pd.gauges():
            family(name, 'gauge', text, [(rank, value)])
    family('gen_throughput', 'gauge', 'The generation throughput (token/s).', [(rank, eng.last_gen_throughput)])
    family('cache_hit_rate', 'gauge', 'The prefix cache hit rate.', [(rank, 0.0)])
    family('token_usage', 'gauge', 'The token usage.', [(rank, 0.0)])
    family('spec_accept_length', 'gauge',
           'Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).',
           [(rank, eng.last_accept_length)])
    family('spec_accept_rate', 'gauge', 'Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).',
           [(rank, eng.last_accept_rate)])
    family('spec_num_steps', 'gauge', 'Currently active speculative_num_steps.',
           [(rank, sim.args['speculative_num_steps'] or 0)])
    family('spec_num_draft_tokens', 'gauge',
           'Currently active speculative_num_draft_tokens (decouples from steps under topk>1).',
           [(rank, sim.args['speculative_num_draft_tokens'] or 0)])
    # Histograms appear once observed (SGLang's multiprocess collector writes nothing before).
    for name, text, samples in histograms:
        lines.append('# HELP sglang:%s %s' % (name, text))
        lines.append('# TYPE sglang:%s histogram' % name)
        lines.extend('sglang:%s%s{%s} %s' % (name, suffix, labels, repr(float(value))) for suffix, labels, value in samples)
    return '\n'.join(lines) + '\n'


class Counters:
    """HTTP counters kept by the Server for /metrics."""

    def __init__(self):
        self.lock = threading.Lock()
        self.http_counts = {}

    def metrics_count(self, path, method, status):
        with self.lock:
            key = (path, method, status)
            self.http_counts[key] = self.http_counts.get(key, 0) + 1
