#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: sglang_router_plan
short_description: Plan one sglang-router from the sglang_router role's options
version_added: 1.1.0
description:
  - Runs first in the C(sglang_router) role (C(tasks/main.yml)), once the host's service manager is known; the rest of
    the role and its templates take the result's RV(plan) as it is.
  - Reads the role's options (the C(sglang_router_*) variables of the host, as the task sees them) once, takes the
    workers from inventory group C(sglang_router_worker_group) (C(sglang_router_worker_url) of a host, else its
    server's address and port), and refuses, before anything on the host is touched, an empty group and servers of
    other hosts that listen on a loopback address the router cannot reach.
  - It only reads variables; no host is contacted or changed.
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.info_module
  - llmops.serving.attributes.controller_action
author:
  - llmops.serving contributors (@llmops)
options: {}
notes:
  - The role's options are documented in the C(sglang_router) role's argument specification.
seealso:
  - module: llmops.serving.sglang_server_plan
'''

EXAMPLES = r'''
- name: Plan the router of this host
  llmops.serving.sglang_router_plan:
  register: planned

- name: Write its launch script where no systemd runs it
  ansible.builtin.template:
    src: launch.sh.j2
    dest: "{{ planned.plan.script }}"
    mode: "0755"
  when: planned.plan.launcher == 'process'
'''

RETURN = r'''
plan:
  description: The router's plan.
  returned: success
  type: dict
  contains:
    launcher:
      description: How the router runs, V(systemd) or V(process) (C(sglang_router_launcher), else the service manager).
      type: str
    unit:
      description: Name of the systemd unit.
      type: str
      sample: llmops-sglang-router-main.service
    script:
      description: Path of the launch script (process launcher).
      type: str
    key_file:
      description: Path of the API key file the launcher shim reads.
      type: str
    shim:
      description: Path of the launcher shim.
      type: str
    pidfile:
      description: Path of the pidfile (process launcher).
      type: str
    argv:
      description: The router's launch command (the shim's python, the shim, then sglang-router's flags).
      type: list
      elements: raw
    workers:
      description: The servers the router fronts, a dict host -> URL.
      type: dict
    directories:
      description: The directories the router's files go into.
      type: list
      elements: str
    templates:
      description: The role's templates to write, C({src, dest, mode}) (the shim, then the unit or the launch script).
      type: list
      elements: dict
    url:
      description: The router's API URL on its host (C(sglang_router_host), C(sglang_router_port)).
      type: str
      sample: http://127.0.0.1:30080
    ready_url:
      description: The URL of its C(/readiness), which answers 200 once a healthy worker is behind it.
      type: str
    pip:
      description:
        - The arguments of M(ansible.builtin.pip) that install the pinned sglang-router (C(sglang_router_version)) into
          its virtualenv (C(sglang_router_venv), made by C(sglang_router_python)), from C(sglang_router_wheelhouse)
          alone where one is set.
      type: dict
    process:
      description:
        - The arguments of M(llmops.serving.server_process) that run it with the process launcher (C(name), C(command),
          C(pidfile)); its C(state) is decided after the files are written (filter C(llmops.serving.router_decision)).
      type: dict
'''

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = dict()


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg='llmops.serving.sglang_router_plan runs on the controller (its action plugin)')


if __name__ == '__main__':
    main()
