#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: sglang_install_plan
short_description: Decide what the sglang_install role installs on a host, from the role's options
version_added: 1.1.0
description:
  - Runs first in the C(sglang_install) role. Reads the role's options (the C(sglang_install_*) variables of the
    host, as the task sees them) once.
  - Refuses entries of C(sglang_install_packages) that are not pinned (C(name==version)), and, unless
    C(sglang_install_check_driver) is false, a host whose nvidia-smi does not work (O(gpus)), naming both variables.
  - Reads the installed version of each pin with the virtualenv's python (M(llmops.serving.venv_requirements), one
    module run). Where one is missing in an existing virtualenv, asks M(llmops.serving.release_venvs) who needs it,
    and refuses to install into a virtualenv a process runs or a kept good configuration names.
  - Changes nothing, on any host.
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.controller_action
  - llmops.serving.attributes.info_module
options:
  gpus:
    description:
      - The result of M(llmops.serving.gpu_memory) listing the host's GPUs (C(ready), C(error), C(msg)).
      - Not read where C(sglang_install_check_driver) is false.
    type: dict
    default: {}
notes:
  - The role's options are documented in the C(sglang_install) role's argument specification.
author:
  - llmops.serving contributors (@llmops)
'''

EXAMPLES = r'''
- name: List the GPUs with nvidia-smi
  llmops.serving.gpu_memory:
    gpus: [all]
    max_used_mib: -1
    balance: 0
  register: listed
  failed_when: false

- name: Decide what to install
  llmops.serving.sglang_install_plan:
    gpus: "{{ listed }}"
  register: planned
'''

RETURN = r'''
plan:
  description: What the role installs.
  type: dict
  returned: success
  contains:
    requirements:
      description: The pins, the engine's first.
      type: list
      elements: str
      sample: [sglang==0.5.23, torch==2.11.0]
    python:
      description: The virtualenv's python.
      type: str
    missing:
      description: The pins the virtualenv does not meet (all of them where it does not exist); empty when nothing is to install.
      type: list
      elements: str
    had:
      description: Each pin and the version installed before (empty without a virtualenv).
      type: dict
    would_install:
      description: What check mode says it would install, and from where.
      type: str
    copy_wheelhouse:
      description: Whether the wheelhouse is copied from the controller to C(sglang_install_wheelhouse_dest).
      type: bool
    pip_extra_args:
      description: pip's extra arguments (the wheelhouse on the host, C(sglang_install_pip_extra_args)); V(null) for none.
      type: str
    state_dirs:
      description: Where the good configurations of the servers are kept (M(llmops.serving.release_venvs)' O(llmops.serving.release_venvs#module:state_dirs)).
      type: list
      elements: str
    keep:
      description: The virtualenvs this host's settings install and run (never pruned).
      type: list
      elements: str
    pip:
      description: The arguments of M(ansible.builtin.pip) that install RV(plan.missing) into the virtualenv.
      type: dict
    verify:
      description: The arguments of M(llmops.serving.venv_requirements) that check the virtualenv after the install.
      type: dict
    prune:
      description: The arguments of M(llmops.serving.release_venvs) that remove the releases nothing needs.
      type: dict
    result:
      description: The role's C(sglang_install_result) but its C(module_version) (C(engine), C(version), C(python), C(installed), C(before)).
      type: dict
'''

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = dict(
    gpus=dict(type='dict', default={}),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg='llmops.serving.sglang_install_plan runs on the controller (its action plugin)')


if __name__ == '__main__':
    main()
