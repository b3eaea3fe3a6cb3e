"""llm_benchmark beside a reference client (``vllm bench serve``, ``sglang.bench_serving``): shared parts.

Both clients read the same prompts (a ShareGPT-format file, :func:`write_sharegpt`), and each
figure is compared as min/median/max over interleaved rounds and the ratio of the medians
(ours / theirs). Used by ``tests/engines/bench_crosscheck.py`` (vLLM CPU engine) and
``tests/gpu/h200/bench_compare.py`` (real SGLang on the H200). The caller makes the collection
importable as ``ansible_collections.llmops.serving`` first.

The clients define the compared figures alike: output tokens per second of the run, TTFT
(request sent to first token), TPOT ((E2E - TTFT) / (output tokens - 1)) per request, ITL
(each chunk's gap divided over the tokens it carries).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from ansible_collections.llmops.serving.plugins.module_utils import _benchmark as bm

# (name, the reference client's key in its result JSON, llm_benchmark's figure of one run)
FIGURES = (
    ('output tok/s', 'output_throughput', lambda run: run['output_throughput']),
    ('TTFT p50 ms', 'median_ttft_ms', lambda run: run['ttft_ms']['p50']),
    ('TPOT mean ms', 'mean_tpot_ms', lambda run: run['tpot_ms']['mean']),
    ('TPOT p50 ms', 'median_tpot_ms', lambda run: run['tpot_ms']['p50']),
    ('ITL p50 ms', 'median_itl_ms', lambda run: run['itl_ms']['p50']),
)


def write_sharegpt(path: Path, num_prompts: int, input_len: int, seed: int = 0) -> Path:
    """The synthetic prompts of llm_benchmark as a ShareGPT-format file (every client reads it)."""
    conversations = [{'id': str(i), 'conversations': [{'from': 'human', 'value': p['prompt']},
                                                      {'from': 'gpt', 'value': 'x'}]}
                     for i, p in enumerate(bm.synthetic_prompts(num_prompts, input_len, 1, seed))]
    path.write_text(json.dumps(conversations))
    return path


def ours(url: str, api: str, dataset: Path, num_prompts: int, output_len: int, concurrency: int,
         model: str | None = None, api_key: str | None = None) -> dict:
    """One llm_benchmark run on the prompts of ``dataset`` (one warm-up request first, as the others)."""
    prompts = bm.load_dataset(str(dataset), num_prompts, output_len, seed=0)
    client = bm.Client(url, api_key=api_key, timeout=600)
    return bm.benchmark(client, api, prompts, [concurrency], model=model, warmup_requests=1)['runs'][0]


def spread(values: list[float]) -> dict:
    return {'min': min(values), 'median': statistics.median(values), 'max': max(values)}


def compare(mine: list[dict], theirs: list[dict]) -> dict:
    """``{figure: {'ours': spread, 'theirs': spread, 'ratio': median ratio}}`` over the rounds
    (figures the reference client did not report are left out)."""
    table = {}
    for name, key, figure in FIGURES:
        if not theirs or any(r.get(key) is None for r in theirs):
            continue
        a, b = spread([figure(r) for r in mine]), spread([r[key] for r in theirs])
        table[name] = {'ours': a, 'theirs': b, 'ratio': a['median'] / b['median'] if b['median'] else None}
    return table


def agrees(row: dict) -> bool:
    """The two clients agree when their ranges over the rounds overlap."""
    return row['ours']['min'] <= row['theirs']['max'] and row['theirs']['min'] <= row['ours']['max']


def format_table(table: dict, theirs: str = 'vllm bench serve', first_column: str = 'figure') -> str:
    """Markdown table; ``table`` is :func:`compare`'s, or ``{label: that}`` with first_column naming the label."""
    nested = table and not {'ours', 'theirs'} <= set(next(iter(table.values())))
    lines = ['| %s%s | llm_benchmark min / median / max | %s min / median / max | ratio of medians '
             '| ranges overlap |' % (first_column + ' | ' if nested else '', 'figure', theirs),
             '| --- %s| --- | --- | --- | --- |' % ('| --- ' if nested else '')]
    for label, rows in (table.items() if nested else [(None, table)]):
        for name, row in rows.items():
            lines.append('| %s%s | %s | %s | %s | %s |' % (
                '' if label is None else '%s | ' % label, name,
                ' / '.join('%.2f' % row['ours'][k] for k in ('min', 'median', 'max')),
                ' / '.join('%.2f' % row['theirs'][k] for k in ('min', 'median', 'max')),
                '-' if row['ratio'] is None else '%.2f' % row['ratio'], 'yes' if agrees(row) else 'no'))
    return '\n'.join(lines)
