#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: sglang_server_plan
short_description: Plan one SGLang (or vLLM) server from the sglang_server role's options
version_added: 1.1.0
description:
  - Runs in the C(sglang_server) role's plan (C(tasks_from=plan)); the role sets the result's RV(plan) as the
    fact C(sglang_server_plan), which the rest of the rollout takes as it is.
  - Reads the role's options (the C(sglang_server_*) variables of the host, as the task sees them) once, and refuses,
    naming the host and the variable, before anything on the host is touched, a host missing from its own
    C(sglang_server_group_hosts), a C(sglang_server_tp_size) that is not a multiple of the group's hosts or needs
    more GPUs than C(sglang_server_gpus) or C(CUDA_VISIBLE_DEVICES) of C(sglang_server_env) names, those two
    naming different GPUs or one GPU twice, and launch settings the launch command refuses whatever the release.
  - Then runs M(llmops.serving.sglang_launch_check) on the host (one module run) and refuses a model or drafter
    path that does not exist there, and flags the installed release does not have.
  - Changes nothing, on any host.
author:
  - llmops.serving contributors (@llmops)
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.controller_action
  - llmops.serving.attributes.info_module
options:
  shim:
    description: Path of the launcher shim on the host, the first argument of the launch command.
    type: path
    required: true
notes:
  - The role's options are documented in the C(sglang_server) role's argument specification.
'''

EXAMPLES = r'''
- name: Plan the server of this host
  llmops.serving.sglang_server_plan:
    shim: /etc/llmops/llmops_launch.py
  register: planned

- name: Show what would run
  ansible.builtin.debug:
    msg: "{{ planned.plan.command | llmops.serving.shell_join }}"
'''

RETURN = r'''
plan:
  description: The server's plan.
  type: dict
  returned: success
  contains:
    launcher:
      description: C(systemd) or C(process).
      type: str
    version:
      description: The installed engine's version.
      type: str
      sample: 0.5.15.post1
    command:
      description: The launch command (the API key is not part of it).
      type: list
      elements: str
    speculative:
      description: The speculative settings that really run (adaptive included), P(llmops.serving.speculative_settings#filter).
      type: dict
    model_config:
      description: The model's C(config.json) where the model is a folder on the host, else empty.
      type: dict
    gpus:
      description: The GPUs (index or UUID) the server uses on this host.
      type: list
      elements: str
      sample: ['0', '1', '2', '3']
    gpus_from:
      description: The setting that chose them, for messages.
      type: str
      sample: sglang_server_tp_size 4 on the GPUs of sglang_server_gpus
    group:
      description: The hosts of this host's multi-node group, rank 0 first; empty without one.
      type: list
      elements: str
    nnodes:
      description: Hosts of the group (1 without one).
      type: int
    node_rank:
      description: This host's rank in its group (0 without one).
      type: int
    dist_init_addr:
      description: The group's rendezvous address (rank 0's inventory address and C(sglang_server_dist_init_port)); empty without a group.
      type: str
    unit:
      description: The server's systemd unit, C(llmops-sglang-<sglang_server_name>.service) (P(llmops.serving.server_names#filter)).
      type: str
    unit_file:
      description: The unit's file, in C(/etc/systemd/system).
      type: str
    env_file:
      description: The server's environment file, in C(sglang_server_config_dir).
      type: str
    script:
      description: The launch script of the process launcher, in C(sglang_server_config_dir).
      type: str
    shim:
      description: The launcher shim, in C(sglang_server_config_dir).
      type: str
    api_key_file:
      description: The file the shim reads the API key from, in C(sglang_server_config_dir) (there only with a key).
      type: str
    pidfile:
      description: The pidfile of the process launcher, in C(sglang_server_run_dir).
      type: str
    url:
      description: Where the server answers on its host (P(llmops.serving.local_url#filter) of C(sglang_server_host) and C(sglang_server_port)).
      type: str
    switch_user:
      description: Whether the server runs as C(sglang_server_user) rather than root.
      type: bool
    home:
      description: The home of the user the server runs as (C(sglang_server_user_home), else C(/root)).
      type: str
    templates:
      description: The launch files rendered from the role's templates besides the environment file, the shim and the unit or the script.
      type: list
      elements: dict
      sample: [{src: llmops_launch.py.j2, dest: /etc/llmops/llmops_launch.py, mode: '0755'}]
    last_good:
      description:
        - The last good record these launch files, command and drafter make (M(llmops.serving.last_good_config)'s
          C(name), C(state_dir), C(files), C(fingerprints) and C(metadata)); the API key file is not part of it.
      type: dict
missing_paths:
  description: The model or drafter settings whose path does not exist on the host, and the path.
  type: dict
  returned: when one is missing
  sample: {sglang_server_model_path: /srv/models/gone}
'''

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = dict(
    shim=dict(type='path', required=True),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg='llmops.serving.sglang_server_plan runs on the controller (its action plugin)')


if __name__ == '__main__':
    main()
