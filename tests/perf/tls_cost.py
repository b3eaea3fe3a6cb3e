# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What does TLS cost the benchmark through the router? Plain HTTP against TLS in one run.

On this machine: two pairs of SGLang simulator workers (test doubles, tests/sim) on loopback, each pair behind its
own real sglang-router 0.3.2 (``tests/integration/install_router.sh``): one pair and its router on plain HTTP, the
other serving HTTPS with certificates of a fleet CA made by module_utils/_tls.py (what llmops.serving.fleet_tls
makes), its router verifying them (``--ca-cert-paths``, and SSL_CERT_FILE as the role's launcher shim sets it) and
serving clients over HTTPS itself (``--tls-cert-path``). The benchmark client of llmops.serving.llm_benchmark
(module_utils/_benchmark.py, streaming, the OpenAI completions API) measures each setup in turns (plain, TLS, plain,
TLS, ...) so that drift on the shared machine falls on both, and the script prints the ratio TLS / plain of the
medians.

    .venv/bin/python tests/perf/tls_cost.py [--rounds 3] [--prompts 64] [--concurrency 8]

SIMULATOR figures: the simulator answers in milliseconds, so TLS (handshakes, encryption of every chunk, on two hops)
weighs far more here than in front of a GPU, where a request takes seconds; the ratio is an upper bound of the cost.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from router_failover import ROUTER_PYTHON, SIM, Worker, free_port, wait  # noqa: E402  pylint: disable=wrong-import-position

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, '.collections'))
from ansible_collections.llmops.serving.plugins.module_utils import _benchmark, _tls  # noqa: E402  pylint: disable=wrong-import-position,import-error

KEY = 'sk-llmops-failover-3b1c'  # router_failover's Worker starts the simulator with this key


class TLSWorker(Worker):
    """A simulator worker serving HTTPS (--ssl-certfile, --ssl-keyfile)."""

    def __init__(self, workdir, name, files):
        super().__init__(workdir, name)
        self.files = files
        self.url = 'https://127.0.0.1:%d' % self.port

    def start(self):
        env = dict(os.environ, PYTHONPATH=SIM, NVSIM_STATE_DIR=os.path.join(self.workdir, 'nvsim-' + self.name),
                   SGLANG_SIM_SPEED='0.05')
        subprocess.run([sys.executable, os.path.join(SIM, 'nvsim.py'), 'init', '--count', '1'], env=env, check=True,
                       capture_output=True)
        with open(os.path.join(self.workdir, self.name + '.log'), 'ab') as log:
            self.proc = subprocess.Popen(
                [sys.executable, '-m', 'sglang.launch_server', '--model-path', os.path.join(self.workdir, 'target'),
                 '--tp-size', '1', '--host', '127.0.0.1', '--port', str(self.port), '--enable-metrics',
                 '--served-model-name', 'tiny', '--api-key', KEY, '--ssl-certfile', self.files['cert'],
                 '--ssl-keyfile', self.files['key'], '--ssl-ca-certs', self.files['ca']],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def healthy(self):
        return self.proc is not None and self.proc.poll() is None


def make_certificates(workdir):
    ca_cert, ca_key = _tls.make_ca()
    cert, key = _tls.make_host_cert(ca_cert, ca_key, 'localhost', ['127.0.0.1'])
    files = {'ca': os.path.join(workdir, 'ca.crt'), 'cert': os.path.join(workdir, 'host.crt'),
             'key': os.path.join(workdir, 'host.key')}
    for name, text in (('ca', ca_cert), ('cert', cert), ('key', key)):
        with open(files[name], 'w', encoding='ascii') as handle:
            handle.write(text)
    os.chmod(files['key'], 0o600)
    return files


def start_router(workdir, name, workers, files=None):
    port = free_port()
    argv = [ROUTER_PYTHON, '-m', 'sglang_router.launch_router', '--host', '127.0.0.1', '--port', str(port),
            '--prometheus-host', '127.0.0.1', '--prometheus-port', str(free_port()), '--policy', 'round_robin',
            '--api-key', KEY, '--health-check-interval-secs', '2', '--worker-urls'] + [w.url for w in workers]
    env = dict(os.environ)
    if files:
        argv += ['--ca-cert-paths', files['ca'], '--tls-cert-path', files['cert'], '--tls-key-path', files['key']]
        env['SSL_CERT_FILE'] = files['ca']
    with open(os.path.join(workdir, 'router-%s.log' % name), 'ab') as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, '%s://127.0.0.1:%d' % ('https' if files else 'http', port)


def ready(url, files):
    client = _benchmark.Client(url, api_key=KEY, timeout=5, http_library='http.client',
                               ca_path=files['ca'] if files else None)
    status, body = client.request('GET', '/readiness')
    return status == 200 and b'"healthy_workers":2' in body.replace(b' ', b'')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--rounds', type=int, default=3, help='measurements of each setup (alternating)')
    parser.add_argument('--prompts', type=int, default=64, help='requests per measurement')
    parser.add_argument('--concurrency', type=int, default=8)
    parser.add_argument('--output-len', type=int, default=32)
    args = parser.parse_args()
    if not os.path.exists(ROUTER_PYTHON):
        sys.exit('%s missing: run tests/integration/install_router.sh' % ROUTER_PYTHON)
    procs = []
    with tempfile.TemporaryDirectory(prefix='llmops-tls-cost-') as workdir:
        subprocess.run([sys.executable, os.path.join(SIM, 'make_tiny_checkpoint.py'), workdir], check=True,
                       capture_output=True)
        files = make_certificates(workdir)
        try:
            setups = {}
            for label, tls in (('plain', None), ('tls', files)):
                workers = [TLSWorker(workdir, label + str(i), tls) if tls else Worker(workdir, label + str(i))
                           for i in range(2)]
                for worker in workers:
                    worker.start()
                    procs.append(worker.proc)
                proc, url = start_router(workdir, label, workers, tls)
                procs.append(proc)
                if wait(lambda url=url, tls=tls: ready(url, tls), 90, step=0.5) is None:
                    raise RuntimeError('router %s not ready (see %s)' % (label, workdir))
                setups[label] = (url, tls)
            prompts = _benchmark.synthetic_prompts(args.prompts, 32, args.output_len, 1)
            results = {'plain': [], 'tls': []}
            for _round in range(args.rounds):
                for label, (url, tls) in setups.items():
                    client = _benchmark.Client(url, api_key=KEY, timeout=60, http_library='http.client',
                                               ca_path=tls['ca'] if tls else None)
                    run = _benchmark.benchmark(client, 'completions', prompts, [args.concurrency], model='tiny',
                                               warmup_requests=args.concurrency)['runs'][0]
                    if run['failed']:
                        raise RuntimeError('%s: %d requests failed: %s' % (label, run['failed'], run['errors']))
                    results[label].append(run)
        finally:
            for proc in procs:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                proc.wait()

    def median(label, key, sub=None):
        values = [r[key][sub] if sub else r[key] for r in results[label]]
        return statistics.median(values)

    print('SIMULATOR figures (tests/sim test doubles behind the real sglang-router 0.3.2 on loopback); '
          '%d rounds each, alternating, %d prompts at concurrency %d, %d output tokens'
          % (args.rounds, args.prompts, args.concurrency, args.output_len))
    print('%-6s %12s %12s %12s %12s' % ('setup', 'req/s', 'out tok/s', 'TTFT p50 ms', 'ITL p50 ms'))
    for label in ('plain', 'tls'):
        print('%-6s %12.1f %12.1f %12.1f %12.2f' % (
            label, median(label, 'request_throughput'), median(label, 'output_throughput'),
            median(label, 'ttft_ms', 'p50'), median(label, 'itl_ms', 'p50')))
    ratio = median('tls', 'output_throughput') / median('plain', 'output_throughput')
    print('TLS / plain output throughput: %.3f (cost %.1f%%); TTFT p50 ratio %.2f'
          % (ratio, (1 - ratio) * 100, median('tls', 'ttft_ms', 'p50') / median('plain', 'ttft_ms', 'p50')))


if __name__ == '__main__':
    main()
