# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Load generation and statistics for LLM inference servers (no Ansible imports).

A benchmark sends streamed requests at a fixed concurrency (closed loop: one worker
thread per concurrent request, each with its own keep-alive connection: a
``requests.Session``, or ``http.client`` where ``requests`` is not installed),
timestamps every server-sent event, and turns the per-request records into figures
defined as ``sglang.benchmark.serving`` (``sglang.bench_serving``) of SGLang
0.5.15.post1 defines them (``async_request_sglang_generate`` and ``calculate_metrics``):

- TTFT: from sending the request to the first chunk that carries tokens.
- ITL, per token: every later chunk's gap to the previous one, divided by the tokens
  it carries and counted once per token (with speculative decoding a chunk carries
  several). The undivided gap is kept as its own figure, ``chunk_gap_ms``.
- TPOT: per request, (E2E latency - TTFT) / (output tokens - 1).
- E2E latency: from sending the request to its last event.
- request and output throughput: completed requests and their output tokens over the
  run's wall-clock duration.
- percentiles: linear interpolation (numpy's default, as there).
- goodput (optional): requests per second that met every SLO given (TTFT, TPOT, E2E in
  ms); bench_serving 0.5.15.post1 has none, this is ``vllm bench serve --goodput``'s.

Two APIs are understood:

- ``completions``: OpenAI-compatible ``POST /v1/completions`` with ``stream: true``
  (SGLang, vLLM, ...). ``stream_options`` asks for usage on every chunk
  (``continuous_usage_stats``) and at the end (``include_usage``), so the token count of
  each chunk is known even when speculative decoding puts several tokens in one chunk
  (without it, a chunk counts as one token).
- ``generate``: SGLang's native ``POST /generate`` with ``stream: true``; every chunk's
  ``meta_info.completion_tokens`` is cumulative, and the last one carries
  ``spec_verify_ct`` / ``spec_accept_length`` when speculative decoding is on.

Every request is bounded by one deadline (``timeout``, from connecting to the last byte),
a misbehaving server fails the request concerned with a message, never the run, and a
stream that ends early (no ``[DONE]`` or ``finish_reason``, or fewer tokens than the
exact length asked for) is a failed, truncated request.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import math
import random
import select
import ssl
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

# What a server answers about itself is read in one place for every module.
from ansible_collections.llmops.serving.plugins.module_utils._server_api import (
    SERVER_INFO_PATHS,
    accept_length_from_metrics,
    accept_length_from_server_info,
    counter_deltas,
    generate_body,
    parse_prometheus,
    speculative_enabled,
)

try:
    import requests
    from urllib3.exceptions import HTTPError as _Urllib3Error, TimeoutError as _Urllib3Timeout
except ImportError:  # pragma: no cover - depends on the host
    requests = None

API_COMPLETIONS = 'completions'
API_GENERATE = 'generate'
APIS = (API_COMPLETIONS, API_GENERATE)
PERCENTILES = (50, 90, 99)
# Largest read; read1() returns whatever has arrived, so a large limit costs no latency and
# keeps the per-event cost low (measured in tests/perf/benchmark_client_throughput.py).
READ_CHUNK = 65536
MAX_ERRORS_KEPT = 5

# Words for synthetic prompts: short and common, so one word is about one token for
# most tokenizers (the server's own prompt_tokens figure is what gets reported).
_WORDS = (
    'the of and to in is was for on that with as by at from his her it an were are '
    'which this be or has had not but first one their its new after who they two '
    'been more when there all year other also into time only some would over may'
).split()


class BenchmarkError(Exception):
    """The benchmark could not run (bad input, server unreachable); message is for people."""


def percentile(sorted_values, pct):
    """Linear-interpolated percentile (numpy's default) of an already sorted list."""
    if not sorted_values:
        return None
    if len(sorted_values) == 1:
        return sorted_values[0]
    rank = (len(sorted_values) - 1) * pct / 100.0
    low = int(math.floor(rank))
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def summarize(values, scale=1.0):
    """mean / p50 / p90 / p99 of ``values`` multiplied by ``scale`` (None when empty)."""
    data = sorted(v * scale for v in values)
    result = {'mean': (sum(data) / len(data)) if data else None}
    for pct in PERCENTILES:
        result['p%d' % pct] = percentile(data, pct)
    return result


# ---------------------------------------------------------------- prompts

def synthetic_prompts(num_prompts, input_len, output_len, seed):
    """``num_prompts`` prompts of ``input_len`` words, reproducible from ``seed``."""
    rng = random.Random(seed)
    return [
        {'prompt': ' '.join(rng.choice(_WORDS) for dummy in range(input_len)), 'output_len': output_len}
        for dummy in range(num_prompts)
    ]


def _jsonl_entries(path, handle, output_len):
    entries = []
    for lineno, line in enumerate(handle, 1):
        line = line.strip()
        if not line:
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise BenchmarkError('%s line %d is not JSON: %s' % (path, lineno, exc))
        if isinstance(item, str):
            item = {'prompt': item}
        prompt = item.get('prompt', item.get('text')) if isinstance(item, dict) else None
        if not isinstance(prompt, str):
            raise BenchmarkError(
                '%s line %d: expected a JSON string or an object with a "prompt" string' % (path, lineno))
        length = item.get('output_len', item.get('max_tokens', output_len))
        if not isinstance(length, int) or isinstance(length, bool) or length < 1:
            raise BenchmarkError('%s line %d: output_len must be a whole number of at least 1, got %s'
                                 % (path, lineno, json.dumps(length)))
        entries.append({'prompt': prompt, 'output_len': length})
    return entries


def _sharegpt_entries(path, handle, output_len):
    """First turn of every conversation of two turns or more, as bench_serving's ShareGPT
    loader takes them; the output length is ``output_len`` (the reply is not tokenized)."""
    try:
        data = json.load(handle)
    except ValueError as exc:
        raise BenchmarkError('%s is not JSON: %s' % (path, exc))
    entries = []
    for index, item in enumerate(data):
        turns = item.get('conversations', item.get('conversation')) if isinstance(item, dict) else None
        if not isinstance(turns, list):
            raise BenchmarkError('%s entry %d: expected an object with a "conversations" list (ShareGPT format)'
                                 % (path, index))
        if len(turns) < 2:
            continue
        first = turns[0]
        prompt = first.get('value', first.get('content')) if isinstance(first, dict) else None
        if not isinstance(prompt, str):
            raise BenchmarkError('%s entry %d: the first turn has no "value" string' % (path, index))
        entries.append({'prompt': prompt, 'output_len': output_len})
    return entries


def load_dataset(path, num_prompts, output_len, seed):
    """Prompts from a file, shuffled with ``seed`` and repeated to ``num_prompts``.

    A JSON array is a ShareGPT-format file (objects with ``conversations``: the first turn's
    ``value`` is the prompt). Otherwise it is JSONL: each line a JSON string (the prompt) or
    an object with ``prompt`` (or ``text``) and optionally ``output_len`` (or ``max_tokens``).
    """
    with open(path, encoding='utf-8') as handle:
        head = handle.read(4096).lstrip()
        handle.seek(0)
        load = _sharegpt_entries if head.startswith('[') else _jsonl_entries
        entries = load(path, handle, output_len)
    if not entries:
        raise BenchmarkError('%s holds no prompts' % path)
    random.Random(seed).shuffle(entries)
    return [entries[i % len(entries)] for i in range(num_prompts)]


def request_body(api, prompt, output_len, model=None, temperature=0.0):
    """JSON body of one streamed request; ``ignore_eos`` makes output lengths exact."""
    if api == API_GENERATE:
        return generate_body(prompt, output_len, temperature, stream=True, ignore_eos=True)
    body = {
        'prompt': prompt,
        'max_tokens': output_len,
        'temperature': temperature,
        'ignore_eos': True,
        'stream': True,
        'stream_options': {'include_usage': True, 'continuous_usage_stats': True},
    }
    if model:
        body['model'] = model
    return body


# ---------------------------------------------------------------- one request

class MalformedEvent(ValueError):
    """A streamed event that does not have the shape its API promises."""


def _shown(value):
    return json.dumps(value)[:80]


def _field(container, key, kind, where):
    """``container[key]`` when it is absent/null or of ``kind``; else MalformedEvent."""
    value = container.get(key)
    if value is None or (isinstance(value, kind) and not isinstance(value, bool)):
        return value
    raise MalformedEvent('%s"%s" is %s, expected %s' % (where, key, _shown(value), {
        dict: 'an object', list: 'a list', int: 'a whole number'}.get(kind, 'a number')))


class RequestRecord:
    """Timings and counts of one streamed request, built by :meth:`feed` per event."""

    __slots__ = ('start', 'ttft', 'end', 'last', 'gaps', 'gap_tokens', 'chunks', 'output_tokens', 'prompt_tokens',
                 'verify_ct', 'accept_length', 'error', 'server_counted', 'chunks_counted', 'expected_tokens', 'done',
                 'finished', 'truncated', '_api')

    def __init__(self, api, start, expected_tokens=None):
        self._api = api
        self.start = start
        self.ttft = None
        self.end = None
        self.last = None
        # Per chunk after the first: the gap to the previous chunk and the tokens it carried.
        self.gaps = []
        self.gap_tokens = []
        self.chunks = 0
        self.output_tokens = 0
        self.prompt_tokens = None
        self.verify_ct = None
        self.accept_length = None
        self.error = None
        # Whether the server gave its own token count (else one token per chunk was assumed).
        self.server_counted = False
        # Whether every chunk came with the server's count (else only a final usage chunk, if any).
        self.chunks_counted = True
        # The exact output length asked for (ignore_eos), None when the server may stop early.
        self.expected_tokens = expected_tokens
        self.done = False  # [DONE] seen
        self.finished = False  # a finish_reason seen
        self.truncated = False

    @property
    def ok(self):
        return self.error is None

    def feed(self, event, now):
        """Account for one decoded ``data:`` event received at ``now``.

        The server's cumulative count (``meta_info.completion_tokens``, or ``usage`` when
        ``continuous_usage_stats`` is honoured) gives the tokens of each chunk; without it
        a chunk counts as one token until a final ``usage`` chunk corrects the total.
        Raises :class:`MalformedEvent` for an event of the wrong shape.
        """
        if not isinstance(event, dict):
            raise MalformedEvent('expected a JSON object, got %s' % _shown(event))
        if self._api == API_GENERATE:
            meta = _field(event, 'meta_info', dict, '') or {}
            carries_tokens = True
            total = _field(meta, 'completion_tokens', int, 'meta_info ')
            prompt = _field(meta, 'prompt_tokens', int, 'meta_info ')
            verify = _field(meta, 'spec_verify_ct', int, 'meta_info ')
            accept = _field(meta, 'spec_accept_length', (int, float), 'meta_info ')
            finish = meta.get('finish_reason')
            if verify is not None:
                self.verify_ct = verify
            if accept is not None:
                self.accept_length = accept
        else:
            usage = _field(event, 'usage', dict, '') or {}
            choices = _field(event, 'choices', list, '')
            carries_tokens = bool(choices)
            if carries_tokens and not isinstance(choices[0], dict):
                raise MalformedEvent('"choices" holds %s, expected objects' % _shown(choices[0]))
            finish = choices[0].get('finish_reason') if carries_tokens else None
            total = _field(usage, 'completion_tokens', int, 'usage ')
            prompt = _field(usage, 'prompt_tokens', int, 'usage ')
        if prompt is not None:
            self.prompt_tokens = prompt
        if finish:
            self.finished = True
        if total is None:
            total = self.output_tokens + (1 if carries_tokens else 0)
            self.chunks_counted = False
        else:
            self.server_counted = True
        new = total - self.output_tokens
        self.output_tokens = total
        if not carries_tokens or (new <= 0 and self.ttft is not None):
            return
        if self.ttft is None:
            self.ttft = now - self.start
        else:
            self.gaps.append(now - self.last)
            self.gap_tokens.append(new)
        self.last = now
        self.chunks += 1

    def finish(self, now):
        self.end = now
        if self.error is None:
            if self.ttft is None:
                self.error = 'stream ended without any token'
            elif not (self.done or self.finished):
                self.error = 'stream truncated: it ended after %d tokens without [DONE] or a finish_reason' % (
                    self.output_tokens)
            elif self.expected_tokens and self.server_counted and self.output_tokens < self.expected_tokens:
                self.error = 'stream truncated: %d of the %d tokens asked for' % (self.output_tokens,
                                                                                  self.expected_tokens)
            self.truncated = self.error is not None and self.error.startswith('stream truncated')
        if self.accept_length is None and self.verify_ct:
            self.accept_length = self.output_tokens / float(self.verify_ct)

    @property
    def e2e(self):
        return self.end - self.start

    @property
    def tpot(self):
        if self.output_tokens > 1 and self.ttft is not None:
            return (self.e2e - self.ttft) / (self.output_tokens - 1)
        return None

    def itl(self):
        """Per-token inter-token latencies: each chunk gap / its tokens, once per token.

        Where the server counted only the total (a final ``usage`` chunk), every chunk is
        taken to hold the mean tokens per chunk: each gap divided by that mean, once per gap
        (the same weight for every gap, so the same mean and percentiles).
        """
        if not self.chunks_counted:
            per_chunk = self.output_tokens / float(self.chunks) if self.server_counted and self.chunks else 1.0
            return [gap / per_chunk for gap in self.gaps]
        return [gap / count for gap, count in zip(self.gaps, self.gap_tokens) for dummy in range(count)]


def iter_lines(read1, size=READ_CHUNK):
    """Lines (without the newline) of a byte stream, as soon as each has arrived.

    ``read1(size)`` must return what is available without waiting for ``size`` bytes
    (``io.BufferedReader.read1`` semantics): SSE responses may be chunked (uvicorn) or
    plain bodies ended by closing the connection, and a read that waits for a full
    buffer would delay every event of the latter.
    """
    pending = b''
    while True:
        data = read1(size)
        if not data:
            break
        lines = (pending + data).split(b'\n')
        pending = lines.pop()
        yield from lines
    if pending:
        yield pending


def consume_stream(lines, record, clock=time.perf_counter):
    """Feed every SSE ``data:`` line of ``lines`` (bytes) into ``record`` until ``[DONE]``.

    A malformed event ends the request with an error in ``record`` (never an exception).
    """
    loads = json.loads
    feed = record.feed
    now = None
    try:
        for line in lines:
            if not line.startswith(b'data:'):
                continue
            now = clock()
            payload = line[5:].strip()
            if payload == b'[DONE]':
                record.done = True
                break
            event = loads(payload)
            if isinstance(event, dict) and 'error' in event and not event.get('choices') and 'meta_info' not in event:
                record.error = 'server error in stream: %s' % json.dumps(event['error'])[:300]
                break
            feed(event, now)
    except ValueError as exc:  # not JSON, not UTF-8, or MalformedEvent
        record.error = 'malformed event in stream: %s' % exc
    # E2E ends at the last event, as in bench_serving (its [DONE] included).
    record.finish(now if record.done else clock())
    return record


# ---------------------------------------------------------------- HTTP

def _remaining(deadline):
    """Seconds left before ``deadline`` (time.monotonic()); TimeoutError when none."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError('no complete answer within the timeout')
    return left


def _closed_by_peer(sock):
    """Whether an idle keep-alive socket is readable, that is: the server closed it (EOF)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _bounded_read1(read1, sock, deadline, remaining_bytes):
    """``read1`` that honours ``deadline`` and tells a body cut short from its end.

    A Content-Length body whose connection closes early reads as ``b''`` (``http.client``
    does not notice): ``remaining_bytes()`` above zero then raises IncompleteRead.
    """
    def read(size):
        left = _remaining(deadline)
        if sock is not None:
            sock.settimeout(left)
        data = read1(size)
        if not data and remaining_bytes():
            raise http.client.IncompleteRead(b'', remaining_bytes())
        return data
    return read


class _RequestsTransport:
    """``requests``: a ``Session`` (keep-alive pool) per worker thread."""

    def __init__(self, url, headers, ca_path=None):
        self.url, self.headers, self.ca_path = url, headers, ca_path
        self.name = 'requests %s' % requests.__version__
        # Reading the raw stream raises urllib3's own errors, not requests' wrappers.
        self.errors = (requests.RequestException, _Urllib3Error, OSError, http.client.HTTPException)
        self.timeouts = (requests.Timeout, _Urllib3Timeout, TimeoutError)
        self._local = threading.local()

    def _session(self):
        session = getattr(self._local, 'session', None)
        if session is None:
            session = self._local.session = requests.Session()
            session.headers.update(self.headers)
            if self.ca_path:
                session.verify = self.ca_path
        return session

    def _drop(self):
        session = getattr(self._local, 'session', None)
        if session is not None:
            session.close()
            self._local.session = None

    def request(self, method, path, deadline, headers=None):
        left = _remaining(deadline)
        try:
            resp = self._session().request(method, self.url + path, timeout=(left, left), headers=headers)
            return resp.status_code, resp.content
        except self.errors:
            self._drop()
            raise

    @contextlib.contextmanager
    def stream(self, path, body, deadline):
        """Yields ``(status, read1, read)`` of a streamed POST."""
        left = _remaining(deadline)
        try:
            with self._session().post(self.url + path, data=json.dumps(body), stream=True,
                                      timeout=(left, left)) as resp:
                raw = resp.raw
                # urllib3 >= 2.3 has read1 (and decodes content); older ones wrap an http.client
                # response that has it (content is not encoded: we ask for identity).
                fp = None if hasattr(raw, 'read1') else raw._fp  # pylint: disable=protected-access

                def unread():
                    return raw.length_remaining if fp is None else fp.length
                conn = getattr(raw, 'connection', None) or getattr(raw, '_connection', None)
                read1 = _bounded_read1(raw.read1 if fp is None else fp.read1, getattr(conn, 'sock', None),
                                       deadline, unread)
                yield resp.status_code, read1, lambda: resp.content
        except BaseException:
            self._drop()
            raise


class _StdlibTransport:
    """``http.client`` (Python standard library): a keep-alive connection per worker thread."""

    name = 'http.client (Python %d.%d)' % sys.version_info[:2]
    errors = (OSError, http.client.HTTPException)
    timeouts = (TimeoutError,)

    def __init__(self, url, headers, ca_path=None):
        parts = urlsplit(url)
        if parts.scheme not in ('http', 'https') or not parts.hostname:
            raise BenchmarkError('cannot use URL %s: expected http(s)://host[:port]' % url)
        if parts.scheme == 'https':
            context = ssl.create_default_context(cafile=ca_path or None)
            self._factory = functools.partial(http.client.HTTPSConnection, context=context)
        else:
            self._factory = http.client.HTTPConnection
        self._address = (parts.hostname, parts.port)
        self._prefix = parts.path.rstrip('/')
        self.headers = headers
        self._local = threading.local()

    def _connection(self, timeout):
        conn = getattr(self._local, 'conn', None)
        if conn is not None and conn.sock is not None and _closed_by_peer(conn.sock):
            self._drop()
            conn = None
        if conn is None:
            conn = self._local.conn = self._factory(self._address[0], self._address[1], timeout=timeout)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _drop(self):
        conn = getattr(self._local, 'conn', None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _response(self, method, path, body, deadline, headers=None):
        data = json.dumps(body).encode() if body is not None else None
        try:
            conn = self._connection(_remaining(deadline))
            conn.request(method, self._prefix + path, body=data, headers=dict(self.headers, **(headers or {})))
            sock = conn.sock  # getresponse() lets go of it when the server closes after this answer
            sock.settimeout(_remaining(deadline))
            return conn.getresponse(), sock
        except self.errors:
            self._drop()
            raise

    def request(self, method, path, deadline, headers=None):
        resp, dummy = self._response(method, path, None, deadline, headers)
        try:
            data = resp.read()
        except self.errors:
            self._drop()
            raise
        if resp.will_close:
            self._drop()
        return resp.status, data

    @contextlib.contextmanager
    def stream(self, path, body, deadline):
        resp, sock = self._response('POST', path, body, deadline)
        try:
            yield resp.status, _bounded_read1(resp.read1, sock, deadline, lambda: resp.length), resp.read
        except BaseException:
            self._drop()
            raise
        reuse = not resp.will_close
        try:
            sock.settimeout(_remaining(deadline))
            resp.read()  # the rest (after [DONE]), so that the connection can be reused
        except self.errors:
            reuse = False  # what was read stands; only the connection is not reused
        if not reuse:
            self._drop()


HTTP_LIBRARIES = ('auto', 'requests', 'http.client')


def disaggregation_refusal(url, mode):
    """Why the server at ``url``, one side of a prefill/decode pair (``mode``: prefill or decode), is not benchmarked
    alone: SGLang refuses a request without a bootstrap_room, and one with its fake bootstrap host runs without the
    other side's KV, so its figures would be wrong."""
    return ('%s is the %s server of a prefill/decode pair (disaggregation_mode %s), which cannot be benchmarked alone: '
            'SGLang answers it only requests paired through a router in prefill/decode mode (HTTP 400 "Disaggregated '
            'request received without bootstrap room id." to any other), one side alone would give wrong figures, and '
            'acceptance shows on the decode of a pair only. Benchmark the router in front of it (its URL as url, '
            'disaggregation_mode unset); nothing was sent' % (url, mode, mode))


def expected_tokens(body):
    """The exact output length a request body asks for (``ignore_eos``), else None."""
    params = body.get('sampling_params', body)
    if not params.get('ignore_eos'):
        return None
    return params.get('max_new_tokens', params.get('max_tokens'))


class Client:
    """HTTP access to one server, with a connection per worker thread.

    ``http_library``: ``requests`` (a ``Session`` per thread), ``http.client`` (the
    standard library, for hosts without ``requests``) or ``auto`` (``requests`` when it
    is installed). ``timeout`` bounds every request, from connecting to its last byte.
    """

    def __init__(self, url, api_key=None, timeout=600.0, http_library='auto', admin_api_key=None, ca_path=None):
        self.url = url.rstrip('/')
        self.timeout = timeout
        headers = {'Content-Type': 'application/json', 'Accept-Encoding': 'identity'}
        if api_key:
            headers['Authorization'] = 'Bearer %s' % api_key
        # The admin endpoints (/flush_cache) take the admin key where the server has one.
        self.admin_headers = {'Authorization': 'Bearer %s' % admin_api_key} if admin_api_key else None
        if http_library == 'auto':
            http_library = 'requests' if requests is not None else 'http.client'
        if http_library == 'requests':
            if requests is None:
                raise BenchmarkError('the Python library "requests" is not installed; use http_library "http.client" '
                                     'or "auto"')
            self.transport = _RequestsTransport(self.url, headers, ca_path)
        else:
            self.transport = _StdlibTransport(self.url, headers, ca_path)
        self.http_library = self.transport.name

    def request(self, method, path, headers=None):
        """``(status, body)`` of a request that is not streamed (``headers``: added to, or replacing, the client's).

        A failure other than a timeout is tried once more on a new connection: the server
        may have closed an idle keep-alive connection (uvicorn does after 5 s) just as it
        was reused.
        """
        deadline = time.monotonic() + self.timeout
        try:
            return self.transport.request(method, path, deadline, headers)
        except self.transport.timeouts:
            raise
        except self.transport.errors:
            return self.transport.request(method, path, deadline, headers)

    def _json(self, path):
        """Body of ``GET path`` as JSON, or None when the endpoint is absent; transport errors raise."""
        status, data = self.request('GET', path)
        try:
            return json.loads(data) if status == 200 else None
        except ValueError:
            return None

    def _unanswered(self, path, exc):
        return BenchmarkError('%s%s did not answer within %g s (timeout): %s: %s'
                              % (self.url, path, self.timeout, type(exc).__name__, exc))

    def stream(self, path, body):
        """One streamed request; never raises: failures are kept in ``record.error``."""
        api = API_GENERATE if path == '/generate' else API_COMPLETIONS
        clock = time.perf_counter
        deadline = time.monotonic() + self.timeout
        record = RequestRecord(api, clock(), expected_tokens(body))
        try:
            with self.transport.stream(path, body, deadline) as (status, read1, read):
                if status != 200:
                    record.error = 'HTTP %d: %s' % (status, read()[:300].decode('utf-8', 'replace').strip())
                else:
                    consume_stream(iter_lines(read1), record, clock)
                    return record
        except self.transport.timeouts as exc:
            record.error = 'timed out: no complete answer within %g s (timeout): %s' % (self.timeout, exc)
        except self.transport.errors as exc:
            record.error = '%s: %s' % (type(exc).__name__, exc)
        record.finish(clock())
        return record

    # Server introspection: best effort, None when the endpoint is absent.
    def server_info(self):
        try:
            for path in SERVER_INFO_PATHS:
                info = self._json(path)
                if info is not None:
                    return info
        except self.transport.errors:
            pass  # a server that does not answer one path will not answer the older one either
        return None

    def metrics(self):
        try:
            status, data = self.request('GET', '/metrics')
        except self.transport.errors:
            return None
        return parse_prometheus(data.decode('utf-8', 'replace')) if status == 200 else None

    def first_model(self):
        try:
            models = self._json('/v1/models')
        except self.transport.errors as exc:
            raise self._unanswered('/v1/models', exc)
        data = (models if isinstance(models, dict) else {}).get('data') or [{}]
        return data[0].get('id') if isinstance(data, list) and isinstance(data[0], dict) else None

    def flush_cache(self, deadline_s=30.0):
        """POST /flush_cache; SGLang refuses while requests run, so retry until the deadline."""
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                status, data = self.request('POST', '/flush_cache', self.admin_headers)
            except self.transport.errors as exc:
                raise self._unanswered('/flush_cache', exc)
            if status == 200:
                return True
            if status == 404:
                raise BenchmarkError('%s/flush_cache does not exist (not an SGLang server?); '
                                     'set flush_cache to false' % self.url)
            if time.monotonic() >= deadline:
                raise BenchmarkError('%s/flush_cache failed for %.0f s: HTTP %d: %s' % (
                    self.url, deadline_s, status, data[:200].decode('utf-8', 'replace').strip()))
            time.sleep(0.5)


# ---------------------------------------------------------------- aggregate

LATENCIES = ('ttft_ms', 'itl_ms', 'chunk_gap_ms', 'tpot_ms', 'e2e_ms')
# Figures of a run reported as the median of its rounds, with min and max in ``spread``.
RATES = ('request_throughput', 'output_throughput', 'total_throughput', 'goodput', 'tokens_per_chunk',
         'accept_length', 'client_cpu_ms_per_1k_tokens', 'client_cpu_utilisation')
# Figures of a run that are the sum of its rounds.
COUNTS = ('num_prompts', 'completed', 'failed', 'truncated', 'good_requests', 'input_tokens', 'output_tokens',
          'duration_s', 'client_cpu_s')


def meets_slo(record, slo):
    """Whether ``record`` met every limit of ``slo`` (ms), as ``vllm bench serve --goodput`` decides.

    A one-token request has no TPOT; it counts as 0 there too.
    """
    figures = {'ttft_ms': record.ttft, 'tpot_ms': record.tpot or 0.0, 'e2e_ms': record.e2e}
    return all(figures[key] * 1000.0 <= limit for key, limit in slo.items())


def aggregate(records, duration, concurrency, cpu_seconds, slo=None):
    """The figures of one run from its request records (definitions: see the module docstring)."""
    done = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    output_tokens = sum(r.output_tokens for r in done)
    prompt_known = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
    input_tokens = sum(prompt_known) if len(prompt_known) == len(done) and done else None
    chunks = sum(r.chunks for r in done)
    good = sum(1 for r in done if meets_slo(r, slo)) if slo else None
    result = {
        'concurrency': concurrency,
        'num_prompts': len(records),
        'completed': len(done),
        'failed': len(failed),
        'truncated': sum(1 for r in failed if r.truncated),
        'errors': sorted(set(r.error for r in failed))[:MAX_ERRORS_KEPT],
        'duration_s': duration,
        'request_throughput': len(done) / duration if duration > 0 else None,
        'input_tokens': input_tokens,
        'output_tokens': output_tokens,
        'output_throughput': output_tokens / duration if duration > 0 else None,
        'total_throughput': ((input_tokens or 0) + output_tokens) / duration if duration > 0 else None,
        'good_requests': good,
        'goodput': good / duration if good is not None and duration > 0 else None,
        'tokens_per_chunk': output_tokens / chunks if chunks else None,
        'output_tokens_counted_by_server': all(r.server_counted for r in done) if done else None,
        'ttft_ms': summarize([r.ttft for r in done], 1000.0),
        'itl_ms': summarize([itl for r in done for itl in r.itl()], 1000.0),
        'chunk_gap_ms': summarize([gap for r in done for gap in r.gaps], 1000.0),
        'tpot_ms': summarize([r.tpot for r in done if r.tpot is not None], 1000.0),
        'e2e_ms': summarize([r.e2e for r in done], 1000.0),
        'accept_length': None,
        'accept_length_source': None,
        'client_cpu_s': cpu_seconds,
        'client_cpu_ms_per_1k_tokens': (cpu_seconds * 1e6 / output_tokens) if output_tokens else None,
        'client_cpu_utilisation': cpu_seconds / duration if duration > 0 else None,
    }
    verify_steps = [r.verify_ct for r in done if r.verify_ct]
    per_request_accept = [r.accept_length for r in done if r.accept_length is not None]
    if done and len(verify_steps) == len(done):
        # Tokens over verify steps of all requests: what the server's own average counts.
        result['accept_length'] = output_tokens / float(sum(verify_steps))
    elif per_request_accept:
        result['accept_length'] = sum(per_request_accept) / len(per_request_accept)
    if result['accept_length'] is not None:
        result['accept_length_source'] = 'per_request'
    return result


def _median(values):
    values = sorted(v for v in values if v is not None)
    return percentile(values, 50)


def _spread(values):
    values = sorted(v for v in values if v is not None)
    return {'min': values[0], 'median': percentile(values, 50), 'max': values[-1]} if values else None


def combine_rounds(rounds):
    """One run from the rounds that measured it: rates and latencies are the median over the
    rounds, counts their sum, and ``spread`` holds min/median/max of every figure."""
    run = dict(rounds[0])
    for key in COUNTS:
        values = [r[key] for r in rounds]
        run[key] = None if None in values else sum(values)
    for key in RATES:
        run[key] = _median(r[key] for r in rounds)
    for key in LATENCIES:
        run[key] = {stat: _median(r[key][stat] for r in rounds) for stat in rounds[0][key]}
    run['errors'] = sorted(set(e for r in rounds for e in r['errors']))[:MAX_ERRORS_KEPT]
    counted = [r['output_tokens_counted_by_server'] for r in rounds if r['output_tokens_counted_by_server'] is not None]
    run['output_tokens_counted_by_server'] = all(counted) if counted else None
    run['accept_length_source'] = next((r['accept_length_source'] for r in rounds if r['accept_length_source']), None)
    counters = {}
    for r in rounds:
        for key, value in r.get('server_counters', {}).items():
            counters[key] = counters.get(key, 0.0) + value
    run['server_counters'] = counters
    spread = {key: _spread(r[key] for r in rounds) for key in RATES}
    for key in LATENCIES:
        for stat in rounds[0][key]:
            spread['%s.%s' % (key, stat)] = _spread(r[key][stat] for r in rounds)
    run['spread'] = spread
    run['rounds'] = [dict(r, round=i) for i, r in enumerate(rounds, 1)]
    return run


# ---------------------------------------------------------------- the run

def run_load(client, api, prompts, concurrency, model=None, temperature=0.0, min_duration=0.0):
    """Send every prompt once, then again from the first until ``min_duration`` seconds have
    passed (whichever ends later), with ``concurrency`` requests in flight; records in the
    order sent."""
    path = '/generate' if api == API_GENERATE else '/v1/completions'
    bodies = [request_body(api, p['prompt'], p['output_len'], model, temperature) for p in prompts]
    end = time.monotonic() + min_duration
    lock = threading.Lock()
    sent = []

    def worker():
        mine = []
        while True:
            with lock:
                index = len(sent)
                if index >= len(bodies) and time.monotonic() >= end:
                    return mine
                sent.append(index)
            mine.append((index, client.stream(path, bodies[index % len(bodies)])))

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(worker) for dummy in range(concurrency)]
        pairs = sorted((pair for future in futures for pair in future.result()), key=lambda pair: pair[0])
    return [record for dummy, record in pairs]


def measure(client, api, prompts, concurrency, model=None, flush_cache=False, temperature=0.0,
            min_duration=0.0, slo=None):
    """One round at one concurrency: flush, snapshot, load, snapshot; returns (figures, server info)."""
    if flush_cache:
        client.flush_cache()
    before = client.metrics()
    cpu0 = time.process_time()
    wall0 = time.perf_counter()
    records = run_load(client, api, prompts, concurrency, model, temperature, min_duration)
    duration = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    after = client.metrics()
    info = client.server_info()
    result = aggregate(records, duration, concurrency, cpu, slo)
    result['server_counters'] = counter_deltas(before, after) if after else {}
    if result['accept_length'] is None and speculative_enabled(info) is not False:
        value = accept_length_from_server_info(info) if flush_cache else None
        source = 'server_info'
        if value is None:
            value, source = accept_length_from_metrics(before, after), 'metrics'
        if value is not None:
            result['accept_length'], result['accept_length_source'] = value, source
    return result, info


def benchmark(client, api, prompts, concurrencies, model=None, warmup_requests=1, flush_cache=False,
              temperature=0.0, progress=None, rounds=1, min_duration=0.0, slo=None):
    """For each concurrency: warm up at that concurrency, then measure ``rounds`` times.

    Warm-up sends ``warmup_requests`` requests, and at least one per concurrent slot.
    Returns ``{'runs': [...], 'server_info': {...} or None, 'model': ...}``; each run is
    :func:`combine_rounds` of its rounds.
    """
    if api == API_COMPLETIONS and not model:
        model = client.first_model()
    runs = []
    info = None
    for concurrency in concurrencies:
        if warmup_requests:
            warm = run_load(client, api, prompts[:1] * max(warmup_requests, concurrency), concurrency, model,
                            temperature)
            bad = [r.error for r in warm if not r.ok]
            if len(bad) == len(warm):
                raise BenchmarkError('every warm-up request to %s failed: %s' % (client.url, bad[0]))
        measured = []
        for number in range(1, rounds + 1):
            if progress:
                progress('concurrency %d, round %d of %d: %d prompts' % (concurrency, number, rounds, len(prompts)))
            result, info = measure(client, api, prompts, concurrency, model, flush_cache, temperature,
                                   min_duration, slo)
            measured.append(result)
        runs.append(combine_rounds(measured))
    return {'runs': runs, 'server_info': info, 'model': model}
