#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: router_worker
short_description: Take a server out of sglang-router, or put it back, or read the router's status
version_added: 1.1.0
description:
  - Runs on the router's host (C(delegate_to) the router), where its worker API and its C(/metrics) answer. The
    C(sglang_router) role runs it from C(tasks/drain.yml) and C(tasks/register.yml) on each server host, once per router
    in front of the server, every option given from the role's variables; its C(tasks/status.yml) runs it on the
    router's host with O(state=status).
  - The router's URLs are O(url) and O(metrics_url) where given; else its address and ports as its launch script or
    unit (written by M(llmops.serving.sglang_router) from the router host's variables) sets them, else O(host),
    O(port), O(prometheus_host) and O(prometheus_port).
  - Lists the router's workers (C(GET /workers)). A router that does not answer is left alone (RV(answered) false).
  - O(state=absent) refuses, before it changes anything, when the servers the router does not list as healthy and the
    O(draining) ones would be more than O(max_unavailable), or in PD mode when it would take the router's last healthy
    prefill or decode; else removes the server's entry and waits until the router no longer lists it. Draining servers
    the router lists as unhealthy already takes nothing away and is never refused (it is how they come back).
  - O(state=present) adds the server when the router does not list it, removes and adds afresh an entry whose circuit
    breaker is open or half-open (a new entry starts closed and gets traffic at once), then waits until the router
    reports it healthy. An entry of the server under the other scheme (C(http://host:port) where O(worker) is
    C(https://host:port), a server moving to TLS, or the other way round) is its entry, which O(state=absent) removes
    and O(state=present) replaces by O(worker). A prefill or decode server (O(worker_type)) is added with its
    C(worker_type) and, for a prefill, its C(bootstrap_port) (C(POST /workers)); an entry of another type or bootstrap
    port is added afresh.
  - A prefill (O(worker_type=prefill)) back in the router is followed by a C(/health) probe of every decode the router
    lists (up to 3 tries, 2 s apart), and one that does not answer 200 fails the task, naming it. Before SGLang 0.5.17 a
    decode that got requests for a prefill that went away (a prefill killed, not drained) loses its scheduler while its
    process runs on, and a rollout must not go on past it.
  - O(state=status) changes nothing and never fails; it reads the router's C(/readiness), C(/workers) and C(/metrics)
    and returns RV(status) (a router that does not answer is not up).
  - O(state=idle), on the server's host once it is out of every router (the drain's last step), waits until the server
    runs and queues no request, at most O(timeout) seconds, reading a live source as M(llmops.serving.wait_for_llm_idle)
    does, and judges the wait (RV(msg)); a server still busy then fails where O(fail_on_timeout), else is stopped
    anyway with a warning. A server whose O(worker) URL fails the TLS handshake (or, over HTTP, is cut off) but
    answers under the other scheme is moving to or from TLS in this rollout, and its wait uses the URL it serves now.
    Skipped in check mode. A prefill (O(worker_type=prefill)) is idle once its running, queued,
    bootstrap and inflight requests are 0, a decode once its running, queued, prealloc and transfer requests are 0 (the
    gauges of C(/metrics), since C(/get_load) does not count the PD queues; a decode's read right after a C(/health)
    probe, which refreshes them, a prefill's without, since SGLang counts the probe's own request in its inflight
    queue until its scheduler's idle refresh, 30 s after its last batch).
  - A decode whose C(/health) generation gets no answer (HTTP 503, or none within O(request_timeout)) is not waited for
    (RV(source) V(not serving)) and is stopped with a warning. Its scheduler is gone (before SGLang 0.5.17, a decode
    that got requests for a prefill that went away), and none of its requests can finish.
author:
  - llmops.serving contributors (@llmops)
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details:
      - Lists the workers (and checks O(max_unavailable)) and reports whether the entry would change; changes nothing.
      - O(state=status) reads the router as without check mode; O(state=idle) does not wait.
  diff_mode:
    support: full
    details: Whether the router lists the server, before and after.
  idempotent:
    support: full
options:
  router:
    description: Inventory name of the router's host, for messages (O(state=absent), O(state=present)).
    type: str
  state:
    description:
      - V(absent) takes the server out of the router, V(present) puts it back, V(status) reads the router's status,
        V(idle) waits until the server is idle. Default V(present).
    type: str
    choices: [absent, present, status, idle]
  url:
    description: Base URL of the router's API; default from its launch file or O(host) and O(port).
    type: str
  metrics_url:
    description: URL of the router's C(/metrics), for the circuit breakers; default from its launch file or
      O(prometheus_host) and O(prometheus_port).
    type: str
  name:
    description: The router's instance name (C(sglang_router_name)), which names its launch file. Default V(main).
    type: str
  config_dir:
    description: Directory of its launch script (C(sglang_router_config_dir)). Default V(/etc/llmops).
    type: path
  host:
    description: Address the router's API binds where its launch file does not say (C(sglang_router_host)). Default V(0.0.0.0).
    type: str
  port:
    description: Port of its API where its launch file does not say (C(sglang_router_port)). Default V(30080).
    type: int
  prometheus_host:
    description: Address of its metrics where its launch file does not say. Default V(127.0.0.1).
    type: str
  prometheus_port:
    description: Port of its metrics where its launch file does not say. Default V(29000).
    type: int
  api_key:
    description:
      - The router's API key (C(sglang_router_api_key)); sent as a Bearer token when not empty. With O(state=idle), the
        server's (the router's key is the one its servers require).
    type: str
  control_plane_api_key:
    description:
      - The router's control-plane key (C(sglang_router_control_plane_api_key)); where set, it is the key sent to the
        router's worker API (C(/workers)) instead of O(api_key), which then serves inference only.
      - A router that refuses it (HTTP 401 or 403) and takes O(api_key) on C(/workers) runs without a control-plane key
        yet (an upgrade to split keys before C(playbooks/router.yml) gives it one), and the module then manages its workers
        with O(api_key) and warns.
    type: str
    version_added: 1.1.0
  worker:
    description: URL the router reaches the server at; default the URL of O(server) in O(workers).
    type: str
  server:
    description: Inventory name of the server's host (its URL is the one of O(workers)).
    type: str
  workers:
    description:
      - Every server the router fronts, a dict host -> URL (group C(sglang_router_worker_group), filter
        P(llmops.serving.worker_urls#filter)); with O(state=status), those it should list.
      - A server in prefill/decode disaggregation maps to a dict C({url, worker_type, bootstrap_port}) (what the filter
        gives for a host with C(sglang_server_disaggregation_mode)); its worker_type and bootstrap_port are the defaults
        of O(worker_type) and O(bootstrap_port).
    type: dict
  worker_type:
    description:
      - The server's role in prefill/decode disaggregation, V(prefill) or V(decode); default the one of O(server) in
        O(workers), else none (SGLang's default mode).
    type: str
    choices: [prefill, decode]
    version_added: 1.1.0
  bootstrap_port:
    description:
      - A prefill's bootstrap port (C(--disaggregation-bootstrap-port)), which the router gives its decodes; default the
        one of O(server) in O(workers), else V(8998).
    type: int
    version_added: 1.1.0
  draining:
    description:
      - The servers being drained with this one (the hosts of the batch that run the drain), host names of O(workers) or
        URLs; this one is always counted.
    type: list
    elements: str
  max_unavailable:
    description: Most servers that may be out of the router at once (C(sglang_router_max_unavailable)); O(state=absent).
    type: int
  timeout:
    description:
      - Seconds to wait for the entry to go (O(state=absent), default 60), for the server to be healthy (O(state=present),
        C(sglang_router_register_timeout), default 60) or idle (O(state=idle), C(sglang_router_drain_timeout), default 300).
    type: float
  fail_on_timeout:
    description: O(state=idle), fail where the server is still busy after O(timeout) (C(sglang_router_drain_fail_on_timeout)).
    type: bool
  version:
    description: O(state=idle), the server's SGLang version, which picks where its load is read; empty reads C(/get_load)
      first and falls back to the gauges of C(/metrics).
    type: str
  request_timeout:
    description: Seconds to wait for one answer. Default V(10).
    type: float
  ca_path:
    description:
      - PEM file on the host of the CA that signed the router's and the servers' certificates (the fleet CA), for
        C(https://) URLs. A path that does not exist counts as unset.
      - Unset, the router's own CA file where it has one (C(<config_dir>/sglang-router-<name>.ca.crt), written by
        M(llmops.serving.sglang_router) from C(llmops_tls_ca_cert)), else the system's CAs.
      - The router's URL is C(https://) where its launch file has C(--tls-cert-path).
    type: path
    version_added: 1.1.0
notes:
  - The API key never appears in the task's output.
seealso:
  - module: llmops.serving.wait_for_llm_idle
  - module: llmops.serving.sglang_router
"""

EXAMPLES = r"""
- name: Take this server out of each router in front of it
  llmops.serving.router_worker:
    state: absent
    router: "{{ router }}"
    api_key: "{{ sglang_router_api_key }}"
    server: "{{ inventory_hostname }}"
    workers: "{{ groups['sglang_servers'] | llmops.serving.worker_urls(hostvars) }}"
    max_unavailable: 1
  delegate_to: "{{ router }}"
  loop: "{{ groups['sglang_routers'] }}"
  loop_control:
    loop_var: router

- name: Wait until the server is idle, then judge the wait
  llmops.serving.router_worker:
    state: idle
    worker: http://10.0.0.11:30000
    timeout: 300
  register: idle

- name: Put a server back into a router, every option given
  llmops.serving.router_worker:
    router: router1
    url: http://127.0.0.1:30080
    metrics_url: http://127.0.0.1:29000/metrics
    api_key: "{{ sglang_router_api_key }}"
    worker: http://10.0.0.11:30000
    state: present
    timeout: 120
  delegate_to: router1
"""

RETURN = r"""
router:
  description: O(router).
  returned: with O(state=absent) and O(state=present)
  type: str
  sample: router1
worker:
  description: The server's URL (O(worker), else the one of O(server) in O(workers)).
  returned: with O(state=absent), O(state=present) and O(state=idle)
  type: str
  sample: http://10.0.0.11:30000
answered:
  description: Whether the router answered its worker API; a router that does not is left alone.
  returned: with O(state=absent) and O(state=present)
  type: bool
  sample: true
action:
  description: What was done (or would be in check mode) to the entry, V(none), V(remove), V(add) or V(re-add).
  returned: with O(state=absent) and O(state=present)
  type: str
  sample: remove
decodes:
  description: The C(/health) status of each decode the router lists (None without an answer), checked after a prefill
    came back (O(state=present), O(worker_type=prefill)).
  returned: when O(state=present) registers a prefill
  type: dict
  sample: {"http://10.0.0.21:30000": 200}
breaker:
  description: The circuit breaker of the server's entry before, O(state=present) (V(closed) when the router has none).
  returned: when O(state=present) and the router answered
  type: str
  sample: closed
status:
  description: The router's status, O(state=status).
  returned: when O(state=status)
  type: dict
  contains:
    url:
      description: O(url).
      type: str
    up:
      description: Whether the router answered its readiness (ready or not).
      type: bool
    ready:
      description: Whether it is ready (a healthy worker behind it).
      type: bool
    workers:
      description:
        - Each worker it lists, C({url, healthy, load, breaker}); V(closed) for a worker without breaker metrics.
        - In PD mode also C(worker_type) and C(bootstrap_port) as the router lists them.
      type: list
      elements: dict
    pairs:
      description:
        - In PD mode only, C({prefill, decode}), the URLs of the healthy prefills and decodes the router lists (it pairs
          any prefill with any decode).
      type: dict
      version_added: 1.1.0
    missing:
      description: The URLs of O(workers) it does not list.
      type: list
      elements: str
    text:
      description:
        - "One text of the router and its workers, as C(playbooks/status.yml) shows it: C(<router>: router
          ready=<ready> <url>;), then per worker C(<router>: worker <url> healthy=... breaker=... load=...;) and, for
          each of O(workers) it does not list, C(<router>: worker <url> not in the router;)."
        - "In PD mode each worker's line names its type (C(worker <url> prefill bootstrap_port=8998 healthy=...)) and a
          last C(<router>: pairs prefill=[...] x decode=[...];) names the healthy prefills and decodes it pairs."
      type: str
idle:
  description: O(state=idle), whether the server went idle within O(timeout) (none in check mode).
  returned: with O(state=idle)
  type: bool
requests:
  description: O(state=idle), the requests it still ran or queued at the last read.
  returned: with O(state=idle), but in check mode
  type: int
source:
  description: O(state=idle), where the load was read, V(get_load), V(metrics) or V(not listening); V(not serving) for a
    decode whose C(/health) generation got no answer (HTTP 503 or none within O(request_timeout)), whose scheduler is
    gone; none of its requests can finish, and the drain stops waiting.
  returned: with O(state=idle), but in check mode
  type: str
elapsed:
  description: O(state=idle), seconds the wait took.
  returned: with O(state=idle), but in check mode
  type: float
reads:
  description: O(state=idle), reads of the load.
  returned: with O(state=idle), but in check mode
  type: int
msg:
  description:
    - O(state=idle), the judgement of the wait shown to a person, empty in check mode; the failure's message where the
      server is still busy and O(fail_on_timeout).
  returned: with O(state=idle)
  type: str
  sample: "ns1: idle 0.52 s after it left the router (get_load, 2 reads)"
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils import _endpoints, _reports, _router, _server_api, _tls, _wait

ARGUMENT_SPEC = dict(
    router=dict(type='str'),
    state=dict(type='str', choices=['absent', 'present', 'status', 'idle']),
    url=dict(type='str'),
    metrics_url=dict(type='str'),
    name=dict(type='str'),
    config_dir=dict(type='path'),
    host=dict(type='str'),
    port=dict(type='int'),
    prometheus_host=dict(type='str'),
    prometheus_port=dict(type='int'),
    api_key=dict(type='str', no_log=True),
    control_plane_api_key=dict(type='str', no_log=True),
    worker=dict(type='str'),
    server=dict(type='str'),
    workers=dict(type='dict'),
    worker_type=dict(type='str', choices=['prefill', 'decode']),
    bootstrap_port=dict(type='int'),
    draining=dict(type='list', elements='str'),
    max_unavailable=dict(type='int'),
    timeout=dict(type='float'),
    fail_on_timeout=dict(type='bool'),
    version=dict(type='str'),
    request_timeout=dict(type='float'),
    ca_path=dict(type='path'),
)
# Applied to the options the task leaves out or passes as null (the sglang_router role's defaults).
DEFAULTS = dict(state='present', name='main', config_dir='/etc/llmops', host='0.0.0.0', port=30080,
                prometheus_host='127.0.0.1', prometheus_port=29000, workers={}, draining=[], fail_on_timeout=False,
                request_timeout=10.0)
REQUIRED = ['router', 'worker']


def read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def resolve(params, read=read_text, exists=os.path.exists):
    """``params`` with the defaults, the router's URLs (given, else from its launch script or unit, else from the
    host and port options) and the server's URL (given, else its host's in ``workers``)."""
    params = dict(params)
    for name, value in DEFAULTS.items():
        if params.get(name) is None:
            params[name] = value
    if not params['url'] or not params['metrics_url']:
        found = {}
        for path in ('%s/sglang-router-%s.sh' % (params['config_dir'], params['name']),
                     '/etc/systemd/system/llmops-sglang-router-%s.service' % params['name']):
            found = _router.launch_endpoints(read(path))
            if found:
                break
        where = dict((name, found.get(name, params[name])) for name in ('host', 'port', 'prometheus_host', 'prometheus_port'))
        params['url'] = params['url'] or _endpoints.local_url(where['host'], where['port'], tls=found.get('tls', False))
        params['metrics_url'] = params['metrics_url'] or _endpoints.local_url(where['prometheus_host'],
                                                                              where['prometheus_port'], '/metrics')
    urls = _router.worker_url_map(params['workers'])
    entry = _router.worker_entry(params['workers'].get(params['server'])) if params['server'] else {}
    if not params['ca_path'] or not exists(params['ca_path']):
        own = _tls.router_tls_files(params['config_dir'], params['name'])['ca_cert']
        params['ca_path'] = own if exists(own) else None
    if not params['worker'] and params['server']:
        params['worker'] = urls.get(params['server'])
    if not params['worker_type'] and entry.get('url') == params['worker']:
        params['worker_type'] = entry.get('worker_type')
    if params['worker_type'] == 'prefill' and params['bootstrap_port'] is None:
        params['bootstrap_port'] = entry.get('bootstrap_port') or _router.BOOTSTRAP_PORT
    if params['worker_type'] != 'prefill':
        params['bootstrap_port'] = None
    params['draining'] = [urls.get(item, item) for item in params['draining'] if item in urls or '://' in item]
    return params


class Router:
    """The router's worker API; fails the module on an answer it does not expect."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.request = self.request_with(self.params['control_plane_api_key'] or self.params['api_key'])
        # A router that runs without a control-plane key yet (the step of an upgrade to split keys before router.yml
        # gives it one) answers /workers to its API key only: the drain and the register fall back to it.
        self.fallback = self.params['api_key'] if self.params['control_plane_api_key'] else None

    def request_with(self, key):
        return _server_api.open_url_request(self.params['url'], _server_api.auth_headers(key), ca_path=self.params['ca_path'])

    def call(self, method, path, statuses, body=None):
        try:
            status, content = self.request(method, path, body=body, timeout=self.params['request_timeout'])
        except Exception as exc:  # every network error: no answer
            return None, str(exc)
        if status not in statuses:
            self.module.fail_json(msg='router %s answered HTTP %d to %s %s%s' % (self.params['router'], status, method,
                                                                                 self.params['url'], path))
        return status, content

    def get_workers(self):
        """``(status, data)`` of the router's ``GET /workers`` (status None without an answer), with the API key where
        the router refuses the control-plane key it does not know yet."""
        status, data = _server_api.get_json(self.request, '/workers', self.params['request_timeout'])
        if self.fallback and status is not None and _server_api.unauthorised(status):
            request, self.fallback = self.request_with(self.fallback), None
            retried, retried_data = _server_api.get_json(request, '/workers', self.params['request_timeout'])
            if retried == 200:
                self.module.warn('router %s refused the control-plane key and took the API key on /workers: it runs '
                                 'without sglang_router_control_plane_api_key yet (playbooks/router.yml gives it the '
                                 'key)' % self.params['router'])
                self.request, status, data = request, retried, retried_data
        return status, data

    def workers(self):
        """The router's entries, or None when it does not answer."""
        status, data = self.get_workers()
        if status is None:
            return None
        if status != 200:
            self.module.fail_json(msg='router %s answered HTTP %d to GET %s/workers'
                                  % (self.params['router'], status, self.params['url']))
        return (data or {}).get('workers') or []

    def remove(self, entry):
        if self.call('DELETE', '/workers/%s' % entry['id'], [202])[0] is None:
            self.module.fail_json(msg='router %s did not answer the removal of %s' % (self.params['router'], entry['url']))

    def add(self):
        body = {'url': self.params['worker']}
        if self.params['worker_type']:  # sglang-router 0.3.2: a prefill or decode entry of a router in PD mode
            body['worker_type'] = self.params['worker_type']
            if self.params['bootstrap_port'] is not None:
                body['bootstrap_port'] = self.params['bootstrap_port']
        if self.call('POST', '/workers', [202], body=body)[0] is None:
            self.module.fail_json(msg='router %s did not answer the addition of %s'
                                  % (self.params['router'], self.params['worker']))

    def wait(self, done, timeout, failure):
        """Reads the workers every second until ``done(listed)``; fails with ``failure`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            listed = self.workers()
            if listed is not None and done(listed):
                return
            if time.monotonic() >= deadline:
                self.module.fail_json(msg='router %s %s %s after %d s'
                                      % (self.params['router'], failure, self.params['worker'], timeout))
            time.sleep(1)


def read_breaker(module):
    """The circuit breaker of the worker on the router's /metrics (no key needed there)."""
    params = module.params
    request = _server_api.open_url_request(params['metrics_url'], {})
    try:
        status, content = request('GET', '', timeout=params['request_timeout'])
    except Exception as exc:
        module.fail_json(msg='router %s: its metrics (%s) do not answer: %s' % (params['router'], params['metrics_url'], exc))
    if status != 200:
        module.fail_json(msg='router %s: its metrics (%s) answered HTTP %d' % (params['router'], params['metrics_url'], status))
    text = content.decode('utf-8', errors='replace') if isinstance(content, bytes) else content
    return _server_api.router_breakers(text).get(params['worker'], 'closed')


def read_status(module):
    """The router's status from its /readiness, /workers and /metrics; an answer missing is no failure."""
    params = module.params
    router, timeout = Router(module), params['request_timeout']
    try:
        readiness = router.request('GET', '/readiness', timeout=timeout)[0]
    except Exception:  # every network error: no answer
        readiness = -1
    data = router.get_workers()[1]
    listed = (data.get('workers') if isinstance(data, dict) else None) or []
    try:
        content = _server_api.open_url_request(params['metrics_url'], {})('GET', '', timeout=timeout)[1]
    except Exception:
        content = b''
    text = content.decode('utf-8', errors='replace') if isinstance(content, bytes) else content or ''
    return _router.status(params['url'], readiness, listed, _server_api.router_breakers(text), params['workers'] or {})


def idle_request(params):
    """The request to the server being drained, at the URL it serves now: a server that moves to or from TLS in this
    rollout still serves under the other scheme until its restart (HTTPS spoken to a plain HTTP server fails its
    handshake, HTTP spoken to an HTTPS server is cut off)."""
    def request_to(url):
        return _server_api.open_url_request(url, _server_api.auth_headers(params['api_key']), ca_path=params['ca_path'])
    request = request_to(params['worker'])
    moving = (_wait.PROBE_TLS_ERROR, _wait.PROBE_DISCONNECTED)
    # /metrics, not /health: a prefill would count the health generation as a busy request (_server_api.current_load).
    if _wait.probe_health(request, '/metrics', params['request_timeout'])['kind'] in moving:
        other = request_to(_router.other_scheme(params['worker']))
        if _wait.probe_health(other, '/metrics', params['request_timeout'])['status'] is not None:
            params['worker'] = _router.other_scheme(params['worker'])
            return other
    return request


def wait_idle(module):
    """O(state=idle): waits until the server is idle and judges the wait (module_utils/_router.py, drain_outcome)."""
    params = module.params
    if module.check_mode:
        module.exit_json(changed=False, worker=params['worker'], idle=None, msg='')
    if not params['worker']:
        module.fail_json(msg='missing required arguments: worker (or server and workers)')
    request = idle_request(params)
    source = _server_api.load_source('auto', params['version'] or None)
    timeout = params['timeout'] if params['timeout'] is not None else 300.0
    result = _router.wait_idle(request, timeout, 0.5, source, params['request_timeout'], mode=params['worker_type'])
    status = result.pop('status')
    if status is not None and _server_api.unauthorised(status):
        module.fail_json(msg='%s refused the API key (HTTP %d): set api_key to the key the server requires'
                         % (params['worker'], status))
    if result['requests'] is None and result['source'] != _router.NOT_SERVING:
        gauges = _server_api.busy_gauge_names(params['worker_type'])
        module.fail_json(msg='%s answers neither /get_load nor the gauges of /metrics (%s): cannot tell whether it is '
                         'idle; start it with --enable-metrics' % (params['worker'], gauges), changed=False, **result)
    shown = int(timeout) if timeout == int(timeout) else timeout  # 300, not 300.0, as the role's variable reads
    outcome = _router.drain_outcome(result, params['server'] or params['worker'], shown, params['fail_on_timeout'])
    result.update(changed=False, worker=params['worker'], msg=outcome['msg'])
    if outcome['failed']:
        module.fail_json(**result)
    module.exit_json(**result)


def check_decodes(params, listed, probes=3, pause=2.0):
    """A prefill back in its router: ``({url: status}, problem)``, the ``/health`` of every decode the router lists (a
    1-token generation through the decode's scheduler; no key needed) and why the rollout must stop where one never
    answers 200 in ``probes`` tries, else None. Before SGLang 0.5.17 a decode that gets a request for a prefill that
    went away loses its scheduler (decode.py ``_ensure_prefill_info``) while its process runs on."""
    hosts = dict((url, host) for host, url in _router.worker_url_map(params['workers']).items())
    statuses, failing = {}, []
    for entry in listed:
        if entry.get('worker_type') != 'decode':
            continue
        request = _server_api.open_url_request(entry['url'], {}, ca_path=params['ca_path'])
        for attempt in range(probes):
            probe = _wait.probe_health(request, '/health', params['request_timeout'])
            if probe['status'] == 200:
                break
            if attempt + 1 < probes:
                time.sleep(pause)
        statuses[entry['url']] = probe['status']
        if probe['status'] != 200:
            failing.append('%s (%s: %s)' % (hosts.get(entry['url'], entry['url']), entry['url'],
                                            'HTTP %d' % probe['status'] if probe['status'] else probe['detail']))
    if not failing:
        return statuses, None
    return statuses, ('prefill %s is back in router %s, but decode %s does not pass /health: a decode that got requests '
                      'for a prefill that went away loses its scheduler before SGLang 0.5.17 (decode.py '
                      '_ensure_prefill_info) while its process runs on. The rollout stops here; restart that decode '
                      '(deploy.yml --limit <its host> -e sglang_server_restart=true)'
                      % (params['server'] or params['worker'], params['router'], ', '.join(failing)))


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.params.update(resolve(module.params))
    params = module.params
    if params['state'] == 'idle':
        wait_idle(module)
    if params['state'] == 'status':
        status = read_status(module)
        status['text'] = _reports.router_status_text([(params['router'] or params['url'], status)])
        module.exit_json(changed=False, router=params['router'], status=status)
    missing = [name for name in REQUIRED if not params[name]]
    if missing:
        module.fail_json(msg='missing required arguments: %s' % ', '.join(missing))
    router, url = Router(module), params['worker']
    result = dict(changed=False, router=params['router'], worker=url, answered=False, action=_router.KEEP)
    listed = router.workers()
    if listed is None:
        module.exit_json(**result)
    result['answered'] = True
    entry = _router.entry_of(listed, url)
    if params['state'] == 'absent':
        refusal = _router.drain_refusal(params['router'], params['workers'] or {}, listed, params['draining'] or [url],
                                        params['max_unavailable'])
        if refusal:
            module.fail_json(msg=refusal, **result)
        action = 'remove' if entry else _router.KEEP
    else:
        result['breaker'] = read_breaker(module)
        action = _router.register_action(listed, url, result['breaker'], params['worker_type'], params['bootstrap_port'])
    result.update(action=action, changed=action != _router.KEEP)
    if module._diff:
        after = entry is not None if action == _router.KEEP else params['state'] == 'present'
        result['diff'] = dict(before=dict(listed=entry is not None), after=dict(listed=after))
    if module.check_mode:
        module.exit_json(**result)
    timeout = params['timeout'] if params['timeout'] is not None else 60.0
    if action in ('remove', _router.RE_ADD):
        router.remove(entry)
        router.wait(lambda now: _router.entry_of(now, url) is None, 60.0 if action == _router.RE_ADD else timeout, 'still lists')
    if params['state'] == 'present':
        if action != _router.KEEP:
            router.add()
        router.wait(lambda now: _router.healthy(now, url), timeout, 'does not report healthy')
        if params['worker_type'] == 'prefill':
            result['decodes'], problem = check_decodes(params, router.workers() or [])
            if problem:
                module.fail_json(msg=problem, **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
