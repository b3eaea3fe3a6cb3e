# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Load generation and statistics for LLM inference servers (no Ansible imports).

A benchmark sends a fixed number of streamed requests at a fixed concurrency
(closed loop: one worker thread per concurrent request, each with its own keep-alive
connection: a ``requests.Session``, or ``http.client`` where ``requests`` is not
installed), timestamps every server-sent event, and turns the per-request records into
the figures ``sglang.bench_serving`` prints: throughput, TTFT, ITL, TPOT, end-to-end
latency and the speculative acceptance length.

Two APIs are understood:

- ``completions``: OpenAI-compatible ``POST /v1/completions`` with ``stream: true``
  (SGLang, vLLM, ...). ``stream_options`` asks for usage on every chunk
  (``continuous_usage_stats``) and at the end (``include_usage``), so the token count of
  each chunk is known even when speculative decoding puts several tokens in one chunk.
- ``generate``: SGLang's native ``POST /generate`` with ``stream: true``; every chunk's
  ``meta_info.completion_tokens`` is cumulative, and the last one carries
  ``spec_verify_ct`` / ``spec_accept_length`` when speculative decoding is on.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import random
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
    from urllib3.exceptions import HTTPError as _Urllib3Error
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


def load_dataset(path, num_prompts, output_len, seed):
    """Prompts from a JSONL file, shuffled with ``seed`` and repeated to ``num_prompts``.

    Each line is a JSON string (the prompt) or an object with ``prompt`` (or ``text``)
    and optionally ``output_len`` (or ``max_tokens``).
    """
    entries = []
    with open(path, encoding='utf-8') as handle:
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
            entries.append({'prompt': prompt, 'output_len': int(item.get('output_len', item.get('max_tokens', output_len)))})
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

class RequestRecord:
    """Timings and counts of one streamed request, built by :meth:`feed` per event."""

    __slots__ = ('start', 'ttft', 'end', 'last', 'gaps', 'chunks', 'output_tokens', 'prompt_tokens',
                 'verify_ct', 'accept_length', 'error', 'server_counted', '_api')

    def __init__(self, api, start):
        self._api = api
        self.start = start
        self.ttft = None
        self.end = None
        self.last = None
        self.gaps = []
        self.chunks = 0
        self.output_tokens = 0
        self.prompt_tokens = None
        self.verify_ct = None
        self.accept_length = None
        self.error = None
        # Whether the server gave its own token count (else one token per chunk was assumed).
        self.server_counted = False

    @property
    def ok(self):
        return self.error is None

    def feed(self, event, now):
        """Account for one decoded ``data:`` event received at ``now``.

        The server's cumulative count (``meta_info.completion_tokens``, or ``usage`` when
        ``continuous_usage_stats`` is honoured) gives the tokens of each chunk; without it
        a chunk counts as one token until a final ``usage`` chunk corrects the total.
        """
        if self._api == API_GENERATE:
            meta = event.get('meta_info') or {}
            carries_tokens = True
            total = meta.get('completion_tokens')
            if meta.get('prompt_tokens') is not None:
                self.prompt_tokens = meta['prompt_tokens']
            if meta.get('spec_verify_ct') is not None:
                self.verify_ct = meta['spec_verify_ct']
            if meta.get('spec_accept_length') is not None:
                self.accept_length = meta['spec_accept_length']
        else:
            usage = event.get('usage') or {}
            carries_tokens = bool(event.get('choices'))
            total = usage.get('completion_tokens')
            if usage.get('prompt_tokens') is not None:
                self.prompt_tokens = usage['prompt_tokens']
        if total is None:
            total = self.output_tokens + (1 if carries_tokens else 0)
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
        self.last = now
        self.chunks += 1

    def finish(self, now):
        self.end = now
        if self.error is None and self.ttft is None:
            self.error = 'stream ended without any token'
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
    """Feed every SSE ``data:`` line of ``lines`` (bytes) into ``record`` until ``[DONE]``."""
    loads = json.loads
    feed = record.feed
    for line in lines:
        if not line.startswith(b'data:'):
            continue
        now = clock()
        payload = line[5:].strip()
        if payload == b'[DONE]':
            break
        event = loads(payload)
        if 'error' in event and not event.get('choices') and 'meta_info' not in event:
            record.error = 'server error in stream: %s' % json.dumps(event['error'])[:300]
            break
        feed(event, now)
    record.finish(clock())
    return record


# ---------------------------------------------------------------- HTTP

class _RequestsTransport:
    """``requests``: a ``Session`` (keep-alive pool) per worker thread."""

    def __init__(self, url, headers, timeout):
        self.url, self.headers, self.timeout = url, headers, timeout
        self.name = 'requests %s' % requests.__version__
        # Reading the raw stream raises urllib3's own errors, not requests' wrappers.
        self.errors = (requests.RequestException, _Urllib3Error, OSError, http.client.HTTPException)
        self._local = threading.local()

    def _session(self):
        session = getattr(self._local, 'session', None)
        if session is None:
            session = self._local.session = requests.Session()
            session.headers.update(self.headers)
        return session

    def request(self, method, path, body=None, timeout=30):
        resp = self._session().request(method, self.url + path, json=body, timeout=timeout)
        return resp.status_code, resp.content

    @contextlib.contextmanager
    def stream(self, path, body):
        """Yields ``(status, read1, read)`` of a streamed POST."""
        with self._session().post(self.url + path, data=json.dumps(body), stream=True,
                                  timeout=(10, self.timeout)) as resp:
            raw = resp.raw
            # urllib3 >= 2.3 has read1 (and decodes content); older ones wrap an http.client
            # response that has it (content is not encoded: we ask for identity).
            read1 = getattr(raw, 'read1', None) or raw._fp.read1  # pylint: disable=protected-access
            yield resp.status_code, read1, lambda: resp.content


class _StdlibTransport:
    """``http.client`` (Python standard library): a keep-alive connection per worker thread."""

    name = 'http.client (Python %d.%d)' % sys.version_info[:2]
    errors = (OSError, http.client.HTTPException)

    def __init__(self, url, headers, timeout):
        parts = urlsplit(url)
        if parts.scheme not in ('http', 'https') or not parts.hostname:
            raise BenchmarkError('cannot use URL %s: expected http(s)://host[:port]' % url)
        self._factory = http.client.HTTPSConnection if parts.scheme == 'https' else http.client.HTTPConnection
        self._address = (parts.hostname, parts.port)
        self._prefix = parts.path.rstrip('/')
        self.headers, self.timeout = headers, timeout
        self._local = threading.local()

    def _connection(self, timeout):
        conn = getattr(self._local, 'conn', None)
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

    def _response(self, method, path, body, timeout):
        data = json.dumps(body).encode() if body is not None else None
        try:
            conn = self._connection(timeout)
            conn.request(method, self._prefix + path, body=data, headers=self.headers)
            return conn.getresponse()
        except self.errors:
            self._drop()
            raise

    def request(self, method, path, body=None, timeout=30):
        resp = self._response(method, path, body, timeout)
        try:
            data = resp.read()
        except self.errors:
            self._drop()
            raise
        if resp.will_close:
            self._drop()
        return resp.status, data

    @contextlib.contextmanager
    def stream(self, path, body):
        resp = self._response('POST', path, body, self.timeout)
        try:
            yield resp.status, resp.read1, resp.read
            resp.read()  # the rest (after [DONE]), so that the connection can be reused
        except BaseException:
            self._drop()
            raise
        if resp.will_close:
            self._drop()


HTTP_LIBRARIES = ('auto', 'requests', 'http.client')


class Client:
    """HTTP access to one server, with a connection per worker thread.

    ``http_library``: ``requests`` (a ``Session`` per thread), ``http.client`` (the
    standard library, for hosts without ``requests``) or ``auto`` (``requests`` when it
    is installed).
    """

    def __init__(self, url, api_key=None, timeout=600.0, http_library='auto'):
        self.url = url.rstrip('/')
        headers = {'Content-Type': 'application/json', 'Accept-Encoding': 'identity'}
        if api_key:
            headers['Authorization'] = 'Bearer %s' % api_key
        if http_library == 'auto':
            http_library = 'requests' if requests is not None else 'http.client'
        if http_library == 'requests':
            if requests is None:
                raise BenchmarkError('the Python library "requests" is not installed; use http_library "http.client" '
                                     'or "auto"')
            self.transport = _RequestsTransport(self.url, headers, timeout)
        else:
            self.transport = _StdlibTransport(self.url, headers, timeout)
        self.http_library = self.transport.name

    def _json(self, path):
        """Body of ``GET path`` as JSON, or None when the endpoint is absent or unreachable."""
        try:
            status, data = self.transport.request('GET', path)
            return json.loads(data) if status == 200 else None
        except self.transport.errors + (ValueError,):
            return None

    def stream(self, path, body):
        """One streamed request; never raises: failures are kept in ``record.error``."""
        api = API_GENERATE if path == '/generate' else API_COMPLETIONS
        clock = time.perf_counter
        record = RequestRecord(api, clock())
        try:
            with self.transport.stream(path, body) as (status, read1, read):
                if status != 200:
                    record.error = 'HTTP %d: %s' % (status, read()[:300].decode('utf-8', 'replace').strip())
                else:
                    consume_stream(iter_lines(read1), record, clock)
                    return record
        except self.transport.errors as exc:
            record.error = '%s: %s' % (type(exc).__name__, exc)
        except ValueError as exc:
            record.error = 'malformed event in stream: %s' % exc
        record.finish(clock())
        return record

    # Server introspection: best effort, None when the endpoint is absent.
    def server_info(self):
        for path in SERVER_INFO_PATHS:
            info = self._json(path)
            if info is not None:
                return info
        return None

    def metrics(self):
        try:
            status, data = self.transport.request('GET', '/metrics')
        except self.transport.errors:
            return None
        return parse_prometheus(data.decode('utf-8', 'replace')) if status == 200 else None

    def first_model(self):
        data = (self._json('/v1/models') or {}).get('data') or [{}]
        return data[0].get('id') if isinstance(data[0], dict) else None

    def flush_cache(self, deadline_s=30.0):
        """POST /flush_cache; SGLang refuses while requests run, so retry until the deadline."""
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                status, data = self.transport.request('POST', '/flush_cache')
                if status == 200:
                    return True
                last = 'HTTP %d: %s' % (status, data[:200].decode('utf-8', 'replace').strip())
                if status == 404:
                    raise BenchmarkError('%s/flush_cache does not exist (not an SGLang server?); '
                                         'set flush_cache to false' % self.url)
            except self.transport.errors as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                raise BenchmarkError('%s/flush_cache failed for %.0f s: %s' % (self.url, deadline_s, last))
            time.sleep(0.5)


# ---------------------------------------------------------------- aggregate

def aggregate(records, duration, concurrency, cpu_seconds):
    """The figures of one run from its request records."""
    done = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    output_tokens = sum(r.output_tokens for r in done)
    prompt_known = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
    input_tokens = sum(prompt_known) if len(prompt_known) == len(done) and done else None
    gaps = [g for r in done for g in r.gaps]
    per_request_accept = [r.accept_length for r in done if r.accept_length is not None]
    chunks = sum(r.chunks for r in done)
    result = {
        'concurrency': concurrency,
        'num_prompts': len(records),
        'completed': len(done),
        'failed': len(failed),
        'errors': sorted(set(r.error for r in failed))[:MAX_ERRORS_KEPT],
        'duration_s': duration,
        'request_throughput': len(done) / duration if duration > 0 else None,
        'input_tokens': input_tokens,
        'output_tokens': output_tokens,
        'output_throughput': output_tokens / duration if duration > 0 else None,
        'total_throughput': ((input_tokens or 0) + output_tokens) / duration if duration > 0 else None,
        'tokens_per_chunk': output_tokens / chunks if chunks else None,
        'output_tokens_counted_by_server': all(r.server_counted for r in done) if done else None,
        'ttft_ms': summarize([r.ttft for r in done], 1000.0),
        'itl_ms': summarize(gaps, 1000.0),
        'tpot_ms': summarize([r.tpot for r in done if r.tpot is not None], 1000.0),
        'e2e_ms': summarize([r.e2e for r in done], 1000.0),
        'accept_length': None,
        'accept_length_source': None,
        'client_cpu_s': cpu_seconds,
        'client_cpu_ms_per_1k_tokens': (cpu_seconds * 1e6 / output_tokens) if output_tokens else None,
        'client_cpu_utilisation': cpu_seconds / duration if duration > 0 else None,
    }
    if per_request_accept:
        result['accept_length'] = sum(per_request_accept) / len(per_request_accept)
        result['accept_length_source'] = 'per_request'
    return result


# ---------------------------------------------------------------- the run

def run_load(client, api, prompts, concurrency, model=None, temperature=0.0):
    """Send ``prompts`` with at most ``concurrency`` in flight; records in prompt order."""
    path = '/generate' if api == API_GENERATE else '/v1/completions'
    bodies = [request_body(api, p['prompt'], p['output_len'], model, temperature) for p in prompts]
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(lambda body: client.stream(path, body), bodies))


def benchmark(client, api, prompts, concurrencies, model=None, warmup_requests=1, flush_cache=False,
              temperature=0.0, progress=None):
    """Warm up once, then for each concurrency: flush, snapshot, load, snapshot.

    Returns ``{'runs': [...], 'server_info': {...} or None, 'model': ...}``.
    """
    if api == API_COMPLETIONS and not model:
        model = client.first_model()
    if warmup_requests:
        warm = run_load(client, api, prompts[:1] * warmup_requests, min(warmup_requests, max(concurrencies)),
                        model, temperature)
        bad = [r.error for r in warm if not r.ok]
        if len(bad) == len(warm):
            raise BenchmarkError('every warm-up request to %s failed: %s' % (client.url, bad[0]))
    runs = []
    info = None
    for concurrency in concurrencies:
        if progress:
            progress('concurrency %d: %d prompts' % (concurrency, len(prompts)))
        if flush_cache:
            client.flush_cache()
        before = client.metrics()
        cpu0 = time.process_time()
        wall0 = time.perf_counter()
        records = run_load(client, api, prompts, concurrency, model, temperature)
        duration = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        after = client.metrics()
        info = client.server_info()
        result = aggregate(records, duration, concurrency, cpu)
        result['server_counters'] = counter_deltas(before, after) if after else {}
        if result['accept_length'] is None and speculative_enabled(info) is not False:
            value = accept_length_from_server_info(info) if flush_cache else None
            source = 'server_info'
            if value is None:
                value, source = accept_length_from_metrics(before, after), 'metrics'
            if value is not None:
                result['accept_length'], result['accept_length_source'] = value, source
        runs.append(result)
    return {'runs': runs, 'server_info': info, 'model': model}
