# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The guard rails of the speculation guard: whether an acceptance collapse reported for one
host is remediated now. Pure functions over a small state (a dict that the action plugin
``remediation_guard`` keeps in a JSON file on the controller); nothing here reads a clock,
a file or the network.

Decisions, in this order (the first that applies wins):

- ``unknown_host``: the inventory does not know the host (logged and ignored);
- ``fleet_wide``: more than ``max_collapsed_share`` of the fleet (and at least two hosts) reported
  a collapse within ``report_window`` seconds (hosts remediated within the cooldown not counted,
  unless their remediation failed):
  a workload shift, not a bad host; nothing is remediated and one fleet-wide alert is raised per
  episode (``fleet_alert`` true on the first decision);
- ``busy``: another remediation runs (one host at a time; one older than ``stale_after``, or whose
  run is gone, no longer counts);
- ``cooldown``: this host was remediated less than ``cooldown`` seconds ago;
- ``rate_limit``: ``max_per_hour`` remediations started across the fleet in the last hour;
- ``remediate``: go; the state now holds this host as in progress until ``finish``.
"""

from __future__ import annotations

import copy

HOUR = 3600.0

REASONS = ('remediate', 'unknown_host', 'fleet_wide', 'busy', 'cooldown', 'rate_limit')


def empty_state():
    """The state before the first report."""
    return {'in_progress': None, 'remediations': [], 'reports': {}, 'fleet_alert_at': None}


def _normalise(state):
    out = empty_state()
    if isinstance(state, dict):
        for key in out:
            if key in state and state[key] is not None:
                out[key] = copy.deepcopy(state[key])
    return out


def decide(state, host, known_hosts, collapsed_hosts, now, cooldown=1800.0, max_per_hour=3,
           max_collapsed_share=0.5, report_window=600.0, stale_after=3600.0, owner=None, owner_alive=None):
    """Decide about one collapse report of ``host``.

    ``collapsed_hosts`` are the hosts the same report says collapsed too (an Alertmanager group,
    the poller's round); ``host`` counts among them. Returns ``(decision, new_state)``: decision is
    a dict with ``action`` ('remediate' or 'ignore'), ``reason`` (one of REASONS), ``msg`` (one line
    for a person), ``collapsed`` (the known hosts that reported a collapse in the window),
    ``fleet_size``, ``fleet_alert`` (raise the fleet-wide alert now), ``retry_after`` (seconds,
    for cooldown and rate_limit, else 0).

    ``owner`` identifies the run that will remediate (the action plugin passes the playbook's PID and
    start time); ``owner_alive(owner)`` says whether the run holding the remediation in progress still
    exists: a run that died (a host unreachable ends a playbook before it can finish) no longer blocks.
    """
    state = _normalise(state)
    known = list(dict.fromkeys(known_hosts or []))
    known_set = set(known)
    decision = {'host': host, 'action': 'ignore', 'reason': None, 'msg': '', 'collapsed': [],
                'fleet_size': len(known), 'fleet_alert': False, 'retry_after': 0}

    if host not in known_set:
        decision.update(reason='unknown_host',
                        msg='alert for %s, which the inventory does not know: ignored' % host)
        return decision, state

    # Collapse reports: the newest per host, forgotten after the window.
    reports = dict((h, t) for h, t in state['reports'].items()
                   if h in known_set and now - float(t) <= report_window)
    for h in list(collapsed_hosts or []) + [host]:
        if h in known_set:
            reports[h] = now
    state['reports'] = reports
    # A host remediated within the cooldown (or being remediated) was acted on: its alert may still fire
    # (Alertmanager repeats the group until the rule's window has passed) but it no longer counts to the
    # share. A host whose remediation failed still counts: remediating the next hosts one by one up to the
    # hourly budget would not mend a shift that reaches them all.
    acted = set(r.get('host') for r in state['remediations']
                if now - float(r.get('started', 0)) < cooldown and r.get('outcome') != 'failed')
    collapsed = sorted(h for h in reports if h not in acted)
    decision['collapsed'] = collapsed

    if len(collapsed) >= 2 and len(collapsed) > max_collapsed_share * len(known):
        last = state['fleet_alert_at']
        decision['fleet_alert'] = last is None or now - float(last) > report_window
        if decision['fleet_alert']:
            state['fleet_alert_at'] = now
        decision.update(reason='fleet_wide',
                        msg='%d of %d servers lost their acceptance within %d s (%s): a fleet-wide shift, '
                            'not a bad host; nothing is remediated'
                            % (len(collapsed), len(known), report_window, ', '.join(collapsed)))
        return decision, state

    busy = state['in_progress']
    if busy and (now - float(busy.get('since', 0)) > stale_after
                 or (owner_alive is not None and busy.get('owner') and not owner_alive(busy['owner']))):
        busy = state['in_progress'] = None
    if busy:
        decision.update(reason='busy',
                        msg='%s is being remediated (since %s): one host at a time' % (busy.get('host'), busy.get('since')))
        return decision, state

    mine = [r for r in state['remediations'] if r.get('host') == host]
    if mine and now - float(mine[-1]['started']) < cooldown:
        wait = cooldown - (now - float(mine[-1]['started']))
        decision.update(reason='cooldown', retry_after=round(wait, 1),
                        msg='%s was remediated %.0f s ago (cooldown %.0f s): not acted on'
                            % (host, now - float(mine[-1]['started']), cooldown))
        return decision, state

    recent = [r for r in state['remediations'] if now - float(r.get('started', 0)) < HOUR]
    if len(recent) >= max_per_hour:
        wait = HOUR - (now - min(float(r['started']) for r in recent))
        decision.update(reason='rate_limit', retry_after=round(wait, 1),
                        msg='%d remediations in the last hour (at most %d): %s not acted on'
                            % (len(recent), max_per_hour, host))
        return decision, state

    # Older entries than the longest window that matters are dropped, so the file stays small.
    keep = max(cooldown, HOUR)
    state['remediations'] = [r for r in state['remediations'] if now - float(r.get('started', 0)) < keep]
    state['remediations'].append({'host': host, 'started': now, 'outcome': None})
    state['in_progress'] = {'host': host, 'since': now, 'owner': owner}
    decision.update(action='remediate', reason='remediate', msg='remediating %s' % host)
    return decision, state


def finish(state, host, outcome, now):
    """Record the outcome of the remediation of ``host`` and let the next one run."""
    state = _normalise(state)
    busy = state['in_progress']
    if busy and busy.get('host') == host:
        state['in_progress'] = None
    for entry in reversed(state['remediations']):
        if entry.get('host') == host:
            if entry.get('outcome') is None:
                entry['outcome'] = outcome
                entry['finished'] = now
            break
    # A host that was just remediated starts afresh: its old report no longer counts to the fleet share.
    state['reports'].pop(host, None)
    return state


FLEET_ALERT = 'LlmopsSpecFleetWideCollapse'


def fleet_alert(decision):
    """The body of the one alert a fleet-wide collapse raises in Alertmanager (its API v2, POST /api/v2/alerts)."""
    return [{'labels': {'alertname': FLEET_ALERT, 'severity': 'critical'},
             'annotations': {'summary': decision['msg'], 'hosts': ','.join(decision['collapsed'])}}]


# The values of llmops_remediate_fallback that mean "speculative decoding off" (else it is a depth).
FALLBACK_OFF = ('off', '0', 'none', 'false', '')


def _depth(value):
    """A depth as Jinja's ``int`` filter reads it (``'3'``, ``3.0``), 0 where it is no number."""
    for convert in (int, lambda v: int(float(v))):
        try:
            return convert(value)
        except (TypeError, ValueError):
            pass
    return 0


def remediation_plan(previous, fallback='off', rollback_to='last_good'):
    """Where a remediation takes the server (playbooks/tasks/remediate_host.yml): ``to`` is
    ``previous`` where last_good_config (state restored, check mode) found a good configuration
    that differs from the launch files on the host, else ``fallback``; ``fallback_depth`` is the
    depth of the fallback, None for speculative decoding off; ``rollback_to`` is passed through."""
    previous = previous or {}
    off = fallback is None or fallback is False or str(fallback).lower() in FALLBACK_OFF
    return {'to': 'previous' if previous.get('found') and previous.get('changed_files') else 'fallback',
            'rollback_to': rollback_to, 'fallback_depth': None if off else _depth(fallback)}


def remediation_start(decision, host, fallback='off', trigger='by hand'):
    """The journal record of the start of a remediation of ``host``: the hosts the guard's
    ``decision`` saw collapsed (``[host]`` where it has none, e.g. no decision), the fallback and
    what triggered it."""
    return {'step': 'started', 'collapsed_hosts': (decision or {}).get('collapsed', [host]),
            'fallback': fallback, 'trigger': trigger}


def remediation_outcome(result, plan):
    """The journal record of the configuration a remediation left the server on: the step
    (``rolled_back`` onto the previous good configuration, else ``fallback``) and the figures
    of the sglang_server role's result."""
    result = result or {}
    return {'step': 'rolled_back' if (plan or {}).get('to') == 'previous' else 'fallback',
            'state': result.get('state', ''), 'pid': result.get('pid'), 'depth': result.get('depth'),
            'accept_length': result.get('accept_length')}
