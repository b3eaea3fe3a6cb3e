# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""sglang-router's worker list, as the drain and the register of a server see it (used by the module router_worker
on the router's host): the entry of one worker, who is out of the router, the refusal of a drain that would take
more than max_unavailable servers out, what register has to do, the drain's wait until the server is idle and its
judgement. And one router on its host (module sglang_router and its action): the workers it can have, its files
(launcher shim, launch script or unit, byte for byte what the role's templates rendered), whether it restarts."""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import time

from ansible_collections.llmops.serving.plugins.module_utils import _server_api, _sglang_args, _tls, _wait

# What register does with the router's entry of the server: nothing, add it, or remove it and add it afresh
# (an entry whose circuit breaker is open would get no traffic until the breaker's timeout).
KEEP, ADD, RE_ADD = 'none', 'add', 're-add'
# A server's role in prefill/decode disaggregation (sglang_server_disaggregation_mode), its worker_type in the router.
PD_TYPES = ('prefill', 'decode')
BOOTSTRAP_PORT = 8998  # SGLang's --disaggregation-bootstrap-port default


def worker_entry(value):
    """``{url, worker_type, bootstrap_port}`` of one value of ``workers``: a URL (a server in SGLang's default
    mode: worker_type and bootstrap_port None), or a dict ``{url, worker_type, bootstrap_port}`` (filter
    worker_urls for a server with a disaggregation mode; only a prefill has a bootstrap port)."""
    if not isinstance(value, dict):
        return dict(url=value, worker_type=None, bootstrap_port=None)
    worker_type = value.get('worker_type') or None
    port = value.get('bootstrap_port')
    if worker_type == 'prefill':
        port = int(port) if port not in (None, '') else BOOTSTRAP_PORT
    else:
        port = None
    return dict(url=value.get('url'), worker_type=worker_type, bootstrap_port=port)


def worker_url_map(workers):
    """``{host: URL}`` of ``workers`` (whose values are URLs or worker_entry dicts)."""
    return dict((host, worker_entry(value)['url']) for host, value in (workers or {}).items())


def pd_mode(workers):
    """Whether the router fronts ``workers`` in prefill/decode disaggregation (one of them has a worker_type)."""
    return any(worker_entry(value)['worker_type'] for value in (workers or {}).values())


def pd_problem(workers):
    """Why a router in PD mode cannot front ``workers``, else None: a worker type sglang-router does not know, a
    server in SGLang's default mode among prefills and decodes, no prefill or no decode."""
    if not pd_mode(workers):
        return None
    entries = dict((host, worker_entry(value)) for host, value in workers.items())
    unknown = ['%s (%s)' % (host, e['worker_type']) for host, e in entries.items() if e['worker_type'] not in PD_TYPES + (None,)]
    if unknown:
        return 'servers %s have a disaggregation mode the router does not know (prefill or decode)' % ', '.join(unknown)
    plain = [host for host, e in entries.items() if not e['worker_type']]
    if plain:
        return ('the router fronts prefill and decode servers, and servers %s have no sglang_server_disaggregation_mode: '
                'a router in PD mode takes prefill and decode servers only' % ', '.join(plain))
    for kind in PD_TYPES:
        if not any(e['worker_type'] == kind for e in entries.values()):
            return 'a router in PD mode needs at least one %s server; its servers are %s' % (
                kind, ', '.join('%s (%s)' % (host, e['worker_type']) for host, e in entries.items()))
    return None


def worker_address(url):
    """``url`` without its scheme and trailing slash (``host:port``): the server the router reaches at it, whether over
    HTTP or HTTPS."""
    return (url or '').split('://', 1)[-1].rstrip('/')


def other_scheme(url):
    """``url`` over HTTPS where it is HTTP, and the other way round (a server moving to or from TLS)."""
    if url.startswith('https://'):
        return 'http://' + url[len('https://'):]
    if url.startswith('http://'):
        return 'https://' + url[len('http://'):]
    return url


def entry_of(listed, url):
    """The entry of ``listed`` (the router's ``/workers``) whose URL is ``url``, else the first one for the same server
    under the other scheme (a server moving to or from TLS: the router lists http://host:port, the inventory now says
    https://host:port), else None."""
    for entry in listed:
        if entry.get('url') == url:
            return entry
    for entry in listed:
        if worker_address(entry.get('url')) == worker_address(url):
            return entry
    return None


def healthy(listed, url):
    """Whether the router lists ``url`` and reports it healthy."""
    return any(entry.get('url') == url and entry.get('is_healthy') for entry in listed)


def out_of_router(workers, listed, draining):
    """``(out_now, out_after)``: the URLs of ``workers`` ({host: URL or worker_entry}) the router does not list as
    healthy (under either scheme: a server not yet moved to TLS serves under its old URL), and those with
    ``draining`` added (each once, in order)."""
    up = set(worker_address(entry.get('url')) for entry in listed if entry.get('is_healthy'))
    out_now = []
    for url in worker_url_map(workers).values():
        if worker_address(url) not in up and url not in out_now:
            out_now.append(url)
    return out_now, out_now + [url for url in dict.fromkeys(draining) if url not in out_now]


def drain_refusal(router, workers, listed, draining, max_unavailable):
    """The message refusing to drain ``draining`` (URLs of the batch) from ``router`` when more than
    ``max_unavailable`` servers of ``workers`` would then be out of it, or in PD mode no healthy prefill or decode;
    None when the router can spare them or has lost them already."""
    out_now, out_after = out_of_router(workers, listed, draining)
    host_of = dict((url, host) for host, url in worker_url_map(workers).items())
    if pd_mode(workers):
        for kind in PD_TYPES:
            of_kind = [url for host, url in worker_url_map(workers).items()
                       if worker_entry(workers[host])['worker_type'] == kind]
            healthy_now = [url for url in of_kind if url not in out_now]
            # A router with no healthy server of the kind already loses nothing: draining one of them is its way back
            # (decodes whose scheduler died with their prefill, SGLang before 0.5.17).
            if healthy_now and not [url for url in of_kind if url not in out_after]:
                return ('draining %s would leave router %s without a healthy %s server (out already: %s): drain '
                        'another server first, or bring the servers that are out back first.'
                        % (', '.join(host_of.get(url, url) for url in dict.fromkeys(draining)), router, kind,
                           ', '.join(host_of.get(url, url) for url in out_now) or 'none'))
    # Draining servers that are out already (crashed, or left out by a killed run) takes nothing away: it is how
    # they come back.
    if max_unavailable is None or len(out_after) <= max_unavailable or len(out_after) == len(out_now):
        return None
    return ('draining %s would leave %d of %d servers out of router %s (out already: %s); '
            'sglang_router_max_unavailable is %d: use smaller batches (llmops_serial) or bring the servers that are '
            'out back first.' % (', '.join(host_of.get(url, url) for url in dict.fromkeys(draining)), len(out_after),
                                 len(host_of), router, ', '.join(host_of.get(url, url) for url in out_now) or 'none',
                                 max_unavailable))


def register_action(listed, url, breaker, worker_type=None, bootstrap_port=None):
    """What register does on a router that lists ``listed`` where the circuit breaker of ``url`` is ``breaker``
    (closed, open, half-open; None when the router has none for it): KEEP, ADD or RE_ADD. In PD mode (``worker_type``
    prefill or decode) an entry of another type or bootstrap port is added afresh too."""
    entry = entry_of(listed, url)
    if entry is None:
        return ADD
    if entry.get('url') != url:  # listed under the other scheme: the server moved to or from TLS
        return RE_ADD
    if worker_type and (entry.get('worker_type') != worker_type or
                        (worker_type == 'prefill' and entry.get('bootstrap_port') != bootstrap_port)):
        return RE_ADD
    return KEEP if (breaker or 'closed') == 'closed' else RE_ADD


def status(url, readiness, listed, breakers, workers):
    """``{url, up, ready, workers, missing}`` of the router at ``url``: ``readiness`` the HTTP status of its
    ``/readiness`` (-1 or None without an answer), ``listed`` its ``/workers`` entries, ``breakers`` its circuit
    breakers ({worker URL: state}), ``workers`` the servers it should front ({host: URL}): each listed worker with its
    health, load and breaker (closed when the router has none for it), and the servers it does not list. In PD mode
    each worker has its ``worker_type`` and ``bootstrap_port`` (as the router lists them) and ``pairs`` says which
    prefills and decodes the router pairs (any healthy prefill with any healthy decode)."""
    urls = set(worker_address(entry.get('url')) for entry in listed)
    result = {'url': url, 'up': readiness in (200, 503), 'ready': readiness == 200,
              'workers': [{'url': entry.get('url'), 'healthy': entry.get('is_healthy'), 'load': entry.get('load'),
                           'breaker': breakers.get(entry.get('url'), 'closed')} for entry in listed],
              'missing': [worker for worker in dict.fromkeys(worker_url_map(workers).values())
                          if worker_address(worker) not in urls]}
    if pd_mode(workers) or any(entry.get('worker_type') in PD_TYPES for entry in listed):
        for worker, entry in zip(result['workers'], listed):
            worker.update(worker_type=entry.get('worker_type'), bootstrap_port=entry.get('bootstrap_port'))
        result['pairs'] = dict((kind, [entry.get('url') for entry in listed
                                       if entry.get('worker_type') == kind and entry.get('is_healthy')])
                               for kind in PD_TYPES)
    return result


# sglang-router flag -> the option of module sglang_router that sets it, in the order of the launch command.
ROUTER_FLAGS = (('--host', 'host'), ('--port', 'port'), ('--prometheus-host', 'prometheus_host'),
                ('--prometheus-port', 'prometheus_port'), ('--policy', 'policy'),
                ('--health-check-interval-secs', 'health_check_interval_secs'),
                ('--health-failure-threshold', 'health_failure_threshold'),
                ('--health-success-threshold', 'health_success_threshold'),
                ('--health-check-timeout-secs', 'health_check_timeout_secs'),
                ('--health-check-endpoint', None),
                ('--cb-failure-threshold', 'cb_failure_threshold'),
                ('--cb-timeout-duration-secs', 'cb_timeout_duration_secs'),
                ('--retry-max-retries', 'retry_max_retries'),
                ('--request-timeout-secs', 'request_timeout_secs'))
# In PD mode (a worker with a worker_type), after the flags above: the policies of each side where set.
PD_POLICY_FLAGS = (('--prefill-policy', 'prefill_policy'), ('--decode-policy', 'decode_policy'))
# Module sglang_router's defaults, applied to the options the task leaves out or passes as null (the role's defaults).
ROUTER_DEFAULTS = dict(state='started', worker_group='sglang_servers', name='main', version='0.3.2', venv='/opt/llmops/sglang-router', host='0.0.0.0',
                       port=30080, prometheus_host='127.0.0.1', prometheus_port=29000, policy='cache_aware',
                       health_check_interval_secs=2, health_failure_threshold=2, health_success_threshold=1,
                       health_check_timeout_secs=5, cb_failure_threshold=5, cb_timeout_duration_secs=5,
                       retry_max_retries=3, request_timeout_secs=600, extra_args=[], launcher='',
                       config_dir='/etc/llmops', run_dir='/run/llmops', log_path='', stop_timeout=30, api_key='', control_plane_api_key='',
                       restart=False, restart_on=[], prefill_policy='', decode_policy='', tls_content={})
LOOPBACK_URL = re.compile(r'https?://(127\.|localhost[:/]|\[::1\])')
MANAGED = 'Ansible managed'


def worker_problem(host, group, workers, local_hosts):
    """Why the router on ``host`` cannot front ``workers`` ({host: URL} of inventory group ``group``), else None:
    no worker, or servers on another host that listen on a loopback address (``local_hosts``, the servers that run
    on the controller, count as this host's when the router runs there too)."""
    if not workers:
        return 'no hosts in inventory group %s (sglang_router_worker_group): the router would have no workers' % group
    problem = pd_problem(workers)
    if problem:
        return problem
    elsewhere = [name for name, url in worker_url_map(workers).items()
                 if name != host and name not in local_hosts and LOOPBACK_URL.match(url)]
    if elsewhere:
        return ('servers %s listen on a loopback address (sglang_server_host) the router on %s cannot reach: set '
                'sglang_server_host (e.g. 0.0.0.0) or sglang_router_worker_url for them' % (', '.join(elsewhere), host))
    return None


def with_defaults(params):
    """Module sglang_router's options with ROUTER_DEFAULTS where they are None (null counts as unset); the log is
    ``/var/log/llmops/sglang-router-<name>.log`` by default."""
    options = dict(params)
    for name, value in ROUTER_DEFAULTS.items():
        if options.get(name) is None:
            options[name] = value
    if not options['log_path']:
        options['log_path'] = '/var/log/llmops/sglang-router-%s.log' % options['name']
    return options


def service_manager(read=None, exists=None):
    """``systemd`` where systemd runs the host (its PID 1, else its runtime directory, as Ansible's service_mgr fact
    finds it), else ``process``."""
    def _read(path):
        try:
            with open(path) as handle:
                return handle.read().strip()
        except (IOError, OSError):
            return ''
    read, exists = read or _read, exists or posixpath.exists
    comm = read('/proc/1/comm')
    if comm and comm != 'init' and not comm.endswith('sh'):
        return 'systemd' if comm == 'systemd' else 'process'
    canaries = ('/run/systemd/system/', '/dev/.run/systemd/', '/dev/.systemd/')
    return 'systemd' if any(exists(path) for path in canaries) else 'process'


def router_paths(options):
    """File names of the router ``options['name']``: unit, script, key_file, shim, pidfile."""
    name, config_dir = options['name'], options['config_dir']
    return dict(unit='llmops-sglang-router-%s.service' % name, script='%s/sglang-router-%s.sh' % (config_dir, name),
                key_file='%s/sglang-router-%s.key' % (config_dir, name),
                control_plane_key_file='%s/sglang-router-%s.control-plane.key' % (config_dir, name),
                shim='%s/llmops_router_launch.py' % config_dir,
                pidfile='%s/sglang-router-%s.pid' % (options['run_dir'], name))


def router_argv(options, workers, paths):
    """The router's launch command: the shim's python, the shim, sglang-router's flags, the workers, extra args. In PD
    mode (workers with a worker_type) the workers are ``--pd-disaggregation --prefill URL BOOTSTRAP_PORT ...
    --decode URL ...``, after ``--prefill-policy`` and ``--decode-policy`` where set."""
    argv = [options['venv'] + '/bin/python', paths['shim']]
    for flag, option in ROUTER_FLAGS:
        argv += [flag, options[option] if option else '/health']
    argv += tls_argv(options)
    if pd_mode(workers):
        for flag, option in PD_POLICY_FLAGS:
            if options.get(option):
                argv += [flag, options[option]]
        argv.append('--pd-disaggregation')
        entries = [worker_entry(value) for value in workers.values()]
        for entry in entries:
            if entry['worker_type'] == 'prefill':
                argv += ['--prefill', entry['url'], entry['bootstrap_port']]
        for entry in entries:
            if entry['worker_type'] == 'decode':
                argv += ['--decode', entry['url']]
    else:
        argv += ['--worker-urls'] + list(worker_url_map(workers).values())
    return [str(arg) for arg in argv + list(options['extra_args'] or [])]


def tls_argv(options):
    """sglang-router's TLS flags for the TLS files the router has (``options['tls_content']``, by name of
    _tls.ROUTER_TLS_FLAGS): its listener, the CA it verifies workers with, its client certificate (mTLS)."""
    content = options.get('tls_content') or {}
    files = _tls.router_tls_files(options['config_dir'], options['name'])
    argv = []
    for flag, name in _tls.ROUTER_TLS_FLAGS:
        if content.get(name):
            argv += [flag, files[name]]
    return argv


# The one control-plane key the collection gives the router (sglang-router's --control-plane-api-keys
# 'id:name:role:key'): the operators', role admin, for worker management (/workers).
CONTROL_PLANE_KEY_ID = 'llmops:llmops-operators:admin:'


def shim_text(options, paths):
    """The launcher shim, which adds the API key (and the control-plane key, where the router has one) from their
    0600 files to the router's argv in memory. Without a control-plane key the shim is as it was before 1.1.0, so that
    upgrading the collection restarts no router."""
    control_plane = bool(options.get('control_plane_api_key'))
    text = (
        '# %s\n'
        '"""Launcher shim of llmops.serving: ``python llmops_router_launch.py [router args...]``.\n\n'
        'sglang-router %s takes its API key only as ``--api-key``. This shim reads\n'
        'it from %s (mode 0600, root only) when that file exists, adds it to the\n'
        'router\'s argv in memory and runs ``sglang_router.launch_router`` as ``__main__``, exactly like\n'
        '``python -m sglang_router.launch_router`` would: the key is on no command line, in no\n'
        'environment, unit or log.\n'
        + ('The control-plane key (worker management; the API key then serves inference only) comes the same\n'
           'way from %s, as ``--control-plane-api-keys``.\n' % paths['control_plane_key_file'] if control_plane else '')
        + '"""\n'
        'import os\nimport runpy\nimport sys\n\n'
        'KEY_FILE = %s\n'
        + ('CONTROL_PLANE_KEY_FILE = %s\n' % json.dumps(paths['control_plane_key_file']) if control_plane else '')
        + '\n\n'
        'def main():\n'
        '    args = sys.argv[1:]\n'
        '    if os.path.exists(KEY_FILE):\n'
        '        with open(KEY_FILE, encoding="utf-8") as handle:\n'
        '            key = handle.read().strip()\n'
        '        if key:\n'
        '            args = args + ["--api-key", key]\n'
        + ('    if os.path.exists(CONTROL_PLANE_KEY_FILE):\n'
           '        with open(CONTROL_PLANE_KEY_FILE, encoding="utf-8") as handle:\n'
           '            key = handle.read().strip()\n'
           '        if key:\n'
           '            args = args + ["--control-plane-api-keys", %s + key]\n' % json.dumps(CONTROL_PLANE_KEY_ID)
           if control_plane else '')
        + ('    # sglang-router 0.3.2 registers workers with --ca-cert-paths but its periodic health checks verify with\n'
           '    # OpenSSL\'s default CA file only: without this, an HTTPS worker signed by the fleet CA turns unhealthy.\n'
           '    os.environ["SSL_CERT_FILE"] = %s\n' % json.dumps(_tls.router_tls_files(options['config_dir'], options['name'])['ca_cert'])
           if (options.get('tls_content') or {}).get('ca_cert') else '')
        + '    sys.argv = ["sglang_router.launch_router"] + args\n'
        '    runpy.run_module("sglang_router.launch_router", run_name="__main__", alter_sys=True)\n\n\n'
        'if __name__ == "__main__":\n'
        '    main()\n')
    return text % (MANAGED, options['version'], paths['key_file'], json.dumps(paths['key_file']))


def script_text(options, paths, argv):
    """The launch script of the process launcher."""
    return ('#!/bin/sh\n# %s\n# sglang-router "%s" (llmops.serving process launcher); the API key, if\n'
            '# any, is read by the launcher shim from %s.\nexec %s\n'
            % (MANAGED, options['name'], paths['key_file'], _sglang_args.shell_join(argv)))


def unit_text(options, paths, argv, workers):
    """The systemd unit of the systemd launcher."""
    log = options['log_path']
    return ('# %s\n[Unit]\nDescription=llmops.serving sglang-router %s (%d workers)\nWants=network-online.target\n'
            'After=network-online.target\n\n[Service]\nType=simple\n'
            '# The API key, if any, is read by the launcher shim from %s (mode 0600).\n'
            'ExecStartPre=-/bin/mv -f %s %s.1\nExecStart=%s\nWorkingDirectory=/\nStandardOutput=append:%s\n'
            'StandardError=inherit\nRestart=on-failure\nRestartSec=5\nKillMode=control-group\nTimeoutStopSec=%s\n'
            'LimitNOFILE=65536\n# The log (written by systemd for the router) is private, like the servers\'.\n'
            'UMask=0077\n\n[Install]\nWantedBy=multi-user.target\n'
            % (MANAGED, options['name'], len(workers), paths['key_file'], log, log, _sglang_args.systemd_exec(argv), log,
               options['stop_timeout']))


def router_files(options, workers, launcher):
    """``{paths, argv, directories, files}`` of the router: ``files`` the list of ``{path, mode, content}`` to write
    (the shim, then the unit or the launch script)."""
    paths = router_paths(options)
    argv = router_argv(options, workers, paths)
    if launcher == 'systemd':
        launch = dict(path='/etc/systemd/system/' + paths['unit'], mode=0o644, content=unit_text(options, paths, argv, workers))
    else:
        launch = dict(path=paths['script'], mode=0o755, content=script_text(options, paths, argv))
    return dict(paths=paths, argv=argv,
                directories=[options['config_dir'], posixpath.dirname(options['log_path'])],
                files=[dict(path=paths['shim'], mode=0o755, content=shim_text(options, paths)), launch])


def process_state(state, restart, changes):
    """What the router's process or unit goes to: ``stopped``; ``restarted`` where asked (``state`` restarted,
    ``restart``) or where something it runs changed (``changes``: its files, its key, the registered results of the
    install passed as restart_on); else ``started``."""
    if state == 'stopped':
        return 'stopped'
    return 'restarted' if state == 'restarted' or restart or any(changes) else 'started'


def launch_without_workers(text):
    """A router's launch script or unit with the workers left out of its ``exec`` or ``ExecStart=`` line
    (``--worker-urls URL...``, ``--prefill URL PORT``, ``--decode URL``): two launch files that differ in their workers
    alone read the same here. None where the line does not parse."""
    lines = []
    for line in (text or '').splitlines():
        stripped = line.strip()
        if not (stripped.startswith('exec ') or stripped.startswith('ExecStart=')):
            lines.append(line)
            continue
        prefix = 'ExecStart=' if stripped.startswith('ExecStart=') else 'exec '
        try:
            argv = shlex.split(stripped[len(prefix):])
        except ValueError:
            return None
        kept, skip, urls = [], 0, False
        for arg in argv:
            if skip:
                skip -= 1
            elif urls and not arg.startswith('--'):
                continue
            elif arg == '--worker-urls':
                urls = True
            elif arg in ('--prefill', '--decode'):
                skip, urls = (2 if arg == '--prefill' else 1), False
            else:
                urls = False
                kept.append(arg)
        lines.append(prefix + ' '.join(kept))
    return '\n'.join(lines)


def lists_every_worker(listed, workers):
    """Whether the router's entries ``listed`` (its ``/workers``) have every URL of ``workers``, healthy."""
    return all(healthy(listed, url) for url in worker_url_map(workers).values())


def launch_endpoints(text):
    """``{host, port, prometheus_host, prometheus_port, ca_path, tls}`` from a router's launch script or unit (the
    ``exec`` or ``ExecStart=`` line), only those it sets (``tls`` true where its listener has a certificate); {} where
    it has no such line."""
    for line in (text or '').splitlines():
        line = line.strip()
        if line.startswith('exec ') or line.startswith('ExecStart='):
            try:
                argv = shlex.split(line.split('=', 1)[1] if line.startswith('ExecStart=') else line[5:])
            except ValueError:
                return {}
            found = {}
            for flag, option in ROUTER_FLAGS[:4] + (('--ca-cert-paths', 'ca_path'),):
                if flag in argv[:-1]:
                    found[option] = argv[argv.index(flag) + 1].replace('$$', '$').replace('%%', '%')
            if '--tls-cert-path' in argv:
                found['tls'] = True
            return found
    return {}


NOT_SERVING = 'not serving'  # wait_idle's source for a decode whose /health generation gets no answer


def drain_outcome(idle, host, timeout, fail_on_timeout):
    """``{failed, msg}`` after the drain's wait for ``host`` to go idle (``idle``: the result of wait_for_llm_idle,
    skipped where no router fronts it or in check mode): a server still busy after ``timeout`` seconds fails where
    ``fail_on_timeout``, else is stopped anyway with a warning; an idle one says how long it took (``msg`` empty
    when the wait did not run)."""
    idle = idle or {}
    if 'idle' not in idle:
        return dict(failed=False, msg='')
    if idle.get('source') == NOT_SERVING:
        return dict(failed=False, msg='WARNING: %s answers no /health generation (%s): its scheduler is gone and none '
                    'of its requests can finish; stopping it without waiting' % (host, idle.get('health')))
    if idle['idle']:
        return dict(failed=False, msg='%s: idle %s s after it left the router (%s, %s reads)'
                    % (host, idle.get('elapsed'), idle.get('source'), idle.get('reads')))
    busy = '%s still had %s running or queued requests %s s after it left the router; ' % (host, idle.get('requests'), timeout)
    if fail_on_timeout:
        return dict(failed=True, msg=busy + 'it keeps running, out of the router.')
    return dict(failed=False, msg='WARNING: ' + busy + 'stopping it anyway (SGLang finishes running requests on SIGTERM '
                'within the stop timeout).')


def wait_idle(request, timeout, interval, source, request_timeout, clock=time.monotonic, sleep=time.sleep, mode=None):
    """``{idle, requests, source, elapsed, reads}`` once the server ``request`` talks to runs and queues no request, or
    ``timeout`` seconds have passed (the drain gate's wait, as module wait_for_llm_idle waits); a server that refuses
    the connection is idle at once (``source`` ``not listening``). ``requests`` is None where no source answers. A
    prefill or decode (``mode``) is idle once its PD queues are empty too (_server_api.current_load)."""
    probe = _wait.probe_health(request, '/get_load', request_timeout)
    if probe['kind'] == _wait.PROBE_REFUSED:
        return dict(idle=True, requests=0, source='not listening', elapsed=0.0, reads=1, status=None)
    if mode == 'decode':
        # A decode whose scheduler died (it got requests for a prefill that went away, SGLang before 0.5.17) keeps
        # its process and its last gauges: its /health generation gets no answer, and no request of it will finish.
        health = _wait.probe_health(request, '/health', request_timeout)
        if health['status'] == 503 or health['kind'] == _wait.PROBE_TIMEOUT:
            return dict(idle=True, requests=None, source=NOT_SERVING, elapsed=0.0, reads=1, status=probe['status'],
                        health=_wait.describe_probe(health))
    result = _server_api.wait_until_idle(request, timeout, interval, source, request_timeout, clock, sleep, mode)
    result['status'] = probe['status']
    return result
