#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: wait_for_llm_idle
short_description: Wait until an SGLang server runs and queues no request
version_added: 1.0.0
description:
  - The drain gate of a rolling update (C(roles/sglang_router) C(tasks/drain.yml)). Once a server is out of its routers, it
    waits until the requests it still runs have finished, at most O(timeout) seconds, reading a live source.
  - V(get_load) is SGLang's C(/get_load) (running + waiting requests per DP rank, live), routed by the checked releases
    0.5.11 to 0.5.20. V(metrics) sums the C(sglang:num_running_reqs) and C(sglang:num_queue_reqs) gauges of C(/metrics)
    after a C(/health) probe; SGLang refreshes those gauges only when its scheduler logs a batch, about every 30 s on an
    idle server (seen on the H200), and the probe's 1-token generation makes it log one.
  - O(source=auto) picks V(get_load) for an O(version) that routes it and V(metrics) for a later one; without O(version)
    it asks C(/get_load) and falls back to the gauges where the server answers 404.
  - A server that refuses the connection (nothing listens on its port, it is stopped) runs nothing, so it is idle at
    once, with RV(source) V(not listening).
  - Never fails because the server stays busy; RV(idle) says whether it went idle. Fails when the server refuses the
    API key or no source can be read.
author:
  - llmops.serving contributors (@llmops)
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.info_module
  - llmops.serving.server_api
  - llmops.serving.server_api.http
options:
  timeout:
    description: Seconds to wait at most.
    type: float
    default: 300
  interval:
    description: Seconds between two reads.
    type: float
    default: 0.5
  source:
    description: Where the load is read (see the description).
    type: str
    choices: [auto, get_load, metrics]
    default: auto
  version:
    description: The server's SGLang version, for O(source=auto) (the deploy's plan knows it).
    type: str
  disaggregation_mode:
    description:
      - The server's role in prefill/decode disaggregation (C(--disaggregation-mode)), V(prefill) or V(decode); null
        (default) for a server that does both.
      - A prefill is idle once its running, queued, bootstrap (C(sglang:num_prefill_bootstrap_queue_reqs), named
        C(sglang:num_prefill_prealloc_queue_reqs) in older releases) and inflight
        (C(sglang:num_prefill_inflight_queue_reqs)) requests are 0; a decode once its running, queued, prealloc
        (C(sglang:num_decode_prealloc_queue_reqs)) and transfer (C(sglang:num_decode_transfer_queue_reqs)) requests are
        0. Both are read from the gauges of V(metrics) whatever O(source) says (C(/get_load) counts no PD queue).
    type: str
    choices: [prefill, decode]
    version_added: 1.1.0
notes:
  - Runs in check mode too; it only reads (and sends the C(/health) probe of V(metrics)).
seealso:
  - module: llmops.serving.llm_server_info
  - module: llmops.serving.wait_for_llm_health
"""

EXAMPLES = r"""
- name: Wait until the drained server has no running or queued request
  llmops.serving.wait_for_llm_idle:
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_server_api_key }}"
    version: 0.5.15.post1
    timeout: 300
  register: drained

- name: Say how long the drain took
  ansible.builtin.debug:
    msg: "idle after {{ drained.elapsed }} s ({{ drained.source }})"
  when: drained.idle
"""

RETURN = r"""
idle:
  description: Whether the server ran and queued no request before O(timeout).
  returned: always
  type: bool
  sample: true
requests:
  description: The running + waiting requests of the last read (null when none could be read).
  returned: always
  type: int
  sample: 0
source:
  description: Where the last read came from, V(get_load) or V(metrics); V(not listening) for a stopped server.
  returned: always
  type: str
  sample: get_load
elapsed:
  description: Seconds from the first read to the last.
  returned: always
  type: float
  sample: 0.3
reads:
  description: How many times the load was read.
  returned: always
  type: int
  sample: 2
"""


from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils import _server_api, _wait

ARGUMENT_SPEC = dict(
    _server_api.SERVER_ARGUMENT_SPEC,
    timeout=dict(type='float', default=300.0),
    interval=dict(type='float', default=0.5),
    source=dict(type='str', default='auto', choices=list(_server_api.LOAD_SOURCES)),
    version=dict(type='str'),
    disaggregation_mode=dict(type='str', choices=['prefill', 'decode']),
)


def first_status(request, timeout):
    """HTTP status of ``GET /get_load``; ``'refused'`` when nothing listens on the port; None on another network
    error (a timeout is no proof that nothing runs)."""
    probe = _wait.probe_health(request, '/get_load', timeout)
    return 'refused' if probe['kind'] == _wait.PROBE_REFUSED else probe['status']


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    request = _server_api.module_request(module)
    status = first_status(request, params['request_timeout'])
    if status == 'refused':
        module.exit_json(changed=False, idle=True, requests=0, source='not listening', elapsed=0.0, reads=1)
    if _server_api.unauthorised(status):
        module.fail_json(msg='%s refused the API key (HTTP %d): set api_key to the key the server requires'
                         % (params['url'], status))
    source = _server_api.load_source(params['source'], params['version'])
    result = _server_api.wait_until_idle(request, params['timeout'], params['interval'], source, params['request_timeout'],
                                         mode=params['disaggregation_mode'])
    if result['requests'] is None:
        module.fail_json(msg='%s answers neither /get_load nor the gauges of /metrics (%s): cannot tell whether it is '
                         'idle; start it with --enable-metrics'
                         % (params['url'], _server_api.busy_gauge_names(params['disaggregation_mode'])),
                         changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
