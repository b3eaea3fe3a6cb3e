# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How much does the sweep's reported output tok/s move from one sweep to the next?

Runs ``playbooks/benchmark.yml`` N times on this machine against the SGLang simulator
(inventories/local: a test double whose timing model is no GPU figure) and prints, per
candidate and concurrency level, the figure each sweep reported (the median of its
rounds) and the spread over the sweeps ((max - min) / median), then which candidate each
sweep named best per load and whether its report called that established.

    .venv/bin/python tests/perf/sweep_spread.py [--sweeps 5] [--rounds 3] [--concurrency 1,8,32]
        [--depths 16,10,5] [--num-prompts 16] [--output-len 128] [--keep DIR]

``--rounds 1`` measures as the sweep did before it took the median of several rounds.
``--keep DIR`` keeps the last sweep's report (results.json, report.md, chart.svg) in DIR.
Needs the installed collection (``make collection``).

Measured 2026-12-03 on the shared 2-core machine (simulator, ``--sweeps 5 --concurrency 8
--depths 10,5 --num-prompts 8 --output-len 64``, 3 rounds): reported tok/s moved by 7.7 %
(baseline), 20.7 % (depth 10) and 11.5 % (depth 5) over the 5 sweeps; every sweep named
depth 10 best at concurrency 8, and 4 of 5 reports said the rounds' spread did not establish it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_playbook import free_port, playbook  # noqa: E402  (tests/perf/local_playbook.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(ROOT, 'tests', 'sim')
LOCAL = os.path.join(ROOT, 'inventories', 'local')


def ints(text):
    return [int(item) for item in text.split(',') if item]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sweeps', type=int, default=5)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--concurrency', type=ints, default=[1, 8, 32])
    parser.add_argument('--depths', type=ints, default=[16, 10, 5])
    parser.add_argument('--num-prompts', type=int, default=16)
    parser.add_argument('--output-len', type=int, default=128)
    parser.add_argument('--quality', default='0.95', help='drafter quality of the simulator')
    parser.add_argument('--speed', default='0.5', help='SGLANG_SIM_SPEED (start-up phases only)')
    parser.add_argument('--keep', help='copy the last sweep\'s report folder here')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix='llmops-sweep-spread-') as work:
        subprocess.run([sys.executable, os.path.join(SIM, 'make_tiny_checkpoint.py'), os.path.join(work, 'checkpoints'),
                        '--quality', args.quality], check=True, capture_output=True)
        extra = {
            'llmops_local_dir': work, 'llmops_simulator_checkpoints': os.path.join(work, 'checkpoints'),
            'sglang_server_name': 'spread', 'sglang_server_port': free_port(),
            'sglang_server_env': {'PYTHONPATH': SIM, 'NVSIM_STATE_DIR': os.path.join(work, 'nvsim'),
                                  'SGLANG_SIM_SPEED': args.speed,
                                  'SGLANG_SIM_PHASES': 'imports=0.2,load=0.2,graphs=0.2,warmup=0.2'},
            'spec_sweep_depths': args.depths, 'spec_sweep_concurrency': args.concurrency,
            'spec_sweep_num_prompts': args.num_prompts, 'spec_sweep_input_len': 32,
            'spec_sweep_output_len': args.output_len, 'spec_sweep_warmup_requests': 2,
            'spec_sweep_rounds': args.rounds,
        }
        prepared = playbook('tests/sim/prepare_host.yml', LOCAL, extra)
        if prepared.returncode != 0:
            sys.exit('preparing the simulator failed:\n' + prepared.stdout[-3000:])
        figures, verdicts = {}, []
        try:
            for number in range(1, args.sweeps + 1):
                report = os.path.join(work, 'report-%d' % number)
                result = playbook('playbooks/benchmark.yml', LOCAL, dict(extra, spec_sweep_report_dir=report))
                if result.returncode != 0:
                    sys.exit('sweep %d failed:\n%s' % (number, result.stdout[-3000:]))
                with open(os.path.join(report, 'localhost', 'results.json'), encoding='utf-8') as handle:
                    results = json.load(handle)
                for cand in results['candidates']:
                    for run in cand['runs']:
                        figures.setdefault((cand['name'], run['concurrency']), []).append(run['output_throughput'])
                verdicts.append(results['best']['levels'])
                print('sweep %d done' % number, file=sys.stderr)
            if args.keep:
                shutil.copytree(os.path.join(report, 'localhost'), args.keep, dirs_exist_ok=True)
        finally:
            playbook('playbooks/stop.yml', LOCAL, extra)
    print('SGLang SIMULATOR (tests/sim test double, not GPU figures): %d sweeps, %d round(s) of %d prompts, '
          '%d output tokens' % (args.sweeps, args.rounds, args.num_prompts, args.output_len))
    print('%-10s %5s  %-48s %9s %9s %9s %7s' % ('candidate', 'conc', 'reported tok/s per sweep', 'min', 'median',
                                                'max', 'spread'))
    for (name, level), values in sorted(figures.items(), key=lambda item: (item[0][1], item[0][0])):
        ordered = sorted(values)
        median = ordered[len(ordered) // 2] if len(ordered) % 2 else sum(ordered[len(ordered) // 2 - 1:][:2]) / 2
        print('%-10s %5d  %-48s %9.1f %9.1f %9.1f %6.1f%%' % (
            name, level, ' '.join('%.0f' % v for v in values), ordered[0], median, ordered[-1],
            100.0 * (ordered[-1] - ordered[0]) / median))
    for level in args.concurrency:
        picks = ['%s%s' % (v[str(level)]['best'], '' if v[str(level)]['established'] else ' (not established)')
                 for v in verdicts]
        print('best at concurrency %d per sweep: %s' % (level, '; '.join(picks)))


if __name__ == '__main__':
    main()
