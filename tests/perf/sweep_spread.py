# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How much does the sweep's reported output tok/s move from one sweep to the next, before
and after the benchmark rework?

Runs ``playbooks/benchmark.yml`` N times per method on this machine and prints, per method,
candidate and concurrency level, the figure each sweep reported (the median of its rounds)
and the spread over the sweeps ((max - min) / median), then which candidate each sweep named
best per load and whether its report called that established. The methods:

- ``before``: one short round per concurrency level (``--before-rounds 1``, no minimum
  duration), as the sweep measured before the benchmark rework (the warm-up at the run's
  own concurrency, which the rework also brought, stays);
- ``after``: ``--rounds`` rounds (figure = their median), each lasting at least
  ``--min-duration`` seconds.

Engines:

- ``--engine sim`` (default): the SGLang simulator (inventories/local; a test double whose
  timing model is no GPU figure), candidates baseline and ``--depths``;
- ``--engine vllm``: the real vLLM CPU engine (tests/engines, venv ``$LLMOPS_ENGINE_VENV`` or
  ``.cache/vllm-venv``) on its tiny models, one candidate: depth ``--depths``' first, which is
  also the host's deployed depth, so that the engine starts once and every sweep measures the
  same running server (a vLLM start takes minutes on 2 cores). Run it under the fleet lock.

    .venv/bin/python tests/perf/sweep_spread.py [--engine sim|vllm] [--sweeps 5] [--rounds 3]
        [--min-duration 3] [--before-rounds 1] [--methods before,after] [--concurrency 1,8,32]
        [--depths 16,10,5] [--num-prompts 16] [--output-len 128] [--keep DIR]

``--keep DIR`` keeps the last sweep's report (results.json, report.md, chart.svg) in DIR.
Needs the installed collection (``make collection``). Figures measured with it are in
roles/spec_sweep/README.md.
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
ENGINES = os.path.join(ROOT, 'tests', 'engines')
LOCAL = os.path.join(ROOT, 'inventories', 'local')
ENGINE_PYTHON = os.path.join(os.environ.get('LLMOPS_ENGINE_VENV', os.path.join(ROOT, '.cache', 'vllm-venv')),
                             'bin', 'python')


def ints(text):
    return [int(item) for item in text.split(',') if item]


def sim_setup(args, work):
    """The local inventory with the simulator: (inventory, extra vars, label of the figures)."""
    subprocess.run([sys.executable, os.path.join(SIM, 'make_tiny_checkpoint.py'), os.path.join(work, 'checkpoints'),
                    '--quality', args.quality], check=True, capture_output=True)
    extra = {
        'llmops_local_dir': work, 'llmops_simulator_checkpoints': os.path.join(work, 'checkpoints'),
        'sglang_server_name': 'spread', 'sglang_server_port': free_port(),
        'sglang_server_env': {'PYTHONPATH': SIM, 'NVSIM_STATE_DIR': os.path.join(work, 'nvsim'),
                              'SGLANG_SIM_SPEED': args.speed,
                              'SGLANG_SIM_PHASES': 'imports=0.2,load=0.2,graphs=0.2,warmup=0.2'},
        'spec_sweep_depths': args.depths,
    }
    prepared = playbook('tests/sim/prepare_host.yml', LOCAL, extra)
    if prepared.returncode != 0:
        sys.exit('preparing the simulator failed:\n' + prepared.stdout[-3000:])
    return LOCAL, extra, 'SGLang SIMULATOR (tests/sim test double, not GPU figures)'


def vllm_setup(args, work):
    """This machine as a local host serving the tiny models on the vLLM CPU engine."""
    if not os.path.exists(ENGINE_PYTHON):
        sys.exit('no engine venv at %s: run tests/engines/install_vllm.sh' % ENGINE_PYTHON)
    models = os.path.join(work, 'models')
    subprocess.run([ENGINE_PYTHON, os.path.join(ENGINES, 'make_models.py'), models, '--shape', 'cpu'],
                   check=True, capture_output=True, timeout=600)
    with open(os.path.join(models, 'manifest.json'), encoding='utf-8') as handle:
        manifest = json.load(handle)
    nvsim = os.path.join(work, 'nvsim')
    subprocess.run([sys.executable, os.path.join(SIM, 'nvsim.py'), 'init', '--count', '1'], check=True,
                   capture_output=True, env=dict(os.environ, NVSIM_STATE_DIR=nvsim))
    depth = args.depths[0]
    # The candidate's values live in the inventory (the sweep refuses them as extra vars); the
    # deployed depth is the candidate's, so neither the candidate nor the restore restarts the engine.
    inventory = os.path.join(work, 'inventory.json')
    with open(inventory, 'w', encoding='utf-8') as handle:
        json.dump({'all': {'hosts': {'localhost': {
            'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
            'sglang_server_speculative_draft_model_path': os.path.join(
                models, manifest['drafters']['good-layers0']['path']),
            'sglang_server_speculative_depth': depth}}}}, handle)
    extra = {
        'sglang_server_engine': 'vllm', 'sglang_server_python': ENGINE_PYTHON, 'sglang_server_user': '',
        'sglang_server_launcher': 'process', 'sglang_server_name': 'vllm-spread',
        'sglang_server_model_path': os.path.join(models, manifest['target']['path']),
        'sglang_server_tp_size': 1, 'sglang_server_port': free_port(),
        'sglang_server_extra_args': ['--max-model-len', '1024', '--dtype', 'bfloat16', '--enforce-eager'],
        'sglang_server_env': {'HF_HUB_OFFLINE': '1', 'TRANSFORMERS_OFFLINE': '1', 'VLLM_CPU_KVCACHE_SPACE': '1',
                              'VLLM_NO_USAGE_STATS': '1'},
        'sglang_server_config_dir': os.path.join(work, 'etc'), 'sglang_server_run_dir': os.path.join(work, 'run'),
        'sglang_server_log_path': os.path.join(work, 'server.log'), 'sglang_server_health_timeout': 600,
        'gpu_preflight_nvidia_smi_path': os.path.join(SIM, 'nvidia-smi'),
        'gpu_preflight_environment': {'NVSIM_STATE_DIR': nvsim},
        'spec_sweep_depths': [depth], 'spec_sweep_baseline': False,
    }
    return inventory, extra, 'vLLM CPU engine (tests/engines tiny models on a shared 2-core machine, not GPU figures)'


def sweeps(args, inventory, extra, method, work):
    """Run the sweeps of one method: ({(candidate, concurrency): [tok/s per sweep]}, [levels per sweep])."""
    rounds, min_duration = (args.before_rounds, 0) if method == 'before' else (args.rounds, args.min_duration)
    figures, verdicts = {}, []
    for number in range(1, args.sweeps + 1):
        report = os.path.join(work, 'report-%s-%d' % (method, number))
        result = playbook('playbooks/benchmark.yml', inventory, dict(
            extra, spec_sweep_report_dir=report, spec_sweep_rounds=rounds, spec_sweep_min_duration=min_duration))
        if result.returncode != 0:
            sys.exit('%s sweep %d failed:\n%s' % (method, number, result.stdout[-3000:]))
        with open(os.path.join(report, 'localhost', 'results.json'), encoding='utf-8') as handle:
            results = json.load(handle)
        for cand in results['candidates']:
            for run in cand['runs']:
                figures.setdefault((cand['name'], run['concurrency']), []).append(run['output_throughput'])
        verdicts.append(results['best']['levels'])
        print('%s sweep %d done' % (method, number), file=sys.stderr)
    if args.keep:
        shutil.copytree(os.path.join(report, 'localhost'), os.path.join(args.keep, method), dirs_exist_ok=True)
    return figures, verdicts


def median(values):
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


def show(args, method, figures, verdicts):
    rounds = ('%d round(s), no minimum duration' % args.before_rounds if method == 'before'
              else '%d round(s) of at least %g s' % (args.rounds, args.min_duration))
    print('%s: %d sweeps, %s, %d prompts, %d output tokens' % (method, args.sweeps, rounds, args.num_prompts,
                                                               args.output_len))
    print('  %-10s %5s  %-48s %9s %9s %9s %7s' % ('candidate', 'conc', 'reported tok/s per sweep', 'min', 'median',
                                                  'max', 'spread'))
    for (name, level), values in sorted(figures.items(), key=lambda item: (item[0][1], item[0][0])):
        mid = median(values)
        print('  %-10s %5d  %-48s %9.1f %9.1f %9.1f %6.1f%%' % (
            name, level, ' '.join('%.0f' % v for v in values), min(values), mid, max(values),
            100.0 * (max(values) - min(values)) / mid))
    for level in args.concurrency:
        picks = ['%s%s' % (v[str(level)]['best'], '' if v[str(level)]['established'] else ' (not established)')
                 for v in verdicts]
        print('  best at concurrency %d per sweep: %s' % (level, '; '.join(picks)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--engine', choices=('sim', 'vllm'), default='sim')
    parser.add_argument('--sweeps', type=int, default=5)
    parser.add_argument('--methods', default='before,after', help='before, after or both (comma-separated)')
    parser.add_argument('--rounds', type=int, default=3, help='rounds of the "after" method')
    parser.add_argument('--min-duration', type=float, default=3.0, help='seconds per round of the "after" method')
    parser.add_argument('--before-rounds', type=int, default=1, help='rounds of the "before" method')
    parser.add_argument('--concurrency', type=ints, default=[1, 8, 32])
    parser.add_argument('--depths', type=ints, default=[16, 10, 5], help='vllm: the first one only')
    parser.add_argument('--num-prompts', type=int, default=16)
    parser.add_argument('--input-len', type=int, default=32)
    parser.add_argument('--output-len', type=int, default=128)
    parser.add_argument('--quality', default='0.95', help='drafter quality of the simulator')
    parser.add_argument('--speed', default='0.5', help='SGLANG_SIM_SPEED of the simulator')
    parser.add_argument('--keep', help='copy the last sweep\'s report folder of each method here')
    args = parser.parse_args()
    methods = [m for m in args.methods.split(',') if m]
    if not methods or set(methods) - {'before', 'after'}:
        parser.error('--methods takes before, after or both')
    with tempfile.TemporaryDirectory(prefix='llmops-sweep-spread-') as work:
        inventory, extra, label = (vllm_setup if args.engine == 'vllm' else sim_setup)(args, work)
        extra.update({'spec_sweep_concurrency': args.concurrency, 'spec_sweep_num_prompts': args.num_prompts,
                      'spec_sweep_input_len': args.input_len, 'spec_sweep_output_len': args.output_len,
                      'spec_sweep_warmup_requests': 2})
        measured = {}
        try:
            for method in methods:
                measured[method] = sweeps(args, inventory, extra, method, work)
        finally:
            playbook('playbooks/stop.yml', inventory, extra)
    print(label)
    for method in methods:
        show(args, method, *measured[method])


if __name__ == '__main__':
    main()
