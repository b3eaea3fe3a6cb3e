#!/usr/bin/python
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_info
short_description: List the GPUs and the compute processes on them
version_added: 1.1.0
description:
  - Lists the GPUs and the compute processes on them with C(nvidia-smi), with each process's owner and full
    command line where it is visible in this PID namespace. Checks nothing and signals nothing.
  - To check that GPUs are present, free and balanced, or to stop processes you name, use
    M(llmops.serving.gpu_memory).
author:
  - llmops.serving contributors (@llmops)
requirements:
  - C(nvidia-smi) (NVIDIA driver utilities) on the host
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.info_module
options:
  gpus:
    description:
      - The GPUs to list, by index (C(0)) or UUID (C(GPU-16b0d5eb-...)); V(all) lists every GPU the driver lists.
      - A GPU the driver does not list fails the module, naming it.
    type: list
    elements: str
    default: [all]
  nvidia_smi_path:
    description: The C(nvidia-smi) to run (a name looked up in E(PATH), or a path).
    type: str
    default: nvidia-smi
seealso:
  - module: llmops.serving.gpu_memory
"""

EXAMPLES = r"""
- name: List the GPUs and what runs on them
  llmops.serving.gpu_info:
  register: gpus

- name: Show the free memory of each GPU
  ansible.builtin.debug:
    msg: "GPU {{ item.index }}: {{ item.free_mib }} of {{ item.total_mib }} MiB free"
  loop: "{{ gpus.gpus }}"
  loop_control:
    label: "{{ item.index }}"
"""

RETURN = r"""
gpus:
  description: The GPUs selected by O(gpus).
  returned: success
  type: list
  elements: dict
  sample:
    - {index: 0, uuid: GPU-16b0d5eb-b6eb-afd8-95b9-178a9196b640, name: NVIDIA H200, total_mib: 143771, used_mib: 0,
       free_mib: 143156}
  contains:
    index:
      description: GPU index.
      type: int
      returned: always
    uuid:
      description: GPU UUID.
      type: str
      returned: always
    name:
      description: Product name.
      type: str
      returned: always
    total_mib:
      description: Total memory (MiB).
      type: int
      returned: always
    used_mib:
      description: Used memory (MiB); null when the driver printed C([N/A]).
      type: int
      returned: always
    free_mib:
      description: Free memory (MiB); null when the driver printed C([N/A]).
      type: int
      returned: always
processes:
  description: The compute processes on the selected GPUs (one entry per process and GPU).
  returned: success
  type: list
  elements: dict
  sample:
    - {pid: 444, gpu: 0, used_mib: 41570, name: python3, cmdline: python3 train.py, user: alice, visible: true}
  contains:
    pid:
      description: PID as the driver reports it.
      type: int
      returned: always
    gpu:
      description: GPU index; null when the driver names a GPU UUID it does not list.
      type: int
      returned: always
    used_mib:
      description: Memory the process holds on this GPU (MiB); null when unknown.
      type: int
      returned: always
    name:
      description: Process name as C(nvidia-smi) prints it; null for C([No data]).
      type: str
      returned: always
    cmdline:
      description: Full command line from C(/proc); null when not visible.
      type: str
      returned: always
    user:
      description: Owner of the process; null when not visible.
      type: str
      returned: always
    visible:
      description: Whether the process is in this PID namespace (a process of another container is not).
      type: bool
      returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import _nvidia_smi as smi
from ansible_collections.llmops.serving.plugins.module_utils import _procs as procs


def main():
    module = AnsibleModule(argument_spec=dict(gpus=dict(type='list', elements='str', default=['all']),
                                              nvidia_smi_path=dict(type='str', default='nvidia-smi')),
                           supports_check_mode=True)
    try:
        gpus, apps = smi.snapshot(module.params['nvidia_smi_path'])
        selected, on_them = smi.selection(gpus, apps, module.params['gpus'])
    except smi.NvidiaSmiError as exc:
        module.fail_json(msg=str(exc), error=exc.kind)
    processes = [smi.process_row(a, procs.read_process(a['pid']) if a['pid'] is not None else None) for a in on_them]
    module.exit_json(changed=False, gpus=selected, processes=processes)


if __name__ == '__main__':
    main()
