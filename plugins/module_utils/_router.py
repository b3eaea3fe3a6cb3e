# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""sglang-router's worker list, as the drain and the register of a server see it (pure; used by the module
router_worker on the router's host): the entry of one worker, who is out of the router, the refusal of a drain
that would take more than max_unavailable servers out, what register has to do."""

from __future__ import annotations

import posixpath
import re

from ansible_collections.llmops.serving.plugins.module_utils import _endpoints

# What register does with the router's entry of the server: nothing, add it, or remove it and add it afresh
# (an entry whose circuit breaker is open would get no traffic until the breaker's timeout).
KEEP, ADD, RE_ADD = 'none', 'add', 're-add'


def entry_of(listed, url):
    """The first entry of ``listed`` (the router's ``/workers``) whose URL is ``url``, else None."""
    for entry in listed:
        if entry.get('url') == url:
            return entry
    return None


def healthy(listed, url):
    """Whether the router lists ``url`` and reports it healthy."""
    return any(entry.get('url') == url and entry.get('is_healthy') for entry in listed)


def out_of_router(workers, listed, draining):
    """``(out_now, out_after)``: the URLs of ``workers`` ({host: URL}) the router does not list as healthy,
    and those with ``draining`` added (each once, in order)."""
    up = set(entry.get('url') for entry in listed if entry.get('is_healthy'))
    out_now = []
    for url in workers.values():
        if url not in up and url not in out_now:
            out_now.append(url)
    return out_now, out_now + [url for url in dict.fromkeys(draining) if url not in out_now]


def drain_refusal(router, workers, listed, draining, max_unavailable):
    """The message refusing to drain ``draining`` (URLs of the batch) from ``router`` when more than
    ``max_unavailable`` servers of ``workers`` would then be out of it; None when the router can spare them."""
    out_now, out_after = out_of_router(workers, listed, draining)
    if max_unavailable is None or len(out_after) <= max_unavailable:
        return None
    host_of = dict((url, host) for host, url in workers.items())
    return ('draining %s would leave %d of %d servers out of router %s (out already: %s); '
            'sglang_router_max_unavailable is %d: use smaller batches (llmops_serial) or bring the servers that are '
            'out back first.' % (', '.join(host_of.get(url, url) for url in dict.fromkeys(draining)), len(out_after),
                                 len(host_of), router, ', '.join(host_of.get(url, url) for url in out_now) or 'none',
                                 max_unavailable))


def register_action(listed, url, breaker):
    """What register does on a router that lists ``listed`` where the circuit breaker of ``url`` is ``breaker``
    (closed, open, half-open; None when the router has none for it): KEEP, ADD or RE_ADD."""
    if entry_of(listed, url) is None:
        return ADD
    return KEEP if (breaker or 'closed') == 'closed' else RE_ADD


def status(url, readiness, listed, breakers, workers):
    """``{url, up, ready, workers, missing}`` of the router at ``url``: ``readiness`` the HTTP status of its
    ``/readiness`` (-1 or None without an answer), ``listed`` its ``/workers`` entries, ``breakers`` its circuit
    breakers ({worker URL: state}), ``workers`` the servers it should front ({host: URL}): each listed worker with its
    health, load and breaker (closed when the router has none for it), and the servers it does not list."""
    urls = set(entry.get('url') for entry in listed)
    return {'url': url, 'up': readiness in (200, 503), 'ready': readiness == 200,
            'workers': [{'url': entry.get('url'), 'healthy': entry.get('is_healthy'), 'load': entry.get('load'),
                         'breaker': breakers.get(entry.get('url'), 'closed')} for entry in listed],
            'missing': [worker for worker in dict.fromkeys(workers.values()) if worker not in urls]}


# The sglang_router role's options the plan reads (its action plugin takes them from the host's variables).
PLAN_OPTIONS = ('sglang_router_name', 'sglang_router_config_dir', 'sglang_router_run_dir', 'sglang_router_venv',
                'sglang_router_log_path', 'sglang_router_launcher', 'sglang_router_worker_group',
                'sglang_router_host', 'sglang_router_port', 'sglang_router_prometheus_host', 'sglang_router_prometheus_port',
                'sglang_router_policy', 'sglang_router_health_check_interval_secs', 'sglang_router_health_failure_threshold',
                'sglang_router_health_success_threshold', 'sglang_router_health_check_timeout_secs',
                'sglang_router_cb_failure_threshold', 'sglang_router_cb_timeout_duration_secs',
                'sglang_router_retry_max_retries', 'sglang_router_request_timeout_secs', 'sglang_router_extra_args',
                'sglang_router_version', 'sglang_router_python', 'sglang_router_wheelhouse')
# sglang-router flag -> the option that sets it, in the order of the launch command.
ROUTER_FLAGS = (('--host', 'sglang_router_host'), ('--port', 'sglang_router_port'),
                ('--prometheus-host', 'sglang_router_prometheus_host'), ('--prometheus-port', 'sglang_router_prometheus_port'),
                ('--policy', 'sglang_router_policy'),
                ('--health-check-interval-secs', 'sglang_router_health_check_interval_secs'),
                ('--health-failure-threshold', 'sglang_router_health_failure_threshold'),
                ('--health-success-threshold', 'sglang_router_health_success_threshold'),
                ('--health-check-timeout-secs', 'sglang_router_health_check_timeout_secs'),
                ('--health-check-endpoint', None),
                ('--cb-failure-threshold', 'sglang_router_cb_failure_threshold'),
                ('--cb-timeout-duration-secs', 'sglang_router_cb_timeout_duration_secs'),
                ('--retry-max-retries', 'sglang_router_retry_max_retries'),
                ('--request-timeout-secs', 'sglang_router_request_timeout_secs'))
LOOPBACK_URL = re.compile(r'https?://(127\.|localhost[:/]|\[::1\])')


def worker_problem(host, group, workers, local_hosts):
    """Why the router on ``host`` cannot front ``workers`` ({host: URL} of inventory group ``group``), else None:
    no worker, or servers on another host that listen on a loopback address (``local_hosts``, the servers that run
    on the controller, count as this host's when the router runs there too)."""
    if not workers:
        return 'no hosts in inventory group %s (sglang_router_worker_group): the router would have no workers' % group
    elsewhere = [name for name, url in workers.items()
                 if name != host and name not in local_hosts and LOOPBACK_URL.match(url)]
    if elsewhere:
        return ('servers %s listen on a loopback address (sglang_server_host) the router on %s cannot reach: set '
                'sglang_server_host (e.g. 0.0.0.0) or sglang_router_worker_url for them' % (', '.join(elsewhere), host))
    return None


def router_plan(options, workers, launcher):
    """``{launcher, unit, script, key_file, shim, pidfile, argv, directories, templates, url, ready_url, pip, process}``
    of the router whose role options are ``options``, fronting ``workers`` ({host: URL}), started by ``launcher``
    (systemd or process): ``pip`` the arguments of ansible.builtin.pip that install it, ``process`` those of
    server_process that run it (its log and stop timeout are the role's options, its ``state`` comes from
    ``decision``)."""
    name, config_dir = options['sglang_router_name'], options['sglang_router_config_dir']
    paths = dict(unit='llmops-sglang-router-%s.service' % name, script='%s/sglang-router-%s.sh' % (config_dir, name),
                 key_file='%s/sglang-router-%s.key' % (config_dir, name), shim='%s/llmops_router_launch.py' % config_dir,
                 pidfile='%s/sglang-router-%s.pid' % (options['sglang_router_run_dir'], name))
    argv = [options['sglang_router_venv'] + '/bin/python', paths['shim']]
    for flag, option in ROUTER_FLAGS:
        argv += [flag, options[option] if option else '/health']
    argv += ['--worker-urls'] + list(workers.values()) + list(options['sglang_router_extra_args'] or [])
    launch = (dict(src='sglang-router.service.j2', dest='/etc/systemd/system/' + paths['unit'], mode='0644')
              if launcher == 'systemd' else dict(src='launch.sh.j2', dest=paths['script'], mode='0755'))
    pip = dict(name='sglang-router==%s' % options['sglang_router_version'], virtualenv=options['sglang_router_venv'],
               virtualenv_command='%s -m venv' % options['sglang_router_python'])
    if options['sglang_router_wheelhouse']:
        pip['extra_args'] = '--no-index --find-links %s' % options['sglang_router_wheelhouse']
    url = _endpoints.local_url(options['sglang_router_host'], options['sglang_router_port'])
    process = dict(name='sglang-router-%s' % name, command=[paths['script']], pidfile=paths['pidfile'])
    return dict(paths, launcher=launcher, argv=argv, workers=workers, url=url, ready_url=url + '/readiness', pip=pip,
                process=process,
                directories=[config_dir, posixpath.dirname(options['sglang_router_log_path']),
                             posixpath.dirname(options['sglang_router_venv'])],
                templates=[dict(src='llmops_router_launch.py.j2', dest=paths['shim'], mode='0755'), launch])


def decision(plan, files, changes, restart=False):
    """``plan`` with ``state`` (``restarted`` where ``restart`` is asked or where the launch files, ``files``, or one of
    ``changes``, the registered results of the install and of the key file, changed something, else ``started``),
    ``files_changed`` (a unit needs a daemon reload) and ``process``, server_process's arguments, given that state."""
    files_changed = bool((files or {}).get('changed'))
    state = 'restarted' if restart or files_changed or any((change or {}).get('changed') for change in changes) else 'started'
    return dict(plan, state=state, files_changed=files_changed, process=dict(plan['process'], state=state))


def result(decided, ready):
    """``sglang_router_result``: the router's state, launcher, URL and workers from ``decided`` (``decision``), and
    what its ``/readiness`` answered (``ready``, the registered result of the wait; none in check mode)."""
    return dict(state=decided['state'], launcher=decided['launcher'], url=decided['url'],
                workers=list(decided['workers'].values()), ready=(ready or {}).get('json'))


def drain_outcome(idle, host, timeout, fail_on_timeout):
    """``{failed, msg}`` after the drain's wait for ``host`` to go idle (``idle``: the result of wait_for_llm_idle,
    skipped where no router fronts it or in check mode): a server still busy after ``timeout`` seconds fails where
    ``fail_on_timeout``, else is stopped anyway with a warning; an idle one says how long it took (``msg`` empty
    when the wait did not run)."""
    idle = idle or {}
    if 'idle' not in idle:
        return dict(failed=False, msg='')
    if idle['idle']:
        return dict(failed=False, msg='%s: idle %s s after it left the router (%s, %s reads)'
                    % (host, idle.get('elapsed'), idle.get('source'), idle.get('reads')))
    busy = '%s still had %s running or queued requests %s s after it left the router; ' % (host, idle.get('requests'), timeout)
    if fail_on_timeout:
        return dict(failed=True, msg=busy + 'it keeps running, out of the router.')
    return dict(failed=False, msg='WARNING: ' + busy + 'stopping it anyway (SGLang finishes running requests on SIGTERM '
                'within the stop timeout).')
