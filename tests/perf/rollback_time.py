# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How long does an automatic rollback take, beside a plain start of the same server?

``playbooks/deploy.yml`` on this machine (local connection, process launcher, the GPU
preflight on the nvidia-smi stand-in, the SGLang simulator: a test double whose phase
times are not GPU figures) deploys the good drafter, then the random one: the acceptance
floor fails and the deploy role puts the last good configuration back. The deploy's own
failure message gives the rollback time (failed check -> the old configuration serving
again, health and smoke included) and the restarted server's own start time (launch ->
ready); their difference is what the rollback costs over a plain restart.

    .venv/bin/python tests/perf/rollback_time.py [--rounds 3] [--speed 0.3]

Needs the installed collection (``make collection``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_playbook import free_port, playbook  # noqa: E402  (tests/perf/local_playbook.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(ROOT, 'tests', 'sim')
MESSAGE = re.compile(r'serving the last good configuration again ([\d.]+) s after the failure \(its own start: '
                     r'([\d.]+) s\)')


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--speed', default='0.3', help='SGLANG_SIM_SPEED of the simulated server')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix='llmops-rollback-time-') as work:
        nvsim = os.path.join(work, 'nvsim')
        subprocess.run([sys.executable, os.path.join(SIM, 'nvsim.py'), 'init', '--count', '1'], check=True,
                       env=dict(os.environ, NVSIM_STATE_DIR=nvsim), capture_output=True)
        checkpoints = os.path.join(work, 'checkpoints')
        for dest, quality in ((checkpoints, 'perfect'), (os.path.join(work, 'random'), 'random')):
            subprocess.run([sys.executable, os.path.join(SIM, 'make_tiny_checkpoint.py'), dest, '--quality', quality],
                           check=True, capture_output=True)
        inventory = os.path.join(work, 'inventory.yml')
        with open(inventory, 'w', encoding='utf-8') as handle:
            handle.write('all:\n  hosts:\n    localhost:\n      ansible_connection: local\n'
                         '      ansible_python_interpreter: %s\n' % sys.executable)
        extra = {
            'sglang_server_python': sys.executable, 'sglang_server_launcher': 'process', 'sglang_server_name': 'rbtime',
            'sglang_server_user': '',  # the server's files are in this script's private temporary folder
            'sglang_server_port': free_port(), 'sglang_server_tp_size': 1,
            'sglang_server_model_path': os.path.join(checkpoints, 'target'),
            'sglang_server_speculative_draft_model_path': os.path.join(checkpoints, 'drafter'),
            'sglang_server_speculative_depth': 16, 'sglang_server_min_accept_length': 1.5,
            'sglang_server_env': {'PYTHONPATH': SIM, 'NVSIM_STATE_DIR': nvsim, 'SGLANG_SIM_SPEED': args.speed},
            'sglang_server_config_dir': os.path.join(work, 'etc'), 'sglang_server_run_dir': os.path.join(work, 'run'),
            'sglang_server_log_path': os.path.join(work, 'server.log'),
            'sglang_server_state_dir': os.path.join(work, 'last-good'), 'sglang_server_health_interval': 1,
            'gpu_preflight_nvidia_smi_path': os.path.join(SIM, 'nvidia-smi'),
            'gpu_preflight_environment': {'NVSIM_STATE_DIR': nvsim},
        }
        print('SGLang simulator (test double) at SGLANG_SIM_SPEED=%s, process launcher, this machine' % args.speed)
        print('%-6s %12s %14s %10s' % ('round', 'rollback_s', 'server_start_s', 'overhead_s'))
        try:
            for number in range(1, args.rounds + 1):
                good = playbook('playbooks/deploy.yml', inventory, extra)
                if good.returncode != 0:
                    sys.exit('the good deploy failed:\n' + good.stdout[-3000:])
                random_drafter = os.path.join(work, 'random', 'drafter')
                bad = playbook('playbooks/deploy.yml', inventory,
                               dict(extra, sglang_server_speculative_draft_model_path=random_drafter))
                found = MESSAGE.search(' '.join(bad.stdout.split()))
                if bad.returncode == 0 or not found:
                    sys.exit('no rollback seen:\n' + bad.stdout[-3000:])
                rollback, start = float(found.group(1)), float(found.group(2))
                print('%-6d %12.1f %14.1f %10.1f' % (number, rollback, start, rollback - start))
        finally:
            playbook('playbooks/stop.yml', inventory, extra)


if __name__ == '__main__':
    main()
