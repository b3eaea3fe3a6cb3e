#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: llm_server_info
short_description: Retrieve what an SGLang or vLLM server says about itself
version_added: 1.0.0
description:
  - Asks a server whether it answers and is healthy (O(health_path)), then for its server
    info (C(/server_info), or C(/get_server_info) where an older SGLang lacks it, or vLLM's
    C(/version)), the model it serves (C(/v1/models)) and its C(/metrics).
  - Returns the version, the speculative decoding settings (depth is the number of draft
    tokens verified per step) and the acceptance length, from the server info
    (C(internal_states[0].avg_spec_accept_length)) or else from the C(/metrics) counters
    since the server started.
  - Never fails because of the server's answers. A server that is down is returned as
    not RV(reachable), one that refuses the API key as RV(unauthorized), with a warning.
  - Sends no generation and changes nothing on the server.
author:
  - llmops.serving contributors (@llmops)
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.info_module
  - llmops.serving.server_api
  - llmops.serving.server_api.http
options:
  health_path:
    description: Path of the health endpoint.
    type: str
    default: /health
seealso:
  - module: llmops.serving.wait_for_llm_health
  - module: llmops.serving.llm_benchmark
"""

EXAMPLES = r"""
- name: Read the state of the local SGLang server
  llmops.serving.llm_server_info:
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_server_api_key }}"
  register: server

- name: Show its version, depth and acceptance length
  ansible.builtin.debug:
    msg: "{{ server.version }} depth {{ server.speculative.depth }} accept length {{ server.accept_length }}"
  when: server.healthy
"""

RETURN = r"""
reachable:
  description: Whether the server gave any HTTP answer.
  returned: always
  type: bool
  sample: true
healthy:
  description: Whether O(health_path) answered 2xx.
  returned: always
  type: bool
  sample: true
unauthorized:
  description: Whether the server refused the request for its info (HTTP 401 or 403), so O(api_key) is missing or wrong.
  returned: always
  type: bool
  sample: false
status_codes:
  description: HTTP status of each path asked; null when it gave no HTTP answer.
  returned: always
  type: dict
  sample: {/health: 200, /server_info: 200, /v1/models: 200, /metrics: 200}
engine:
  description: V(sglang) or V(vllm) when recognised.
  returned: always
  type: str
  sample: sglang
version:
  description: Server version; null when unknown.
  returned: always
  type: str
  sample: 0.5.15.post1
model:
  description: The model served (first of C(/v1/models)); null when unknown.
  returned: always
  type: str
  sample: meta-llama/Llama-3.1-8B-Instruct
speculative:
  description: Speculative decoding settings from the server info; null values when off or unknown.
  returned: always
  type: dict
  contains:
    algorithm:
      description: For example V(EAGLE3); null with speculative decoding off.
      type: str
      returned: always
    num_steps:
      description: C(speculative_num_steps).
      type: int
      returned: always
    eagle_topk:
      description: C(speculative_eagle_topk).
      type: int
      returned: always
    depth:
      description: Draft tokens verified per step (C(speculative_num_draft_tokens)).
      type: int
      returned: always
    adaptive:
      description: Whether SGLang runs C(--speculative-adaptive) (RV(speculative.depth) is then where it started).
      type: bool
      returned: always
      version_added: 1.0.0
  sample: {algorithm: EAGLE3, num_steps: 15, eagle_topk: 1, depth: 16, adaptive: false}
accept_length:
  description: Acceptance length (tokens per verification step); null without speculative decoding or traffic.
  returned: always
  type: float
  sample: 4.57
accept_length_source:
  description: Where RV(accept_length) came from.
  returned: always
  type: str
  sample: metrics:sglang:generation_tokens_total/spec_verify_calls_total
server_info_source:
  description: The path that gave the server info; null when none did.
  returned: always
  type: str
  sample: /server_info
msg:
  description: Why the server info is missing, when it is.
  returned: when the server is unreachable or refused the request
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils._server_api import (
    SERVER_ARGUMENT_SPEC,
    SERVER_INFO_PATHS,
    accept_length_since_start,
    fetch_metrics,
    first_model_id,
    get_json,
    module_request,
    speculative_enabled,
    summarize_server_info,
    unauthorised,
)

ARGUMENT_SPEC = dict(
    SERVER_ARGUMENT_SPEC,
    health_path=dict(type='str', default='/health'),
)
API_KEY_VARIABLE = 'sglang_server_api_key'


def server_info(request, timeout, codes):
    """``(path, summary)`` of the first server-info endpoint that answers; codes gets every status."""
    for path, engine in [(p, None) for p in SERVER_INFO_PATHS] + [('/version', 'vllm')]:
        status, data = get_json(request, path, timeout)
        codes[path] = status
        if status == 200 and isinstance(data, dict):
            return path, summarize_server_info(data, engine)
        if status is None or unauthorised(status):
            break  # no server, or one that wants a key: the other paths answer the same
    return None, summarize_server_info({})


def gather(request, timeout, health_path):
    codes = {}
    status, dummy = get_json(request, health_path, timeout)
    codes[health_path] = status
    result = dict(reachable=status is not None, healthy=status is not None and 200 <= status < 300)
    source, summary = server_info(request, timeout, codes) if result['reachable'] else (None, summarize_server_info({}))
    result['unauthorized'] = any(unauthorised(code) for code in codes.values() if code)
    model = None
    metrics = None
    if source is not None:
        model = first_model_id(request, timeout) or summary.get('served_model_name')
        metrics = fetch_metrics(request, timeout)
    accept, accept_source = summary['avg_spec_accept_length'], None
    if accept is not None:
        accept_source = '%s:internal_states.avg_spec_accept_length' % source
    elif metrics and speculative_enabled(summary, metrics) is not False:
        accept, accept_source = accept_length_since_start(metrics)
    result.update(
        status_codes=codes, engine=summary.get('engine'), version=summary.get('version'), model=model,
        speculative={'algorithm': summary.get('speculative_algorithm'), 'num_steps': summary.get('speculative_num_steps'),
                     'eagle_topk': summary.get('speculative_eagle_topk'), 'depth': summary.get('speculative_depth'),
                     'adaptive': summary.get('speculative_adaptive', False)},
        accept_length=round(accept, 3) if accept else None, accept_length_source=accept_source,
        server_info_source=source)
    return result


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    result = gather(module_request(module), params['request_timeout'], params['health_path'])
    if not result['reachable']:
        result['msg'] = 'no answer from %s%s' % (params['url'].rstrip('/'), params['health_path'])
    elif result['unauthorized']:
        refused = sorted('%s (HTTP %s)' % item for item in result['status_codes'].items() if unauthorised(item[1]))
        result['msg'] = ('the server refused %s: it needs an API key, and %s (set the variable %s, or the module '
                         'option api_key)' % (', '.join(refused), 'the api_key sent was refused' if params['api_key'] else
                                              'none was sent', API_KEY_VARIABLE))
        module.warn(result['msg'])
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
