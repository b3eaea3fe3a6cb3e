"""llm_benchmark agrees with a client nobody here wrote: ``vllm bench serve`` (issue 17).

Same vLLM CPU server (EAGLE-3, the good drafter: about 4 tokens per streamed chunk), same
prompts (one ShareGPT-format file), output length and concurrency, rounds interleaved with the
order alternating (bench_crosscheck.cross_check). Output tok/s and TTFT p50: llm_benchmark's
range over the rounds overlaps vllm bench serve's. TPOT mean: the ratio of the medians is within
0.5-1.5 (below). With 3 rounds of 1 s, always vllm bench serve first, one full run of the tests
read 0.63x of its output tok/s (ranges 458-754 against 865-1168): the engine's speed on the 2 shared
cores swings by up to 2x between back-to-back runs of one client (684-1194 tok/s, llm_benchmark
alone). 5 rounds of 2 s in alternating order make such a miss less likely. Both clients run on the
cores the engine leaves to its API server (cross_check: a client's thread on the worker's core read whole
responses at once). ``tests/perf/benchmark_vs_vllm_bench.py`` prints the same table.
"""

from __future__ import annotations

import pytest

from bench_crosscheck import agrees, cross_check, format_table


@pytest.mark.engine
def test_llm_benchmark_agrees_with_vllm_bench_serve(good_server, tmp_path):
    table = cross_check(good_server.url, good_server.model, tmp_path, client_cpus=good_server.cpus_beside_engine())
    print('\n' + format_table(table))
    for name in ('output tok/s', 'TTFT p50 ms'):
        assert agrees(table[name]), format_table(table)
    # vllm bench serve's TPOT swings by up to 40 % between runs here (its client shares the two cores
    # with the engine: 3.6-5.3 ms against our 3.1-3.2 ms in one run), so the TPOT ranges need not
    # overlap; a different definition (per request vs per token, s vs ms) would be off by far more.
    assert 0.5 <= table['TPOT mean ms']['ratio'] <= 1.5, format_table(table)
