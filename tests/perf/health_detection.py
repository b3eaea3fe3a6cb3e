# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How fast does wait_for_llm_health notice ready / crash / fatal log line, next to the seed's loop?

Three simulated servers (small Python processes, one per scenario and per poller) follow a
fixed timeline and record the instant of their event:

- ``ready``: connection refused for 3 s, HTTP 503 until 6 s, then 200 (event: first 200);
- ``crash``: writes a traceback to its log at 4 s and exits with status 1 (event: exit);
- ``fatal``: writes ``KeyError: ...`` after a traceback line at 4 s and keeps running
  without ever listening (event: the line is flushed).

Side by side, in one run, each scenario is waited for by

- **ours**: the module ``llmops.serving.wait_for_llm_health`` run as a process on this
  machine (what runs on the managed host) with ``interval: 1``, the server's pidfile and
  log, started together with the server;
- **seed**: the seed's loop, ``curl -sf URL/health`` then ``sleep 10``, 90 tries (urllib
  here, 5 s per request). It cannot tell a crash or a fatal line from "still loading": it
  gives up after its last try.

Latency = verdict instant - event instant. By default the seed loop is observed for
``--observe`` seconds after the event; when it has not decided by then, its verdict time is
projected from its fixed schedule (its try count and sleep are deterministic) and marked
"projected". ``--full`` lets it run to the end (about 15 minutes).

    .venv/bin/python tests/perf/health_detection.py [--full] [--observe 25]

Exits 1 when a target is missed: crash and fatal line within 2 s, ready within 1.5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMPORT_ROOT = os.path.join(ROOT, 'build', 'pytest')
MODULE = 'ansible_collections.llmops.serving.plugins.modules.wait_for_llm_health'
TARGETS = {'ready': 1.5, 'crash': 2.0, 'fatal': 2.0}
SEED_SLEEP, SEED_TRIES, SEED_REQUEST_TIMEOUT = 10.0, 90, 5.0

SERVER = r'''
import http.server, json, os, sys, threading, time
mode, port, log_path, event_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
start = time.time()
log = open(log_path, 'a', buffering=1)
def at(seconds):
    time.sleep(max(0.0, start + seconds - time.time()))
def event():
    with open(event_path, 'w') as fh:
        json.dump({'t': time.time()}, fh)
log.write('[t] Init torch distributed begin.\n')
at(1.0)
log.write('[t] Load weight begin. avail mem=139.09 GB\n')
if mode == 'crash':
    at(4.0)
    log.write('[t] Scheduler hit an exception: Traceback (most recent call last):\n')
    log.write('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n')
    event()
    os._exit(1)
if mode == 'fatal':
    at(4.0)
    log.write('[t] Scheduler hit an exception: Traceback (most recent call last):\n')
    log.write("KeyError: 'midlayer.self_attn.qkv_proj.weight'\n")
    event()
    time.sleep(3600)
state = {'ready': False}
class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_GET(self):
        code = 200 if state['ready'] else 503
        if self.path != '/health':
            code = 404
        self.send_response(code)
        self.send_header('Content-Length', '0')
        self.end_headers()
at(3.0)
httpd = http.server.ThreadingHTTPServer(('127.0.0.1', port), Handler)
threading.Thread(target=httpd.serve_forever, daemon=True).start()
log.write('[t] Uvicorn running on http://127.0.0.1:%d\n' % port)
at(6.0)
state['ready'] = True
event()
log.write('[t] The server is fired up and ready to roll!\n')
time.sleep(3600)
'''


def free_port():
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def link_collection():
    """Same import root as tests/conftest.py: the repository as ansible_collections.llmops.serving."""
    link = os.path.join(IMPORT_ROOT, 'ansible_collections', 'llmops', 'serving')
    if not os.path.islink(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        try:
            os.symlink(ROOT, link)
        except FileExistsError:
            pass


class Scenario(object):
    """One simulated server for one poller."""

    def __init__(self, mode, workdir, tag):
        self.mode = mode
        self.port = free_port()
        self.log = os.path.join(workdir, '%s-%s.log' % (mode, tag))
        self.event_file = os.path.join(workdir, '%s-%s.event' % (mode, tag))
        self.pidfile = os.path.join(workdir, '%s-%s.pid' % (mode, tag))
        self.proc = None
        self.started = None

    def start(self):
        self.started = time.time()
        self.proc = subprocess.Popen([sys.executable, '-c', SERVER, self.mode, str(self.port), self.log, self.event_file])
        with open(self.pidfile, 'w') as fh:
            fh.write('%d\n' % self.proc.pid)

    def event_time(self, timeout=30.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with open(self.event_file) as fh:
                    return json.load(fh)['t']
            except (OSError, ValueError):
                time.sleep(0.05)
        raise RuntimeError('%s server recorded no event' % self.mode)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def run_ours(scenario, workdir):
    args = {'url': 'http://127.0.0.1:%d' % scenario.port, 'interval': 1, 'timeout': 120,
            'pidfile': scenario.pidfile, 'log_path': scenario.log, 'stall_timeout': 0}
    path = os.path.join(workdir, 'args-%s.json' % scenario.mode)
    with open(path, 'w') as fh:
        json.dump({'ANSIBLE_MODULE_ARGS': args}, fh)
    env = dict(os.environ, PYTHONPATH=IMPORT_ROOT, no_proxy='*')
    out = subprocess.run([sys.executable, '-m', MODULE, path], capture_output=True, text=True, env=env, check=False)
    done = time.time()
    result = json.loads(out.stdout)
    return done, result['status']


def run_seed(scenario, give_up_after):
    """The seed's loop: curl -sf /health || sleep 10, 90 tries. Returns (time, verdict, projected)."""
    url = 'http://127.0.0.1:%d/health' % scenario.port
    for attempt in range(1, SEED_TRIES + 1):
        try:
            with urllib.request.urlopen(url, timeout=SEED_REQUEST_TIMEOUT) as response:
                if response.status == 200:
                    return time.time(), 'ready', False
        except (urllib.error.URLError, OSError):
            pass
        if attempt == SEED_TRIES:
            return time.time(), 'gave up', False
        limit = give_up_after() if give_up_after is not None else None
        if limit is not None and time.time() + SEED_SLEEP > limit:
            # undecided when observation ends: every remaining try fails the same way
            # (refused, ~0 s), so the verdict comes after the remaining sleeps
            return time.time() + (SEED_TRIES - attempt) * SEED_SLEEP, 'gave up', True
        time.sleep(SEED_SLEEP)
    raise AssertionError('unreachable')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--full', action='store_true', help='let the seed loop run to its end (about 15 minutes)')
    parser.add_argument('--observe', type=float, default=25.0,
                        help='seconds to watch the seed loop after the event before projecting its verdict')
    options = parser.parse_args(argv)
    link_collection()
    workdir = tempfile.mkdtemp(prefix='health-perf-')
    rows = {}
    threads = []
    scenarios = []

    def measure(mode):
        # The seed's ready latency depends on where its 10 s sleep falls: for "ready", five
        # seed pollers start 0, 2, 4, 6 and 8 s after their servers (mean over the phase).
        offsets = (0, 2, 4, 6, 8) if mode == 'ready' else (0,)
        ours = Scenario(mode, workdir, 'ours')
        seeds = [Scenario(mode, workdir, 'seed%d' % offset) for offset in offsets]
        scenarios.extend([ours] + seeds)
        seed_results = {}

        def seed_thread(seed, offset):
            def observation_end():
                return seed.event_time() + options.observe if os.path.exists(seed.event_file) else None
            time.sleep(offset)
            seed_results[offset] = run_seed(seed, None if options.full else observation_end)
        ours.start()
        workers = []
        for seed, offset in zip(seeds, offsets):
            seed.start()
            workers.append(threading.Thread(target=seed_thread, args=(seed, offset)))
            workers[-1].start()
        done, status = run_ours(ours, workdir)
        ours_latency = done - ours.event_time()
        for worker in workers:
            worker.join()
        latencies = [seed_results[offset][0] - seed.event_time() for seed, offset in zip(seeds, offsets)]
        verdict, projected = seed_results[offsets[0]][1], seed_results[offsets[0]][2]
        rows[mode] = (ours_latency, status, latencies, verdict, projected)

    try:
        for mode in ('ready', 'crash', 'fatal'):
            thread = threading.Thread(target=measure, args=(mode,))
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
    finally:
        for scenario in scenarios:
            if scenario.proc is not None:
                scenario.stop()

    print('interval 1 s (ours) vs seed loop (curl, sleep %d s, %d tries); latency = verdict - event'
          % (SEED_SLEEP, SEED_TRIES))
    print('%-8s %-26s %-44s %-10s %s' % ('scenario', 'ours (status)', 'seed loop (verdict)', 'ratio', 'target'))
    missed = []
    for mode in ('ready', 'crash', 'fatal'):
        ours_latency, status, latencies, seed_verdict, projected = rows[mode]
        seed_latency = sum(latencies) / len(latencies)
        spread = ' %.1f-%.1f' % (min(latencies), max(latencies)) if len(latencies) > 1 else ''
        ok = ours_latency <= TARGETS[mode]
        if not ok:
            missed.append(mode)
        print('%-8s %-26s %-44s %-10s <= %.1f s %s' % (
            mode, '%.2f s (%s)' % (ours_latency, status),
            '%.2f s (%s%s%s)' % (seed_latency, seed_verdict, ', projected' if projected else '',
                                 ', mean of %d:%s' % (len(latencies), spread) if spread else ''),
            'x%.0f' % (seed_latency / ours_latency) if ours_latency > 0 else '-', TARGETS[mode], 'ok' if ok else 'MISSED'))
    if missed:
        print('missed targets: %s' % ', '.join(missed))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
