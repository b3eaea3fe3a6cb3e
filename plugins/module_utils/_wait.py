# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The wait loop of llmops.serving.wait_for_llm_health: health probes, their classification, verdicts.

One slice of waiting: probe the health endpoint in a thread, follow the log, watch the
process, and return a status. HTTP goes through an injected ``request`` callable
(``_server_api.open_url_request``), so everything here is unit-testable without Ansible.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from urllib.error import URLError

from ansible_collections.llmops.serving.plugins.module_utils._procs import ProcessWatch
from ansible_collections.llmops.serving.plugins.module_utils._startup_log import (
    DEFAULT_FATAL_PATTERNS,
    LAUNCHING,
    READY,
    WARMUP,
    TracebackTracker,
    compile_patterns,
    find_fatal,
    fold_line,
    match_phase,
    phase_rank,
    split_display_line,
)

# --------------------------------------------------------------------------------------
# Health probe classification
# --------------------------------------------------------------------------------------
PROBE_READY = 'ready'             # 2xx
PROBE_STARTING = 'starting'       # 503: SGLang is up but warm-up has not finished
# 503 after the server had answered healthy: SGLang's /health runs a 1-token generation and
# answers 503 when it does not finish in time (20 s): busy or stuck, not starting.
PROBE_GENERATION_TIMEOUT = 'generation_timeout'
# 503 from /ready after the server had answered ready: paused (/pause_generation), shutting
# down, or marked unhealthy by a /health generation that timed out; not starting.
PROBE_NOT_READY = 'not_ready'
PROBE_SERVER_ERROR = 'server_error'   # other 5xx
PROBE_CLIENT_ERROR = 'client_error'   # 4xx and other codes (wrong path, API key...)
PROBE_REFUSED = 'refused'         # nothing listens yet (weights loading, graphs...)
PROBE_TIMEOUT = 'timeout'         # listening but no answer within request_timeout
PROBE_TLS_ERROR = 'tls_error'     # TLS handshake or certificate validation failed
PROBE_DISCONNECTED = 'disconnected'  # connection reset / closed without an answer
PROBE_UNREACHABLE = 'unreachable'  # DNS, no route, other network errors

_PROBE_TEXT = {
    PROBE_READY: 'healthy',
    PROBE_STARTING: 'starting (warm-up not finished)',
    PROBE_GENERATION_TIMEOUT: 'health generation timed out (503 after the server answered healthy: busy or stuck, not starting)',
    PROBE_NOT_READY: 'not ready (503 from /ready after the server was ready: paused, shutting down or unhealthy)',
    PROBE_SERVER_ERROR: 'server error',
    PROBE_CLIENT_ERROR: 'unexpected answer',
    PROBE_REFUSED: 'connection refused (not listening yet)',
    PROBE_TIMEOUT: 'no answer within request_timeout',
    PROBE_TLS_ERROR: 'TLS error',
    PROBE_DISCONNECTED: 'connection closed without an answer',
    PROBE_UNREACHABLE: 'unreachable',
}


def classify_status(status):
    """Classify an HTTP status code of a health probe."""
    if 200 <= status < 300:
        return PROBE_READY
    if status == 503:
        return PROBE_STARTING
    if 500 <= status < 600:
        return PROBE_SERVER_ERROR
    return PROBE_CLIENT_ERROR


def _exception_chain(exc):
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        nxt = getattr(exc, 'reason', None)
        if not isinstance(nxt, BaseException):
            nxt = exc.__cause__ or exc.__context__
        exc = nxt
    return seen


def classify_exception(exc):
    """Classify a network exception raised by a probe (urllib / open_url / socket)."""
    for item in _exception_chain(exc):
        # ansible.module_utils.urls.SSLValidationError, matched by name (no Ansible import)
        if isinstance(item, (ssl.SSLError, ssl.CertificateError)) or type(item).__name__ in ('SSLValidationError', 'NoSSLError'):
            return PROBE_TLS_ERROR
        if isinstance(item, ConnectionRefusedError):
            return PROBE_REFUSED
        if isinstance(item, (socket.timeout, TimeoutError)):
            return PROBE_TIMEOUT
        if isinstance(item, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)) or \
                type(item).__name__ in ('RemoteDisconnected', 'BadStatusLine', 'IncompleteRead'):
            return PROBE_DISCONNECTED
    if isinstance(exc, URLError) and 'timed out' in str(getattr(exc, 'reason', '')):
        return PROBE_TIMEOUT
    return PROBE_UNREACHABLE


def describe_probe(probe):
    """One human line for a probe dict (kind, status, detail)."""
    if probe is None:
        return 'no probe yet'
    text = _PROBE_TEXT.get(probe['kind'], probe['kind'])
    if probe.get('status') is not None:
        text = 'HTTP %s, %s' % (probe['status'], text)
        if probe['kind'] == PROBE_CLIENT_ERROR and probe['status'] in (401, 403):
            text += ': check api_key / headers'
        elif probe['kind'] == PROBE_CLIENT_ERROR and probe['status'] == 404:
            text += ': check health_path'
    elif probe.get('detail') and probe['kind'] not in (PROBE_REFUSED, PROBE_TIMEOUT):
        text += ': %s' % probe['detail']
    return text


def probe_health(request, path, timeout):
    """One GET of the health endpoint: returns {'kind', 'status', 'detail', 'seconds', 'path'}."""
    start = time.monotonic()
    try:
        status, dummy = request('GET', path, timeout=timeout)
        result = {'kind': classify_status(status), 'status': status, 'detail': None}
    except Exception as exc:  # every network error is an answer here, classified
        result = {'kind': classify_exception(exc), 'status': None, 'detail': str(exc)[:300]}
    result['seconds'] = round(time.monotonic() - start, 3)
    result['path'] = path
    return result


# Readiness without a health_path: SGLang's /ready (0.5.20 and later: 200 once the warm-up
# request has passed and the server is neither paused nor shutting down; no generation, no
# API key) where the server has it, else /health. /ready is asked first; an answer that says
# the route is not there switches to /health for the rest of the wait: 404 (SGLang before
# 0.5.20, vLLM, the stand-in server of a multi-node rank >= 1), 401/403 (before 0.5.20 the
# API key guards every path but /health and /metrics, so a keyless probe of a missing
# /ready is refused rather than not found). Connection refused and 503 decide nothing.
READY_PATH = '/ready'
HEALTH_PATH = '/health'
NO_READY_STATUSES = (401, 403, 404)


def ready_path_missing(probe):
    """Whether a probe of READY_PATH says that the server has no such route."""
    return probe['path'] == READY_PATH and probe['status'] in NO_READY_STATUSES


# --------------------------------------------------------------------------------------
# The wait loop (one slice; the action plugin strings slices together)
# --------------------------------------------------------------------------------------
STATUS_READY = 'ready'
STATUS_CRASHED = 'crashed'
STATUS_FATAL_LOG = 'fatal_log'
STATUS_STALLED = 'stalled'
STATUS_TIMEOUT = 'timeout'
STATUS_WAITING = 'waiting'   # slice over, nothing decided yet: call again

FATAL_GRACE = 0.5   # seconds to keep reading after a fatal line (rest of the traceback, exit)
FATAL_GRACE_MAX = 1.5  # ... and at most this long while a traceback has not reached its exception line
FATAL_CONTEXT = 40  # lines kept after a fatal line
_MAX_NEW_LINES = 500


class _Prober(threading.Thread):
    """Probes the health endpoint every ``interval`` seconds (start to start).

    ``auto``: ``path`` is READY_PATH until the server shows it has no such route; then
    HEALTH_PATH, asked at once (``switched`` holds the answer that made the switch)."""

    def __init__(self, request, path, interval, timeout, auto=False):
        super(_Prober, self).__init__(name='health-prober')
        self.daemon = True
        self._request = request
        self._timeout = timeout
        self.path = path
        self.auto = auto
        self.switched = None
        self._interval = interval
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._results = []
        self.busy = False

    def run(self):
        while not self._stop_event.is_set():
            began = time.monotonic()
            self.busy = True
            result = probe_health(self._request, self.path, self._timeout)
            if self.auto and ready_path_missing(result):
                self.switched, self.path = result, HEALTH_PATH
                result = probe_health(self._request, self.path, self._timeout)
            result['at'] = time.monotonic()
            with self._lock:
                self._results.append(result)
                self.busy = False
            self._stop_event.wait(max(0.0, self._interval - (time.monotonic() - began)))

    def take(self):
        with self._lock:
            results, self._results = self._results, []
        return results

    def stop(self):
        self._stop_event.set()


class Waiter(object):
    """Polls health, follows the log and watches the process for one slice.

    ``state`` (from the previous slice's ``export()``) carries phases, health streak,
    stall clock and the log/process followers' positions. ``elapsed`` is the time
    already spent (as the controller counts it). ``health_path`` None: READY_PATH where the
    server has it, else HEALTH_PATH (see READY_PATH); the choice is carried in ``state``.
    """

    def __init__(self, request, health_path=None, interval=1.0, request_timeout=5.0, timeout=900.0,
                 success_threshold=1, stall_timeout=300.0, fatal_patterns=DEFAULT_FATAL_PATTERNS,
                 log=None, process=None, log_lines=20, state=None, elapsed=0.0, tick=0.1):
        self.request = request
        state = state or {}
        self.auto = health_path is None and state.get('auto', True)
        self.health_path = health_path or state.get('health_path') or READY_PATH
        self.ready_missing = state.get('ready_missing')  # the status of READY_PATH that made the switch
        self.interval = interval
        self.request_timeout = request_timeout
        self.timeout = timeout
        self.success_threshold = success_threshold
        self.stall_timeout = stall_timeout if log is not None else 0
        self.fatal_res = compile_patterns(fatal_patterns)
        self.log = log
        self.process = process or ProcessWatch()
        self.log_lines = log_lines
        self.tick = tick
        self.elapsed_base = float(elapsed)
        self.phase = state.get('phase', LAUNCHING)
        self.phases = list(state.get('phases', [{'phase': LAUNCHING, 'elapsed': 0.0}]))
        self.streak = state.get('streak', 0)
        self.was_ready = state.get('was_ready', False)
        self.last_progress = state.get('last_progress', 0.0)
        self.last_probe = state.get('last_probe')
        self.tail = list(state.get('tail', []))
        self.tracebacks = TracebackTracker(state.get('tracebacks'))
        self.new_lines = []
        self.fatal = None
        self.exit = None
        self.notes = []
        self._fatal_at = None
        self._t0 = None

    def elapsed(self):
        return round(self.elapsed_base + time.monotonic() - self._t0, 3)

    def export(self):
        return {'phase': self.phase, 'phases': self.phases, 'streak': self.streak, 'was_ready': self.was_ready,
                'health_path': self.health_path, 'auto': self.auto, 'ready_missing': self.ready_missing,
                'last_progress': self.last_progress, 'last_probe': self.last_probe, 'tail': self.tail,
                'tracebacks': self.tracebacks.export()}

    def _enter_phase(self, name, line=None):
        if name == self.phase or (name == WARMUP and phase_rank(self.phase) >= phase_rank(WARMUP)):
            return
        # the current phase never goes back: SGLang initialises and loads the drafter
        # ("Init torch distributed begin" again) after the target's weights
        if phase_rank(name) > phase_rank(self.phase):
            self.phase = name
        if name not in [p['phase'] for p in self.phases]:
            entry = {'phase': name, 'elapsed': self.elapsed()}
            if line:
                entry['line'] = line[:300]
            self.phases.append(entry)

    def _handle_lines(self, raw_lines):
        for raw in raw_lines:
            full = split_display_line(raw)
            if not full:
                continue
            self.tracebacks.feed(full)
            line = fold_line(full)
            self.new_lines.append(line)
            self.tail.append(line)
            pattern = find_fatal(raw, self.fatal_res)
            if self.fatal is not None:
                if len(self.fatal['context']) < FATAL_CONTEXT:
                    self.fatal['context'].append(line)
                    if pattern:
                        self.fatal['matches'].append(line)
                continue
            phase = match_phase(raw)
            if phase:
                self._enter_phase(phase, full)
            if pattern:
                self.fatal = {'line': line, 'pattern': pattern, 'elapsed': self.elapsed(), 'context': [line],
                              'matches': [line]}
                self._fatal_at = time.monotonic()
        del self.new_lines[:-_MAX_NEW_LINES]
        del self.tail[:-max(self.log_lines, FATAL_CONTEXT)]

    def _handle_probe(self, probe):
        if probe['kind'] == PROBE_STARTING and self.was_ready:
            probe = dict(probe, kind=PROBE_NOT_READY if probe.get('path') == READY_PATH else PROBE_GENERATION_TIMEOUT)
        self.was_ready = self.was_ready or probe['kind'] == PROBE_READY
        previous = self.last_probe
        self.last_probe = {'kind': probe['kind'], 'status': probe['status'], 'detail': probe['detail']}
        if previous is None or previous['kind'] != probe['kind'] or previous['status'] != probe['status']:
            self.last_progress = self.elapsed()
        if probe['kind'] == PROBE_READY:
            self.streak += 1
        else:
            self.streak = 0
        if probe['kind'] == PROBE_STARTING:
            self._enter_phase(WARMUP)

    def _poll_log(self):
        if self.log is None:
            return
        try:
            lines = self.log.poll()
        except OSError as exc:
            self.notes.append('cannot read the log: %s' % exc)
            return
        if lines:
            self.last_progress = self.elapsed()
            self._handle_lines(lines)

    def run(self, slice_seconds):
        """Run until a verdict or the end of the slice; returns the status."""
        self._t0 = time.monotonic()
        remaining = self.timeout - self.elapsed_base
        end = self._t0 + max(0.0, min(slice_seconds, remaining))
        prober = _Prober(self.request, self.health_path, self.interval, self.request_timeout,
                         auto=self.auto and self.health_path == READY_PATH)
        prober.start()
        try:
            return self._loop(prober, end)
        finally:
            prober.stop()
            self._note_switch(prober)
            if self.log is not None:
                self.log.close()

    def _note_switch(self, prober):
        if prober.switched is not None:
            self.health_path, self.ready_missing = prober.path, prober.switched['status']
            self.notes.append(self.path_note())

    def path_note(self):
        """Why readiness comes from HEALTH_PATH (once READY_PATH showed it is missing), or None."""
        if self.ready_missing is None:
            return None
        return ('%s answered HTTP %s (no such route: SGLang before 0.5.20, vLLM or a node rank >= 1): readiness from %s'
                % (READY_PATH, self.ready_missing, self.health_path))

    def _last_words(self):
        """After a crash: read what the log still delivers (a journal needs a moment)."""
        settle = getattr(self.log, 'settle', 0.0)
        quiet_since = deadline = time.monotonic()
        deadline += settle
        while True:
            before = len(self.new_lines)
            self._poll_log()
            now = time.monotonic()
            if len(self.new_lines) != before:
                quiet_since = now
            if now >= deadline or (self.new_lines and now - quiet_since >= 0.3):
                return
            time.sleep(0.05)

    def _loop(self, prober, end):
        while True:
            self._poll_log()
            self.exit = self.process.check()
            if self.exit is not None:
                self._last_words()
                return STATUS_CRASHED
            if self.fatal is not None:
                # keep reading the rest of the traceback (and maybe see the process exit)
                waited = time.monotonic() - self._fatal_at
                if waited >= FATAL_GRACE and (not self.tracebacks.open or waited >= FATAL_GRACE_MAX):
                    return STATUS_FATAL_LOG
            else:
                for probe in prober.take():
                    self._handle_probe(probe)
                    if self.streak >= self.success_threshold:
                        self._enter_phase(READY)
                        return STATUS_READY
                if self.stall_timeout and self.elapsed() - self.last_progress >= self.stall_timeout:
                    return STATUS_STALLED
            now = time.monotonic()
            # a probe still waiting for its answer is not dropped at the end of a slice: SGLang
            # answers a healthy /health only after a 1-token generation (about 1 s on the H200)
            if now >= end and self.fatal is None and not (prober.busy and now < end + self.request_timeout):
                return STATUS_TIMEOUT if self.elapsed() >= self.timeout else STATUS_WAITING
            time.sleep(self.tick if self.fatal is not None else min(self.tick, max(0.0, end - now)))
