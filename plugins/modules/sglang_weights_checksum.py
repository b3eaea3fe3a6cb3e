#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_weights_checksum
short_description: Check that an SGLang server loaded the same weights as the other replicas of its model group
version_added: 1.1.0
description:
  - Weights attestation. Asks the server at O(url) for the checksum of the weights it loaded (SGLang's
    C(/weights_checker), action C(checksum) - C(per_engine_checksum), a SHA-256 over each rank's C(per_gpu_checksum),
    itself a SHA-256 over the sorted names and hashes of the target model's tensors on that rank, dequantized), then
    asks every server of O(replicas) the same, and compares.
  - The server is the B(outlier) where its checksum differs from the one that more than half of the other replicas
    report; with one other replica, where it differs from it. An outlier fails the task (O(fail_on_outlier)) with
    C(<host> loaded weights whose checksum <its> differs from <majority> of <hosts> (model group <group>)), checksums
    shown by their first 16 hex digits.
  - Compared are only the replicas that answer a checksum in the same tensor, pipeline and data parallel layout
    (C(parallelism_info) - the checksum of a rank depends on its shard) and, where both versions are known
    (C(/server_info), with O(api_key)), the same SGLang release (a release may name or fuse the model's parameters
    otherwise - during a release upgrade the upgraded servers are compared with each other only). A replica that
    does not answer (not serving), answers 404 (a release without the route), refuses the key or has another layout
    or release is left out, with a note in RV(replicas).
  - Never fails for want of a comparison. A server whose release has no C(/weights_checker) (vLLM; SGLang before
    0.5.11, from O(version) or a 404 answer), that refuses the key (an admin key is needed, O(admin_api_key)) or that
    cannot compute its checksum is not checked (RV(checked) false, RV(note) says why); so is a server with no other replica serving to
    compare with, or whose other replicas disagree among themselves with no majority (a warning then).
  - The drafter's weights (EAGLE-3) are not covered - SGLang checksums the target model's runner only.
  - C(/weights_checker) is an admin endpoint of SGLang (auth level ADMIN_OPTIONAL) - a server started with
    C(--admin-api-key) takes only that key for it, one without takes O(api_key). The module sends O(admin_api_key)
    where it is set, else O(api_key), to every server it asks.
  - A checksum reads every weight of the model on the GPUs; on a replica that serves, it runs between its batches.
author:
  - llmops.serving contributors (@llmops)
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.info_module
  - llmops.serving.server_api
  - llmops.serving.server_api.http
options:
  admin_api_key:
    description:
      - The servers' admin key (SGLang C(--admin-api-key), C(sglang_server_admin_api_key)), sent for
        C(/weights_checker) to this server and to every replica. Unset or empty, O(api_key) is sent.
      - Never printed.
    type: str
  replicas:
    description:
      - The other replicas of the server's model group, inventory name -> URL as they are reached from this host (the
        values of P(llmops.serving.worker_urls#filter) - a URL, or a dict with C(url) for a prefill or decode server).
      - The entry named O(host), and one whose URL is O(url), are this server and are left out.
      - Unset or empty, there is nothing to compare with (RV(checked) false).
    type: dict
  host:
    description: The inventory name of this server, as messages name it. Unset, O(url).
    type: str
  group:
    description: The name of the model group (the inventory group of the replicas), as messages name it.
    type: str
  engine:
    description: The server's engine; only V(sglang) has C(/weights_checker). Unset, V(sglang).
    type: str
  version:
    description: The server's SGLang version (the deploy's plan knows it); a release before 0.5.11 is skipped without
      a request. Unset, the route is asked and a 404 answer skips, and the version is read from C(/server_info).
    type: str
  timeout:
    description:
      - Seconds one checksum request may take (the server reads every weight on its GPUs). Default V(300).
    type: float
  fail_on_outlier:
    description: Fail the task where the server is the outlier. V(false) returns RV(outlier) only. Default V(true).
    type: bool
notes:
  - Runs in check mode too; it only reads.
seealso:
  - module: llmops.serving.wait_for_llm_health
  - module: llmops.serving.sglang_server
"""

EXAMPLES = r"""
- name: Check that the server loaded the same weights as the other serving replicas of its model group
  llmops.serving.sglang_weights_checksum:
    url: http://127.0.0.1:30000
    admin_api_key: "{{ sglang_server_admin_api_key }}"
    api_key: "{{ sglang_server_api_key }}"
    host: "{{ inventory_hostname }}"
    group: llama70b
    version: 0.5.15.post1
    replicas: "{{ groups['llama70b'] | llmops.serving.worker_urls(hostvars) }}"

- name: Only read the checksums (no failure on an outlier)
  llmops.serving.sglang_weights_checksum:
    url: https://gpu-a01.example.com:30000
    ca_path: /etc/llmops/tls/ca.pem
    admin_api_key: "{{ vault_sglang_server_admin_api_key }}"
    host: gpu-a01
    replicas:
      gpu-a02: https://gpu-a02.example.com:30000
      gpu-a03: https://gpu-a03.example.com:30000
    fail_on_outlier: false
  register: attestation
"""

RETURN = r"""
checksum:
  description: The server's C(per_engine_checksum) (SHA-256, hex); null where it was not read.
  returned: always
  type: str
  sample: 3f0c5e1d9a7b2c4e8f6a1b3d5c7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e
layout:
  description: The server's parallel layout, C(tp<N> pp<N> dp<N>); null where it was not read.
  returned: always
  type: str
  sample: tp8 pp1 dp1
version:
  description: The server's SGLang release (O(version), else what its C(/server_info) says); null where unknown.
  returned: always
  type: str
  sample: 0.5.15.post1
ranks:
  description: How many ranks the server's answer covers.
  returned: always
  type: int
  sample: 8
replicas:
  description: Each other replica asked, by name, with its C(url), C(checksum), C(layout), C(version) (its SGLang
    release, null where unknown), C(compared) (whether it counted) and C(note) (why it did not).
  returned: always
  type: dict
  sample: {gpu-a02: {url: "http://10.0.0.6:30000", checksum: 3f0c5e1d9a7b2c4e8f6a1b3d5c7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e,
           layout: tp8 pp1 dp1, version: 0.5.15.post1, compared: true, note: null}}
majority:
  description: The checksum more than half of the compared replicas report; null where none does.
  returned: always
  type: str
  sample: 3f0c5e1d9a7b2c4e8f6a1b3d5c7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e
agreeing:
  description: The replicas that report RV(majority).
  returned: always
  type: list
  elements: str
  sample: [gpu-a02, gpu-a03]
outlier:
  description: Whether the server's checksum differs from RV(majority).
  returned: always
  type: bool
  sample: false
checked:
  description: Whether the checksum was compared with a majority of the other replicas (else see RV(note)).
  returned: always
  type: bool
  sample: true
note:
  description: What was found, in one line (why it was skipped, or which replicas it matches).
  returned: always
  type: str
  sample: "gpu-a01 loaded the weights of gpu-a02, gpu-a03: checksum 3f0c5e1d9a7b2c4e (model group llama70b)"
"""

from ansible_collections.llmops.serving.plugins.module_utils import _server_api, _weights
from ansible_collections.llmops.serving.plugins.module_utils._null_unset import NullIsUnsetModule

DEFAULT_TIMEOUT = 300.0

ARGUMENT_SPEC = dict(
    _server_api.SERVER_ARGUMENT_SPEC,
    admin_api_key=dict(type='str', no_log=True),
    replicas=dict(type='dict'),
    host=dict(type='str'),
    group=dict(type='str'),
    engine=dict(type='str'),
    version=dict(type='str'),
    timeout=dict(type='float'),
    fail_on_outlier=dict(type='bool'),
)


def attest(params, make_request, warn=None):
    """The module's result (without ``changed``) and whether to fail: ``(result, failed)``.

    ``make_request(url, admin)`` returns a ``_server_api`` request callable for that URL, with the key to send: the
    admin key where ``admin`` (the checker) and it is set, else the API key."""
    host = params.get('host') or params['url']
    group = params.get('group')
    timeout = params.get('timeout') or DEFAULT_TIMEOUT
    info_timeout = params.get('request_timeout') or 5.0
    result = dict(checksum=None, layout=None, version=params.get('version'), ranks=0, replicas={}, majority=None,
                  agreeing=[], outlier=False, checked=False, note=None)
    problem = _weights.route_problem(params.get('engine') or 'sglang', params.get('version'))
    if problem:
        result['note'] = '%s: %s; weights not checked' % (host, problem)
        return result, False
    own_url = params['url'].rstrip('/')
    others = dict((str(name), _weights.replica_url(value)) for name, value in (params.get('replicas') or {}).items())
    others = dict((name, url) for name, url in others.items() if url and name != host and url != own_url)
    if not others:
        result['note'] = ('no other replica%s to compare %s with: weights not checked'
                          % (' in model group %s' % group if group else '', host))
        return result, False
    own = _weights.read_checksum(make_request(own_url, True), timeout)
    own['version'] = params.get('version') or _weights.read_version(make_request(own_url, False), info_timeout)
    result.update(checksum=own['checksum'], layout=own['layout'], version=own['version'], ranks=own['ranks'])
    if not own['checksum']:
        result['note'] = '%s %s; weights not checked' % (host, own['note'])
        return result, False
    answers = {}
    for name, url in sorted(others.items()):
        answer = _weights.read_checksum(make_request(url, True), timeout)
        if answer['checksum']:
            answer['version'] = _weights.read_version(make_request(url, False), info_timeout)
        answers[name] = answer
        note = answer['note'] or _weights.difference(own, answer)
        result['replicas'][name] = dict(url=url, checksum=answer['checksum'], layout=answer['layout'],
                                        version=answer['version'], compared=note is None, note=note)
    verdict = _weights.judge(host, own, answers, group)
    result.update(majority=verdict['majority'], agreeing=verdict['agreeing'], outlier=verdict['outlier'],
                  checked=bool(verdict['agreeing']), note=verdict['msg'])
    if verdict['compared'] and not verdict['agreeing'] and warn:
        warn(verdict['msg'])
    fail = verdict['outlier'] and params.get('fail_on_outlier') is not False
    return result, fail


def main():
    module = NullIsUnsetModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    for value in _server_api.secret_header_values(params.get('headers')):
        module.no_log_values.add(value)
    admin_headers = _server_api.auth_headers(params.get('admin_api_key') or params.get('api_key'), params.get('headers'))
    headers = _server_api.auth_headers(params.get('api_key'), params.get('headers'))

    def make_request(url, admin):
        return _server_api.open_url_request(url, admin_headers if admin else headers,
                                            validate_certs=params.get('validate_certs', True),
                                            use_proxy=params.get('use_proxy', True), ca_path=params.get('ca_path'))

    result, fail = attest(params, make_request, module.warn)
    if fail:
        module.fail_json(msg=result['note'], changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
