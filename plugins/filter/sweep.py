# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the spec_sweep role: which candidates to measure, which round of a
candidate counts, and which candidate is best. Each filter is documented in the YAML
file of its name next to this one."""

from __future__ import annotations

import math

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

RANK_BY = 'geometric mean of output tokens/s over the concurrency levels'


def _throughput(run):
    return run.get('output_throughput') or 0.0


def sweep_candidates(depths, baseline=True, adaptive=False, engine='sglang'):
    """One entry ``{name, depth, adaptive}`` per server configuration to measure, in order:
    the baseline (depth None: no speculative decoding), each depth, then SGLang's adaptive
    mode at the largest depth (SGLang only)."""
    try:
        depths = [int(depth) for depth in depths or []]
    except (TypeError, ValueError):
        raise AnsibleFilterError('sweep_candidates: every depth must be an integer, got %r' % (depths,))
    out = [{'name': 'baseline', 'depth': None, 'adaptive': False}] if boolean(baseline) else []
    out.extend({'name': 'depth %d' % depth, 'depth': depth, 'adaptive': False} for depth in depths)
    if boolean(adaptive) and engine == 'sglang':
        if not depths:
            raise AnsibleFilterError('sweep_candidates: the adaptive candidate needs at least one depth')
        out.append({'name': 'adaptive', 'depth': max(depths), 'adaptive': True})
    return out


def sweep_best_rounds(rounds, concurrency):
    """Per concurrency level, the run of the round with the highest output throughput (work
    from elsewhere on the host only ever slows a round down), with every round's figure in
    ``rounds_output_throughput``. ``rounds``: the llm_benchmark results, one per round."""
    runs = [run for result in rounds or [] for run in result.get('runs') or []]
    out = []
    for level in concurrency:
        at_level = [run for run in runs if run.get('concurrency') == level]
        if not at_level:
            raise AnsibleFilterError('sweep_best_rounds: no benchmark run at concurrency %s' % level)
        # Stable sort, last item: of equal rounds the last one counts.
        best = sorted(at_level, key=_throughput)[-1]
        out.append(dict(best, rounds_output_throughput=[run.get('output_throughput') for run in at_level]))
    return out


def sweep_ranking(results, concurrency):
    """The best candidate overall (highest geometric mean of output tokens/s over its runs;
    failed candidates and those without runs never win; the first of equals wins) and per
    concurrency level (highest output tokens/s)."""
    name, score = None, 0.0
    for cand in results or []:
        runs = cand.get('runs') or []
        if cand.get('error') is not None or not runs:
            continue
        candidate_score = math.prod(_throughput(run) for run in runs) ** (1.0 / len(runs))
        if candidate_score > score:
            name, score = cand['name'], candidate_score
    per_concurrency = {}
    for level in concurrency:
        best, value = None, 0.0
        for cand in results or []:
            if cand.get('error') is not None:
                continue
            for run in cand.get('runs') or []:
                if run.get('concurrency') == level and _throughput(run) > value:
                    best, value = cand['name'], run['output_throughput']
        per_concurrency[str(level)] = best
    return {'name': name, 'score': score, 'rank_by': RANK_BY, 'per_concurrency': per_concurrency}


class FilterModule:
    def filters(self):
        return {
            'sweep_candidates': sweep_candidates,
            'sweep_best_rounds': sweep_best_rounds,
            'sweep_ranking': sweep_ranking,
        }
