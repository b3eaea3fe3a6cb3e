"""tests/bench_compare.py: the comparison shared by the vLLM and the H200 cross-checks."""

from __future__ import annotations

import json

from bench_compare import agrees, compare, format_table, write_sharegpt


def run(tok_s, ttft, tpot, itl):
    return {'output_throughput': tok_s, 'ttft_ms': {'p50': ttft}, 'tpot_ms': {'mean': tpot, 'p50': tpot},
            'itl_ms': {'p50': itl}}


def test_compare_is_ratio_of_medians_and_overlap():
    mine = [run(100, 10, 2, 1), run(110, 12, 2, 1), run(90, 11, 2, 1)]
    theirs = [{'output_throughput': 200, 'median_ttft_ms': 10, 'mean_tpot_ms': 2, 'median_tpot_ms': 2},
              {'output_throughput': 220, 'median_ttft_ms': 12, 'mean_tpot_ms': 2, 'median_tpot_ms': 2}]
    table = compare(mine, theirs)
    # The reference left out ITL: no row for it.
    assert list(table) == ['output tok/s', 'TTFT p50 ms', 'TPOT mean ms', 'TPOT p50 ms']
    assert table['output tok/s']['ratio'] == 100 / 210
    assert not agrees(table['output tok/s']) and agrees(table['TTFT p50 ms'])


def test_format_table_nested_by_concurrency():
    mine, theirs = [run(100, 10, 2, 1)], [{'output_throughput': 50, 'median_ttft_ms': 10, 'mean_tpot_ms': 2,
                                           'median_tpot_ms': 2, 'median_itl_ms': 1}]
    text = format_table({'1': compare(mine, theirs), '8': compare(mine, theirs)}, theirs='sglang.bench_serving',
                        first_column='concurrency')
    lines = text.splitlines()
    assert lines[0].startswith('| concurrency | figure | llm_benchmark') and 'sglang.bench_serving' in lines[0]
    assert lines[2] == '| 1 | output tok/s | 100.00 / 100.00 / 100.00 | 50.00 / 50.00 / 50.00 | 2.00 | no |'
    assert len(lines) == 2 + 2 * 5
    flat = format_table(compare(mine, theirs)).splitlines()
    assert flat[0].startswith('| figure |') and flat[2].startswith('| output tok/s |')


def test_write_sharegpt(tmp_path):
    data = json.loads(write_sharegpt(tmp_path / 'p.json', 5, 8).read_text())
    assert len(data) == 5 and all(len(c['conversations']) == 2 and c['conversations'][0]['value'] for c in data)
