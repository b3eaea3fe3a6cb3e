# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the sglang_server role derives from its options and from what it read on the host: the names of
the server's files and unit, its launch files and environment, the last good record it would write, the
decision to start or restart, and the facts it sets (``sglang_server_result``, ``sglang_server_status``).
Pure functions over plain values; the action plugins ``sglang_server_plan`` and ``sglang_server_files``
and the filters of ``plugins/filter/server.py`` call them."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils import _endpoints

PREFIX = 'sglang_server_'
# The role options the names are made of (names()'s arguments, in order).
NAME_OPTIONS = tuple(PREFIX + name for name in ('name', 'config_dir', 'run_dir', 'host', 'port'))
# Every role option the plan reads for names(), server_user() and last_good() (besides _server_plan.OPTIONS).
OPTIONS = NAME_OPTIONS + tuple(PREFIX + name for name in ('user', 'user_home', 'state_dir'))
# The role options of the short fixed benchmark (tasks/benchmark_rounds.yml, the deploy role's canary gate).
BENCHMARK_OPTIONS = tuple(PREFIX + name for name in (
    'engine', 'served_model_name', 'api_key', 'host', 'port', 'benchmark_rounds', 'benchmark_num_prompts',
    'benchmark_concurrency', 'benchmark_input_len', 'benchmark_output_len', 'benchmark_timeout'))
# The role options the launch files are made of (besides the plan).
FILES_OPTIONS = tuple(PREFIX + name for name in ('env', 'gpus', 'user', 'user_groups', 'api_key', 'admin_api_key',
                                                 'config_dir', 'log_path'))
UNIT_DIR = '/etc/systemd/system'
SHIM_TEMPLATE = {'src': 'llmops_launch.py.j2', 'mode': '0755'}
UNIT_TEMPLATE = {'src': 'sglang.service.j2', 'mode': '0644'}
SCRIPT_TEMPLATE = {'src': 'launch.sh.j2', 'mode': '0755'}
ENV_TEMPLATE = 'env.j2'
# What systemd says of a unit that runs (or is about to).
ACTIVE_STATES = ('active', 'activating', 'reloading')


# What an option of llmops.serving.sglang_server that is null (unset) means: the sglang_server role's defaults.
DEFAULTS = {'engine': 'sglang', 'served_model_name': '', 'tp_size': 8, 'host': '127.0.0.1', 'port': 30000,
            'enable_metrics': True, 'trust_remote_code': False, 'extra_args': [], 'speculative_algorithm': 'EAGLE3',
            'speculative_draft_model_path': '', 'speculative_adaptive': False, 'speculative_adaptive_config': '',
            'group_hosts': [], 'dist_init_port': 20000, 'gpus': [], 'env': {}, 'python': '/usr/bin/python3',
            'launcher': '', 'name': 'main', 'config_dir': '/etc/llmops', 'run_dir': '/run/llmops',
            'user_home': '/var/lib/sglang', 'state_dir': '/var/lib/llmops/last-good', 'user_groups': [], 'api_key': '',
            'admin_api_key': '', 'smoke': True, 'disaggregation_bootstrap_port': 8998, 'disaggregation_kv_checksum': False,
            'tls_refresh': False}


def role_options(args):
    """The role's options keyed by the variable names (``sglang_server_<option>``) from the arguments of
    llmops.serving.sglang_server (keyed by the option): a null option takes its DEFAULTS value, a null log path
    is C(/var/log/llmops/sglang-<name>.log)."""
    options = {}
    for name, value in args.items():
        options[PREFIX + name] = DEFAULTS.get(name) if value is None else value
    if not options.get(PREFIX + 'log_path'):
        options[PREFIX + 'log_path'] = '/var/log/llmops/sglang-%s.log' % options[PREFIX + 'name']
    return options


def names(name, config_dir, run_dir, host, port):
    """``{unit, unit_file, env_file, script, shim, api_key_file, admin_api_key_file, pidfile, url}`` of the server
    ``name``: its systemd unit and its file, its environment file, launch script (the process launcher), launcher
    shim, API key file and admin key file in ``config_dir``, its pidfile in ``run_dir``, and the URL its host reaches it at."""
    unit = 'llmops-sglang-%s.service' % name
    base = '%s/sglang-%s' % (config_dir, name)
    return {'unit': unit, 'unit_file': '%s/%s' % (UNIT_DIR, unit), 'env_file': base + '.env', 'script': base + '.sh',
            'shim': '%s/llmops_launch.py' % config_dir, 'api_key_file': base + '.key',
            'admin_api_key_file': base + '.admin.key', 'pidfile': '%s/sglang-%s.pid' % (run_dir, name), 'url': _endpoints.local_url(host, port)}


def server_user(user, user_home):
    """``{switch_user, home}``: whether the server runs as ``user`` rather than root (the launcher switches to
    it), and the home of the user it runs as (its caches)."""
    switch = str(user or '') not in ('', 'root')
    return {'switch_user': switch, 'home': user_home if switch else '/root'}


def launch_templates(launcher, file_names):
    """The launch files rendered besides the environment file, ``[{src, dest, mode}]``: the shim and the unit
    (systemd) or the launch script (process)."""
    launch = dict(UNIT_TEMPLATE, dest=file_names['unit_file']) if launcher == 'systemd' else dict(
        SCRIPT_TEMPLATE, dest=file_names['script'])
    return [dict(SHIM_TEMPLATE, dest=file_names['shim']), launch]


def role_plan(options, plan):
    """What the plan adds to ``plan`` (launcher, command, version, speculative) from the role's ``options``
    (a dict keyed by the variable names): names(), server_user(), the launch ``templates`` and the ``last_good``
    record the server's launch files, command and drafter make (the drafter's fingerprint besides)."""
    added = names(*[options[name] for name in NAME_OPTIONS])
    added.update(tls_endpoint(added['url'], plan['command'], options[PREFIX + 'config_dir'], options[PREFIX + 'name']))
    added.update(server_user(options[PREFIX + 'user'], options[PREFIX + 'user_home']))
    added['templates'] = launch_templates(plan['launcher'], added)
    drafter = options[PREFIX + 'speculative_draft_model_path'] or ''
    added['last_good'] = {
        'name': options[PREFIX + 'name'], 'state_dir': options[PREFIX + 'state_dir'],
        'files': [added['env_file']] + [template['dest'] for template in added['templates']],
        'fingerprints': [drafter] if drafter else [],
        'metadata': {'python': options[PREFIX + 'python'], 'launcher': plan['launcher'], 'command': plan['command'],
                     'engine': options[PREFIX + 'engine'], 'version': plan['version'],
                     'depth': plan['speculative']['depth'], 'drafter': drafter}}
    return added


def tls_endpoint(url, command, config_dir, name):
    """``{url, ca_path, tls_reloaded}``: the server's URL with the scheme its launch ``command`` serves (https where
    it has ``--ssl-certfile``), the CA file its host checks the certificate with (where the command names one, else
    None: the system's CAs), and the certificate and key files the server reloads without a restart (with
    ``--enable-ssl-refresh``)."""
    command = list(command or [])
    if '--ssl-certfile' not in command:
        return {'url': url, 'ca_path': None, 'tls_reloaded': []}

    def value(flag):
        index = command.index(flag) + 1 if flag in command else len(command)
        return command[index] if index < len(command) else None
    reloaded = [value('--ssl-certfile'), value('--ssl-keyfile')] if '--enable-ssl-refresh' in command else []
    return {'url': 'https' + url[len('http'):] if url.startswith('http:') else url, 'ca_path': value('--ssl-ca-certs'),
            'tls_reloaded': [path for path in reloaded if path]}


def environment(env, gpus, user, plan, api_key_file_env, user_env, admin_api_key_file_env=None):
    """The server's environment: ``env`` (sglang_server_env), the API key file's path under ``api_key_file_env``
    (always: no file, no key), the admin key file's path under ``admin_api_key_file_env`` where given (only with
    an admin key: without one the file is byte for byte the one of 1.0.0), CUDA_VISIBLE_DEVICES from ``gpus`` (sglang_server_gpus) where it names any, and
    ``user`` under ``user_env`` where the launcher switches to it."""
    result = dict(env or {})
    result[api_key_file_env] = plan['api_key_file']
    if admin_api_key_file_env:
        result[admin_api_key_file_env] = plan['admin_api_key_file']
    if gpus:
        result['CUDA_VISIBLE_DEVICES'] = ','.join(str(gpu) for gpu in gpus)
    if plan['switch_user']:
        result[user_env] = user
    return result


def decision(plan, process_status, unit_status, files, restart):
    """``plan`` with what the host's state decides: ``running``, ``pid`` and ``enabled`` (the launcher's status
    read: ``process_status`` of llmops.serving.server_process, ``unit_status`` of systemd_service; ``enabled`` is
    false for a unit that is not), what the launch files' comparison found (``files``: llmops.serving.launch_files
    in check mode: ``files_changed``, ``changed_files``, ``users_to_fix``, ``last_good_current``, and
    ``previous_version`` and ``previous_command``, the version and command of the newest last good record) and the ``action``: ``start`` where the
    server does not run, ``restart`` where a file changed or ``restart`` is asked, else ``none``."""
    status = unit_status.get('status') or {}
    if plan['launcher'] == 'process':
        running, pid, enabled = bool(process_status.get('running')), process_status.get('pid'), True
    else:
        running, pid = status.get('ActiveState', 'inactive') in ACTIVE_STATES, status.get('MainPID')
        enabled = status.get('UnitFileState', '') == 'enabled'
    last_good = files.get('last_good') or {}
    changed = list(files.get('changed_files') or [])
    result = dict(plan, running=running, pid=pid, enabled=enabled, files_changed=bool(changed), changed_files=changed,
                  users_to_fix=list(files.get('users_to_fix') or []), last_good_current=bool(last_good.get('current', False)),
                  previous_version=last_good.get('version'), previous_command=list(last_good.get('command') or []))
    # A certificate and key that the server reloads itself (--enable-ssl-refresh) are written without a restart.
    reloaded = set(plan.get('tls_reloaded') or [])
    restart_for = [path for path in changed if path not in reloaded]
    result['action'] = 'start' if not running else ('restart' if restart_for or restart else 'none')
    return result


def health_settings(options):
    """``{smoke, min_accept_length}`` of the health check after a start (llmops.serving.wait_for_llm_health): the
    smoke request on the server's native API (SGLang) or the OpenAI-compatible one, or none without
    sglang_server_smoke; the acceptance floor only with a drafter and not on a prefill (else None: unset), since a
    prefill server generates no speculative tokens (acceptance shows on the decode only)."""
    smoke = ('generate' if options[PREFIX + 'engine'] == 'sglang' else 'completions') if options[PREFIX + 'smoke'] else 'none'
    floor = options.get(PREFIX + 'min_accept_length')
    drafter = options[PREFIX + 'speculative_draft_model_path'] or ''
    prefill = options.get(PREFIX + 'disaggregation_mode') == 'prefill'
    return {'smoke': smoke, 'min_accept_length': floor if drafter and floor is not None and not prefill else None}


def restored_plan(layout, file_names, restored):
    """The plan of a rollback: the group ``layout`` (``_server_plan.group_layout``), the ``file_names`` (names()),
    and the launcher, command, version and depth of the record llmops.serving.last_good_config put back
    (``restored``, its result with state=restored), restarted; ``restored`` true: its launch files are not written."""
    metadata = restored.get('metadata') or {}
    plan = {'group': layout['group'], 'nnodes': layout['nnodes'], 'node_rank': layout['node_rank']}
    plan.update(file_names)
    plan.update(tls_endpoint(file_names['url'], metadata.get('command'), None, None))
    plan.update(action='restart', restored=True, launcher=metadata.get('launcher'), command=metadata.get('command'),
                version=metadata.get('version'), speculative={'depth': metadata.get('depth')})
    return plan


def rollback_outcome(restored, reason):
    """What a rollback's result says before its restart (the sglang_server role's ``sglang_server_result``, tasks/
    rollback.yml): ``state`` rolled_back where llmops.serving.last_good_config put a record back (``restored``, its
    result with state=restored, run with failed_when false), else failed; the ``record`` it selected; the
    ``reason`` (``reason``, sglang_server_rollback_reason), with why the server is left stopped where nothing was
    put back."""
    restorable = bool(restored.get('found')) and not restored.get('failed')
    if restorable:
        suffix = ''
    elif not restored.get('found'):
        suffix = '; no last good configuration was recorded, the server is left stopped'
    else:
        suffix = '; %s; the server is left stopped' % restored.get('msg')
    return {'state': 'rolled_back' if restorable else 'failed', 'record': restored.get('selected') or {},
            'reason': '%s%s' % (reason, suffix)}


def start(plan, restart=False):
    """The state llmops.serving.sglang_server's start asks of the launcher: ``restarted`` where the plan's action is
    restart or ``restart`` is asked, ``started`` where it is start or the unit is not enabled, else None (the
    server runs as wanted: nothing is started)."""
    if restart or plan['action'] == 'restart':
        return 'restarted'
    if plan['action'] != 'none' or not plan.get('enabled', True):
        return 'started'
    return None


def result(plan, health, rank_health, pid, engine, check_mode):
    """``sglang_server_result`` after apply: the plan's action, launcher, version and speculative settings, the
    server's ``pid`` and ``engine``, and what its health check (``health``, rank 0; ``rank_health``, a rank >= 1
    of a multi-node group; either skipped) found: state, ready time, startup phases, first sampled request and
    acceptance length."""
    health, rank_health = health or {}, rank_health or {}
    if 'status' in health:
        state = health['status']
    elif 'status' in rank_health:
        state = rank_health['status']
    else:
        state = 'check mode' if check_mode else 'started'
    speculative = plan['speculative']
    return {'state': state, 'action': plan['action'], 'launcher': plan['launcher'], 'pid': pid, 'engine': engine,
            'version': plan['version'], 'previous_version': plan.get('previous_version'), 'depth': speculative['depth'],
            'adaptive': speculative.get('adaptive', False), 'ready_s': health.get('elapsed'),
            'phases': health.get('phases', []), 'warm_sampled_s': (health.get('warm_sampled') or {}).get('seconds'),
            'accept_length': (health.get('smoke') or {}).get('accept_length'), 'url': plan['url']}


def benchmark_args(options):
    """The arguments of one round of the role's short fixed benchmark (llmops.serving.llm_benchmark): the
    server's native API (SGLang) or the OpenAI-compatible one, one concurrency level (as many warm-up requests),
    the prefix cache flushed (SGLang), no failed request allowed."""
    concurrency = options[PREFIX + 'benchmark_concurrency']
    args = {'url': _endpoints.local_url(options[PREFIX + 'host'], options[PREFIX + 'port']),
            'api': 'generate' if options[PREFIX + 'engine'] == 'sglang' else 'completions',
            'num_prompts': options[PREFIX + 'benchmark_num_prompts'], 'concurrency': [concurrency],
            'input_len': options[PREFIX + 'benchmark_input_len'], 'output_len': options[PREFIX + 'benchmark_output_len'],
            'warmup_requests': concurrency, 'flush_cache': options[PREFIX + 'engine'] == 'sglang',
            'timeout': options[PREFIX + 'benchmark_timeout'], 'max_failed_ratio': 0}
    for name, option in (('model', 'served_model_name'), ('api_key', 'api_key')):
        if options[PREFIX + option]:
            args[name] = options[PREFIX + option]
    return args


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def status(process_status, unit_status, info):
    """``sglang_server_status``: whether the server runs and its PID (the pidfile of the process launcher, else
    the unit's state; ``unit_status`` is skipped where there is no unit) and what the server said of itself
    (``info``: llmops.serving.llm_server_info)."""
    unit = unit_status.get('status') or {}
    speculative = info.get('speculative') or {}
    return {'running': bool(process_status.get('running') or unit.get('ActiveState', '') == 'active'),
            'pid': process_status.get('pid') or _int(unit.get('MainPID', 0)) or None,
            'healthy': info['healthy'], 'unauthorized': info['unauthorized'], 'version': info['version'],
            'depth': speculative.get('depth'), 'adaptive': speculative.get('adaptive', False),
            'accept_length': info['accept_length'], 'accept_length_source': info['accept_length_source'],
            'msg': info.get('msg', '')}
