# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-host summary of a deploy as one aligned table, and the alignment of the tables of the
deploy summary and playbooks/status.yml. Each filter is documented in the YAML file of its name
next to this one."""

from __future__ import annotations

HEADER = ('host', 'state', 'action', 'ready_s', 'version', 'depth', 'accept', 'url / reason')
NOT_REACHED = 'not reached: the rollout stopped before this host, or it was unreachable'
REASON_CHARS = 300
# How a rank of a multi-node group that failed because another rank did says so (the group gates
# of roles/deploy/tasks/group_gate.yml, rank 0's check in roles/sglang_server/tasks/apply.yml).
GROUP_FAILURE = 'multi-node group '


def _one_line(text, limit=REASON_CHARS):
    """Whitespace collapsed (two spaces separate the columns), cut at ``limit`` characters."""
    text = ' '.join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + '...'


def _figure(value, fmt, none='-'):
    return none if value is None or value == '' else fmt % float(value)


def _group_cause(host, variables, hostvars):
    """For a rank of a multi-node group that failed because other ranks did, the group and those
    ranks' own reasons (the root cause), or None."""
    group = list(variables.get('sglang_server_group_hosts') or [])
    if len(group) < 2 or not str(variables.get('llmops_deploy_failure')).startswith(GROUP_FAILURE):
        return None
    causes = []
    for rank in group:
        failure = (hostvars.get(rank) or {}).get('llmops_deploy_failure') if rank != host and rank in hostvars else None
        if failure is not None and not str(failure).startswith(GROUP_FAILURE):
            causes.append('%s failed: %s' % (rank, failure))
    return '%s%s: %s' % (GROUP_FAILURE, ', '.join(group), '; '.join(causes)) if causes else None


def depth_label(depth, adaptive=False):
    """How a depth is shown (summary, status): the draft tokens verified per step, 'adaptive from N'
    where SGLang's --speculative-adaptive starts at N, 'off' without speculative decoding."""
    if depth is None or depth == '':
        return 'off'
    return ('adaptive from %s' if adaptive in (True, 'True', 'true') else '%s') % depth


def _release_change(result):
    """The version, or ``<from> -> <to>`` where the plan changes it: from the version of the server's
    newest last good record (what it last passed its checks with), to the one planned."""
    version, before = result.get('version'), result.get('previous_version')
    if version and before and str(before) != str(version):
        return '%s -> %s' % (before, version)
    return version


def _row(host, hostvars):
    """The table row of one host, and the canary report lines that follow the table."""
    variables = hostvars.get(host) or {}
    result = variables.get('sglang_server_result') or {}
    failure = variables.get('llmops_deploy_failure')
    if not result and failure is None:
        return (host, 'not reached', '-', '-', '-', '-', '-', NOT_REACHED), []
    state = result.get('state') or 'failed'
    if failure is not None and state not in ('failed', 'rolled_back'):
        state = 'failed'
    version = ' '.join(str(part) for part in (result.get('engine'), _release_change(result)) if part)
    version = (version + (' SIMULATOR' if variables.get('llmops_simulator') else '')) if version else '-'
    if failure is not None:
        detail = result.get('reason') or _group_cause(host, variables, hostvars) or failure
        if state == 'rolled_back':
            detail = 'serving its last good configuration again; %s' % detail
    else:
        detail = result.get('url') or '-'
        back = _reregistered(variables.get('sglang_router_registered'))
        if back and result.get('action') == 'none':
            detail = 're-registered: was out of router %s; %s' % (', '.join(back), detail)
    depth = result.get('depth')
    row = (host, state, result.get('action') or '-', _figure(result.get('ready_s'), '%.1f'), version,
           '-' if not result else depth_label(depth, result.get('adaptive')),
           _figure(result.get('accept_length'), '%.2f'), _one_line(detail))
    canary = variables.get('deploy_canary_verdict') or {}
    lines = ['%s %s' % (host, line) for line in canary.get('report') or []]
    start = _start_line(result, variables.get('model_stage_warm') or {})
    return row, lines + (['%s %s' % (host, start)] if start else [])


def _reregistered(registered):
    """The routers that did not list the server and added it (sglang_router role, register), from its registered loop
    result."""
    results = registered.get('results') if isinstance(registered, dict) else None
    return [str(r.get('router')) for r in results or [] if isinstance(r, dict) and r.get('action') == 'add']


def _start_line(result, warm):
    """Where a (re)start spent its time: seconds per startup phase (from the server's log, as
    wait_for_llm_health saw it), the sampled warm-up, and the page cache warm-up done before the stop."""
    phases = [p for p in result.get('phases') or [] if isinstance(p, dict) and p.get('elapsed') is not None]
    if not phases:
        return None
    spans = ['%s %.1f' % (this['phase'], float(after['elapsed']) - float(this['elapsed']))
             for this, after in zip(phases, phases[1:])]
    text = 'start: %s (s), %s at %.1f s' % (', '.join(spans) or '-', phases[-1]['phase'], float(phases[-1]['elapsed']))
    if result.get('warm_sampled_s') not in (None, ''):
        text += '; first sampled request %.2f s' % float(result['warm_sampled_s'])
    if warm.get('bytes') is not None:
        text += '; page cache warm-up before the stop %.2f GB in %.1f s' % (warm['bytes'] / 1e9, float(warm.get('seconds') or 0))
    return text


def deploy_summary(hosts, hostvars):
    """One aligned text line per host (after a header): state, action, ready time, engine
    version, speculative depth, acceptance length, and the URL (ready) or the reason (failed,
    rolled back, not reached; for a rank of a multi-node group that failed because other ranks
    did, their reasons). Columns are separated by at least two spaces; no cell holds two
    spaces in a row, so a reader can split on them."""
    rows, extra = [HEADER], []
    for host in hosts:
        row, lines = _row(host, hostvars)
        rows.append(row)
        extra.extend(lines)
    return text_table(rows) + extra


def text_table(rows):
    """The rows (the header first) as text lines: each column but the last padded to its widest
    cell, columns two spaces apart, no space at the end of a line."""
    rows = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)] if rows else []
    return ['  '.join([cell.ljust(width) for cell, width in zip(row, widths)] + row[-1:]).rstrip() for row in rows]


class FilterModule:
    def filters(self):
        return {'deploy_summary': deploy_summary, 'depth_label': depth_label, 'text_table': text_table}
