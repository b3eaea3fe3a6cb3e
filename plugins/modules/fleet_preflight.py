#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: fleet_preflight
short_description: Refuse a rollout before its first batch stops anything
version_added: 1.0.0
description:
  - Runs on the controller, once for the whole rollout, after every server host of the run was planned
    (C(roles/sglang_server) C(tasks_from=plan), which sets C(sglang_server_plan)). Reads each host's variables
    and plan and refuses the rollout, naming the host and the variable, when
  - a batch (from O(serial), as Ansible cuts them) would take more servers out of a router than its
    C(sglang_router_max_unavailable) allows;
  - the API key of a router (C(sglang_router_api_key) of a host of O(router_group)) is not the one its servers
    require (C(sglang_server_api_key)), or a router would run without a key in front of servers that require one;
  - C(sglang_server_tp_size) does not divide the model's attention heads, or TP and the key/value heads do not
    divide one another (from the model's C(config.json), as the plan read it), which SGLang would refuse only after
    the old server stopped;
  - a host of a multi-node group (C(sglang_server_group_hosts)) is not in the run or the batches would split the
    group;
  - with O(strict), a variable named with a prefix of this collection (C(sglang_server_), C(sglang_router_),
    C(llmops_)) that nothing in the collection declares. Without O(strict) each one is a warning that names the
    closest declared name.
  - the servers behind the routers (the hosts of O(worker_group)) run prefill/decode disaggregation
    (C(sglang_server_disaggregation_mode) on any of them) without at least one prefill and one decode, or with a
    server that has no mode;
  - the prefill and decode servers behind the routers differ in model, drafter, speculative settings, page size
    (C(--page-size)), KV dtype (C(--kv-cache-dtype)) or engine release, read from each plan's launch command and
    version (SGLang checks only page size and KV dtype between them, and the router pairs any prefill with any
    decode);
  - the rollout would restart prefill or decode servers with another model, drafter, speculative settings or
    release than their last good record, one batch at a time, so that old and new servers would pair - unless
    O(pd_mixed_ok) (the README says how to do it blue-green behind a second router);
  - two servers of one address (C(ansible_host)) would listen on the same port (C(sglang_server_port),
    C(sglang_server_nccl_port), a prefill's C(sglang_server_disaggregation_bootstrap_port)).
  - Warns about hosts of one inventory group that serve without speculative decoding while others run a drafter.
  - Changes nothing, on any host.
author:
  - llmops.serving contributors (@llmops)
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.controller_action
  - llmops.serving.attributes.info_module
options:
  hosts:
    description: The server hosts of the rollout, in play order; left out or V(null), the play's (C(ansible_play_hosts_all)).
    type: list
    elements: str
  serial:
    description:
      - The play's C(serial) (C(llmops_serial)), an integer, a percentage, or a list of them.
      - Unset, the batches are not checked (one batch of every host is assumed for the groups).
    type: raw
  strict:
    description: Refuse undeclared variable names instead of warning about them (C(llmops_strict)). V(null) means V(false).
    type: bool
  known:
    description:
      - Names with a prefix of this collection that the site uses for itself.
      - C(llmops_known_variables). V(null) means none.
    type: list
    elements: str
  router_group:
    description: The inventory group of the routers (C(sglang_router_group)). V(null) means V(sglang_routers).
    type: str
  worker_group:
    description: The inventory group of the servers the routers front (C(sglang_router_worker_group)). V(null) means V(sglang_servers).
    type: str
  pd_mixed_ok:
    description:
      - Roll a change of model, drafter, speculative settings or release across the prefill and decode servers of a
        router one batch at a time although old and new servers pair while it rolls (C(llmops_pd_mixed_ok)).
      - V(null) means V(false).
    type: bool
    version_added: 1.1.0
notes:
  - Run it with C(run_once), in a play without C(serial), after the plan of every host.
'''

EXAMPLES = r'''
- name: Plan every server host, in parallel, without changing anything
  ansible.builtin.include_role:
    name: llmops.serving.sglang_server
    tasks_from: plan

- name: Refuse the rollout before its first batch stops anything
  llmops.serving.fleet_preflight:
    hosts: "{{ ansible_play_hosts_all }}"
    serial: "{{ llmops_serial | default(1) }}"
    strict: "{{ llmops_strict | default(false) }}"
    router_group: "{{ sglang_router_group | default(omit) }}"
    worker_group: "{{ sglang_router_worker_group | default(omit) }}"
  run_once: true
'''

RETURN = r'''
problems:
  description: Why the rollout is refused, one sentence each naming the host and the variable; empty when it is not.
  type: list
  elements: str
  returned: always
notes:
  description: The warnings (undeclared variable names, hosts serving without the drafter of their group).
  type: list
  elements: str
  returned: always
batches:
  description: The hosts in the batches Ansible will make of them.
  type: list
  elements: list
  returned: always
  sample: [[gpu-a01, gpu-a02], [gpu-a03]]
stopping:
  description: The hosts whose server will stop for a restart.
  type: list
  elements: str
  returned: always
'''

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = dict(
    hosts=dict(type='list', elements='str'),
    serial=dict(type='raw'),
    strict=dict(type='bool'),
    known=dict(type='list', elements='str'),
    router_group=dict(type='str'),
    worker_group=dict(type='str'),
    pd_mixed_ok=dict(type='bool'),
)

# The value of an option left out or null (hosts: the play's, ansible_play_hosts_all).
DEFAULTS = dict(strict=False, known=[], router_group='sglang_routers', worker_group='sglang_servers', pd_mixed_ok=False)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg='llmops.serving.fleet_preflight runs on the controller (its action plugin)')


if __name__ == '__main__':
    main()
