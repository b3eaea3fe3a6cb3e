# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests of plugins/filter/sweep.py: the spec_sweep role's candidate list, best round and
ranking; on random sweeps they give what the role's former Jinja gave."""

from __future__ import annotations

import random

import pytest
from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.llmops.serving.plugins.filter.sweep import FilterModule

FILTERS = FilterModule().filters()

# The Jinja the filters replace (spec_sweep vars/main.yml, tasks/candidate.yml, tasks/report.yml).
OLD_CANDIDATES = """
  {%- set out = [{'name': 'baseline', 'depth': none, 'adaptive': false}] if spec_sweep_baseline | bool else [] -%}
  {%- for depth in spec_sweep_depths -%}
  {%- set _ = out.append({'name': 'depth %d' % (depth | int), 'depth': depth | int, 'adaptive': false}) -%}
  {%- endfor -%}
  {%- if spec_sweep_adaptive | bool and __spec_sweep_engine == 'sglang' -%}
  {%- set _ = out.append({'name': 'adaptive', 'depth': spec_sweep_depths | max, 'adaptive': true}) -%}
  {%- endif -%}
  {{ out }}"""
OLD_BEST_RUNS = """
          {%- set out = [] -%}
          {%- for level in spec_sweep_concurrency -%}
          {%- set rounds = __spec_sweep_bench.results | map(attribute='runs') | flatten
                           | selectattr('concurrency', 'eq', level) | list -%}
          {%- set _ = out.append(rounds | sort(attribute='output_throughput') | last
                                 | combine({'rounds_output_throughput': rounds | map(attribute='output_throughput') | list})) -%}
          {%- endfor -%}
          {{ out }}"""
OLD_BEST = """
      {%- set ns = namespace(name=none, score=0.0) -%}
      {%- for cand in __spec_sweep_results if cand.error is none and cand.runs | length > 0 -%}
      {%- set product = namespace(value=1.0) -%}
      {%- for run in cand.runs -%}{%- set product.value = product.value * (run.output_throughput or 0.0) -%}{%- endfor -%}
      {%- set score = product.value ** (1.0 / cand.runs | length) -%}
      {%- if score > ns.score -%}{%- set ns.name = cand.name -%}{%- set ns.score = score -%}{%- endif -%}
      {%- endfor -%}
      {{ {'name': ns.name, 'score': ns.score} }}"""
OLD_PER_CONCURRENCY = """
      {%- set out = {} -%}
      {%- for level in spec_sweep_concurrency -%}
      {%- set ns = namespace(name=none, value=0.0) -%}
      {%- for cand in __spec_sweep_results if cand.error is none -%}
      {%- for run in cand.runs if run.concurrency == level and (run.output_throughput or 0.0) > ns.value -%}
      {%- set ns.name = cand.name -%}{%- set ns.value = run.output_throughput -%}
      {%- endfor -%}
      {%- endfor -%}
      {%- set _ = out.update({level | string: ns.name}) -%}
      {%- endfor -%}
      {{ out }}"""


def old(template, **variables):
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(template.strip()))


def test_candidates():
    candidates = FILTERS['sweep_candidates']
    assert candidates([16, '10', 5], adaptive=True) == [
        {'name': 'baseline', 'depth': None, 'adaptive': False},
        {'name': 'depth 16', 'depth': 16, 'adaptive': False},
        {'name': 'depth 10', 'depth': 10, 'adaptive': False},
        {'name': 'depth 5', 'depth': 5, 'adaptive': False},
        {'name': 'adaptive', 'depth': 16, 'adaptive': True}]
    # Adaptive is SGLang's; 'false' as a string is false, as with Jinja's | bool.
    assert [c['name'] for c in candidates([4, 2], baseline='false', adaptive=True, engine='vllm')] == ['depth 4', 'depth 2']
    assert candidates([], baseline=True) == [{'name': 'baseline', 'depth': None, 'adaptive': False}]


def test_candidates_refuse_what_cannot_be_measured():
    with pytest.raises(AnsibleFilterError, match='adaptive candidate needs at least one depth'):
        FILTERS['sweep_candidates']([], adaptive=True)
    with pytest.raises(AnsibleFilterError, match="every depth must be an integer, got \\['ten'\\]"):
        FILTERS['sweep_candidates'](['ten'])


def test_best_rounds_keeps_the_fastest_round_and_every_figure():
    rounds = [{'runs': [{'concurrency': 1, 'output_throughput': 100.0, 'round': 1},
                        {'concurrency': 8, 'output_throughput': 700.0, 'round': 1}]},
              {'runs': [{'concurrency': 1, 'output_throughput': 120.0, 'round': 2},
                        {'concurrency': 8, 'output_throughput': 650.0, 'round': 2}]},
              {'runs': [{'concurrency': 1, 'output_throughput': 120.0, 'round': 3},
                        {'concurrency': 8, 'output_throughput': 690.0, 'round': 3}]}]
    best = FILTERS['sweep_best_rounds'](rounds, [1, 8])
    # Of equally fast rounds the last one counts (as the former sort | last did).
    assert [(run['concurrency'], run['round']) for run in best] == [(1, 3), (8, 1)]
    assert best[1]['rounds_output_throughput'] == [700.0, 650.0, 690.0]
    assert 'rounds_output_throughput' not in rounds[0]['runs'][1]


def test_best_rounds_names_a_level_no_round_measured():
    with pytest.raises(AnsibleFilterError, match='no benchmark run at concurrency 4'):
        FILTERS['sweep_best_rounds']([{'runs': [{'concurrency': 1, 'output_throughput': 1.0}]}], [1, 4])


def test_ranking_by_geometric_mean():
    def runs(at_1, at_8):
        return [{'concurrency': 1, 'output_throughput': at_1}, {'concurrency': 8, 'output_throughput': at_8}]

    results = [
        {'name': 'baseline', 'error': None, 'runs': runs(100.0, 400.0)},
        # Faster at 1, slower at 8, and a higher geometric mean (sqrt(300 * 600) > sqrt(200 * 700)).
        {'name': 'depth 10', 'error': None, 'runs': runs(300.0, 600.0)},
        {'name': 'depth 16', 'error': None, 'runs': runs(200.0, 700.0)},
        {'name': 'depth 30', 'error': 'out of memory', 'runs': [{'concurrency': 8, 'output_throughput': 9999.0}]},
    ]
    ranking = FILTERS['sweep_ranking'](results, [1, 8])
    assert ranking['name'] == 'depth 10'
    assert ranking['score'] == pytest.approx((300.0 * 600.0) ** 0.5)
    assert ranking['per_concurrency'] == {'1': 'depth 10', '8': 'depth 16'}
    assert ranking['rank_by'] == 'geometric mean of output tokens/s over the concurrency levels'


def test_ranking_when_every_candidate_failed():
    results = [{'name': 'depth 5', 'error': 'crash', 'runs': []},
               {'name': 'depth 10', 'error': None, 'runs': [{'concurrency': 8, 'output_throughput': None}]}]
    assert FILTERS['sweep_ranking'](results, [8]) == {
        'name': None, 'score': 0.0, 'per_concurrency': {'8': None},
        'rank_by': 'geometric mean of output tokens/s over the concurrency levels'}


def random_sweep(rng):
    levels = rng.sample([1, 2, 4, 8, 16, 32], rng.randint(1, 3))
    results = []
    for index in range(rng.randint(1, 5)):
        failed = rng.random() < 0.2
        runs = [] if failed and rng.random() < 0.5 else [
            {'concurrency': level, 'output_throughput': rng.choice([None, 0.0, 50.0, round(rng.uniform(1, 2000), 3)])}
            for level in levels]
        results.append({'name': 'c%d' % index, 'error': 'failed' if failed else None, 'runs': runs})
    rounds = [{'runs': [{'concurrency': level, 'output_throughput': rng.choice([10.0, round(rng.uniform(1, 900), 2)]),
                         'round': n} for level in levels]} for n in range(rng.randint(1, 4))]
    return levels, results, rounds


@pytest.mark.parametrize('seed', range(12))
def test_filters_give_what_the_former_jinja_gave(seed):
    rng = random.Random(seed)
    levels, results, rounds = random_sweep(rng)
    variables = {'spec_sweep_concurrency': levels, '__spec_sweep_results': results,
                 '__spec_sweep_bench': {'results': rounds}}
    ranking = FILTERS['sweep_ranking'](results, levels)
    assert {'name': ranking['name'], 'score': ranking['score']} == old(OLD_BEST, **variables)
    assert ranking['per_concurrency'] == old(OLD_PER_CONCURRENCY, **variables)
    assert FILTERS['sweep_best_rounds'](rounds, levels) == old(OLD_BEST_RUNS, **variables)
    depths = rng.sample(range(2, 20), rng.randint(1, 4))
    baseline, adaptive, engine = rng.random() < 0.5, rng.random() < 0.5, rng.choice(['sglang', 'vllm'])
    assert FILTERS['sweep_candidates'](depths, baseline=baseline, adaptive=adaptive, engine=engine) == old(
        OLD_CANDIDATES, spec_sweep_depths=depths, spec_sweep_baseline=baseline, spec_sweep_adaptive=adaptive,
        __spec_sweep_engine=engine)
