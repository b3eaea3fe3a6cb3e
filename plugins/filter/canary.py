# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The canary gate of a rollout: does a host serve at least as well after a change as before
it? Documented in canary_verdict.yml next to this file."""

from __future__ import annotations

import statistics

from ansible.errors import AnsibleFilterError


def _figures(rounds, key, where):
    values = []
    for index, result in enumerate(rounds or []):
        runs = result.get('runs') or []
        if len(runs) != 1 or runs[0].get('failed'):
            raise AnsibleFilterError('canary_verdict: round %d of the %s benchmark did not complete (%s)'
                                     % (index + 1, where, (runs[0].get('errors') if runs else 'no run')))
        value = runs[0].get(key)
        if value is not None:
            values.append(float(value))
    return values


def _spread(values):
    return {'min': min(values), 'median': statistics.median(values), 'max': max(values)} if values else None


def canary_verdict(before, after, max_throughput_drop=0.10, max_accept_drop=0.3):
    """Compare the benchmark rounds (llm_benchmark results at one concurrency level) taken on
    a host before and after a change.

    Throughput fails when the median after the change is more than ``max_throughput_drop``
    (a fraction) below the median before it **and** even the best round after is below the
    median before: one slow round (noise) is not a regression, a slower server is. Acceptance
    length (the server's own counters, nearly noise-free) fails when its median drops by more
    than ``max_accept_drop``."""
    if not before or not after:
        raise AnsibleFilterError('canary_verdict: needs benchmark rounds before and after the change')
    tok_before, tok_after = _figures(before, 'output_throughput', 'before'), _figures(after, 'output_throughput', 'after')
    acc_before, acc_after = _figures(before, 'accept_length', 'before'), _figures(after, 'accept_length', 'after')
    table = {'output_throughput': {'before': _spread(tok_before), 'after': _spread(tok_after)},
             'accept_length': {'before': _spread(acc_before), 'after': _spread(acc_after)}}
    reasons = []
    tok = table['output_throughput']
    floor = tok['before']['median'] * (1.0 - float(max_throughput_drop))
    if tok['after']['median'] < floor and tok['after']['max'] < tok['before']['median']:
        reasons.append('output throughput fell from %.1f to %.1f tok/s (median of %d rounds; best round after: %.1f; '
                       'allowed: %.0f %% below, %.1f)' % (tok['before']['median'], tok['after']['median'],
                                                          len(tok_after), tok['after']['max'],
                                                          100 * float(max_throughput_drop), floor))
    acc = table['accept_length']
    if acc['before'] and acc['after'] is None:
        reasons.append('the acceptance length was %.2f before the change and is not reported after it'
                       % acc['before']['median'])
    elif acc['before'] and acc['after']['median'] < acc['before']['median'] - float(max_accept_drop):
        reasons.append('acceptance length fell from %.2f to %.2f (allowed drop: %.2f)'
                       % (acc['before']['median'], acc['after']['median'], float(max_accept_drop)))
    return {'passed': not reasons, 'reasons': reasons, 'figures': table, 'report': _report(table, not reasons)}


def _cell(spread, fmt):
    return ' / '.join(fmt % spread[key] for key in ('min', 'median', 'max')) if spread else '-'


def _report(table, passed):
    """The before/after table as text lines (min / median / max over the rounds)."""
    lines = ['canary gate: %s' % ('passed' if passed else 'FAILED'),
             '%-14s %-28s %s' % ('figure', 'before (min / median / max)', 'after (min / median / max)')]
    for key, label, fmt in (('output_throughput', 'output tok/s', '%.1f'), ('accept_length', 'accept length', '%.2f')):
        lines.append('%-14s %-28s %s' % (label, _cell(table[key]['before'], fmt), _cell(table[key]['after'], fmt)))
    return lines


class FilterModule:
    def filters(self):
        return {'canary_verdict': canary_verdict}
