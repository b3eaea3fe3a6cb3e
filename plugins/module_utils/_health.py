# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Startup phases, fatal log patterns, health classification and log following.

The one place that knows what an SGLang or vLLM server says while it starts, how its
health endpoint answers, and how to tell "still loading" from "crashed", "hung" or
"stalled". No Ansible imports: HTTP goes through an injected ``request`` callable
(the module passes one built on ``open_url``), so everything here is unit-testable
and usable from the simulator's tests and the benchmark script.
"""

from __future__ import annotations

import json
import os
import re
import socket
import ssl
import subprocess
import threading
import time
from urllib.error import URLError

# /metrics and /get_server_info parsing live with the benchmark (one place for both)
from ansible_collections.llmops.serving.plugins.module_utils._benchmark import (
    accept_length_from_metrics,
    accept_length_from_server_info,
    counter_deltas,
    parse_prometheus,
)
from ansible_collections.llmops.serving.plugins.module_utils._procs import compile_patterns as _compile_patterns, read_process

# --------------------------------------------------------------------------------------
# Startup phases. Matched case-insensitively and loosely: versions reword these lines
# (SGLang 0.5.15 says "Capture target prefill CUDA graph begin", 0.5.11 "Capture cuda
# graph begin"). The first phase is "launching" (imports, argument parsing) until a
# line or a probe says more; "warmup" comes from /health answering 503; "ready" from
# the log line or a healthy probe.
# --------------------------------------------------------------------------------------
LAUNCHING = 'launching'
WARMUP = 'warmup'
READY = 'ready'

PHASE_PATTERNS = (
    # SGLang and vLLM: torch.distributed / NCCL initialisation
    ('distributed_init', r'Init torch distributed begin|init_distributed_environment|world_size=\d+ rank=\d+'),
    # SGLang "Load weight begin." / vLLM "Starting to load model ...", "Loading weights took"
    ('load_weights', r'Load weight begin|Starting to load model|Loading model from|Loading (safetensors|weights)'),
    # vLLM compiles during its memory profiling, before it sizes the KV cache. Only lines
    # that vLLM writes when it does compile: "Enforce eager set, disabling torch.compile"
    # (every --enforce-eager start) must not count.
    ('compile', r"Using cache directory: .* for vLLM's torch\.compile|vLLM's torch\.compile cache is disabled|"
                r'Dynamo bytecode transform time|Compiling a graph for|Directly load the compiled graph|'
                r'torch\.compile took [\d.]+ s in total'),
    # SGLang "KV Cache is allocated", vLLM "GPU KV cache size:" / "# GPU blocks:"
    ('kv_cache', r'KV Cache is allocated|KV cache size|# [CG]PU blocks'),
    # SGLang "Capture cuda graph begin" / "Capture target prefill CUDA graph begin",
    # vLLM "Capturing CUDA graph shapes" / "Capturing CUDA graphs"
    ('cuda_graphs', r'Capture .*cuda graph begin|Capturing cuda graph'),
    # SGLang "Uvicorn running on", vLLM "Starting vLLM (API) server on", both
    # "Application startup complete."
    ('http_server', r'Uvicorn running on|Starting vLLM (API )?server|Application startup complete'),
    # SGLang, after the warm-up request succeeded
    (READY, r'The server is fired up and ready to roll'),
)
PHASE_ORDER = (LAUNCHING,) + tuple(name for name, dummy in PHASE_PATTERNS[:-1]) + (WARMUP, READY)
_PHASE_RES = tuple((name, re.compile(pattern, re.IGNORECASE)) for name, pattern in PHASE_PATTERNS)

# --------------------------------------------------------------------------------------
# Fatal patterns: a line matching one of them means the start has failed. Chosen so that
# none matches the genuine successful starts in tests/fixtures (which do log "Unexpected
# error during package walk" and SyntaxWarnings).
# --------------------------------------------------------------------------------------
DEFAULT_FATAL_PATTERNS = (
    r'CUDA out of memory|OutOfMemoryError',
    r'Traceback \(most recent call last\)',
    r'Initialization failed',
    r'memory capacity is unbalanced',
    r'Not enough memory',
    r'KeyError',
    r'Received sigquit from a child process',
    r'Scheduler hit an exception',
    r'Engine core initialization failed|EngineCore failed to start',
    r': error: (unrecognized arguments|argument |the following arguments are required|ambiguous option)',
    r'NCCL error|ncclSystemError|ncclInternalError',
    r'Fatal Python error|Segmentation fault',
)


def compile_patterns(patterns):
    """Compile fatal-line regexes; raises ValueError naming the bad pattern."""
    return _compile_patterns(patterns, what='fatal pattern')


def match_phase(line):
    """Return the phase a log line announces, or None."""
    for name, regex in _PHASE_RES:
        if regex.search(line):
            return name
    return None


def find_fatal(line, compiled):
    """Return the first fatal pattern (text) that matches the line, or None."""
    for regex in compiled:
        if regex.search(line):
            return regex.pattern
    return None


# --------------------------------------------------------------------------------------
# Exceptions. The fatal patterns catch a traceback by its first line; the cause is on its
# last one ("ValueError: There is no module or parameter named ..."), 46 lines later in
# vLLM, where every line of a worker's traceback carries the worker's prefix
# "(Worker pid=N) ERROR 12-02 10:16:15 [file.py:953] ". SGLang writes "[date] Scheduler
# hit an exception: Traceback ..." and then the traceback without prefixes.
# --------------------------------------------------------------------------------------
_LOG_PREFIX_RE = re.compile(
    r'(?P<source>\(\w+ pid=\d+\) )?'
    r'(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] '
    r'|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\] )?')
_TRACEBACK_RE = re.compile(r'Traceback \(most recent call last\):\s*$')
# "ValueError: msg", "torch.OutOfMemoryError: msg", "Exception: msg", bare "AssertionError"
_EXCEPTION_RE = re.compile(r'(?:[A-Za-z_]\w*\.)*(?P<name>[A-Z]\w*)(?:: (?P<message>\S.*)|:?\s*)$')
_BARE_EXCEPTION_RE = re.compile(r'(Error|Exception|Exit|Interrupt)$')
MAX_EXCEPTIONS = 10
MAX_EXCEPTION_CHARS = 500


class TracebackTracker(object):
    """Collects the exception lines that end Python tracebacks in a log, in order.

    Tracebacks of several processes may interleave; each is followed by its log prefix
    (vLLM's ``(Worker pid=N)``, none for SGLang). State is a plain dict (``export()``).
    """

    def __init__(self, state=None):
        state = state or {}
        self.open = list(state.get('open', []))
        self.exceptions = list(state.get('exceptions', []))

    def export(self):
        return {'open': self.open, 'exceptions': self.exceptions}

    def feed(self, line):
        """Look at one display line; returns the exception line it ends a traceback with, or None."""
        prefix = _LOG_PREFIX_RE.match(line)
        source = (prefix.group('source') or '').strip()
        body = line[prefix.end():]
        if _TRACEBACK_RE.search(body):
            if source not in self.open:
                self.open.append(source)
            return None
        if source not in self.open or not body or body[0].isspace():
            return None
        match = _EXCEPTION_RE.match(body)
        if match is None or (match.group('message') is None and not _BARE_EXCEPTION_RE.search(match.group('name'))):
            return None  # a line of another process between the traceback's lines
        self.open.remove(source)
        body = body.rstrip()
        if len(body) > MAX_EXCEPTION_CHARS:
            body = body[:MAX_EXCEPTION_CHARS] + '...'
        if body not in self.exceptions and len(self.exceptions) < MAX_EXCEPTIONS:
            self.exceptions.append(body)
        return body


def phase_rank(name):
    return PHASE_ORDER.index(name) if name in PHASE_ORDER else 0


# --------------------------------------------------------------------------------------
# Health probe classification
# --------------------------------------------------------------------------------------
PROBE_READY = 'ready'             # 2xx
PROBE_STARTING = 'starting'       # 503: SGLang is up but warm-up has not finished
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
    """One GET of the health endpoint: returns {'kind', 'status', 'detail', 'seconds'}."""
    start = time.monotonic()
    try:
        status, dummy = request('GET', path, timeout=timeout)
        result = {'kind': classify_status(status), 'status': status, 'detail': None}
    except Exception as exc:  # every network error is an answer here, classified
        result = {'kind': classify_exception(exc), 'status': None, 'detail': str(exc)[:300]}
    result['seconds'] = round(time.monotonic() - start, 3)
    return result


# --------------------------------------------------------------------------------------
# Log following
# --------------------------------------------------------------------------------------
_MAX_PARTIAL = 65536


# SGLang logs its server_args (api_key='...') and a launcher may echo its command line
_SECRET_RE = re.compile(r"""((?:admin_)?api_key=)'[^']*'|(--(?:admin-)?api-key[= ])\S+""")


def redact(line):
    """Mask API keys that servers print in their own logs."""
    return _SECRET_RE.sub(lambda m: (m.group(1) or m.group(2)) + ("'********'" if m.group(1) else '********'), line)


def split_display_line(raw):
    """A log line as a terminal would show it (the last segment of \\r progress bars), secrets masked."""
    parts = [p for p in raw.split('\r') if p.strip()]
    return redact(parts[-1].rstrip()) if parts else ''


class LogFollower(object):
    """Follows a file from a byte offset, across calls, noticing rotation and truncation.

    State (``offset``, ``inode``, ``partial``) is a plain dict so it can travel between
    module invocations. Rotation: the path now has another inode (the rest of the old
    file is read first when it is still open). Truncation: same inode, size below the
    offset (reading restarts at 0).
    """

    def __init__(self, path, state=None, start='beginning'):
        self.path = path
        state = state or {}
        self.offset = state.get('offset')
        self.inode = state.get('inode')
        self.partial = state.get('partial', '')
        self.events = []
        self.missing = False
        self._fh = None
        self._start = start

    def export(self):
        return {'offset': self.offset, 'inode': self.inode, 'partial': self.partial[-_MAX_PARTIAL:]}

    def close(self):
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def _open(self, st):
        self.close()
        self._fh = open(self.path, 'rb')
        if self.inode is not None and self.inode != st.st_ino:
            self.events.append('log file %s was replaced (rotated); reading the new file from its start' % self.path)
            self.offset = 0
            self.partial = ''
        elif self.offset is None:
            self.offset = st.st_size if self._start == 'end' else 0
        elif st.st_size < self.offset:
            self.events.append('log file %s was truncated; reading from its start' % self.path)
            self.offset = 0
            self.partial = ''
        self.inode = st.st_ino
        self._fh.seek(self.offset)

    def _read_open(self):
        data = self._fh.read()
        self.offset += len(data)
        return data

    def poll(self):
        """Return the complete new lines (raw text, may hold \\r segments)."""
        try:
            st = os.stat(self.path)
        except OSError:
            self.missing = True
            # a rotated-away file still open: drain it
            return self._split(self._read_open()) if self._fh is not None else []
        self.missing = False
        data = b''
        if self._fh is None:
            self._open(st)
        elif st.st_ino != self.inode:
            data = self._read_open()  # rest of the rotated file
            self._open(st)
        elif st.st_size < self.offset:
            self._open(st)
        data += self._read_open()
        return self._split(data)

    def _split(self, data):
        if not data:
            return []
        text = self.partial + data.decode('utf-8', errors='replace')
        lines = text.split('\n')
        self.partial = lines.pop()
        if len(self.partial) > _MAX_PARTIAL:  # an endless progress bar: emit it
            lines.append(self.partial)
            self.partial = ''
        return lines


class JournalFollower(object):
    """Follows the journal of a systemd unit (current invocation) with ``journalctl -f``.

    State: the journal ``cursor`` of the last entry read and the unit's ``invocation``.
    """

    settle = 1.0  # seconds journald may need to hand over a crashed unit's last lines

    def __init__(self, unit, state=None, run=None):
        self.unit = unit
        state = state or {}
        self.cursor = state.get('cursor')
        self.invocation = state.get('invocation')
        self.events = []
        self.missing = False
        self._proc = None
        self._buf = b''
        self._run = run or _run_command

    def export(self):
        return {'cursor': self.cursor, 'invocation': self.invocation}

    def _start(self):
        if not self.invocation:
            rc, out = self._run(['systemctl', 'show', '-p', 'InvocationID', '--value', self.unit])
            self.invocation = out.strip() if rc == 0 and out.strip() else None
        cmd = ['journalctl', '--no-pager', '-o', 'json', '-f']
        if self.cursor:
            cmd += ['--after-cursor', self.cursor, '-n', 'all']
        else:
            cmd += ['-n', 'all']
        if self.invocation:
            # the unit's own lines and systemd's lines about this run of the unit
            cmd += ['_SYSTEMD_INVOCATION_ID=%s' % self.invocation, '+', 'INVOCATION_ID=%s' % self.invocation]
        else:
            cmd += ['-u', self.unit]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        os.set_blocking(self._proc.stdout.fileno(), False)

    def poll(self):
        if self._proc is None:
            self._start()
        chunks = []
        while True:
            try:
                chunk = self._proc.stdout.read(65536)
            except (BlockingIOError, InterruptedError):
                chunk = None
            if not chunk:
                break
            chunks.append(chunk)
        self._buf += b''.join(chunks)
        *complete, self._buf = self._buf.split(b'\n')
        lines = []
        for raw in complete:
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            message = entry.get('MESSAGE')
            if isinstance(message, list):  # journald stores non-UTF-8 as a byte array
                message = bytes(message).decode('utf-8', errors='replace')
            self.cursor = entry.get('__CURSOR', self.cursor)
            if message is not None:
                lines.extend(str(message).split('\n'))
        return lines

    def close(self):
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc.stdout.close()
            self._proc = None


def _run_command(argv):
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return proc.returncode, proc.stdout.decode('utf-8', errors='replace')


# --------------------------------------------------------------------------------------
# Process watch
# --------------------------------------------------------------------------------------
def zombie_exit_status(pid, proc_root='/proc'):
    """The waitpid-style status a zombie keeps in /proc/PID/stat (field 52, Linux >= 3.5)."""
    try:
        with open('%s/%d/stat' % (proc_root, pid), 'rb') as fh:
            data = fh.read().decode('utf-8', errors='replace')
        return int(data[data.rfind(')') + 2:].split()[49])
    except (OSError, ValueError, IndexError):
        return None


def decode_wait_status(status):
    """waitpid status -> exit code (negative signal number when killed)."""
    if status is None:
        return None
    if status & 0x7f:
        return -(status & 0x7f)
    return (status >> 8) & 0xff


class ProcessWatch(object):
    """Watches the server process given by pid, pidfile or systemd unit.

    ``check()`` returns None while it runs (or has not appeared yet), else a dict with
    ``exit_code`` (None when it cannot be known) and ``detail``. Cheap enough to call
    every 0.1 s: /proc reads; ``systemctl show`` at most every ``unit_period`` seconds.
    """

    def __init__(self, pid=None, pidfile=None, unit=None, state=None, run=None, proc_root='/proc',
                 unit_period=1.0, clock=time.monotonic):
        self.pid = pid
        self.pidfile = pidfile
        self.unit = unit
        state = state or {}
        self.seen_pid = state.get('pid')
        self.seen_starttime = state.get('starttime')
        self.unit_main_pid = state.get('main_pid')
        self.notes = []
        self._run = run or _run_command
        self._proc_root = proc_root
        self._unit_period = unit_period
        self._clock = clock
        self._next_unit_check = 0.0

    def export(self):
        return {'pid': self.seen_pid, 'starttime': self.seen_starttime, 'main_pid': self.unit_main_pid}

    def describe(self):
        if self.unit:
            return 'systemd unit %s' % self.unit
        if self.pidfile:
            return 'process %s (pidfile %s)' % (self.seen_pid or '?', self.pidfile)
        if self.pid:
            return 'process %s' % self.pid
        return None

    def _watch_pid(self, pid, origin):
        """Check one PID; remembers its start time to catch PID reuse."""
        info = read_process(pid, self._proc_root)
        if self.seen_pid != pid:
            if self.seen_pid is not None:
                return {'exit_code': None,
                        'detail': '%s changed from PID %s to %s: the process was restarted' % (origin, self.seen_pid, pid)}
            if info is None:
                return {'exit_code': None, 'detail': 'PID %s (%s) does not exist' % (pid, origin)}
            self.seen_pid, self.seen_starttime = pid, info.starttime
        if info is None:
            return {'exit_code': None, 'detail': 'PID %s exited (exit code unknown: not our child)' % pid}
        if info.starttime != self.seen_starttime:
            return {'exit_code': None, 'detail': 'PID %s exited (the PID now belongs to another process)' % pid}
        if info.exited:
            return {'exit_code': decode_wait_status(zombie_exit_status(pid, self._proc_root)),
                    'detail': 'PID %s exited' % pid}
        return None

    def _read_pidfile(self):
        try:
            with open(self.pidfile) as fh:
                return int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _unit_show(self):
        rc, out = self._run(['systemctl', 'show', self.unit, '-p', 'MainPID', '-p', 'ActiveState', '-p', 'SubState',
                             '-p', 'ExecMainStatus', '-p', 'ExecMainCode', '-p', 'Result', '-p', 'LoadState'])
        props = {}
        for line in out.splitlines():
            key, sep, value = line.partition('=')
            if sep:
                props[key] = value
        return rc, props

    def _unit_verdict(self, props):
        """None while the unit runs, else the crash dict (exit code from ExecMainStatus)."""
        active, sub = props.get('ActiveState'), props.get('SubState')
        main_pid = int(props.get('MainPID') or 0)
        if active in ('failed', 'inactive') or sub == 'auto-restart' or \
                (self.unit_main_pid and main_pid and main_pid != self.unit_main_pid):
            exit_code = None
            status = props.get('ExecMainStatus')
            if status not in (None, '') and props.get('ExecMainCode') not in (None, '', '0'):
                # ExecMainCode: 1 = exited (status = exit code), 2/3 = killed/dumped (signal)
                exit_code = int(status) if props.get('ExecMainCode') == '1' else -int(status)
            return {'exit_code': exit_code,
                    'detail': 'systemd unit %s is %s (%s, result %s)' % (self.unit, active, sub, props.get('Result'))}
        if main_pid:
            self.unit_main_pid = main_pid
        return None

    def _check_unit(self, now):
        if self.unit_main_pid and now < self._next_unit_check:
            gone = self._watch_pid(self.unit_main_pid, 'unit %s' % self.unit)
            if gone is None:
                return None
            # the main process is gone: systemd notices within milliseconds; ask it for the exit status
            for dummy in range(10):
                rc, props = self._unit_show()
                verdict = self._unit_verdict(props)
                if verdict is not None or int(props.get('MainPID') or 0) != self.unit_main_pid:
                    return verdict or gone
                time.sleep(0.05)
            return gone
        self._next_unit_check = now + self._unit_period
        rc, props = self._unit_show()
        if rc != 0 or props.get('LoadState') == 'not-found':
            return {'exit_code': None, 'detail': 'systemd unit %s not found (systemctl show: rc %s)' % (self.unit, rc)}
        verdict = self._unit_verdict(props)
        if verdict is None and self.unit_main_pid:
            return self._watch_pid(self.unit_main_pid, 'unit %s' % self.unit)
        return verdict

    def check(self):
        """Return None while running, else {'exit_code', 'detail'}."""
        self.notes = []
        if self.unit:
            return self._check_unit(self._clock())
        if self.pidfile:
            pid = self._read_pidfile()
            if pid is None:
                if self.seen_pid is not None:
                    return {'exit_code': None, 'detail': 'pidfile %s disappeared: the process %s stopped' % (self.pidfile, self.seen_pid)}
                self.notes.append('pidfile %s does not exist (yet)' % self.pidfile)
                return None
            return self._watch_pid(pid, 'pidfile %s' % self.pidfile)
        if self.pid:
            return self._watch_pid(self.pid, 'pid')
        return None


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
    """Probes the health endpoint every ``interval`` seconds (start to start)."""

    def __init__(self, request, path, interval, timeout):
        super(_Prober, self).__init__(name='health-prober')
        self.daemon = True
        self._args = (request, path, timeout)
        self._interval = interval
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._results = []
        self.busy = False

    def run(self):
        while not self._stop_event.is_set():
            began = time.monotonic()
            self.busy = True
            result = probe_health(*self._args)
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
    already spent (as the controller counts it).
    """

    def __init__(self, request, health_path='/health', interval=1.0, request_timeout=5.0, timeout=900.0,
                 success_threshold=1, stall_timeout=300.0, fatal_patterns=DEFAULT_FATAL_PATTERNS,
                 log=None, process=None, log_lines=20, state=None, elapsed=0.0, tick=0.1):
        self.request = request
        self.health_path = health_path
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
        state = state or {}
        self.elapsed_base = float(elapsed)
        self.phase = state.get('phase', LAUNCHING)
        self.phases = list(state.get('phases', [{'phase': LAUNCHING, 'elapsed': 0.0}]))
        self.streak = state.get('streak', 0)
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
        return {'phase': self.phase, 'phases': self.phases, 'streak': self.streak,
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
            line = split_display_line(raw)
            if not line:
                continue
            self.new_lines.append(line)
            self.tail.append(line)
            self.tracebacks.feed(line)
            pattern = find_fatal(raw, self.fatal_res)
            if self.fatal is not None:
                if len(self.fatal['context']) < FATAL_CONTEXT:
                    self.fatal['context'].append(line)
                    if pattern:
                        self.fatal['matches'].append(line)
                continue
            phase = match_phase(raw)
            if phase:
                self._enter_phase(phase, line)
            if pattern:
                self.fatal = {'line': line, 'pattern': pattern, 'elapsed': self.elapsed(), 'context': [line],
                              'matches': [line]}
                self._fatal_at = time.monotonic()
        del self.new_lines[:-_MAX_NEW_LINES]
        del self.tail[:-max(self.log_lines, FATAL_CONTEXT)]

    def _handle_probe(self, probe):
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
        prober = _Prober(self.request, self.health_path, self.interval, self.request_timeout)
        prober.start()
        try:
            return self._loop(prober, end)
        finally:
            prober.stop()
            if self.log is not None:
                self.log.close()

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


# --------------------------------------------------------------------------------------
# After ready: server info, smoke generation, acceptance length
# --------------------------------------------------------------------------------------
def _json(body):
    try:
        return json.loads(body)
    except (ValueError, TypeError):
        return None


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def summarize_server_info(info, engine=None):
    """The fields people ask about, from /get_server_info (SGLang) or /version (vLLM)."""
    info = info or {}
    summary = {
        'engine': engine or ('sglang' if 'internal_states' in info or 'speculative_algorithm' in info else None),
        'version': info.get('version'),
        'model_path': info.get('model_path'),
        'served_model_name': info.get('served_model_name'),
        'tp_size': info.get('tp_size'),
        'speculative_algorithm': info.get('speculative_algorithm'),
        'speculative_num_steps': info.get('speculative_num_steps'),
        'speculative_eagle_topk': info.get('speculative_eagle_topk'),
        # depth = tokens verified per step
        'speculative_depth': info.get('speculative_num_draft_tokens'),
        'avg_spec_accept_length': accept_length_from_server_info(info),
    }
    return summary


def fetch_server_info(request, timeout):
    """Try /server_info (SGLang; 0.5.15 logs a deprecation for /get_server_info), /get_server_info (older), /version (vLLM)."""
    for path, engine in (('/server_info', None), ('/get_server_info', None), ('/version', 'vllm')):
        try:
            status, body = request('GET', path, timeout=timeout)
        except Exception:
            continue
        data = _json(body)
        if status == 200 and isinstance(data, dict):
            summary = summarize_server_info(data, engine)
            summary['source'] = path
            return summary, data
    return {'engine': None, 'source': None}, None


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


def accept_length_from_metrics_with_source(before, after):
    """Acceptance length from /metrics snapshots around a request, and which metric gave it."""
    value = accept_length_from_metrics(before, after)
    if value is None:
        return None, None
    if counter_deltas(before, after).get('spec_drafts'):
        return value, 'metrics:vllm:spec_decode_num_accepted_tokens_total/num_drafts_total'
    return value, 'metrics:sglang:spec_accept_length'


def speculative_enabled(server_summary, metrics_before, metrics_after):
    """True/False when known, None when the engine does not say."""
    if server_summary.get('engine') == 'sglang':
        return bool(server_summary.get('speculative_algorithm'))
    if metrics_after and 'vllm:spec_decode_num_drafts_total' in metrics_after:
        return True
    return None


def fetch_metrics(request, timeout):
    try:
        status, body = request('GET', '/metrics', timeout=timeout)
    except Exception:
        return None
    if status != 200:
        return None
    return parse_prometheus(body.decode('utf-8', errors='replace') if isinstance(body, bytes) else body)


def first_model_id(request, timeout):
    try:
        status, body = request('GET', '/v1/models', timeout=timeout)
    except Exception:
        return None
    data = _json(body) or {}
    models = data.get('data') or []
    return models[0].get('id') if models and isinstance(models[0], dict) else None


def smoke_request(request, kind, prompt, max_tokens, model=None, timeout=120):
    """Send one real generation; return a dict (ok, text, tokens, meta_info, error...)."""
    if kind == 'generate':
        path = '/generate'
        payload = {'text': prompt, 'sampling_params': {'max_new_tokens': max_tokens, 'temperature': 0}}
    else:
        path = '/v1/completions'
        model = model or first_model_id(request, timeout)
        payload = {'model': model, 'prompt': prompt, 'max_tokens': max_tokens, 'temperature': 0}
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


def accept_length_message(value, floor, source, server_summary):
    algo = server_summary.get('speculative_algorithm') or 'speculative decoding'
    depth = server_summary.get('speculative_depth')
    return ('the drafter is not being accepted: accept length %.2f < floor %.2f (%s%s, from %s); '
            'likely wrong layer names or missing lm_head in the drafter checkpoint - see '
            'llmops.serving.drafter_checkpoint' % (value, floor, algo, ', depth %s' % depth if depth else '', source))


# --------------------------------------------------------------------------------------
# Options of llmops.serving.wait_for_llm_health, shared by the module (on the host) and
# its action plugin (validation on the controller). Documented in the module.
# --------------------------------------------------------------------------------------
ARGUMENT_SPEC = dict(
    url=dict(type='str', required=True),
    health_path=dict(type='str', default='/health'),
    headers=dict(type='dict', default={}),
    api_key=dict(type='str', no_log=True),
    validate_certs=dict(type='bool', default=True),
    use_proxy=dict(type='bool', default=True),
    request_timeout=dict(type='float', default=5.0),
    timeout=dict(type='float', default=900.0),
    interval=dict(type='float', default=1.0),
    stall_timeout=dict(type='float', default=300.0),
    heartbeat_interval=dict(type='float', default=60.0),
    log_path=dict(type='path'),
    log_start=dict(type='str', default='beginning', choices=['beginning', 'end']),
    systemd_unit=dict(type='str'),
    log_lines=dict(type='int', default=20),
    pid=dict(type='int'),
    pidfile=dict(type='path'),
    fatal_patterns=dict(type='list', elements='str'),
    extra_fatal_patterns=dict(type='list', elements='str', default=[]),
    success_threshold=dict(type='int', default=1),
    smoke=dict(type='str', default='none', choices=['none', 'completions', 'generate']),
    smoke_model=dict(type='str'),
    smoke_prompt=dict(type='str', default='The capital of France is'),
    smoke_max_tokens=dict(type='int', default=32, no_log=False),
    smoke_timeout=dict(type='float', default=120.0),
    min_accept_length=dict(type='float'),
    resume=dict(type='dict'),
)
MUTUALLY_EXCLUSIVE = [('pid', 'pidfile', 'systemd_unit')]
