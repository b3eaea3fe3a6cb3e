# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the spec_sweep role's step (action plugin spec_sweep_step) decides from the measured
candidates, as pure functions: which candidates to measure, what each really runs (its label),
which candidate is best (overall and per concurrency level, judged against the spread of the
rounds), the ``--speculative-adaptive-config`` tier table built from the best per load, and the
chart (SVG). Private: no filter publishes them."""

from __future__ import annotations

import math
from xml.sax.saxutils import escape

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.llmops.serving.plugins.module_utils import _sglang_args
from ansible_collections.llmops.serving.plugins.module_utils._version import parse_version


class SweepError(ValueError):
    """Settings or results the sweep refuses."""


RANK_BY = 'geometric mean of output tokens/s over the concurrency levels'
DEFAULT_MAX_SPREAD = 0.1


def _throughput(run):
    return run.get('output_throughput') or 0.0


# The adaptive candidate starts where the launch rules start --speculative-adaptive without a depth.
ADAPTIVE_START_DEPTH = _sglang_args.ADAPTIVE_DEFAULT_START_STEPS + 1
# --speculative-adaptive-config holds one slot per batch size from 0.5.13 ({"<bs>": {"candidate_steps":
# [...]}}; before, one flat candidate_steps list), and takes steps 0 (no drafting) from 0.5.14
# (sglang/srt/speculative/adaptive_spec_params.py of each release, tests/releases/fixtures).
ADAPTIVE_TIERS_SINCE = (0, 5, 13)
ADAPTIVE_ZERO_STEPS_SINCE = (0, 5, 14)
TIERS_NAME = 'adaptive tiers'


def sweep_candidates(depths, baseline=True, adaptive=False, engine='sglang'):
    """One entry ``{name, depth, adaptive}`` per server configuration to measure, in order:
    the baseline (depth None: no speculative decoding), each depth, then SGLang's adaptive
    mode with its default candidates, starting at depth 8 as the launch rules start it
    (SGLang only; it needs a drafter, so at least one depth)."""
    try:
        depths = [int(depth) for depth in depths or []]
    except (TypeError, ValueError):
        raise SweepError('sweep_candidates: every depth must be an integer, got %r' % (depths,))
    out = [{'name': 'baseline', 'depth': None, 'adaptive': False}] if boolean(baseline) else []
    out.extend({'name': 'depth %d' % depth, 'depth': depth, 'adaptive': False} for depth in depths)
    if boolean(adaptive) and engine == 'sglang':
        if not depths:
            raise SweepError('sweep_candidates: the adaptive candidate needs at least one depth')
        out.append({'name': 'adaptive', 'depth': ADAPTIVE_START_DEPTH, 'adaptive': True})
    return out


def _tiers_text(tiers):
    return '{%s}' % ', '.join('%d:[%s]' % (int(size), ','.join(str(step) for step in steps))
                              for size, steps in sorted(tiers.items(), key=lambda item: int(item[0])))


def sweep_label(candidate, version=None):
    """What a candidate really runs: its name, or for an adaptive one its candidate steps per
    batch-size tier (``adaptive {1:[1,3,7], 8:[0,1,3], 32:[0,1], 64:[0]}`` for SGLang 0.5.15's
    defaults; the candidate's own ``tiers`` for a tier table)."""
    if not boolean(candidate.get('adaptive', False)):
        return candidate['name']
    tiers = candidate.get('tiers')
    if not tiers:
        try:
            plan = _sglang_args.adaptive_plan(version, int(candidate.get('depth') or ADAPTIVE_START_DEPTH) - 1)
        except (_sglang_args.LaunchArgsError, ValueError) as exc:
            return 'adaptive (%s)' % exc
        if plan['slots'] is None:
            return 'adaptive (candidate steps per batch size depend on the SGLang version, unknown here)'
        tiers = {slot['batch_size']: slot['candidate_steps'] for slot in plan['slots']}
    return 'adaptive %s' % _tiers_text(tiers)


def sweep_engine_version(results):
    """The engine version the first candidate that reports one ran, else None."""
    for cand in results:
        version = (cand.get('server_args') or {}).get('version') or (cand.get('launch') or {}).get('version')
        if version:
            return version
    return None


def _fixed_ranked(results, level, speculative_only=False):
    """(name, depth, median tok/s) of the successful non-adaptive candidates at ``level``, fastest first."""
    out = []
    for cand in results:
        if cand.get('error') is not None or boolean(cand.get('adaptive', False)):
            continue
        if speculative_only and cand.get('depth') is None:
            continue
        for run in cand.get('runs') or []:
            if run.get('concurrency') == level and _throughput(run) > 0:
                out.append((cand['name'], cand.get('depth'), _throughput(run)))
    return sorted(out, key=lambda item: -item[2])


def tier_keys(levels):
    """The batch size each level's slot starts at: the first level, then one above the geometric
    midpoint to the level below (levels 1 and 32: slots 1 and 6)."""
    return [level if index == 0 else int(math.sqrt(levels[index - 1] * level)) + 1
            for index, level in enumerate(levels)]


def sweep_adaptive_tiers(results, concurrency, version=None):
    """The ``--speculative-adaptive-config`` tier table built from the best fixed candidate
    (baseline or a depth; adaptive candidates are left out) per concurrency level: one slot per
    level, holding the one candidate step of that level's best
    (depth D: steps D - 1; the baseline: steps 0, no drafting). Returns ``{'candidate',
    'config', 'tiers', 'picked', 'why'}``: ``candidate`` (``{name: 'adaptive tiers', depth,
    adaptive: true, tiers}``, the depth being where it starts: the steps of the lowest level
    that drafts, + 1) and ``config`` (the file's content) are None when no table is worth
    measuring, and ``why`` says why.

    SGLang routes a batch to the slot with the largest key not above it (smaller batches to the
    first). Keying a slot by its level would send a level's own ramp and tail (every batch not yet
    or no longer full) to the level below, so each slot after the first is keyed at the geometric
    midpoint to the level below (``tier_keys``): a batch size between two levels goes to the
    nearer one on a log scale."""
    results = [cand for cand in results or [] if cand.get('name') != TIERS_NAME]
    version = version or sweep_engine_version(results)
    out = {'candidate': None, 'config': None, 'tiers': None, 'picked': None, 'why': None}
    try:
        parsed = parse_version(version)
    except ValueError:
        parsed = None
    if parsed is None:
        out['why'] = 'the SGLang version is unknown, so the format of its --speculative-adaptive-config is too'
        return out
    if parsed < ADAPTIVE_TIERS_SINCE:
        out['why'] = ('SGLang %s reads one candidate_steps list from --speculative-adaptive-config, no tier per '
                      'batch size (from 0.5.13 on)' % version)
        return out
    tiers, picked, notes = {}, {}, []
    for level in concurrency:
        level = int(level)
        ranked = _fixed_ranked(results, level)
        if ranked and ranked[0][1] is None and parsed < ADAPTIVE_ZERO_STEPS_SINCE:
            notes.append('at concurrency %d the baseline was fastest, but SGLang %s takes no steps 0 in a tier: '
                         'the fastest depth instead' % (level, version))
            ranked = _fixed_ranked(results, level, speculative_only=True)
        if not ranked:
            out['why'] = 'no baseline or depth candidate completed at concurrency %d' % level
            return out
        name, depth, _value = ranked[0]
        picked[str(level)] = name
        tiers[level] = 0 if depth is None else int(depth) - 1
    out['picked'] = picked
    levels = sorted(tiers)
    tiers = dict(zip(tier_keys(levels), (tiers[level] for level in levels)))  # keyed by the slot's first batch size
    out['tiers'] = {str(key): [steps] for key, steps in sorted(tiers.items())}
    drafting = [steps for _key, steps in sorted(tiers.items()) if steps > 0]
    if not drafting:
        out['why'] = 'the baseline was fastest at every concurrency level: no speculative decoding to tier'
    elif len(set(tiers.values())) == 1:
        out['why'] = ('%s was fastest at every concurrency level: a tier table would run just that, already '
                      'measured' % picked[str(sorted(tiers)[0])])
    else:
        out['config'] = {str(key): {'candidate_steps': [steps]} for key, steps in sorted(tiers.items())}
        out['candidate'] = {'name': TIERS_NAME, 'depth': drafting[0] + 1, 'adaptive': True,
                            'tiers': out['tiers']}
        out['why'] = '; '.join(['per concurrency level the fastest of %s' % ', '.join(
            '%s: %s' % (level, name) for level, name in picked.items())] + notes)
    return out


def throughput_spread(run):
    """``{min, median, max, rounds}`` of a run's output tokens/s over its rounds (llm_benchmark's
    ``spread``); a run without rounds is one round, its figure all three."""
    median = run.get('output_throughput')
    if median is None:
        return None
    spread = (run.get('spread') or {}).get('output_throughput') or {}
    return {'min': spread.get('min', median), 'median': median, 'max': spread.get('max', median),
            'rounds': len(run.get('rounds') or []) or 1}


def _relative(spread):
    return (spread['max'] - spread['min']) / spread['median'] if spread['median'] else float('inf')


def _range_text(name, spread):
    return '%s %.1f-%.1f tok/s (%.0f%%)' % (name, spread['min'], spread['max'], 100.0 * _relative(spread))


def _verdict(best, runner_up, max_spread):
    """Whether ``best`` (name, spread) is established ahead of ``runner_up``, and why not."""
    if runner_up is None:
        return True, 'the only candidate measured', 'only candidate'
    (name, spread), (other, other_spread) = best, runner_up
    if min(spread['rounds'], other_spread['rounds']) < 2:
        return (False, 'one round per candidate: the run-to-run spread is unknown (set spec_sweep_rounds to 3 or more)',
                'one round, spread unknown')
    too_wide = [text for text, s in ((name, spread), (other, other_spread)) if _relative(s) > max_spread]
    if too_wide:
        return False, 'spread too wide to rank (over %.0f%%): %s' % (100.0 * max_spread, '; '.join(
            _range_text(n, s) for n, s in ((name, spread), (other, other_spread)) if n in too_wide)), 'spread too wide'
    if spread['min'] <= other_spread['max']:
        return (False, 'the rounds overlap: %s against %s' % (_range_text(name, spread), _range_text(other, other_spread)),
                'rounds overlap %s' % other)
    return True, 'every round of %s beat every round of %s' % (name, other), 'ahead of %s in every round' % other


def _speedup(spread, base):
    if spread is None or base is None or not base['median'] or not base['min']:
        return None
    return {'min': spread['min'] / base['max'], 'median': spread['median'] / base['median'],
            'max': spread['max'] / base['min']}


def sweep_ranking(results, concurrency, max_spread=DEFAULT_MAX_SPREAD):
    """The best candidate overall (highest geometric mean of the median output tokens/s over
    its runs; failed candidates and those without runs never win; the first of equals wins),
    per concurrency level (highest median output tokens/s) and, in ``levels``, per level the
    runner-up, the speed-up over the baseline with its range, and whether the rounds' spread
    establishes the order (``established``, ``why``)."""
    max_spread = float(max_spread)
    ok = [cand for cand in results or [] if cand.get('error') is None]
    name, score = None, 0.0
    for cand in ok:
        runs = cand.get('runs') or []
        if not runs:
            continue
        candidate_score = math.prod(_throughput(run) for run in runs) ** (1.0 / len(runs))
        if candidate_score > score:
            name, score = cand['name'], candidate_score
    per_concurrency, levels = {}, {}
    for level in concurrency:
        measured = []
        for cand in ok:
            for run in cand.get('runs') or []:
                if run.get('concurrency') == level and _throughput(run) > 0:
                    measured.append((cand['name'], throughput_spread(run)))
        # Stable sort, fastest first: of equals the first candidate wins.
        ranked = sorted(measured, key=lambda item: -item[1]['median'])
        base = next((spread for cand_name, spread in measured if cand_name == 'baseline'), None)
        best = ranked[0] if ranked else None
        per_concurrency[str(level)] = best[0] if best else None
        if best is None:
            levels[str(level)] = {'best': None, 'runner_up': None, 'speedup': None, 'established': False,
                                  'why': 'no candidate completed at this concurrency', 'short': 'no candidate'}
            continue
        runner_up = ranked[1] if len(ranked) > 1 else None
        established, why, short = _verdict(best, runner_up, max_spread)
        levels[str(level)] = {
            'best': best[0], 'output_throughput': best[1],
            'runner_up': runner_up[0] if runner_up else None,
            'runner_up_output_throughput': runner_up[1] if runner_up else None,
            'speedup': _speedup(best[1], base), 'established': established, 'why': why, 'short': short}
    return {'name': name, 'score': score, 'rank_by': RANK_BY, 'per_concurrency': per_concurrency, 'levels': levels,
            'max_spread': max_spread}


# ---------------------------------------------------------------- chart

COLORS = ('#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#17becf', '#7f7f7f')
# One marker shape per concurrency level, so that series drawn on top of each other stay apart.
SHAPES = ('circle', 'square', 'diamond', 'triangle')


def nice_axis(low, high, ticks=5):
    """Axis bounds and step fitted to [low, high]: a 1/2/2.5/5 x 10^k step, at most ``ticks``
    steps, bounds on multiples of it; a flat range gets room around it."""
    if high <= low:
        pad = abs(high) * 0.1 or 1.0
        low, high = low - pad, high + pad
    raw = (high - low) / ticks
    exponent = math.floor(math.log10(raw))
    step = next(m * 10.0 ** exponent for m in (1, 2, 2.5, 5, 10) if m * 10.0 ** exponent >= raw)
    return math.floor(low / step + 1e-9) * step, math.ceil(high / step - 1e-9) * step, step


def tick_decimals(step):
    """The decimals that show every multiple of ``step`` exactly: 0 for 200 or 5, 1 for 2.5 or
    0.5, 2 for 0.25 or 0.05 (a label never rounds a tick to a neighbouring value)."""
    decimals = 0
    while decimals < 6 and abs(round(step, decimals) - step) > 1e-9 * max(1.0, abs(step)):
        decimals += 1
    return decimals


def tick_label(value, step):
    """The label of the tick at ``value`` on an axis of step ``step``: its value, to the decimals of the step."""
    decimals = tick_decimals(step)
    # no "-0.0" where a tick lands a hair below 0
    return '%.*f' % (decimals, value if round(value, decimals) else 0.0)


def axis_ticks(low, high, step):
    """``[(value, label), ...]`` of the ticks from ``low`` to ``high`` every ``step`` (values computed
    from their index, so that no rounding error piles up)."""
    count = int(round((high - low) / step))
    return [(low + index * step, tick_label(low + index * step, step)) for index in range(count + 1)]


class _Panel:
    """One plot: a box at (left, top) of w x h, an x axis of depths to scale (adaptive, if any,
    in its own slot on the right) and a fitted y axis."""

    def __init__(self, out, left, top, width, height, depths, adaptive, ylow, yhigh):
        self.out, self.left, self.top, self.w, self.h = out, left, top, width, height
        self.adaptive = adaptive
        lo, hi = (min(depths), max(depths)) if depths else (0, 1)
        pad = max(1.0, (hi - lo) * 0.08)
        self.xlo, self.xhi = lo - pad, hi + pad
        self.depth_w = width - (46 if adaptive else 0)
        self.ylo, self.yhi, self.ystep = nice_axis(ylow, yhigh)

    def x(self, depth, adaptive=False):
        if adaptive:
            # the default adaptive candidate left of a tier table's, both in the adaptive slot
            return self.left + self.w - 23 + (8 if adaptive == 'tiers' else -4 if adaptive == 'default' else 0)
        return self.left + (depth - self.xlo) / (self.xhi - self.xlo) * self.depth_w

    def y(self, value):
        return self.top + self.h - (value - self.ylo) / (self.yhi - self.ylo) * self.h

    def frame(self, title, depths, ylabel):
        out, left, top = self.out, self.left, self.top
        out.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="13" font-weight="bold">%s</text>'
                   % (left + self.w / 2, top - 12, escape(title)))
        for value, label in axis_ticks(self.ylo, self.yhi, self.ystep):
            y = self.y(value)
            out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>' % (left, y, left + self.w, y))
            out.append('<text class="ytick" x="%.1f" y="%.1f" text-anchor="end">%s</text>'
                       % (left - 6, y + 4, label))
        out.append('<text x="%.1f" y="%.1f" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">%s</text>'
                   % (left - 48, top + self.h / 2, left - 48, top + self.h / 2, escape(ylabel)))
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333333"/>'
                   % (left, top, self.w, self.h))
        for depth in depths:
            x = self.x(depth)
            out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333333"/>'
                       % (x, top + self.h, x, top + self.h + 4))
            out.append('<text class="xtick" x="%.1f" y="%d" text-anchor="middle">%d</text>' % (x, top + self.h + 17, depth))
        if self.adaptive:
            x = self.x(0, adaptive=True)
            out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999999" stroke-dasharray="3,3"/>'
                       % (x - 23, top, x - 23, top + self.h))
            out.append('<text class="xtick" x="%.1f" y="%d" text-anchor="middle">adaptive</text>' % (x, top + self.h + 17))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">speculative depth (to scale)</text>'
                   % (left + self.depth_w / 2, top + self.h + 34))

    def band(self, spread, color, label):
        """A dashed horizontal line at the median of ``spread``, its min..max shaded (the baseline)."""
        out = self.out
        y_lo, y_hi = self.y(spread['min']), self.y(spread['max'])
        out.append('<rect class="baseline-band" x="%d" y="%.1f" width="%d" height="%.1f" fill="%s" fill-opacity="0.12"/>'
                   % (self.left, y_hi, self.w, max(0.5, y_lo - y_hi), color))
        y = self.y(spread['median'])
        out.append('<line class="baseline" x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="1.5" '
                   'stroke-dasharray="6,4"/>' % (self.left, y, self.left + self.w, y, color))
        out.append('<text x="%d" y="%.1f" font-size="11" fill="%s">%s</text>' % (self.left + 4, y - 4, color, escape(label)))


def _slot(cand):
    """Where an adaptive candidate sits in the adaptive slot: 'tiers' (a tier table), 'default' or False."""
    if not cand.get('adaptive'):
        return False
    return 'tiers' if cand.get('tiers') else 'default'


def _marker(out, shape, x, y, color, size=4.5, hollow=False, css=''):
    fill = '#ffffff' if hollow else color
    attrs = 'class="%s" fill="%s" stroke="%s" stroke-width="1.6"' % (css, fill, color)
    if shape == 'circle':
        out.append('<circle %s cx="%.1f" cy="%.1f" r="%.1f"/>' % (attrs, x, y, size))
    elif shape == 'square':
        out.append('<rect %s x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>' % (attrs, x - size, y - size, 2 * size, 2 * size))
    elif shape == 'diamond':
        s = size * 1.35
        out.append('<polygon %s points="%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f"/>'
                   % (attrs, x, y - s, x + s, y, x, y + s, x - s, y))
    else:
        s = size * 1.3
        out.append('<polygon %s points="%.1f,%.1f %.1f,%.1f %.1f,%.1f"/>' % (attrs, x, y - s, x + s, y + s * 0.8, x - s, y + s * 0.8))


def _error_bar(out, x, y_min, y_max, color, css='spread'):
    out.append('<line class="%s" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.4"/>'
               % (css, x, y_min, x, y_max, color))
    for y in (y_min, y_max):
        out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.4"/>' % (x - 4, y, x + 4, y, color))


def _points(cands, level, key):
    """(candidate, run, spread of ``key``) of each successful candidate with a figure at ``level``."""
    for cand in cands:
        for run in cand.get('runs') or []:
            if run.get('concurrency') == level and run.get(key) is not None:
                spread = (run.get('spread') or {}).get(key) or {}
                median = run[key]
                yield cand, run, {'min': spread.get('min', median), 'median': median, 'max': spread.get('max', median)}


def sweep_chart(results):
    """The spec_sweep chart (SVG text) of a sweep's results (``spec_sweep_results``): one panel
    of output tokens/s per concurrency level (median of the rounds, bars from the slowest to
    the fastest round, the baseline as a dashed line in its shaded spread, the speed-up over
    it above each point, the best ringed), then the speed-up and the acceptance length of
    every level against depth. Depths are to scale and every y axis is fitted to its data."""
    cands = [c for c in results.get('candidates') or [] if c.get('error') is None and c.get('runs')]
    levels = list((results.get('settings') or {}).get('concurrency') or [])
    best = results.get('best') or {}
    specs = [c for c in cands if c.get('depth') is not None]
    depths = sorted(set(int(c['depth']) for c in specs if not c.get('adaptive')))
    has_adaptive = any(c.get('adaptive') for c in specs)
    baseline = next((c for c in cands if c['name'] == 'baseline'), None)
    simulator = bool(results.get('simulator'))

    per_row = min(3, max(1, len(levels)))
    pw, ph, gap = (880 - 80 * per_row) // per_row, 210, 80
    top0 = 110 if simulator else 80
    rows = (len(levels) + per_row - 1) // per_row
    bottom_top = top0 + rows * (ph + 95) + 20
    width, height = 960, bottom_top + 240 + 110
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="Helvetica, Arial, sans-serif" font-size="12">' % (width, height, width, height),
           '<title>Speculative depth sweep on %s</title>' % escape(str(results.get('host'))),
           '<rect width="%d" height="%d" fill="#ffffff"/>' % (width, height)]
    title = 'Speculative depth sweep on %s' % results.get('host')
    if best.get('name'):
        title += ' (best overall: %s)' % best['name']
    out.append('<text x="%d" y="30" text-anchor="middle" font-size="17" font-weight="bold">%s</text>'
               % (width / 2, escape(title)))
    settings = results.get('settings') or {}
    out.append('<text x="%d" y="50" text-anchor="middle" fill="#555555">%s</text>' % (width / 2, escape(
        '%s %s; %s prompts per round, %s rounds; points: median of the rounds, bars: slowest to fastest round' % (
            settings.get('engine', ''), (results.get('versions') or {}).get('engine') or '',
            settings.get('num_prompts', '?'), settings.get('rounds', '?')))))
    if simulator:
        out.append('<rect class="simulator" x="20" y="62" width="%d" height="26" fill="#fff3cd" stroke="#b58105"/>' % (width - 40))
        out.append('<text x="%d" y="80" text-anchor="middle" font-weight="bold" fill="#7a5600">SIMULATOR: the server was '
                   'the SGLang simulator (tests/sim), a test double; these are not GPU figures</text>' % (width / 2))

    for index, level in enumerate(levels):
        left = 80 + (index % per_row) * (pw + gap)
        top = top0 + (index // per_row) * (ph + 95) + 24
        points = list(_points(specs, level, 'output_throughput'))
        base = next((s for c, r, s in _points([baseline], level, 'output_throughput')), None) if baseline else None
        values = [v for c, r, s in points for v in (s['min'], s['max'])] + ([base['min'], base['max']] if base else [])
        if not values:
            continue
        panel = _Panel(out, left, top, pw, ph, depths, has_adaptive, min(values), max(values) * 1.06)
        info = (best.get('levels') or {}).get(str(level)) or {}
        panel.frame('Concurrency %s: output tokens/s' % level, depths, 'output tokens/s')
        color = COLORS[index % len(COLORS)]
        if base:
            panel.band(base, '#555555', 'baseline (no speculation)')
        line = [(panel.x(int(c['depth'])), panel.y(s['median'])) for c, r, s in points if not c.get('adaptive')]
        line.sort()
        out.append('<polyline class="throughput" data-concurrency="%s" fill="none" stroke="%s" stroke-width="2" points="%s"/>'
                   % (level, color, ' '.join('%.1f,%.1f' % p for p in line)))
        for cand, run, spread in points:
            x = panel.x(int(cand['depth']), _slot(cand))
            _error_bar(out, x, panel.y(spread['min']), panel.y(spread['max']), color)
            _marker(out, 'square' if cand.get('adaptive') else 'circle', x, panel.y(spread['median']), color)
            if cand['name'] == info.get('best'):
                out.append('<circle class="best" cx="%.1f" cy="%.1f" r="9" fill="none" stroke="%s" stroke-width="2"/>'
                           % (x, panel.y(spread['median']), color))
            if base and base['median']:
                out.append('<text class="speedup" x="%.1f" y="%.1f" text-anchor="middle" font-size="11">%.2fx</text>'
                           % (x, panel.y(spread['max']) - 7, spread['median'] / base['median']))
        if info:
            verdict = '%s: %s' % (info['best'], info.get('short', '')) if info.get('established') else (
                'best not established (%s)' % info.get('short', ''))
            out.append('<text class="verdict" x="%d" y="%d" font-size="11" fill="%s">%s</text>' % (
                left, top + ph + 52, '#333333' if info.get('established') else '#b35900', escape(verdict)))

    _summary_panels(out, specs, levels, baseline, depths, has_adaptive, bottom_top)
    out.append('</svg>')
    return '\n'.join(out) + '\n'


def _summary_panels(out, specs, levels, baseline, depths, has_adaptive, top):
    """Speed-up over the baseline and acceptance length, every concurrency level on one axis:
    each level its colour and marker shape, nudged sideways so that equal values stay visible."""
    width = 370
    panels = []
    speedups = {}
    if baseline:
        for level in levels:
            base = next((s for c, r, s in _points([baseline], level, 'output_throughput')), None)
            if base and base['median']:
                speedups[level] = [(c, {k: s[k] / base['median'] for k in ('min', 'median', 'max')})
                                   for c, r, s in _points(specs, level, 'output_throughput')]
        panels.append(('Speed-up over the baseline', 'x baseline output tokens/s', speedups, True))
    accept = {level: [(c, s) for c, r, s in _points(specs, level, 'accept_length')] for level in levels}
    panels.append(('Acceptance length (tokens per verify step)', 'accept length', accept, False))
    nudge_step = 5.0
    for number, (title, ylabel, series, unity) in enumerate(panels):
        values = [v for pts in series.values() for c, s in pts for v in (s['min'], s['max'])]
        if not values:
            continue
        if unity:
            values.append(1.0)
        left = 100 + number * (width + 110)
        panel = _Panel(out, left, top + 24, width, 230, depths, has_adaptive, min(values), max(values) * 1.03)
        panel.frame(title, depths, ylabel)
        if unity:
            y = panel.y(1.0)
            out.append('<line class="unity" x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#555555" stroke-dasharray="6,4"/>'
                       % (panel.left, y, panel.left + panel.w, y))
            out.append('<text x="%d" y="%.1f" font-size="11" fill="#555555">1.0 = baseline</text>' % (panel.left + 4, y - 4))
        for index, level in enumerate(levels):
            color, shape = COLORS[index % len(COLORS)], SHAPES[index % len(SHAPES)]
            nudge = (index - (len(levels) - 1) / 2.0) * nudge_step
            pts = sorted(((panel.x(int(c['depth']), _slot(c)) + nudge, s, c) for c, s in series.get(level, [])),
                         key=lambda p: p[0])
            line = [(x, panel.y(s['median'])) for x, s, c in pts if not c.get('adaptive')]
            polyline = ' '.join('%.1f,%.1f' % p for p in line)
            out.append('<polyline class="%s" data-concurrency="%s" fill="none" stroke="%s" stroke-width="1.6" '
                       'stroke-opacity="0.8" points="%s"/>' % ('speedup-line' if unity else 'accept-line', level, color,
                                                               polyline))
            for x, s, c in pts:
                _error_bar(out, x, panel.y(s['min']), panel.y(s['max']), color)
                _marker(out, shape, x, panel.y(s['median']), color, hollow=index % 2 == 1)
    # Legend: concurrency levels with their colour and marker.
    legend_y = top + 24 + 230 + 58
    for index, level in enumerate(levels):
        x = 100 + index * 150
        color = COLORS[index % len(COLORS)]
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>' % (x, legend_y, x + 28, legend_y, color))
        _marker(out, SHAPES[index % len(SHAPES)], x + 14, legend_y, color, hollow=index % 2 == 1)
        out.append('<text x="%d" y="%d">concurrency %s</text>' % (x + 36, legend_y + 4, level))
    out.append('<text x="100" y="%d" fill="#555555">Ring: best at that concurrency. Bars: slowest to fastest round. '
               'Square / "adaptive": --speculative-adaptive, not on the depth axis.</text>' % (legend_y + 26))
