# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A rolling deploy behind the real sglang-router under streaming load, with and without drain.

Builds a test fleet (tests/integration/fleet.py): SGLang simulator servers (test doubles) on
ns1-ns3, the real router (tests/integration/install_router.sh) on ns4. While 8 clients (each
pausing --pause s between requests) stream completions through the router,
playbooks/deploy.yml restarts every server (a depth change,
one host per batch), once with the drain (the deploy sequence takes each server out of the
router before its stop and puts it back after its health check) and once without it
(today's behaviour: the deploy sees no router group, the router finds out by itself).
Prints per run: requests sent, failed (HTTP or connection error), truncated streams (no
``[DONE]``), p50/p99 time to first token during and outside the rollout.

    .venv/bin/python tests/perf/rollout_under_load.py [--hosts 3]      (as root; make collection first)

Exits 1 unless the drained run has 0 failed and 0 truncated over at least 200 requests.
The simulator's timings are not GPU figures; what is measured is what the clients see.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'integration'))
from conftest import ansible_env  # noqa: E402  (tests/integration/conftest.py)
from fleet import Fleet  # noqa: E402
from router_failover import Load  # noqa: E402  (this directory)
from test_router import router_vars  # noqa: E402  (the fleet settings the router test uses)
from test_deploy import API_KEY  # noqa: E402


def playbook(inventory, path, extra_vars, limit=None):
    with tempfile.NamedTemporaryFile('w', suffix='.json') as ev:
        json.dump(extra_vars, ev)
        ev.flush()
        argv = [os.path.join(ROOT, '.venv', 'bin', 'ansible-playbook'), '-i', inventory, os.path.join(ROOT, path),
                '-e', '@' + ev.name] + (['--limit', limit] if limit else [])
        proc = subprocess.run(argv, capture_output=True, text=True, env=ansible_env(), cwd=ROOT, timeout=1200,
                              check=False)
    if proc.returncode != 0:
        log = os.path.join(tempfile.gettempdir(), 'rollout_under_load-%s.log' % os.path.basename(path))
        with open(log, 'w') as f:
            f.write(proc.stdout + proc.stderr)
        failed = [line for line in proc.stdout.splitlines() if line.startswith(('fatal:', 'failed:'))]
        sys.exit('%s failed (rc %d; whole output in %s):\n%s\n%s'
                 % (path, proc.returncode, log, '\n'.join(failed), proc.stdout[-4000:]))


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float('nan')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--hosts', type=int, default=3, help='servers (the router gets one more host)')
    parser.add_argument('--after', type=int, default=100, help='requests sent after each rollout')
    parser.add_argument('--pause', type=float, default=0.5,
                        help="seconds each of the 8 clients waits after each of its requests (the simulator answers "
                             "in milliseconds: unpaced, the clients would take the machine's CPUs from the deploy)")
    args = parser.parse_args()
    subprocess.run([os.path.join(ROOT, 'tests', 'integration', 'install_router.sh')], check=True)
    servers = ['ns%d' % i for i in range(1, args.hosts + 1)]
    router_host = 'ns%d' % (args.hosts + 1)
    with tempfile.TemporaryDirectory(prefix='llr-', dir='/tmp') as workdir, \
            Fleet(os.path.join(workdir, 'f')).up(ns_hosts=args.hosts + 1, die_with_parent=True) as fleet:
        inventory = os.path.join(workdir, 'inventory')
        os.makedirs(inventory)
        with open(fleet.inventory) as src, open(os.path.join(inventory, 'fleet.yml'), 'w') as dst:
            dst.write(src.read())
        with open(os.path.join(inventory, 'groups.yml'), 'w') as f:
            f.write('sglang_servers:\n  hosts:\n%s\nsglang_routers:\n  hosts:\n    %s:\n'
                    % (''.join('    %s:\n' % h for h in servers), router_host))
        limit = ','.join(servers)
        playbook(inventory, 'tests/sim/prepare_host.yml', router_vars(), limit)
        playbook(inventory, 'playbooks/deploy.yml', router_vars(), limit)
        playbook(inventory, 'playbooks/router.yml', router_vars())
        router = 'http://%s:30080' % fleet.hosts[router_host]['address']
        rows = []
        for mode, group, depth in (('drain', 'sglang_routers', 10), ('no drain', 'no_routers', 16)):
            with Load(router, key=API_KEY, model='tiny-llama', pause=args.pause) as load:
                while load.sent < 50:
                    time.sleep(0.1)
                begin = time.monotonic()
                playbook(inventory, 'playbooks/deploy.yml', limit=limit, extra_vars=router_vars(
                    sglang_server_speculative_depth=depth, llmops_serial=1, sglang_router_group=group))
                end = time.monotonic()
                sent = load.sent
                while load.sent < sent + args.after:
                    time.sleep(0.1)
            during = [s[1] for s in load.samples if begin <= s[0] <= end and s[1] is not None]
            outside = [s[1] for s in load.samples if not begin <= s[0] <= end and s[1] is not None]
            rows.append((mode, load.sent, load.failed, load.truncated, end - begin,
                         percentile(during, .5), percentile(during, .99), percentile(outside, .5),
                         percentile(outside, .99)))
    print('%d servers behind the real sglang-router, 8 streaming clients (%.2f s pause after each request), '
          'deploy.yml restarting every server (depth change, serial 1); SGLang simulator, not GPU figures'
          % (args.hosts, args.pause))
    print('%-9s %9s %7s %10s %10s %16s %16s %16s %16s' % (
        'run', 'requests', 'failed', 'truncated', 'rollout_s', 'ttft_p50_during', 'ttft_p99_during',
        'ttft_p50_outside', 'ttft_p99_outside'))
    for row in rows:
        print('%-9s %9d %7d %10d %10.0f %14.1fms %14.1fms %14.1fms %14.1fms' % (
            row[:5] + tuple(1000 * v for v in row[5:])))
    drained = rows[0]
    return 0 if drained[2] == 0 and drained[3] == 0 and drained[1] >= 200 else 1


if __name__ == '__main__':
    sys.exit(main())
