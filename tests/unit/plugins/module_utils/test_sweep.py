# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests of plugins/module_utils/_sweep.py: the spec_sweep role's candidate list and ranking (on
random sweeps they give what the role's former Jinja gave), the verdict on the rounds'
spread, and the chart."""

from __future__ import annotations

import random

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.llmops.serving.plugins.module_utils import _sweep

# The Jinja these functions replace (spec_sweep vars/main.yml, tasks/candidate.yml, tasks/report.yml).
OLD_CANDIDATES = """
  {%- set out = [{'name': 'baseline', 'depth': none, 'adaptive': false}] if spec_sweep_baseline | bool else [] -%}
  {%- for depth in spec_sweep_depths -%}
  {%- set _ = out.append({'name': 'depth %d' % (depth | int), 'depth': depth | int, 'adaptive': false}) -%}
  {%- endfor -%}
  {%- if spec_sweep_adaptive | bool and __spec_sweep_engine == 'sglang' -%}
  {%- set _ = out.append({'name': 'adaptive', 'depth': spec_sweep_depths | max, 'adaptive': true}) -%}
  {%- endif -%}
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
    candidates = _sweep.sweep_candidates
    assert candidates([16, '10', 5], adaptive=True) == [
        {'name': 'baseline', 'depth': None, 'adaptive': False},
        {'name': 'depth 16', 'depth': 16, 'adaptive': False},
        {'name': 'depth 10', 'depth': 10, 'adaptive': False},
        {'name': 'depth 5', 'depth': 5, 'adaptive': False},
        {'name': 'adaptive', 'depth': 8, 'adaptive': True}]
    # Adaptive is SGLang's; 'false' as a string is false, as with Jinja's | bool.
    assert [c['name'] for c in candidates([4, 2], baseline='false', adaptive=True, engine='vllm')] == ['depth 4', 'depth 2']
    assert candidates([], baseline=True) == [{'name': 'baseline', 'depth': None, 'adaptive': False}]


@pytest.mark.parametrize('version, label', [
    # The release's default candidate steps per batch-size tier (tests/releases/fixtures 'adaptive').
    ('0.5.15.post1', 'adaptive {1:[1,3,7], 8:[0,1,3], 32:[0,1], 64:[0]}'),
    ('0.5.23', 'adaptive {1:[1,3,5,7], 8:[0,1,3], 32:[0,1], 64:[0]}'),
    ('0.5.13.post1', 'adaptive {1:[1,3,7], 8:[1,3], 32:[1]}'),
    ('0.5.11', 'adaptive {1:[1,3,7]}'),
    (None, 'adaptive (candidate steps per batch size depend on the SGLang version, unknown here)'),
])
def test_adaptive_label_says_what_sglang_runs(version, label):
    adaptive = _sweep.sweep_candidates([16, 10, 5], adaptive=True)[-1]
    assert _sweep.sweep_label(adaptive, version) == label
    assert _sweep.sweep_label({'name': 'depth 5', 'depth': 5, 'adaptive': False}, version) == 'depth 5'
    tiers = {'name': 'adaptive tiers', 'depth': 16, 'adaptive': True, 'tiers': {'32': [4], '1': [15]}}
    assert _sweep.sweep_label(tiers, version) == 'adaptive {1:[15], 32:[4]}'


def test_candidates_refuse_what_cannot_be_measured():
    with pytest.raises(_sweep.SweepError, match='adaptive candidate needs at least one depth'):
        _sweep.sweep_candidates([], adaptive=True)
    with pytest.raises(_sweep.SweepError, match="every depth must be an integer, got \\['ten'\\]"):
        _sweep.sweep_candidates(['ten'])


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
    ranking = _sweep.sweep_ranking(results, [1, 8])
    assert ranking['name'] == 'depth 10'
    assert ranking['score'] == pytest.approx((300.0 * 600.0) ** 0.5)
    assert ranking['per_concurrency'] == {'1': 'depth 10', '8': 'depth 16'}
    assert ranking['rank_by'] == 'geometric mean of output tokens/s over the concurrency levels'


def test_ranking_when_every_candidate_failed():
    results = [{'name': 'depth 5', 'error': 'crash', 'runs': []},
               {'name': 'depth 10', 'error': None, 'runs': [{'concurrency': 8, 'output_throughput': None}]}]
    ranking = _sweep.sweep_ranking(results, [8])
    assert (ranking['name'], ranking['score'], ranking['per_concurrency']) == (None, 0.0, {'8': None})
    assert ranking['levels']['8'] == {'best': None, 'runner_up': None, 'speedup': None, 'established': False,
                                      'why': 'no candidate completed at this concurrency', 'short': 'no candidate'}


def random_sweep(rng):
    levels = rng.sample([1, 2, 4, 8, 16, 32], rng.randint(1, 3))
    results = []
    for index in range(rng.randint(1, 5)):
        failed = rng.random() < 0.2
        runs = [] if failed and rng.random() < 0.5 else [
            {'concurrency': level, 'output_throughput': rng.choice([None, 0.0, 50.0, round(rng.uniform(1, 2000), 3)])}
            for level in levels]
        results.append({'name': 'c%d' % index, 'error': 'failed' if failed else None, 'runs': runs})
    return levels, results


@pytest.mark.parametrize('seed', range(12))
def test_the_functions_give_what_the_former_jinja_gave(seed):
    rng = random.Random(seed)
    levels, results = random_sweep(rng)
    variables = {'spec_sweep_concurrency': levels, '__spec_sweep_results': results}
    ranking = _sweep.sweep_ranking(results, levels)
    assert {'name': ranking['name'], 'score': ranking['score']} == old(OLD_BEST, **variables)
    assert ranking['per_concurrency'] == old(OLD_PER_CONCURRENCY, **variables)
    depths = rng.sample(range(2, 20), rng.randint(1, 4))
    baseline, adaptive, engine = rng.random() < 0.5, rng.random() < 0.5, rng.choice(['sglang', 'vllm'])
    # One intended change: the adaptive candidate's depth is where SGLang starts it (8), not the largest depth.
    assert _sweep.sweep_candidates(depths, baseline=baseline, adaptive=adaptive, engine=engine) == [
        dict(c, depth=8) if c['adaptive'] else c for c in old(
            OLD_CANDIDATES, spec_sweep_depths=depths, spec_sweep_baseline=baseline, spec_sweep_adaptive=adaptive,
            __spec_sweep_engine=engine)]


# ---------------------------------------------------------------- spread of the rounds

def measured(level, low, median, high, accept=None, rounds=3):
    """A run as llm_benchmark returns it: the median, and min/median/max over ``rounds`` rounds."""
    return {'concurrency': level, 'output_throughput': median, 'accept_length': accept,
            'spread': {'output_throughput': {'min': low, 'median': median, 'max': high},
                       'accept_length': {'min': accept, 'median': accept, 'max': accept} if accept else None},
            'rounds': [{'round': n} for n in range(1, rounds + 1)]}


def cand(name, depth, *runs, adaptive=False):
    return {'name': name, 'depth': depth, 'adaptive': adaptive, 'error': None, 'runs': list(runs)}


def test_ranking_is_established_when_every_round_of_the_best_beat_the_runner_up():
    results = [cand('baseline', None, measured(8, 480.0, 500.0, 520.0)),
               cand('depth 10', 10, measured(8, 980.0, 1000.0, 1010.0)),
               cand('depth 5', 5, measured(8, 900.0, 930.0, 960.0))]
    level = _sweep.sweep_ranking(results, [8])['levels']['8']
    assert (level['best'], level['runner_up'], level['established']) == ('depth 10', 'depth 5', True)
    assert level['why'] == 'every round of depth 10 beat every round of depth 5'
    # Speed-up: median over median, and the worst / best pairing of rounds.
    assert level['speedup'] == pytest.approx({'min': 980.0 / 520.0, 'median': 2.0, 'max': 1010.0 / 480.0})
    assert level['output_throughput'] == {'min': 980.0, 'median': 1000.0, 'max': 1010.0, 'rounds': 3}


@pytest.mark.parametrize('runner_up, rounds, max_spread, short, why', [
    # depth 5's fastest round (990) beat depth 10's slowest (980).
    ((900.0, 950.0, 990.0), 3, 0.1, 'rounds overlap depth 5',
     'the rounds overlap: depth 10 980.0-1010.0 tok/s (3%) against depth 5 900.0-990.0 tok/s (9%)'),
    # Apart, but depth 5 varied by 30 % from round to round.
    ((700.0, 800.0, 940.0), 3, 0.1, 'spread too wide',
     'spread too wide to rank (over 10%): depth 5 700.0-940.0 tok/s (30%)'),
    # The same figures pass with a wider limit.
    ((700.0, 800.0, 940.0), 3, 0.5, 'ahead of depth 5 in every round', 'every round of depth 10 beat every round of depth 5'),
    # One round: nothing is known about the spread.
    ((800.0, 800.0, 800.0), 1, 0.1, 'one round, spread unknown',
     'one round per candidate: the run-to-run spread is unknown (set spec_sweep_rounds to 3 or more)'),
])
def test_ranking_says_when_the_spread_is_too_wide_to_rank(runner_up, rounds, max_spread, short, why):
    best = (980.0, 1000.0, 1010.0) if rounds > 1 else (1000.0, 1000.0, 1000.0)
    results = [cand('depth 10', 10, measured(8, *best, rounds=rounds)),
               cand('depth 5', 5, measured(8, *runner_up, rounds=rounds))]
    level = _sweep.sweep_ranking(results, [8], max_spread=max_spread)['levels']['8']
    assert level['best'] == 'depth 10'
    assert (level['established'], level['short'], level['why']) == (short.startswith('ahead'), short, why)
    assert level['speedup'] is None  # no baseline


# ---------------------------------------------------------------- chart

SVG = '{http://www.w3.org/2000/svg}'


def sweep_doc(simulator=True):
    """Three loads where a different depth wins (as the simulator's speed model makes it), and adaptive."""
    candidates = [
        cand('baseline', None, measured(1, 98.0, 100.0, 103.0), measured(32, 1450.0, 1500.0, 1530.0)),
        cand('depth 16', 16, measured(1, 250.0, 260.0, 266.0, 7.5), measured(32, 1250.0, 1300.0, 1330.0, 7.5)),
        cand('depth 10', 10, measured(1, 232.0, 240.0, 244.0, 6.7), measured(32, 1650.0, 1700.0, 1760.0, 6.7)),
        cand('depth 5', 5, measured(1, 185.0, 190.0, 195.0, 4.4), measured(32, 1760.0, 1800.0, 1830.0, 4.4)),
        cand('adaptive', 16, measured(1, 236.0, 245.0, 249.0, 7.4), measured(32, 1560.0, 1600.0, 1640.0, 4.6),
             adaptive=True),
        {'name': 'depth 32', 'depth': 32, 'adaptive': False, 'error': 'out of memory', 'runs': []},
    ]
    return {'host': 'gpu-01', 'simulator': simulator, 'settings': {'concurrency': [1, 32], 'engine': 'sglang', 'rounds': 3},
            'versions': {'engine': '0.5.15.post1'}, 'candidates': candidates,
            'best': _sweep.sweep_ranking(candidates, [1, 32])}


def parse(svg):
    import xml.etree.ElementTree as ET
    return ET.fromstring(svg)


def points(element):
    return [tuple(map(float, p.split(','))) for p in element.get('points').split()]


def test_chart_draws_depths_to_scale_and_the_best_of_each_load():
    root = parse(_sweep.sweep_chart(sweep_doc()))
    lines = {(e.get('class'), e.get('data-concurrency')): points(e) for e in root.iter(SVG + 'polyline')}
    assert set(lines) == {(kind, level) for kind in ('throughput', 'speedup-line', 'accept-line') for level in ('1', '32')}
    xs = [x for x, y in lines[('throughput', '1')]]
    # Depths 5, 10, 16: the gaps are 5 and 6 depths wide on the axis.
    assert (xs[1] - xs[0]) / (xs[2] - xs[1]) == pytest.approx(5.0 / 6.0, rel=0.01)
    # At 1 request depth 16 is highest (SVG y grows downwards), at 32 depth 5.
    ys1 = [y for x, y in lines[('throughput', '1')]]
    ys32 = [y for x, y in lines[('throughput', '32')]]
    assert min(ys1) == ys1[2] and min(ys32) == ys32[0]
    texts = [t.text for t in root.iter(SVG + 'text')]
    assert 'Speculative depth sweep on gpu-01 (best overall: depth 10)' in texts
    assert texts.count('adaptive') == 4  # its own slot on every panel's axis
    # Each load's best is ringed; a failed candidate is not drawn.
    assert len([e for e in root.iter(SVG + 'circle') if e.get('class') == 'best']) == 2
    assert not any('32' == t for t in texts if t)


def test_chart_fits_the_axes_and_shows_spread_and_speed_up():
    root = parse(_sweep.sweep_chart(sweep_doc()))
    ticks = [t.text for t in root.iter(SVG + 'text') if t.get('class') == 'ytick']
    # Concurrency 32 spans 1250..1830 tok/s: its axis starts near the data, not at 0.
    assert ticks[ticks.index('1200'):ticks.index('1200') + 4] == ['1200', '1400', '1600', '1800']
    assert '0' not in ticks
    # One bar per point: 4 per throughput panel, 4 per level in speed-up and acceptance.
    bars = [e for e in root.iter(SVG + 'line') if e.get('class') == 'spread']
    assert len(bars) == 2 * 4 + 2 * 4 + 2 * 4
    speedups = [t.text for t in root.iter(SVG + 'text') if t.get('class') == 'speedup']
    assert speedups == ['2.60x', '2.40x', '1.90x', '2.45x', '0.87x', '1.13x', '1.20x', '1.07x']
    assert len([e for e in root.iter(SVG + 'rect') if e.get('class') == 'baseline-band']) == 2
    verdicts = [t.text for t in root.iter(SVG + 'text') if t.get('class') == 'verdict']
    assert verdicts == ['depth 16: ahead of adaptive in every round', 'best not established (rounds overlap depth 10)']


def test_chart_keeps_overlapping_series_apart():
    root = parse(_sweep.sweep_chart(sweep_doc()))
    accept = {e.get('data-concurrency'): points(e) for e in root.iter(SVG + 'polyline') if e.get('class') == 'accept-line'}
    # Same acceptance at both loads: same heights, drawn side by side, different markers.
    assert [y for x, y in accept['1']] == [y for x, y in accept['32']]
    assert all(x32 - x1 > 3 for (x1, dummy), (x32, dummy2) in zip(accept['1'], accept['32']))


def wide_speedup_doc():
    """Speed-ups from 1x to 12x and acceptance lengths from 1.5 to 8.5: axes stepped by 2.5 (or 0.5)."""
    candidates = [cand('baseline', None, measured(1, 98.0, 100.0, 102.0)),
                  cand('depth 16', 16, measured(1, 1150.0, 1200.0, 1210.0, 8.5)),
                  cand('depth 10', 10, measured(1, 600.0, 620.0, 630.0, 5.0)),
                  cand('depth 3', 3, measured(1, 140.0, 150.0, 155.0, 1.5))]
    return {'host': 'gpu-01', 'simulator': False, 'settings': {'concurrency': [1], 'engine': 'sglang', 'rounds': 3},
            'versions': {'engine': '0.5.15.post1'}, 'candidates': candidates,
            'best': _sweep.sweep_ranking(candidates, [1])}


@pytest.mark.parametrize('doc', [sweep_doc(), wide_speedup_doc()], ids=['sweep', 'wide'])
def test_chart_labels_every_tick_with_its_value(doc):
    """On every panel the y tick labels are the values at the ticks' heights: evenly spaced
    values on evenly spaced lines (the old labels of ticks 0, 2.5, 5, 7.5 read 0, 2, 5, 8)."""
    root = parse(_sweep.sweep_chart(doc))
    panels = {}
    for tick in root.iter(SVG + 'text'):
        if tick.get('class') == 'ytick':
            panels.setdefault(tick.get('x'), {}).setdefault(float(tick.get('y')), []).append(tick.text)
    assert panels
    checked = 0
    for column in panels.values():
        # the panels of one column share x: split them where the labels start again from the bottom
        rows = sorted(column.items())
        labels = [label for y, texts in rows for label in texts]
        heights = [y for y, texts in rows for label in texts]
        values = [float(label) for label in labels]
        panel, runs = [], []
        for y, value, label in zip(heights, values, labels):
            if panel and value >= panel[-1][1]:
                runs.append(panel)
                panel = []
            panel.append((y, value, label))
        runs.append(panel)
        for run in runs:
            steps = {round(b[1] - a[1], 9) for a, b in zip(run, run[1:])}
            gaps = {round(b[0] - a[0], 0) for a, b in zip(run, run[1:])}
            assert len(steps) == 1 and len(gaps) <= 2, [label for dummy, dummy2, label in run]
            step = -steps.pop()
            assert all(float(label) == pytest.approx(value) and label == _sweep.tick_label(value, step)
                       for dummy, value, label in run)
            checked += 1
    assert checked >= 3


def test_wide_speed_up_axis_reads_its_half_steps():
    root = parse(_sweep.sweep_chart(wide_speedup_doc()))
    ticks = [t.text for t in root.iter(SVG + 'text') if t.get('class') == 'ytick']
    # The speed-up panel, from 1x to 12x, steps by 2.5 (before: labelled 0, 2, 5, 8, 10, 12)
    start = ticks.index('2.5') - 1
    assert ticks[start:start + 6] == ['0.0', '2.5', '5.0', '7.5', '10.0', '12.5']
    assert '12' not in ticks


@pytest.mark.parametrize('low, high, expected', [
    (0.8, 12.3, ['0.0', '2.5', '5.0', '7.5', '10.0', '12.5']),
    (1200, 1830, ['1200', '1400', '1600', '1800', '2000']),
    (0.1, 1.3, ['0.00', '0.25', '0.50', '0.75', '1.00', '1.25', '1.50']),
    (1.0, 1.4, ['1.0', '1.1', '1.2', '1.3', '1.4']),
    (0, 1250, ['0', '250', '500', '750', '1000', '1250']),
])
def test_axis_ticks_are_labelled_with_their_values(low, high, expected):
    ticks = _sweep.axis_ticks(*_sweep.nice_axis(low, high))
    assert [label for dummy, label in ticks] == expected
    assert all(float(label) == pytest.approx(value) for value, label in ticks)


def test_chart_says_simulator_only_for_the_simulator():
    assert 'SIMULATOR' in _sweep.sweep_chart(sweep_doc(simulator=True))
    assert 'SIMULATOR' not in _sweep.sweep_chart(sweep_doc(simulator=False))


# ---------------------------------------------------------------- adaptive tier table

def with_version(results, version='0.5.15.post1'):
    results[0]['launch'] = {'version': version}
    return results


def simulator_sweep():
    """The simulator's model at q = 0.95 (tests/sim/README.md): depth 16 fastest alone, depth 5 at 32."""
    return with_version([cand('baseline', None, measured(1, 60.0, 67.0, 70.0), measured(32, 2000.0, 2025.0, 2050.0)),
                         cand('depth 16', 16, measured(1, 370.0, 382.0, 390.0), measured(32, 3400.0, 3462.0, 3500.0)),
                         cand('depth 5', 5, measured(1, 260.0, 272.0, 280.0), measured(32, 6000.0, 6070.0, 6100.0)),
                         cand('adaptive', 8, measured(1, 390.0, 400.0, 410.0), measured(32, 9000.0, 9100.0, 9200.0),
                              adaptive=True)])


def test_tier_table_runs_the_best_depth_of_each_load():
    tiers = _sweep.sweep_adaptive_tiers(simulator_sweep(), [1, 32])
    # The adaptive candidate, fastest everywhere, is no tier: a tier holds a depth's steps.
    assert tiers['picked'] == {'1': 'depth 16', '32': 'depth 5'}
    # Level 32's slot starts above the geometric midpoint of 1 and 32 (5.66), so the ramp and the tail
    # of a run at 32 draft as depth 5 too.
    assert tiers['config'] == {'1': {'candidate_steps': [15]}, '6': {'candidate_steps': [4]}}
    assert tiers['candidate'] == {'name': 'adaptive tiers', 'depth': 16, 'adaptive': True,
                                  'tiers': {'1': [15], '6': [4]}}
    assert tiers['why'] == 'per concurrency level the fastest of 1: depth 16, 32: depth 5'


def test_tier_table_is_read_as_sglang_reads_it():
    """The table as the release's own loader and slot routing read it (the 0.5.15.post1 source, as
    tests/sim/sglang/_adaptive.py models it): batch 1-5 drafts 15 steps, 6 and more 4."""
    import importlib
    import json
    import os
    import sys
    import tempfile
    sim = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'sim')
    sys.path.insert(0, sim)
    try:
        adaptive = importlib.import_module('sglang._adaptive')
    finally:
        sys.path.remove(sim)
    tiers = _sweep.sweep_adaptive_tiers(simulator_sweep(), [1, 32])
    with tempfile.NamedTemporaryFile('w', suffix='.json') as handle:
        json.dump(tiers['config'], handle)
        handle.flush()
        slots = adaptive.Adaptive('0.5.15.post1', tiers['candidate']['depth'] - 1, handle.name)
    assert [slots.steps(batch) for batch in (1, 5, 6, 31, 32, 48)] == [15, 15, 4, 4, 4, 4]


def test_tier_table_turns_drafting_off_where_the_baseline_wins():
    results = simulator_sweep()
    results[0]['runs'][1] = measured(32, 7000.0, 7100.0, 7200.0)  # the baseline now fastest at 32
    tiers = _sweep.sweep_adaptive_tiers(results, [1, 32])
    assert tiers['config'] == {'1': {'candidate_steps': [15]}, '6': {'candidate_steps': [0]}}
    assert tiers['candidate']['depth'] == 16
    # 0.5.13 takes no steps 0 in a tier: the fastest depth there instead.
    tiers = _sweep.sweep_adaptive_tiers(with_version(results, '0.5.13.post1'), [1, 32])
    assert tiers['config'] == {'1': {'candidate_steps': [15]}, '6': {'candidate_steps': [4]}}
    assert 'SGLang 0.5.13.post1 takes no steps 0 in a tier' in tiers['why']
    # With the baseline fastest at 1 the table starts at the first level that drafts.
    results[0]['runs'][0] = measured(1, 500.0, 510.0, 520.0)
    results[0]['runs'][1] = measured(32, 2000.0, 2025.0, 2050.0)
    tiers = _sweep.sweep_adaptive_tiers(with_version(results), [1, 32])
    assert tiers['config'] == {'1': {'candidate_steps': [0]}, '6': {'candidate_steps': [4]}}
    assert tiers['candidate']['depth'] == 5


def test_tier_keys_start_above_the_geometric_midpoint_to_the_level_below():
    assert _sweep.tier_keys([1, 32]) == [1, 6]
    assert _sweep.tier_keys([1, 2, 8, 64]) == [1, 2, 5, 23]
    assert _sweep.tier_keys([4, 5]) == [4, 5]


@pytest.mark.parametrize('change, levels, why', [
    (None, [1], 'depth 16 was fastest at every concurrency level: a tier table would run just that'),
    ('old', [1, 32], 'SGLang 0.5.12.post1 reads one candidate_steps list from --speculative-adaptive-config, no tier'),
    ('unknown', [1, 32], 'the SGLang version is unknown'),
    ('baseline', [1, 32], 'the baseline was fastest at every concurrency level'),
    ('failed', [1, 32], 'no baseline or depth candidate completed at concurrency 32'),
])
def test_no_tier_table_where_it_would_add_nothing(change, levels, why):
    results = simulator_sweep()
    if change == 'old':
        with_version(results, '0.5.12.post1')
    elif change == 'unknown':
        results[0].pop('launch')
    elif change == 'baseline':
        results[0]['runs'] = [measured(1, 900.0, 1000.0, 1100.0), measured(32, 9900.0, 10000.0, 10100.0)]
    elif change == 'failed':
        for result in results:
            result['runs'] = result['runs'][:1]
    tiers = _sweep.sweep_adaptive_tiers(results, levels)
    assert (tiers['candidate'], tiers['config']) == (None, None)
    assert why in tiers['why']


def test_engine_version_is_the_first_candidate_that_reports_one():
    version = _sweep.sweep_engine_version
    failed = {'name': 'd3', 'error': 'did not start'}
    assert version([failed, {'name': 'd5', 'launch': {'version': '0.5.11'}},
                    {'name': 'd7', 'server_args': {'version': '0.5.15.post1'}}]) == '0.5.11'
    assert version([{'name': 'd5', 'launch': {'version': '0.5.11'}, 'server_args': {'version': '0.5.15.post1'}}]) \
        == '0.5.15.post1'
    assert version([failed]) is None
