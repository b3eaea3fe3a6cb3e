"""llm_benchmark beside ``sglang.bench_serving`` on one running SGLang server (step bench_compare of proof.py).

The same prompts (one ShareGPT-format file, ``tests/bench_compare.py``), output length
(``ignore_eos``) and concurrency with each client in turn, after one unrecorded warm-up run at that
concurrency, rounds interleaved; llm_benchmark
uses SGLang's native ``/generate`` stream as ``bench_serving --backend sglang`` does. Writes
``compare.json`` (every run of both, and per concurrency the table of
``bench_compare.compare``) and ``compare.md`` (the ratio table) into ``--out``.
``sglang.bench_serving`` runs with the model path as tokenizer, so nothing is downloaded;
``LLMOPS_PROOF_PYTHONPATH`` is its PYTHONPATH (the installed wheels, or the simulator's
stand-in in a dry run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def bench_serving(args, dataset, concurrency, out_file):
    """One ``python -m sglang.bench_serving`` run: its result line, or ``{'error': ...}``."""
    argv = [sys.executable, '-m', 'sglang.bench_serving', '--backend', 'sglang', '--base-url', args.url,
            '--model', args.model, '--tokenizer', args.model, '--dataset-name', 'sharegpt',
            '--dataset-path', str(dataset), '--sharegpt-output-len', str(args.output_len),
            '--num-prompts', str(args.num_prompts), '--max-concurrency', str(concurrency),
            '--disable-tqdm', '--output-file', str(out_file)]
    env = dict(os.environ, PYTHONPATH=os.environ.get('LLMOPS_PROOF_PYTHONPATH', ''), HF_HUB_OFFLINE='1',
               TRANSFORMERS_OFFLINE='1')
    print('$ ' + ' '.join(argv[1:]), flush=True)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, check=False)
    print(done.stdout[-3000:] + done.stderr[-3000:], flush=True)
    lines = out_file.read_text().splitlines() if out_file.exists() else []
    if done.returncode != 0 or not lines:
        return {'error': 'exit status %s: %s' % (done.returncode, (done.stderr or done.stdout)[-500:])}
    return json.loads(lines[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--url', required=True)
    parser.add_argument('--model', required=True, help='model path (also the tokenizer)')
    parser.add_argument('--work', required=True, type=Path)
    parser.add_argument('--out', required=True, type=Path)
    parser.add_argument('--collections', required=True, help='folder holding ansible_collections/llmops/serving')
    parser.add_argument('--concurrency', type=int, nargs='+', default=[1, 8, 32])
    parser.add_argument('--num-prompts', type=int, default=64)
    parser.add_argument('--input-len', type=int, default=64)
    parser.add_argument('--output-len', type=int, default=128)
    parser.add_argument('--rounds', type=int, default=2)
    args = parser.parse_args(argv)
    sys.path[:0] = [args.collections, str(REPO / 'tests')]
    # pylint: disable=import-outside-toplevel
    from bench_compare import compare, format_table, ours, write_sharegpt

    args.work.mkdir(parents=True, exist_ok=True)
    dataset = write_sharegpt(args.work / 'sharegpt.json', args.num_prompts, args.input_len)
    data = {'settings': {k: v for k, v in vars(args).items() if k in ('concurrency', 'num_prompts', 'input_len',
                                                                      'output_len', 'rounds')},
            'runs': [], 'tables': {}, 'ours_errors': [], 'theirs_errors': []}
    for concurrency in args.concurrency:
        mine, theirs = [], []
        # Unrecorded: the first batches of a new size after a start stall (H200 phase h: bench_serving, run
        # first, had TTFT p99 3.3 s against a median of 76 ms at concurrency 32).
        ours(args.url, 'generate', dataset, args.num_prompts, args.output_len, concurrency)
        for number in range(args.rounds):
            theirs_run = bench_serving(args, dataset, concurrency, args.work / ('bench_serving-c%d-r%d.jsonl' % (
                concurrency, number)))
            run = ours(args.url, 'generate', dataset, args.num_prompts, args.output_len, concurrency)
            if theirs_run.get('completed') != args.num_prompts:
                data['theirs_errors'].append('c%d round %d: %s of %s completed %s' % (
                    concurrency, number, theirs_run.get('completed'), args.num_prompts, theirs_run.get('error', '')))
            else:
                theirs.append(theirs_run)
            if (run['completed'], run['failed']) != (args.num_prompts, 0):
                data['ours_errors'].append('c%d round %d: %s' % (concurrency, number, run['errors'][:3]))
            else:
                mine.append(run)
            data['runs'].append({'concurrency': concurrency, 'round': number, 'theirs': theirs_run,
                                 'ours': {k: v for k, v in run.items() if k != 'rounds'}})
            print('c%d round %d: llm_benchmark %.0f tok/s, bench_serving %s tok/s' % (
                concurrency, number, run['output_throughput'] or 0, theirs_run.get('output_throughput')), flush=True)
        if mine and theirs:
            data['tables'][str(concurrency)] = compare(mine, theirs)
    data['ours_complete'] = not data['ours_errors']
    data['theirs_complete'] = not data['theirs_errors']
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / 'compare.json').write_text(json.dumps(data, indent=1, default=str))
    table = format_table(data['tables'], theirs='sglang.bench_serving', first_column='concurrency')
    (args.out / 'compare.md').write_text(
        '%d prompts of %d words, %d tokens out (ignore_eos), %d rounds interleaved, same server; ratio = '
        'llm_benchmark / sglang.bench_serving\n\n%s\n' % (args.num_prompts, args.input_len, args.output_len,
                                                          args.rounds, table))
    print(table)
    return 0 if data['ours_complete'] and data['theirs_complete'] else 1


if __name__ == '__main__':
    sys.exit(main())
