# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What an SGLang or vLLM server says while it starts: phases, fatal lines, traceback roots, redaction.

No Ansible imports and no I/O: every function takes a log line, so the module, the
simulator's tests and the scripts share one reading of a start-up log.
"""

from __future__ import annotations

import re

from ansible_collections.llmops.serving.plugins.module_utils._procs import compile_patterns as _compile_patterns

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
# Secrets. SGLang logs its server_args (``api_key='...'``, the repr: ``"a'b"`` when the
# key holds a quote, ``'a\\'b"c'`` with escapes when it holds both), launchers echo
# their command line (``--api-key K``, ``--api-key=K``), HTTP libraries log headers
# (``Authorization: Bearer K``, ``X-API-Key: K``) and URLs (``?api_key=K``). Every form
# keeps its name and loses its value, so a line still says which setting it was.
# --------------------------------------------------------------------------------------
# A value: quoted segments (Python repr escapes, shell quoting) and unquoted characters up to a space.
_VALUE = r"""(?:'(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|[^\s'"&,;)])+"""
_SECRET_RE = re.compile(
    r"""(?P<prefix>--(?:admin-)?api-key(?:=|\s+|['"],\s*)"""       # --api-key K, --api-key=K, ['--api-key', 'K']
    r"""|\b(?:Bearer|Basic)\s+"""                                     # Authorization: Bearer K
    r"""|\b(?:\w+[_-])?api[_-]?key["']?\s*[=:]\s*)"""                  # api_key='K', X-API-Key: K, ?api_key=K
    r"""(?!(?:None|null)\b)(?P<value>%s)""" % _VALUE, re.IGNORECASE)
MASK = '********'


def _mask(match):
    value = match.group('value')
    quote = value[0] if value[0] in '\'"' else ''
    return match.group('prefix') + quote + MASK + quote


def redact(line):
    """Mask every form of an API key a server, a launcher or an HTTP library prints."""
    return _SECRET_RE.sub(_mask, line)


# SGLang prints its whole configuration on one line (``server_args=ServerArgs(...)``, about
# 8 KB): a line longer than FOLD_CHARS is shown as its first FOLD_KEEP characters and a count.
FOLD_CHARS = 400
FOLD_KEEP = 200


def fold_line(line):
    """A display line cut to FOLD_KEEP characters when longer than FOLD_CHARS, saying how much was folded."""
    if len(line) <= FOLD_CHARS:
        return line
    return '%s ... [%d more characters folded]' % (line[:FOLD_KEEP], len(line) - FOLD_KEEP)


def split_display_line(raw):
    """A log line as a terminal would show it (the last segment of \\r progress bars), secrets masked."""
    parts = [p for p in raw.split('\r') if p.strip()]
    return redact(parts[-1].rstrip()) if parts else ''
