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
    in front of the server, giving only O(state) (and the router as C(delegate_to)); its action plugin fills every
    option left out from the role's variables (C(sglang_router_*) of the server host, the router's host and port from
    the router host's). The role's C(tasks/status.yml) runs it on the router's host with O(state=status).
  - Lists the router's workers (C(GET /workers)). A router that does not answer is left alone (RV(answered) false).
  - O(state=absent) refuses, before it changes anything, when the servers the router does not list as healthy and the
    O(draining) ones would be more than O(max_unavailable); else removes the server's entry and waits until the router
    no longer lists it.
  - O(state=present) adds the server when the router does not list it, removes and adds afresh an entry whose circuit
    breaker is open or half-open (a new entry starts closed and gets traffic at once), then waits until the router
    reports it healthy.
  - O(state=status) changes nothing and never fails; it reads the router's C(/readiness), C(/workers) and C(/metrics)
    and returns RV(status) (a router that does not answer is not up).
author:
  - llmops.serving contributors (@llmops)
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details:
      - Lists the workers (and checks O(max_unavailable)) and reports whether the entry would change; changes nothing.
      - O(state=status) reads the router as without check mode.
  diff_mode:
    support: full
    details: Whether the router lists the server, before and after.
  idempotent:
    support: full
  action:
    support: full
    description: An action plugin fills the options left out from the C(sglang_router) role's variables.
options:
  router:
    description:
      - Inventory name of the router's host, for messages; the action plugin takes the router's URLs from its variables.
      - The action plugin's default is the host the task is delegated to, else the task's host.
    type: str
  state:
    description:
      - V(absent) takes the server out of the router, V(present) puts it back, V(status) reads the router's status.
    type: str
    choices: [absent, present, status]
    default: present
  url:
    description: Base URL of the router's API, from its host (C(sglang_router_host), C(sglang_router_port)).
    type: str
  metrics_url:
    description: URL of the router's C(/metrics), for the circuit breakers (C(sglang_router_prometheus_host), C(_port)).
    type: str
  api_key:
    description: The router's API key (C(sglang_router_api_key)); sent as a Bearer token when not empty.
    type: str
  worker:
    description: URL the router reaches the server at (C(sglang_router_worker_url), else the server's address and port).
    type: str
  workers:
    description:
      - Every server the router fronts, a dict host -> URL (group C(sglang_router_worker_group)); with O(state=status),
        those it should list.
    type: dict
  draining:
    description:
      - URLs of the servers being drained with this one (the hosts of the batch that run the drain), this one included.
    type: list
    elements: str
  max_unavailable:
    description: Most servers that may be out of the router at once (C(sglang_router_max_unavailable)); O(state=absent).
    type: int
  timeout:
    description:
      - Seconds to wait for the entry to go (O(state=absent), 60) or the server to be healthy (O(state=present),
        C(sglang_router_register_timeout)).
    type: float
  request_timeout:
    description: Seconds to wait for one answer of the router.
    type: float
    default: 10
notes:
  - The API key never appears in the task's output; the options are not listed in the role's argument specification.
seealso:
  - module: llmops.serving.wait_for_llm_idle
"""

EXAMPLES = r"""
- name: Take this server out of each router in front of it
  llmops.serving.router_worker:
    state: absent
  delegate_to: "{{ router }}"
  loop: "{{ groups['sglang_routers'] }}"
  loop_control:
    loop_var: router

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
  returned: always
  type: str
  sample: router1
worker:
  description: O(worker).
  returned: always
  type: str
  sample: http://10.0.0.11:30000
answered:
  description: Whether the router answered its worker API; a router that does not is left alone.
  returned: always
  type: bool
  sample: true
action:
  description: What was done (or would be in check mode) to the entry, V(none), V(remove), V(add) or V(re-add).
  returned: always
  type: str
  sample: remove
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
      description: Each worker it lists, C({url, healthy, load, breaker}); V(closed) for a worker without breaker metrics.
      type: list
      elements: dict
    missing:
      description: The URLs of O(workers) it does not list.
      type: list
      elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils import _router, _server_api

ARGUMENT_SPEC = dict(
    router=dict(type='str'),
    state=dict(type='str', default='present', choices=['absent', 'present', 'status']),
    url=dict(type='str'),
    metrics_url=dict(type='str'),
    api_key=dict(type='str', no_log=True),
    worker=dict(type='str'),
    workers=dict(type='dict'),
    draining=dict(type='list', elements='str'),
    max_unavailable=dict(type='int'),
    timeout=dict(type='float'),
    request_timeout=dict(type='float', default=10.0),
)
REQUIRED = ['router', 'url', 'worker']


class Router:
    """The router's worker API; fails the module on an answer it does not expect."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.request = _server_api.open_url_request(self.params['url'], _server_api.auth_headers(self.params['api_key']))

    def call(self, method, path, statuses, body=None):
        try:
            status, content = self.request(method, path, body=body, timeout=self.params['request_timeout'])
        except Exception as exc:  # every network error: no answer
            return None, str(exc)
        if status not in statuses:
            self.module.fail_json(msg='router %s answered HTTP %d to %s %s%s' % (self.params['router'], status, method,
                                                                                 self.params['url'], path))
        return status, content

    def workers(self):
        """The router's entries, or None when it does not answer."""
        status, data = _server_api.get_json(self.request, '/workers', self.params['request_timeout'])
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
        if self.call('POST', '/workers', [202], body={'url': self.params['worker']})[0] is None:
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
    request, timeout = Router(module).request, params['request_timeout']
    try:
        readiness = request('GET', '/readiness', timeout=timeout)[0]
    except Exception:  # every network error: no answer
        readiness = -1
    data = _server_api.get_json(request, '/workers', timeout)[1]
    listed = (data.get('workers') if isinstance(data, dict) else None) or []
    try:
        content = _server_api.open_url_request(params['metrics_url'], {})('GET', '', timeout=timeout)[1]
    except Exception:
        content = b''
    text = content.decode('utf-8', errors='replace') if isinstance(content, bytes) else content or ''
    return _router.status(params['url'], readiness, listed, _server_api.router_breakers(text), params['workers'] or {})


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           required_if=[('state', 'present', ['metrics_url']), ('state', 'status', ['url', 'metrics_url'])])
    params = module.params
    if params['state'] == 'status':
        module.exit_json(changed=False, router=params['router'], status=read_status(module))
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
        action = _router.register_action(listed, url, result['breaker'])
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
    module.exit_json(**result)


if __name__ == '__main__':
    main()
