#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: sglang_router
short_description: One sglang-router's configuration on its host, and whether it must start, restart or stop
version_added: 1.1.0
description:
  - The C(sglang_router) role's main step (C(tasks/main.yml)), after the install of sglang-router into its virtualenv
    (M(ansible.builtin.pip)) and before its process (M(llmops.serving.server_process)) or unit
    (M(ansible.builtin.systemd_service)) is started. It writes the router's directories, its API key file (mode 0600,
    removed when O(api_key) is empty), the launcher shim that reads that key, and the launch script (process launcher)
    or the systemd unit, and returns what the process or unit goes to (RV(state)).
  - The router is restarted (RV(state=restarted)) where O(state=restarted), O(restart), where one of its files or its
    key changed, or where one of O(restart_on) (the registered results of the install) changed; else RV(state=started).
    A launch file that changes in its workers alone (C(--worker-urls), C(--prefill), C(--decode)) restarts no router
    that already lists every one of them healthy (RV(kept_running)), as its C(/workers) reads with O(control_plane_api_key)
    or O(api_key).
  - Its action plugin (same name) refuses, before anything on the host is touched, an empty O(workers) and servers of
    other hosts that listen on a loopback address the router cannot reach (servers and router that both run on the
    controller, connection C(local), share it).
  - Check mode is the plan (nothing is written; RV(state) says what would happen); C(--diff) shows the launch files'
    changes (never the key).
  - Every option left out or null takes the default its description gives (the C(sglang_router) role's default).
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The shim and the launch script or unit, before and after; the key file only as written or removed.
  idempotent:
    support: full
  action:
    support: full
    description: An action plugin of the same name checks O(workers) on the controller, then runs the module.
author:
  - llmops.serving contributors (@llmops)
options:
  state:
    description:
      - V(started) (default) starts it, restarting it where something it runs changed; V(restarted) always restarts it;
        V(stopped) stops it (its files are still written).
    type: str
    choices: [started, restarted, stopped]
  workers:
    description:
      - The servers the router fronts, a dict host -> URL (filter P(llmops.serving.worker_urls#filter) over group
        C(sglang_router_worker_group)); at least one.
      - A server in prefill/decode disaggregation maps to a dict C({url, worker_type, bootstrap_port}) (what the filter
        gives for a host with C(sglang_server_disaggregation_mode)). Where one does, the router runs in PD mode
        (C(--pd-disaggregation --prefill URL BOOTSTRAP_PORT ... --decode URL ...)), and the action refuses a server
        without a mode among them, and a router without a prefill or without a decode.
    type: dict
    required: true
  prefill_policy:
    description: In PD mode, the policy of the prefills (C(--prefill-policy)); empty or null (default) takes O(policy).
    type: str
    version_added: 1.1.0
  decode_policy:
    description: In PD mode, the policy of the decodes (C(--decode-policy)); empty or null (default) takes O(policy).
    type: str
    version_added: 1.1.0
  worker_group:
    description: The inventory group O(workers) come from, named where it has no host. Default V(sglang_servers).
    type: str
  name:
    description: Instance name, used for the unit, pidfile, key file, launch script and log names. Default V(main).
    type: str
  version:
    description: The C(sglang-router) version installed, named in the shim. Default V(0.3.2).
    type: str
  venv:
    description: The virtualenv sglang-router is installed in. Default V(/opt/llmops/sglang-router).
    type: path
  host:
    description: Address the router's API binds (C(--host)). Default V(0.0.0.0).
    type: str
  port:
    description: Port of the router's API (C(--port)). Default V(30080).
    type: int
  prometheus_host:
    description: Address its metrics bind (C(--prometheus-host)). Default V(127.0.0.1).
    type: str
  prometheus_port:
    description: Port of its metrics (C(--prometheus-port)). Default V(29000).
    type: int
  policy:
    description: Load-balancing policy (C(--policy)). Default V(cache_aware).
    type: str
  health_check_interval_secs:
    description: C(--health-check-interval-secs). Default V(2).
    type: int
  health_failure_threshold:
    description: C(--health-failure-threshold). Default V(2).
    type: int
  health_success_threshold:
    description: C(--health-success-threshold). Default V(1).
    type: int
  health_check_timeout_secs:
    description: C(--health-check-timeout-secs). Default V(5).
    type: int
  cb_failure_threshold:
    description: C(--cb-failure-threshold). Default V(5).
    type: int
  cb_timeout_duration_secs:
    description: C(--cb-timeout-duration-secs). Default V(5).
    type: int
  retry_max_retries:
    description: C(--retry-max-retries). Default V(3).
    type: int
  request_timeout_secs:
    description: C(--request-timeout-secs). Default V(600).
    type: int
  extra_args:
    description: More sglang-router arguments, after the workers. Default none.
    type: list
    elements: str
  launcher:
    description:
      - V(systemd) or V(process); empty or null (default) picks V(systemd) where systemd runs the host (its PID 1, else
        its runtime directory), else V(process).
    type: str
  config_dir:
    description: Directory of the shim, the key file and the launch script. Default V(/etc/llmops).
    type: path
  run_dir:
    description: Directory of the pidfile (process launcher). Default V(/run/llmops).
    type: path
  log_path:
    description: The router's log; its directory is made. Default C(/var/log/llmops/sglang-router-<name>.log).
    type: path
  stop_timeout:
    description: Seconds systemd waits for the router to stop (C(TimeoutStopSec)). Default V(30).
    type: int
  api_key:
    description: The router's API key, written to its key file (mode 0600); empty or null (default) removes that file.
    type: str
  control_plane_api_key:
    description:
      - The key of the router's worker management (C(--control-plane-api-keys), role admin), written to its own key file
        (mode 0600); empty or null (default) removes that file.
      - With it, the router takes O(api_key) for inference only and answers C(/workers) (add, remove, list) to this key
        only; without it sglang-router 0.3.2 lets every holder of O(api_key) add and remove workers.
    type: str
    version_added: 1.1.0
  tls_cert:
    description:
      - Path B(on the controller) of the certificate (PEM) of the router's own listener (C(--tls-cert-path)); clients
        then reach the router over HTTPS. Needs O(tls_key). Installed as C(<config_dir>/sglang-router-<name>.tls.crt).
    type: path
    version_added: 1.1.0
  tls_key:
    description:
      - Path on the controller of the private key of O(tls_cert) (C(--tls-key-path)), installed with mode 0600; its
        content never appears in output or diffs.
    type: path
    version_added: 1.1.0
  ca_cert:
    description:
      - Path on the controller of the CA certificate (PEM) the router verifies HTTPS workers with (C(--ca-cert-paths));
        the fleet CA, C(llmops_tls_ca_cert).
    type: path
    version_added: 1.1.0
  client_cert:
    description:
      - Path on the controller of the certificate the router presents to its workers (mTLS, C(--client-cert-path)).
        Needs O(client_key).
    type: path
    version_added: 1.1.0
  client_key:
    description: Path on the controller of the private key of O(client_cert) (C(--client-key-path)), installed with mode 0600.
    type: path
    version_added: 1.1.0
  tls_content:
    description:
      - Set by the action plugin from O(tls_cert), O(tls_key), O(ca_cert), O(client_cert) and O(client_key) (the
        content of those files, read on the controller); do not set it in a task.
    type: dict
    version_added: 1.1.0
  restart:
    description: Restart the router even where nothing changed (the role's C(sglang_router_restart)). Default V(false).
    type: bool
  restart_on:
    description:
      - Registered results of earlier tasks whose change the running router must take up (the role passes its
        install's); the router restarts where one of them changed. Default none.
    type: list
    elements: dict
notes:
  - The role's options (C(sglang_router_*)) are documented in the C(sglang_router) role's argument specification.
seealso:
  - module: llmops.serving.server_process
  - module: llmops.serving.router_worker
'''

EXAMPLES = r'''
- name: Install the pinned sglang-router into its virtualenv
  ansible.builtin.pip:
    name: sglang-router==0.3.2
    virtualenv: /opt/llmops/sglang-router
    virtualenv_command: /usr/bin/python3 -m venv
  register: installed

- name: Configure the router in front of the servers
  llmops.serving.sglang_router:
    workers: "{{ groups['sglang_servers'] | llmops.serving.worker_urls(hostvars) }}"
    policy: round_robin
    api_key: "{{ sglang_router_api_key }}"
    restart_on: ["{{ installed }}"]
  register: router

- name: Start or restart it as a detached process
  llmops.serving.server_process:
    name: sglang-router-main
    command: ["{{ router.script }}"]
    pidfile: "{{ router.pidfile }}"
    state: "{{ router.state }}"
  when: router.launcher == 'process'
'''

RETURN = r'''
state:
  description: What the router's process or unit goes to, V(started), V(restarted) or V(stopped).
  returned: success
  type: str
  sample: started
launcher:
  description: How the router runs, V(systemd) or V(process).
  returned: success
  type: str
  sample: process
daemon_reload:
  description: Whether the unit changed (systemd must reload it).
  returned: success
  type: bool
unit:
  description: Name of the systemd unit.
  returned: success
  type: str
  sample: llmops-sglang-router-main.service
script:
  description: Path of the launch script (process launcher).
  returned: success
  type: str
  sample: /etc/llmops/sglang-router-main.sh
pidfile:
  description: Path of the pidfile (process launcher).
  returned: success
  type: str
key_file:
  description: Path of the API key file the shim reads.
  returned: success
  type: str
control_plane_key_file:
  description: Path of the control-plane key file the shim reads (where O(control_plane_api_key) is set).
  returned: success
  type: str
  version_added: 1.1.0
shim:
  description: Path of the launcher shim.
  returned: success
  type: str
argv:
  description: The router's launch command (the shim's python, the shim, then sglang-router's flags); no key.
  returned: success
  type: list
  elements: str
files:
  description: The paths written or removed (or that would be, in check mode).
  returned: success
  type: list
  elements: str
url:
  description: The router's API URL on its host.
  returned: success
  type: str
  sample: http://127.0.0.1:30080
ready_url:
  description: The URL of its C(/readiness), which answers 200 once a healthy worker is behind it.
  returned: success
  type: str
kept_running:
  description:
    - Whether the router keeps running although its launch file changed, because the change is in its workers alone
      and the running router already lists every one of them healthy (a rollout's register added them, e.g. the
      C(https://) workers of a fleet moved to TLS); the launch file is then for its next start.
  returned: success
  type: bool
  version_added: 1.1.0
ca_path:
  description: The CA file the router verifies its workers with (from O(ca_cert)), for clients on its host; null without one.
  returned: success
  type: str
  version_added: 1.1.0
result:
  description: The role's C(sglang_router_result) but its readiness, C({state, launcher, url, workers}) (workers their URLs).
  returned: success
  type: dict
'''

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils import _endpoints, _router, _server_api, _tls

ARGUMENT_SPEC = dict(
    state=dict(type='str', choices=['started', 'restarted', 'stopped']),
    workers=dict(type='dict', required=True),
    worker_group=dict(type='str'),
    name=dict(type='str'),
    version=dict(type='str'),
    venv=dict(type='path'),
    host=dict(type='str'),
    port=dict(type='int'),
    prometheus_host=dict(type='str'),
    prometheus_port=dict(type='int'),
    policy=dict(type='str'),
    prefill_policy=dict(type='str'),
    decode_policy=dict(type='str'),
    health_check_interval_secs=dict(type='int'),
    health_failure_threshold=dict(type='int'),
    health_success_threshold=dict(type='int'),
    health_check_timeout_secs=dict(type='int'),
    cb_failure_threshold=dict(type='int'),
    cb_timeout_duration_secs=dict(type='int'),
    retry_max_retries=dict(type='int'),
    request_timeout_secs=dict(type='int'),
    extra_args=dict(type='list', elements='str'),
    launcher=dict(type='str'),
    config_dir=dict(type='path'),
    run_dir=dict(type='path'),
    log_path=dict(type='path'),
    stop_timeout=dict(type='int'),
    api_key=dict(type='str', no_log=True),
    control_plane_api_key=dict(type='str', no_log=True),
    tls_cert=dict(type='path'),
    tls_key=dict(type='path', no_log=False),
    ca_cert=dict(type='path'),
    client_cert=dict(type='path'),
    client_key=dict(type='path', no_log=False),
    tls_content=dict(type='dict', no_log=True),
    restart=dict(type='bool'),
    restart_on=dict(type='list', elements='dict'),
)


def read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def write(module, path, content, mode):
    """Writes ``content`` to ``path`` atomically with ``mode``."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.%s.' % os.path.basename(path))
    try:
        with os.fdopen(fd, 'w') as handle:
            handle.write(content)
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    except Exception as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        module.fail_json(msg='cannot write %s: %s' % (path, exc))


def write_key(module, key, path, changed_paths, diffs, check):
    """The key file ``path`` holds ``key`` (mode 0600), or is gone where ``key`` is empty; the diff never shows it."""
    if key:
        if read(path) != key + '\n' or mode_of(path) != 0o600:
            changed_paths.append(path)
            diffs.append(dict(before_header=path, after_header=path, before='', after='(key written)\n'))
            if not check:
                write(module, path, key + '\n', 0o600)
    elif os.path.exists(path):
        changed_paths.append(path)
        diffs.append(dict(before_header=path, after_header=path, before='(key)\n', after=''))
        if not check:
            os.unlink(path)


def mode_of(path):
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return None


def workers_only_and_live(options, launch_before, planned, url, own_ca):
    """Whether the launch file changes in its workers alone and the running router already lists every one of them,
    healthy (the register of a rollout added them: a fleet moved to TLS lists its https:// workers): then the router
    keeps running, and the launch file is for its next start."""
    before = _router.launch_without_workers(launch_before) if launch_before else None
    if before is None or before != _router.launch_without_workers(planned['files'][-1]['content']):
        return False
    key = options['control_plane_api_key'] or options['api_key']
    request = _server_api.open_url_request(url, _server_api.auth_headers(key), ca_path=own_ca)
    status, data = _server_api.get_json(request, '/workers', 10)
    return status == 200 and _router.lists_every_worker((data or {}).get('workers') or [], options['workers'])


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    options = _router.with_defaults(module.params)
    workers = options['workers']
    if options['launcher'] not in ('', 'systemd', 'process'):
        module.fail_json(msg='launcher must be systemd, process or empty, got %r' % options['launcher'])
    launcher = options['launcher'] or _router.service_manager()
    planned = _router.router_files(options, workers, launcher)
    paths, check = planned['paths'], module.check_mode
    changed_paths, diffs, launch_changed = [], [], False
    launch_before = read(planned['files'][-1]['path'])
    for directory in planned['directories']:
        if not os.path.isdir(directory):
            changed_paths.append(directory)
            if not check:
                os.makedirs(directory, 0o755)
    for item in planned['files']:
        before = read(item['path'])
        if before == item['content'] and mode_of(item['path']) == item['mode']:
            continue
        changed_paths.append(item['path'])
        launch_changed = launch_changed or item is planned['files'][-1]
        diffs.append(dict(before_header=item['path'], after_header=item['path'], before=before or '', after=item['content']))
        if not check:
            write(module, item['path'], item['content'], item['mode'])
    for key, key_file in ((options['api_key'], paths['key_file']),
                          (options['control_plane_api_key'], paths['control_plane_key_file'])):
        write_key(module, key, key_file, changed_paths, diffs, check)
    tls_files = _tls.router_tls_files(options['config_dir'], options['name'])
    for name, path in sorted(tls_files.items()):
        content = (options['tls_content'] or {}).get(name) or ''
        if name.endswith('_key'):
            write_key(module, content.rstrip('\n'), path, changed_paths, diffs, check)
        elif content and (read(path) != content or mode_of(path) != 0o644):
            changed_paths.append(path)
            diffs.append(dict(before_header=path, after_header=path, before=read(path) or '', after=content))
            if not check:
                write(module, path, content, 0o644)
        elif not content and os.path.exists(path):
            changed_paths.append(path)
            diffs.append(dict(before_header=path, after_header=path, before=read(path) or '', after=''))
            if not check:
                os.unlink(path)
    runs_changed = [path for path in changed_paths if path not in planned['directories']]
    url = _endpoints.local_url(options['host'], options['port'], tls=bool((options['tls_content'] or {}).get('tls_cert')))
    own_ca = tls_files['ca_cert'] if (options['tls_content'] or {}).get('ca_cert') else None
    installed = any((done or {}).get('changed') for done in options['restart_on'])
    kept_running = (runs_changed == [planned['files'][-1]['path']] and options['state'] == 'started'
                    and not options['restart'] and not installed
                    and workers_only_and_live(options, launch_before, planned, url, own_ca))
    if kept_running:
        runs_changed = []
    state = _router.process_state(options['state'], options['restart'], [bool(runs_changed), installed])
    result = dict(changed=bool(changed_paths), state=state, ca_path=own_ca, launcher=launcher, files=changed_paths,
                  kept_running=kept_running,
                  daemon_reload=launcher == 'systemd' and launch_changed, argv=planned['argv'], url=url,
                  ready_url=url + '/readiness', result=dict(state=state, launcher=launcher, url=url,
                                                            workers=list(_router.worker_url_map(workers).values())), **paths)
    if module._diff:
        result['diff'] = diffs
    module.exit_json(**result)


if __name__ == '__main__':
    main()
