#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: sglang_install_plan
short_description: Decide what the sglang_install role installs on a host
version_added: 1.1.0
description:
  - Runs first in the C(sglang_install) role, which passes it the role's options.
  - Refuses entries of O(packages) that are not pinned (C(name==version)), and, unless O(check_driver) is false, a
    host whose nvidia-smi does not work (O(gpus)). The refusals name the role's variables
    (C(sglang_install_packages), C(sglang_install_nvidia_smi_path), C(sglang_install_check_driver)).
  - Reads the installed version of each pin with the virtualenv's python (M(llmops.serving.venv_requirements), one
    module run). Where one is missing in an existing virtualenv, asks M(llmops.serving.release_venvs) who needs it,
    and refuses to install into a virtualenv a process runs or a kept good configuration names.
  - Changes nothing, on any host.
  - An option given as V(null) is not given (its default applies).
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.controller_action
  - llmops.serving.attributes.info_module
options:
  gpus:
    description:
      - The result of M(llmops.serving.gpu_memory) listing the host's GPUs (C(ready), C(error), C(msg)).
      - Not read where O(check_driver) is false.
    type: dict
    default: {}
  engine:
    description: The engine, also the module the virtualenv's python must import (C(sglang_install_engine)).
    type: str
    default: sglang
  package:
    description: The engine's package (C(sglang_install_package)); O(engine) when omitted.
    type: str
  version:
    description: The engine's release, pinned (C(sglang_install_version)).
    type: str
    required: true
  packages:
    description: Other pins, each C(name==version) (C(sglang_install_packages)).
    type: list
    elements: str
    default: []
  venv:
    description: The virtualenv (C(sglang_install_venv)).
    type: path
    required: true
  root:
    description: The directory of the releases' virtualenvs (C(sglang_install_root)).
    type: path
    default: /opt/llmops
  python:
    description: The python that creates the virtualenv (C(sglang_install_python)).
    type: path
    default: /usr/bin/python3
  check_driver:
    description: Refuse a host whose nvidia-smi does not work (C(sglang_install_check_driver)).
    type: bool
    default: true
  nvidia_smi_path:
    description: The nvidia-smi that O(gpus) ran, as the refusal names it (C(sglang_install_nvidia_smi_path)).
    type: str
    default: nvidia-smi
  wheelhouse:
    description: A directory of wheels on the controller (or on the host with O(wheelhouse_on_host)); V('') for the
      package index (C(sglang_install_wheelhouse)).
    type: str
    default: ''
  wheelhouse_on_host:
    description: O(wheelhouse) is on the host already (C(sglang_install_wheelhouse_on_host)).
    type: bool
    default: false
  wheelhouse_dest:
    description: Where the wheelhouse is copied on the host (C(sglang_install_wheelhouse_dest)).
    type: path
    default: /opt/llmops/wheelhouse
  pip_extra_args:
    description: pip's extra arguments (C(sglang_install_pip_extra_args)).
    type: str
    default: ''
  state_dir:
    description: Where the servers' good configurations are kept (C(sglang_install_state_dir)).
    type: path
    default: /var/lib/llmops/last-good
  server_python:
    description: The python the server runs where it is set (C(sglang_install_server_python)); its virtualenv is
      never pruned. V('') for none.
    type: str
    default: ''
  disaggregation_mode:
    description:
      - The prefill/decode mode of the host's server (C(sglang_install_disaggregation_mode), by default its
        C(sglang_server_disaggregation_mode)), V(prefill) or V(decode). With one, the transfer engine of
        O(transfer_backend) is installed with the engine; none where it is null.
    type: str
    version_added: 1.1.0
  transfer_backend:
    description:
      - The server's transfer backend (C(sglang_install_transfer_backend), by default its
        C(sglang_server_disaggregation_transfer_backend)); null is SGLang's default, V(mooncake).
      - V(mooncake) and V(mooncake_tcp) install C(mooncake-transfer-engine) (CUDA 12) or
        C(mooncake-transfer-engine-cuda13) (CUDA 13) at O(mooncake_version); V(nixl) installs C(nixl-cu12) or
        C(nixl-cu13) at O(nixl_version) (not the C(nixl) meta package, whose 1.5.2 pins a wheel that is not
        published); V(fake) installs nothing. A package of that name in O(packages) is installed as pinned there.
    type: str
    version_added: 1.1.0
  transfer_engine_cuda:
    description: The CUDA major version of the virtualenv's torch, which picks the transfer engine's build (C(sglang_install_transfer_engine_cuda)).
    type: str
    choices: ['12', '13']
    default: '13'
    version_added: 1.1.0
  mooncake_version:
    description: The release of the mooncake transfer engine (C(sglang_install_mooncake_version)).
    type: str
    default: 0.3.14
    version_added: 1.1.0
  nixl_version:
    description: The release of the NIXL transfer engine (C(sglang_install_nixl_version)).
    type: str
    default: 1.5.1
    version_added: 1.1.0
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
    version: 0.5.15.post1
    venv: /opt/llmops/sglang-0.5.15.post1
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
      description: Whether the wheelhouse is copied from the controller to O(wheelhouse_dest).
      type: bool
    wheelhouse_src:
      description: The wheelhouse directory on the controller with a trailing V(/) (its files are copied), V('') for none.
      type: str
    pip_extra_args:
      description: pip's extra arguments (the wheelhouse on the host, O(pip_extra_args)); V(null) for none.
      type: str
    state_dirs:
      description: Where the good configurations of the servers are kept (M(llmops.serving.release_venvs)' O(llmops.serving.release_venvs#module:state_dirs)).
      type: list
      elements: str
    keep:
      description: The virtualenvs this host's settings install and run (never pruned).
      type: list
      elements: str
    result:
      description: The role's C(sglang_install_result) but its C(module_version) (C(engine), C(version), C(python), C(installed), C(before)).
      type: dict
'''

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = dict(
    gpus=dict(type='dict', default={}),
    engine=dict(type='str', default='sglang'),
    package=dict(type='str'),
    version=dict(type='str', required=True),
    packages=dict(type='list', elements='str', default=[]),
    venv=dict(type='path', required=True),
    root=dict(type='path', default='/opt/llmops'),
    python=dict(type='path', default='/usr/bin/python3'),
    check_driver=dict(type='bool', default=True),
    nvidia_smi_path=dict(type='str', default='nvidia-smi'),
    wheelhouse=dict(type='str', default=''),
    wheelhouse_on_host=dict(type='bool', default=False),
    wheelhouse_dest=dict(type='path', default='/opt/llmops/wheelhouse'),
    pip_extra_args=dict(type='str', default=''),
    state_dir=dict(type='path', default='/var/lib/llmops/last-good'),
    server_python=dict(type='str', default=''),
    disaggregation_mode=dict(type='str'),
    transfer_backend=dict(type='str'),
    transfer_engine_cuda=dict(type='str', default='13', choices=['12', '13']),
    mooncake_version=dict(type='str', default='0.3.14'),
    nixl_version=dict(type='str', default='1.5.1'),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg='llmops.serving.sglang_install_plan runs on the controller (its action plugin)')


if __name__ == '__main__':
    main()
