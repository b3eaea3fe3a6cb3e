# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How fast does the real sglang-router take a dead worker out, and give it traffic again?

The measurement behind the failover defaults of roles/sglang_router. On this machine: two
SGLang simulator workers (test doubles, tests/sim) on loopback and the real router from
``tests/integration/install_router.sh``. For each router setting (the router's own defaults,
then the role's), under steady streaming load through the router (8 clients):

1. SIGKILL worker B (its whole process group) and poll ``/workers`` every 0.1 s:
   ``out_s`` = kill -> B reported ``is_healthy: false``; client requests failed or truncated;
2. start B again: ``healthy_s`` = B's ``/health`` 200 -> router says healthy;
   ``traffic_s`` = B's ``/health`` 200 -> the first request the router sends B (its
   ``sglang:http_requests_total`` of ``/v1/completions`` grows), bounded by ``--observe`` seconds (">N" when not seen).

    .venv/bin/python tests/perf/router_failover.py [--observe 40] [--only role]

Timings of the simulator are not GPU figures; what is measured is the router's behaviour.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(ROOT, 'tests', 'sim')
ROUTER_PYTHON = os.path.join(ROOT, '.cache', 'router-venv', 'bin', 'python')
KEY = 'sk-llmops-failover-3b1c'
SETTINGS = {
    'router defaults': [],
    'role': ['--health-check-interval-secs', '2', '--health-failure-threshold', '2', '--health-success-threshold', '1',
             '--health-check-timeout-secs', '5', '--cb-failure-threshold', '5', '--cb-timeout-duration-secs', '5',
             '--retry-max-retries', '3'],
}


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def http(url, *, data=None, method=None, timeout=5):
    req = urllib.request.Request(url, data=json.dumps(data).encode() if data is not None else None, method=method,
                                 headers={'Authorization': 'Bearer ' + KEY, 'Content-Type': 'application/json'})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read().decode()


def wait(predicate, timeout, step=0.1):
    """Seconds until ``predicate()`` is true, or None after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if predicate():
                return time.monotonic() - start
        except (OSError, ValueError):
            pass
        time.sleep(step)
    return None


class Worker:
    def __init__(self, workdir, name):
        self.port, self.name, self.workdir, self.proc = free_port(), name, workdir, None
        self.url = 'http://127.0.0.1:%d' % self.port

    def start(self):
        env = dict(os.environ, PYTHONPATH=SIM, NVSIM_STATE_DIR=os.path.join(self.workdir, 'nvsim-' + self.name),
                   SGLANG_SIM_SPEED='0.05')
        subprocess.run([sys.executable, os.path.join(SIM, 'nvsim.py'), 'init', '--count', '1'], env=env, check=True,
                       capture_output=True)
        with open(os.path.join(self.workdir, self.name + '.log'), 'ab') as log:
            self.proc = subprocess.Popen(
                [sys.executable, '-m', 'sglang.launch_server', '--model-path', os.path.join(self.workdir, 'target'),
                 '--tp-size', '1', '--host', '127.0.0.1', '--port', str(self.port), '--enable-metrics',
                 '--served-model-name', 'tiny', '--api-key', KEY],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        if wait(self.healthy, 60) is None:
            raise RuntimeError('worker %s did not become healthy' % self.name)

    def healthy(self):
        return http(self.url + '/health')[0] == 200

    def requests(self):
        text = http(self.url + '/metrics')[1]
        pattern = r'^sglang:http_requests_total\{endpoint="/v1/completions"[^}]*\} (\S+)$'
        return sum(float(v) for v in re.findall(pattern, text, re.M))

    def kill(self):
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class Load:
    """``clients`` threads sending streaming completions to ``url`` until stopped (or ``limit``
    requests were sent), each waiting ``pause`` seconds after each of its requests (the
    simulator answers in milliseconds: unpaced, 8 clients keep a 2-core machine busy);
    counts requests sent, failed (HTTP or connection error, timeout) and truncated (no
    ``[DONE]``), and keeps ``(start, ttft or None, outcome)`` per request."""

    def __init__(self, url, key=KEY, model='tiny', clients=8, limit=None, pause=0.0, context=None):
        self.url, self.key, self.model, self.limit, self.pause = url, key, model, limit, pause
        self.context = context  # an ssl.SSLContext for an https:// router (the fleet CA)
        self.stop, self.lock = threading.Event(), threading.Lock()
        self.sent = self.failed = self.truncated = 0
        self.samples = []
        self.threads = [threading.Thread(target=self.client, daemon=True) for _client in range(clients)]

    def client(self):
        body = json.dumps({'model': self.model, 'prompt': 'hello', 'max_tokens': 16, 'stream': True}).encode()
        while not self.stop.is_set() and (self.limit is None or self.sent < self.limit):
            req = urllib.request.Request(self.url + '/v1/completions', data=body, headers={
                'Authorization': 'Bearer ' + self.key, 'Content-Type': 'application/json'})
            start, ttft, outcome = time.monotonic(), None, 'truncated'
            try:
                with urllib.request.urlopen(req, timeout=30, context=self.context) as resp:
                    for line in resp:
                        if ttft is None and line.startswith(b'data:'):
                            ttft = time.monotonic() - start
                        if line.strip() == b'data: [DONE]':
                            outcome = 'ok'
            except (OSError, urllib.error.HTTPError):
                outcome = 'failed'
            with self.lock:
                self.sent += 1
                self.failed += outcome == 'failed'
                self.truncated += outcome == 'truncated'
                self.samples.append((start, ttft, outcome))
            self.stop.wait(self.pause)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(60)


def worker_state(router, url):
    workers = json.loads(http(router + '/workers')[1])['workers']
    return next((w['is_healthy'] for w in workers if w['url'] == url), None)


def measure(label, flags, workdir, observe):
    a, b = Worker(workdir, 'a'), Worker(workdir, 'b')
    a.start()
    b.start()
    port, router_proc = free_port(), None
    router = 'http://127.0.0.1:%d' % port
    try:
        with open(os.path.join(workdir, 'router.log'), 'ab') as log:
            router_proc = subprocess.Popen(
                [ROUTER_PYTHON, '-m', 'sglang_router.launch_router', '--host', '127.0.0.1', '--port', str(port),
                 '--prometheus-host', '127.0.0.1', '--prometheus-port', str(free_port()), '--policy', 'round_robin',
                 '--api-key', KEY, '--worker-urls', a.url, b.url] + flags,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        if wait(lambda: http(router + '/readiness')[0] == 200 and worker_state(router, b.url), 60) is None:
            raise RuntimeError('router not ready')
        with Load(router) as load:
            wait(lambda: load.sent >= 40, 30)
            b.kill()
            out_s = wait(lambda: worker_state(router, b.url) is False, observe)
            before = (load.sent, load.failed, load.truncated)
        b.start()
        base = b.requests()
        with Load(router) as load:
            healthy_s = wait(lambda: worker_state(router, b.url) is True, observe)
            traffic_s = wait(lambda: b.requests() > base, observe)
        return {'setting': label, 'out_s': out_s, 'sent': before[0], 'failed': before[1], 'truncated': before[2],
                'healthy_s': healthy_s, 'traffic_s': traffic_s, 'sent_after': load.sent, 'failed_after': load.failed}
    finally:
        if router_proc:
            os.killpg(router_proc.pid, signal.SIGTERM)
            router_proc.wait()
        for w in (a, b):
            if w.proc and w.proc.poll() is None:
                w.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--observe', type=float, default=40, help='longest wait per phase, seconds')
    parser.add_argument('--only', choices=sorted(SETTINGS), help='measure one setting only')
    args = parser.parse_args()
    if not os.path.exists(ROUTER_PYTHON):
        sys.exit('%s missing: run tests/integration/install_router.sh' % ROUTER_PYTHON)

    def fmt(value):
        return '>%g' % args.observe if value is None else '%.1f' % value

    print('%-16s %8s %6s %6s %9s %10s %10s' % ('setting', 'out_s', 'sent', 'failed', 'truncated', 'healthy_s',
                                               'traffic_s'))
    for label, flags in SETTINGS.items():
        if args.only and label != args.only:
            continue
        with tempfile.TemporaryDirectory(prefix='llmops-failover-') as workdir:
            subprocess.run([sys.executable, os.path.join(SIM, 'make_tiny_checkpoint.py'), workdir], check=True,
                           capture_output=True)
            r = measure(label, flags, workdir, args.observe)
        print('%-16s %8s %6d %6d %9d %10s %10s   %s' % (
            r['setting'], fmt(r['out_s']), r['sent'], r['failed'], r['truncated'], fmt(r['healthy_s']),
            fmt(r['traffic_s']), ' '.join(flags) or '(no flags)'), flush=True)


if __name__ == '__main__':
    main()
