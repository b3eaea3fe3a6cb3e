# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What an SGLang or vLLM server answers about itself: the one place for its HTTP API.

Server info (``/server_info``, then ``/get_server_info`` for older SGLang, then vLLM's
``/version``), the served model, speculative settings, acceptance length (per request,
from ``/metrics`` and from server info), the ``/generate`` body, the smoke generation,
``/flush_cache``, Prometheus parsing and the API key headers.

Every function takes a ``request`` callable, ``(method, path, body=None, timeout) ->
(status, bytes)``, that raises on network errors: :func:`open_url_request` builds one on
Ansible's ``open_url`` for the modules, the benchmark passes its own transport's.
"""

from __future__ import annotations

import json
import random
import re
import time

from ansible_collections.llmops.serving.plugins.module_utils._version import parse_version

SERVER_INFO_PATHS = ('/server_info', '/get_server_info')  # 0.5.15 logs a deprecation for every /get_server_info
SECRET_HEADERS = ('authorization', 'x-api-key', 'api-key', 'proxy-authorization')


# The options of plugins/doc_fragments/server_api.py (DOCUMENTATION and HTTP).
SERVER_ARGUMENT_SPEC = dict(
    url=dict(type='str', required=True),
    api_key=dict(type='str', no_log=True),
    headers=dict(type='dict', default={}),
    validate_certs=dict(type='bool', default=True),
    ca_path=dict(type='path'),
    use_proxy=dict(type='bool', default=True),
    request_timeout=dict(type='float', default=5.0),
)


class ServerApiError(Exception):
    """An endpoint that must answer did not."""


def _json(body):
    try:
        return json.loads(body)
    except (ValueError, TypeError):
        return None


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# ---------------------------------------------------------------- requests

def auth_headers(api_key=None, headers=None):
    """The headers of every request: the user's, and the API key as a Bearer token."""
    result = dict((k, str(v)) for k, v in (headers or {}).items())
    if api_key:
        result['Authorization'] = 'Bearer %s' % api_key
    return result


def secret_header_values(headers):
    """Values of the headers that carry credentials (to hide from output)."""
    return [str(v) for k, v in (headers or {}).items() if k.lower() in SECRET_HEADERS]


def open_url_request(url, headers, validate_certs=True, use_proxy=True, ca_path=None):
    """A ``request`` callable on Ansible's ``open_url``: HTTP errors are answers, not exceptions."""
    from urllib.error import HTTPError
    from ansible.module_utils.urls import open_url

    base = url.rstrip('/')

    def request(method, path, body=None, timeout=10.0):
        send = dict(headers)
        data = None
        if body is not None:
            data = json.dumps(body)
            send['Content-Type'] = 'application/json'
        try:
            response = open_url(base + path, data=data, headers=send, method=method, timeout=timeout,
                                validate_certs=validate_certs, use_proxy=use_proxy, ca_path=ca_path or None)
            return response.getcode(), response.read()
        except HTTPError as exc:
            try:
                content = exc.read()
            except Exception:
                content = b''
            return exc.code, content

    return request


def module_request(module):
    """The ``request`` callable for a module with SERVER_ARGUMENT_SPEC; credentials in headers are hidden from output."""
    params = module.params
    for value in secret_header_values(params['headers']):
        module.no_log_values.add(value)
    return open_url_request(params['url'], auth_headers(params['api_key'], params['headers']),
                            validate_certs=params['validate_certs'], use_proxy=params['use_proxy'],
                            ca_path=params.get('ca_path'))


def get_json(request, path, timeout):
    """``(status, data)`` of ``GET path``: status None without an HTTP answer, data None unless JSON."""
    try:
        status, body = request('GET', path, timeout=timeout)
    except Exception:  # every network error means "no answer" here
        return None, None
    return status, _json(body)


def unauthorised(status):
    return status in (401, 403)


# ---------------------------------------------------------------- server info

def raw_server_info(request, timeout, statuses=None):
    """``(path, info)`` from ``/server_info``, else ``/get_server_info``; ``(None, None)`` when neither answers.

    ``statuses``, a dict, gets the HTTP status of each path asked (None: no answer).
    """
    for path in SERVER_INFO_PATHS:
        status, data = get_json(request, path, timeout)
        if statuses is not None:
            statuses[path] = status
        if status == 200 and isinstance(data, dict):
            return path, data
    return None, None


def speculative_settings(info):
    """Algorithm, steps, top-k and depth (draft tokens verified per step) from SGLang server info."""
    info = info or {}
    return {
        'speculative_algorithm': info.get('speculative_algorithm'),
        'speculative_num_steps': info.get('speculative_num_steps'),
        'speculative_eagle_topk': info.get('speculative_eagle_topk'),
        'speculative_depth': info.get('speculative_num_draft_tokens'),
        'speculative_adaptive': bool(info.get('speculative_adaptive')),
    }


def summarize_server_info(info, engine=None):
    """The fields people ask about, from /server_info (SGLang) or /version (vLLM)."""
    info = info or {}
    summary = {
        'engine': engine or ('sglang' if 'internal_states' in info or 'speculative_algorithm' in info else None),
        'version': info.get('version'),
        'model_path': info.get('model_path'),
        'served_model_name': info.get('served_model_name'),
        'tp_size': info.get('tp_size'),
    }
    summary.update(speculative_settings(info))
    summary['avg_spec_accept_length'] = accept_length_from_server_info(info)
    return summary


def fetch_server_info(request, timeout):
    """``(summary, raw)``: SGLang's server info, else vLLM's /version; ``({'engine': None, 'source': None}, None)``."""
    path, data = raw_server_info(request, timeout)
    engine = None
    if data is None:
        status, data = get_json(request, '/version', timeout)
        path, engine = '/version', 'vllm'
        if status != 200 or not isinstance(data, dict):
            return {'engine': None, 'source': None}, None
    summary = summarize_server_info(data, engine)
    summary['source'] = path
    return summary, data


def speculative_enabled(info, metrics=None):
    """True/False when the server says (SGLang server info, raw or summarised; vLLM's counters), None when unknown."""
    if info and info.get('engine', 'sglang') == 'sglang' and 'speculative_algorithm' in info:
        return bool(info['speculative_algorithm'])
    if metrics and 'vllm:spec_decode_num_drafts_total' in metrics:
        return True
    return None


def first_model_id(request, timeout):
    """The ``id`` of the first model of ``/v1/models``, or None."""
    dummy, data = get_json(request, '/v1/models', timeout)
    models = (data or {}).get('data') if isinstance(data, dict) else None
    return models[0].get('id') if models and isinstance(models[0], dict) else None


def flush_cache(request, timeout, deadline_s=30.0, url=''):
    """POST /flush_cache; SGLang refuses while requests run, so retry until the deadline. Raises ServerApiError."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            status, data = request('POST', '/flush_cache', timeout=timeout)
            if status == 200:
                return True
            last = 'HTTP %d: %s' % (status, (data or b'')[:200].decode('utf-8', 'replace').strip())
            if status == 404:
                raise ServerApiError('%s/flush_cache does not exist (not an SGLang server?); '
                                     'set flush_cache to false' % url)
        except ServerApiError:
            raise
        except Exception as exc:  # network errors: retried until the deadline
            last = str(exc)
        if time.monotonic() >= deadline:
            raise ServerApiError('%s/flush_cache failed for %.0f s: %s' % (url, deadline_s, last))
        time.sleep(0.5)


# ---------------------------------------------------------------- /metrics

_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_LABEL_ESCAPES = {'\\\\': '\\', '\\"': '"', '\\n': '\n'}
# sglang-router's smg_worker_cb_state per worker URL
ROUTER_BREAKER_STATES = {0: 'closed', 1: 'open', 2: 'half-open'}


def _label_value(escaped):
    return re.sub(r'\\.', lambda match: _LABEL_ESCAPES.get(match.group(0), match.group(0)), escaped)


def prometheus_samples(text):
    """``(metric name, {label: value}, value)`` of every sample of Prometheus text format."""
    for line in text.splitlines():
        if not line or line[0] == '#':
            continue
        name_end = line.find('{')
        labelled = name_end >= 0
        if not labelled:
            name_end = line.find(' ')
        if name_end <= 0:
            continue
        rest = line.rsplit('}', 1)[-1] if labelled else line[name_end:]
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            continue
        labels = dict((key, _label_value(escaped)) for key, escaped in
                      _LABEL.findall(line[name_end + 1:line.rfind('}')])) if labelled else {}
        yield line[:name_end], labels, value


def parse_prometheus(text):
    """``{metric name: [values over all label sets]}`` from Prometheus text format."""
    metrics = {}
    for name, dummy, value in prometheus_samples(text):
        metrics.setdefault(name, []).append(value)
    return metrics


def router_breakers(text):
    """``{worker URL: closed, open or half-open}`` from sglang-router's /metrics text (the code of
    a state it does not name as text)."""
    breakers = {}
    for name, labels, value in prometheus_samples(text):
        if name == 'smg_worker_cb_state' and list(labels) == ['worker']:
            breakers.setdefault(labels['worker'], ROUTER_BREAKER_STATES.get(value, '%g' % value))
    return breakers


def fetch_metrics(request, timeout):
    """``parse_prometheus`` of ``GET /metrics``, or None when it does not answer 200."""
    try:
        status, body = request('GET', '/metrics', timeout=timeout)
    except Exception:
        return None
    if status != 200:
        return None
    return parse_prometheus(body.decode('utf-8', errors='replace') if isinstance(body, bytes) else body)


def _total(metrics, name):
    values = (metrics or {}).get(name)
    return sum(values) if values else None


# ---------------------------------------------------------------- load (the drain gate)

# /get_load answers the scheduler's live running + waiting requests (num_reqs per DP rank). SGLang
# routes it from 0.5.11 (the oldest checked) to 0.5.20 (tests/releases/fixtures, http.routes);
# no checked release routes /v1/loads.
GET_LOAD_LAST = (0, 5, 20)
# The gauges SGLang updates only when its scheduler logs a batch (every 30 s when idle): a 1-token
# generation (GET /health) makes it log one, so the gate reads them after such a probe.
BUSY_GAUGES = (('sglang:num_running_reqs',), ('sglang:num_queue_reqs',))
# A server in prefill/decode disaggregation also holds requests in queues of its own (SGLang's metrics collector):
# a prefill in its bootstrap queue and its inflight queue (KV being sent), a decode in its prealloc and transfer
# queues (KV being received). /get_load counts none of them. Each entry lists a gauge's names, newest first: the
# prefill's bootstrap queue is `num_prefill_bootstrap_queue_reqs` in 0.5.15.post1 (read in its wheel and on a GPU),
# `num_prefill_prealloc_queue_reqs` in older SGLang.
PD_GAUGES = {
    'prefill': (('sglang:num_prefill_bootstrap_queue_reqs', 'sglang:num_prefill_prealloc_queue_reqs'),
                ('sglang:num_prefill_inflight_queue_reqs',)),
    'decode': (('sglang:num_decode_prealloc_queue_reqs',), ('sglang:num_decode_transfer_queue_reqs',)),
}
LOAD_SOURCES = ('auto', 'get_load', 'metrics')


def load_source(source, version=None):
    """The source ``auto`` stands for on SGLang ``version``: ``get_load`` where the release routes
    it, ``metrics`` after it; ``auto`` again when the version is unknown (then probe)."""
    if source != 'auto' or not version:
        return source
    try:
        parsed = parse_version(version)
    except ValueError:
        return 'auto'
    return 'get_load' if parsed is not None and parsed <= GET_LOAD_LAST else 'metrics'


def requests_in_get_load(data):
    """Running + waiting requests in a /get_load answer (a list per DP rank, or one rank), or None."""
    ranks = data if isinstance(data, list) else [data]
    counts = [_number(rank.get('num_reqs')) for rank in ranks if isinstance(rank, dict)]
    if not counts or any(count is None for count in counts):
        return None
    return int(sum(counts))


def busy_gauges(mode=None):
    """The gauges whose sum is the requests a server holds, each a tuple of its names: BUSY_GAUGES, and in
    prefill/decode disaggregation (``mode`` prefill or decode) that side's PD_GAUGES."""
    return BUSY_GAUGES + PD_GAUGES.get(mode or '', ())


def busy_gauge_names(mode=None):
    """The gauges of ``busy_gauges`` for a message, each named as the newest release names it."""
    return ', '.join(names[0] for names in busy_gauges(mode))


def _first_total(metrics, names):
    totals = [_total(metrics, name) for name in names]
    return next((total for total in totals if total is not None), None)


def current_load(request, timeout, source='auto', mode=None):
    """``(requests, source)``: the requests the server runs or queues now, and where that was read;
    ``(None, source)`` when it could not be read. ``auto`` asks /get_load and falls back to the gauges
    where it is not routed. A server in prefill/decode disaggregation (``mode`` prefill or decode) is read from
    the gauges, its PD queues included, whatever ``source`` says (/get_load does not count them). A prefill gets
    no /health probe first: SGLang (0.5.15.post1, disaggregation/prefill.py) puts a batch's requests into the
    inflight queue before it writes the gauges, so the probe's own request would read as 1 busy at every read;
    the scheduler writes the true queues itself after 30 s without a batch."""
    if mode in PD_GAUGES:
        source = 'metrics'
    if source in ('auto', 'get_load'):
        status, data = get_json(request, '/get_load', timeout)
        count = requests_in_get_load(data) if status == 200 else None
        if count is not None or source == 'get_load' or status not in (404, 405):
            return count, 'get_load'
    if mode != 'prefill':
        try:
            request('GET', '/health', timeout=timeout)  # a 1-token generation: the scheduler logs, the gauges refresh
        except Exception:
            pass
    metrics = fetch_metrics(request, timeout)
    values = [_first_total(metrics, names) for names in busy_gauges(mode)]
    if any(value is None for value in values):
        return None, 'metrics'
    return int(sum(values)), 'metrics'


def wait_until_idle(request, timeout, interval, source, request_timeout, clock=time.monotonic, sleep=time.sleep,
                    mode=None):
    """``{idle, requests, source, elapsed, reads}`` once ``current_load`` reads 0 requests or ``timeout`` seconds have
    passed (a prefill or decode, ``mode``, with its PD queues): the wait of the drain gate and of module
    wait_for_llm_idle. A ``source`` of ``auto`` that finds /get_load routed keeps to it."""
    start, reads = clock(), 0
    while True:
        count, used = current_load(request, request_timeout, source, mode)
        reads += 1
        if used == 'get_load' and source == 'auto' and count is not None:
            source = 'get_load'
        elapsed = clock() - start
        if count == 0 or elapsed >= timeout:
            return dict(idle=count == 0, requests=count, source=used, elapsed=round(elapsed, 2), reads=reads)
        sleep(max(0.0, min(interval, timeout - elapsed)))


# Counter totals reported as deltas over a run, for cross-checking the client's counts.
SERVER_COUNTERS = {
    'generation_tokens': ('sglang:generation_tokens_total', 'vllm:generation_tokens_total'),
    'prompt_tokens': ('sglang:prompt_tokens_total', 'vllm:prompt_tokens_total'),
    'spec_verify_calls': ('sglang:spec_verify_calls_total',),
    'spec_drafts': ('vllm:spec_decode_num_drafts_total',),
    'spec_draft_tokens': ('vllm:spec_decode_num_draft_tokens_total',),
    'spec_accepted_tokens': ('vllm:spec_decode_num_accepted_tokens_total',),
}


def counter_deltas(before, after):
    """Differences of the known counters between two ``parse_prometheus`` snapshots (``before`` may be {})."""
    deltas = {}
    for key, names in SERVER_COUNTERS.items():
        for name in names:
            end = _total(after, name)
            if end is not None:
                deltas[key] = end - (_total(before, name) or 0.0)
                break
    return deltas


# ---------------------------------------------------------------- acceptance length

def accept_length_from_metrics(before, after):
    """Acceptance length from /metrics: vLLM counter deltas, else SGLang's gauge."""
    deltas = counter_deltas(before, after)
    if deltas.get('spec_drafts'):
        return deltas.get('spec_accepted_tokens', 0.0) / deltas['spec_drafts'] + 1.0
    values = [v for v in (after or {}).get('sglang:spec_accept_length', []) if v > 0]
    return sum(values) / len(values) if values else None


def accept_length_from_metrics_with_source(before, after):
    """Acceptance length from /metrics snapshots around a request, and which metric gave it."""
    value = accept_length_from_metrics(before, after)
    if value is None:
        return None, None
    if counter_deltas(before, after).get('spec_drafts'):
        return value, 'metrics:vllm:spec_decode_num_accepted_tokens_total/num_drafts_total'
    return value, 'metrics:sglang:spec_accept_length'


def accept_length_since_start(metrics):
    """``(value, source)`` over every request since the server started, from its /metrics counters.

    vLLM: accepted draft tokens / drafts + 1; SGLang: generation tokens / verification
    calls (the ``spec_verify_ct`` ratio of one request, over all of them).
    """
    value, source = accept_length_from_metrics_with_source({}, metrics)
    if value is not None and source.startswith('metrics:vllm'):
        return value, source
    totals = counter_deltas({}, metrics)
    ratio = accept_length_from_meta({'completion_tokens': totals.get('generation_tokens'),
                                     'spec_verify_ct': totals.get('spec_verify_calls')})
    if ratio:
        return ratio, 'metrics:sglang:generation_tokens_total/spec_verify_calls_total'
    return value, source


def accept_length_from_server_info(info):
    """``internal_states[0].avg_spec_accept_length`` when it is a positive number."""
    states = (info or {}).get('internal_states') or [{}]
    value = states[0].get('avg_spec_accept_length') if isinstance(states[0], dict) else None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def accept_length_from_meta(meta):
    """SGLang /generate meta_info: spec_accept_length, else completion_tokens / spec_verify_ct."""
    if not isinstance(meta, dict):
        return None
    value = _number(meta.get('spec_accept_length'))
    if value:
        return value
    verify, tokens = _number(meta.get('spec_verify_ct')), _number(meta.get('completion_tokens'))
    if verify and tokens:
        return float(tokens) / verify
    return None


def accept_length_message(value, floor, source, server_summary):
    algo = server_summary.get('speculative_algorithm') or 'speculative decoding'
    depth = server_summary.get('speculative_depth')
    return ('the drafter is not being accepted: accept length %.2f < floor %.2f (%s%s, from %s); '
            'likely wrong layer names or missing lm_head in the drafter checkpoint - see '
            'llmops.serving.drafter_checkpoint' % (value, floor, algo, ', depth %s' % depth if depth else '', source))


# ---------------------------------------------------------------- generation

def generate_body(prompt, max_new_tokens, temperature=0.0, stream=False, ignore_eos=False):
    """The JSON body of SGLang's ``POST /generate``."""
    params = {'max_new_tokens': max_new_tokens, 'temperature': temperature}
    if ignore_eos:
        params['ignore_eos'] = True
    body = {'text': prompt, 'sampling_params': params}
    if stream:
        body['stream'] = True
    return body


# SGLang's FAKE_BOOTSTRAP_HOST (disaggregation/utils.py): a request to a prefill or decode server that names it as
# its bootstrap host runs on that server alone (its own /health_generate sends it), with no KV transfer to or
# from a peer. A request to such a server without a bootstrap_room is refused (HTTP 400, "Invalid request:
# Disaggregated request received without bootstrap room id.").
FAKE_BOOTSTRAP_HOST = '2.2.2.2'
DISAGGREGATION_MODES = ('prefill', 'decode')


def disaggregation_fields(mode):
    """The fields a generation request sent straight to a server of ``mode`` (its --disaggregation-mode: prefill,
    decode, or None/null for a server that does both) needs so that it runs on that server alone: the fake
    bootstrap host and a random room (a 63-bit int, as SGLang draws them); ``{}`` for a server that is not PD."""
    if mode not in DISAGGREGATION_MODES:
        return {}
    return {'bootstrap_host': FAKE_BOOTSTRAP_HOST, 'bootstrap_room': random.randint(0, (1 << 63) - 1)}


def smoke_request(request, kind, prompt, max_tokens, model=None, timeout=120, temperature=0.0, disaggregation_mode=None):
    """Send one real generation; return a dict (ok, text, tokens, meta_info, error...). ``disaggregation_mode``
    prefill or decode: the request carries disaggregation_fields(), so that it runs on that server alone."""
    if kind == 'generate':
        path = '/generate'
        payload = generate_body(prompt, max_tokens, temperature)
    else:
        path = '/v1/completions'
        model = model or first_model_id(request, timeout)
        payload = {'model': model, 'prompt': prompt, 'max_tokens': max_tokens, 'temperature': temperature}
    payload.update(disaggregation_fields(disaggregation_mode))
    result = {'kind': kind, 'path': path, 'model': model, 'ok': False, 'text': None, 'tokens': None}
    start = time.monotonic()
    try:
        status, body = request('POST', path, body=payload, timeout=timeout)
    except Exception as exc:
        result['error'] = '%s failed: %s' % (path, exc)
        return result
    result['seconds'] = round(time.monotonic() - start, 3)
    result['http_status'] = status
    data = _json(body)
    if status != 200 or not isinstance(data, dict):
        result['error'] = '%s answered HTTP %s: %s' % (path, status, (body or b'')[:300])
        return result
    if kind == 'generate':
        meta = data.get('meta_info') or {}
        result['text'] = data.get('text')
        result['tokens'] = _number(meta.get('completion_tokens'))
        if result['tokens'] is None and isinstance(data.get('output_ids'), list):
            result['tokens'] = len(data['output_ids'])
        result['meta_info'] = meta
    else:
        choices = data.get('choices') or [{}]
        result['text'] = choices[0].get('text')
        result['tokens'] = _number((data.get('usage') or {}).get('completion_tokens'))
    if not result['tokens'] and not result['text']:
        result['error'] = '%s returned no output (0 tokens, empty text)' % path
        return result
    result['ok'] = True
    return result
