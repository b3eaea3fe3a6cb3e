# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the spec_sweep role decides between its deploys, as pure functions over the role's options
(a dict of variable name -> value, built from its task's arguments by the action plugin ``spec_sweep_step``):
the settings checked and fixed before the first candidate, the llm_benchmark arguments of a
candidate and of the check after the rollout, the record kept per candidate, the report's
``results.json`` content, and whether the rolled-out server runs the best candidate. Nothing here
reads a clock, a file or the network; the ranking, labels, tier table and chart are in ``_sweep.py``."""

from __future__ import annotations

# The value of each option a task leaves out or passes as null (the role passes the server's
# settings with ``| default(omit)``: they belong to the sglang_server role, whose defaults these are).
DEFAULTS = {
    'sglang_server_engine': 'sglang',
    'sglang_server_speculative_draft_model_path': '',
    'sglang_server_extra_args': [],
    'sglang_server_model_path': '',
    'sglang_server_served_model_name': '',
    'sglang_server_api_key': '',
    'sglang_server_admin_api_key': '',
    'sglang_server_port': 30000,
    'sglang_server_config_dir': '/etc/llmops',
    'sglang_server_name': 'main',
    'sglang_server_result': None,
    'sglang_router_group': 'sglang_routers',
    'sglang_router_worker_group': 'sglang_servers',
    'llmops_simulator': False,
    'spec_sweep_applied': None,
    'spec_sweep_restored': None,
    '__spec_sweep_tiers': None,
    '__spec_sweep_candidate': {},
}
TIERS_TEXT = ', then an adaptive tier table from the best per concurrency level (if they differ)'
CHECK_PROMPTS = 4


class SweepError(Exception):
    """Settings the sweep refuses."""


def _int(value):
    """Jinja's ``| int``: 0 for what is no integer."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _is_depth(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 2


def settings_problem(opts, truthy):
    """The message refusing the sweep's settings, or None. ``truthy`` is Ansible's ``| bool``."""
    depths = opts['spec_sweep_depths'] or []
    drafter = opts['sglang_server_speculative_draft_model_path'] or ''
    if ((depths or truthy(opts['spec_sweep_baseline'])) and all(_is_depth(depth) for depth in depths)
            and len(opts['spec_sweep_concurrency'] or []) > 0 and _int(opts['spec_sweep_rounds']) >= 1
            and (not depths or drafter)):
        return None
    return ("spec_sweep on %s: spec_sweep_depths must be integers of at least 2 (got %s), spec_sweep_concurrency must"
            " not be empty, spec_sweep_rounds at least 1 (got %s), and speculative depths need a drafter"
            " (sglang_server_speculative_draft_model_path is '%s')."
            % (opts['inventory_hostname'], opts['spec_sweep_depths'], opts['spec_sweep_rounds'], drafter))


def server_url(opts):
    """The URL to benchmark: spec_sweep_url, else the one the sglang_server role reports for the
    server it just started, else the server's port on this host."""
    if opts['spec_sweep_url']:
        return opts['spec_sweep_url']
    launched = opts['sglang_server_result']
    if isinstance(launched, dict) and 'url' in launched:
        return launched['url']
    return 'http://127.0.0.1:%s' % opts['sglang_server_port']


def settings(opts, groups, candidates, truthy, now):
    """What every candidate starts from, fixed once before the first one (the candidates override
    the sglang_server_* variables, so they cannot refer to themselves), and what the role decides
    from the settings: the API, the tier table's file, whether routers front the host."""
    host = opts['inventory_hostname']
    engine = opts['sglang_server_engine']
    depths = opts['spec_sweep_depths'] or []
    measures_tiers = truthy(opts['spec_sweep_adaptive_tiers']) and engine == 'sglang' and len(depths) > 0
    model_path = opts['sglang_server_model_path'] or ''
    out = {
        'engine': engine,
        'api': opts['spec_sweep_api'] or ('generate' if engine == 'sglang' else 'completions'),
        'drafter': opts['sglang_server_speculative_draft_model_path'] or '',
        'extra_args': opts['sglang_server_extra_args'] or [],
        # The drafter is checked against the target's config.json when the target is a local path.
        'target_path': model_path if model_path.startswith('/') else None,
        'candidates': candidates,
        'started': now,
        'measures_tiers': measures_tiers,
        'any_adaptive': (truthy(opts['spec_sweep_adaptive']) and engine == 'sglang') or measures_tiers,
        'tiers_file': '%s/spec-sweep-%s-adaptive.json' % (opts['sglang_server_config_dir'], opts['sglang_server_name']),
        'host_dir': '%s/%s' % (opts['spec_sweep_report_dir'], host),
        # Routers front this server: it is a worker of sglang_router_worker_group and routers exist.
        'routed': bool(groups.get(opts['sglang_router_group'])) and host in (groups.get(opts['sglang_router_worker_group']) or []),
    }
    # Extra vars (-e) would beat the value every candidate sets (tasks/main.yml refuses them).
    out['extra_vars_message'] = (
        'spec_sweep on %s: sglang_server_speculative_draft_model_path, _depth, _num_steps, _eagle_topk, _num_draft_tokens,'
        ' _adaptive, _adaptive_config%s must not be extra vars (-e): they would override the value of every candidate.'
        ' Set them in the inventory (group_vars or host_vars) or in the play.'
        % (host, ' and sglang_server_extra_args' if out['any_adaptive'] else ''))
    out['would_measure'] = 'Would measure %s at concurrency %s (%s prompts each) against %s%s, and write the report to %s.' % (
        ', '.join(cand['name'] for cand in candidates), ', '.join(str(level) for level in opts['spec_sweep_concurrency']),
        opts['spec_sweep_num_prompts'], server_url(opts), TIERS_TEXT if measures_tiers else '', out['host_dir'])
    return out


def restored(launched):
    """What the server runs after the sweep put the host's own configuration back (``launched``: the
    sglang_server role's ``sglang_server_result``): its state, depth and why, where it says."""
    if not isinstance(launched, dict) or 'state' not in launched or 'depth' not in launched:
        raise SweepError('spec_sweep: sglang_server_result has no state and depth after the redeploy: %s' % (launched,))
    return {'state': launched['state'], 'depth': launched['depth'], 'reason': launched.get('reason')}


def benchmark_args(opts, check=False):
    """llm_benchmark's arguments for a candidate, or (``check``) for the short check after the rollout."""
    sweep = opts['__spec_sweep']
    args = {'url': server_url(opts), 'api': sweep['api'], 'flush_cache': sweep['engine'] == 'sglang',
            'timeout': opts['spec_sweep_timeout']}
    if check:
        args.update(num_prompts=CHECK_PROMPTS, concurrency=[1], input_len=16, output_len=32, warmup_requests=0)
    else:
        # Every figure is the median of the rounds, with min/median/max in runs[].spread.
        args.update(num_prompts=opts['spec_sweep_num_prompts'], concurrency=opts['spec_sweep_concurrency'],
                    input_len=opts['spec_sweep_input_len'], output_len=opts['spec_sweep_output_len'],
                    warmup_requests=opts['spec_sweep_warmup_requests'], rounds=opts['spec_sweep_rounds'],
                    min_duration=opts['spec_sweep_min_duration'], max_failed_ratio=opts['spec_sweep_max_failed_ratio'])
        if opts['spec_sweep_dataset']:
            args['dataset'] = opts['spec_sweep_dataset']
    for name, key in (('model', 'sglang_server_served_model_name'), ('api_key', 'sglang_server_api_key'),
                      ('admin_api_key', 'sglang_server_admin_api_key')):
        if opts[key]:
            args[name] = opts[key]
    return args


def record(candidate, label, progress, finished, bench=None, error=None, failed_task=''):
    """What results.json keeps of a candidate: its settings, label, times, launch and command
    (once it was deployed: ``progress`` holds them), then the benchmark's figures or the failure."""
    out = dict(candidate, label=label, started=progress.get('started'), finished=finished, error=error,
               launch=progress.get('launch') or {}, command=progress.get('command') or [])
    if bench is None:
        out.update(error=error or 'failed', failed_task=failed_task, runs=[])
    else:
        out.update(server_args=bench.get('server'), model=bench.get('model'), http_library=bench.get('http_library'),
                   runs=bench.get('runs'))
    return out


# What results.json keeps of the tier table (the step "tiers" returns it with the candidate to measure).
TIER_KEYS = ('candidate', 'config', 'tiers', 'picked', 'why', 'file')


def tiers(table, tiers_file):
    """The tier table (_sweep.sweep_adaptive_tiers) with its ``file``, and ``measure``: its candidate with
    ``--speculative-adaptive-config`` that file, or None when there is none to measure."""
    measure = dict(table['candidate'], adaptive_config=tiers_file) if table['candidate'] is not None else None
    return dict(table, file=tiers_file, measure=measure)


def tier_table(registered):
    """What results.json keeps of the step's answer (tasks/tiers.yml), None when no tier table was built."""
    if not registered:
        return None
    return dict((key, value) for key, value in registered.items() if key in TIER_KEYS)


def results(opts, now, versions, best, truthy):
    """The content of results.json (and what report.md and chart.svg show)."""
    sweep = opts['__spec_sweep']
    dataset = opts['spec_sweep_dataset']
    return {
        'host': opts['inventory_hostname'],
        # The test double of tests/sim (llmops_simulator, as the deploy summary's [SIMULATOR]):
        # its figures come from a timing model, never from SGLang on a GPU.
        'simulator': truthy(opts['llmops_simulator']),
        'started': sweep['started'],
        'finished': now,
        'settings': {
            'engine': sweep['engine'], 'model_path': opts['sglang_server_model_path'], 'drafter': sweep['drafter'],
            'depths': opts['spec_sweep_depths'], 'baseline': opts['spec_sweep_baseline'],
            'adaptive': opts['spec_sweep_adaptive'], 'adaptive_tiers': opts['spec_sweep_adaptive_tiers'],
            'concurrency': opts['spec_sweep_concurrency'], 'num_prompts': opts['spec_sweep_num_prompts'],
            'input_len': opts['spec_sweep_input_len'] if not dataset else None,
            'output_len': opts['spec_sweep_output_len'], 'dataset': dataset or None,
            'warmup_requests': opts['spec_sweep_warmup_requests'], 'rounds': opts['spec_sweep_rounds'],
            'min_duration': opts['spec_sweep_min_duration'], 'max_spread': opts['spec_sweep_max_spread'],
            'api': sweep['api'], 'url': server_url(opts), 'benchmark_host': opts['spec_sweep_benchmark_host']},
        'versions': versions,
        'applied': opts['spec_sweep_applied'],
        'restored': opts['spec_sweep_restored'],
        'best': best,
        # The --speculative-adaptive-config table built from the best per load (tasks/tiers.yml), or None.
        'adaptive_tiers': tier_table(opts['__spec_sweep_tiers']),
        'candidates': opts['__spec_sweep_results'],
    }


def best_candidate(candidates, best):
    """The record of the best candidate, or None."""
    return next((cand for cand in candidates if cand['name'] == best['name']), None)


def where(host, best, host_dir):
    return 'Best on %s: %s; report in %s/report.md' % (host, best['name'] or 'none (every candidate failed)', host_dir)


def serves(want, server):
    """Whether what the server reports is the candidate ``want``: no speculative decoding for the
    baseline; the depth of a depth; for an adaptive candidate --speculative-adaptive, its starting
    steps and its own tier table (or none). A server that reports nothing passes."""
    if not server:
        return True
    adaptive = bool(server.get('speculative_adaptive', False))
    if want['depth'] is None:
        return not server.get('speculative_algorithm')
    if not want['adaptive']:
        return not adaptive and _int(server.get('speculative_num_draft_tokens')) == _int(want['depth'])
    return (adaptive and _int(server.get('speculative_num_steps')) == _int(want['depth']) - 1
            and (server.get('speculative_adaptive_config') or '') == want.get('adaptive_config', ''))


def verdict(host, want, check):
    """(verified, message) of the check after the rollout: every check request completed and the
    server runs ``want``."""
    server = check.get('server') or {}
    completed = check['runs'][0]['completed']
    label = want.get('label', want['name'])
    if completed == CHECK_PROMPTS and serves(want, server):
        return True, '%s serves %s' % (host, label)
    reported = ', '.join('%s=%s' % (key, server.get(key, '?')) for key in (
        'speculative_algorithm', 'speculative_num_steps', 'speculative_num_draft_tokens', 'speculative_adaptive',
        'speculative_adaptive_config'))
    return False, '%s should now serve %s, but the server reports %s and %d/%d check requests completed.' % (
        host, label, reported, completed, CHECK_PROMPTS)
