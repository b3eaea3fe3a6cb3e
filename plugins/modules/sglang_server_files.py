#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: sglang_server_files
short_description: Compare or write the launch files of the sglang_server role's plan
version_added: 1.1.0
description:
  - Runs in the C(sglang_server) role after its plan (M(llmops.serving.sglang_server_plan), the fact
    C(sglang_server_plan)), once in check mode in the plan, with O(compare), to decide whether the server must
    restart, and once in its apply where the plan found a difference.
  - Renders the role's templates on the controller, with the role's variables (the launcher shim, the unit or the
    launch script the plan's C(templates) name, the environment file), and runs M(llmops.serving.launch_files) on
    the host once with them, the configuration and log directories, the API key file (C(sglang_server_api_key);
    removed without a key) and the server's user (C(sglang_server_user), where the server does not run as root).
  - The environment file and the API key file are secrets of M(llmops.serving.launch_files) - never shown in a
    diff - and the server's environment (C(sglang_server_env), the API key file's path, C(CUDA_VISIBLE_DEVICES)
    from C(sglang_server_gpus), the user the launcher switches to) is never part of the result.
author:
  - llmops.serving contributors (@llmops)
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.controller_action
attributes:
  check_mode:
    details: Reports the files that would change (RV(changed_files)) and changes nothing.
    support: full
  diff_mode:
    details: The diff of M(llmops.serving.launch_files); the secrets' content is replaced by a placeholder.
    support: full
  idempotent:
    support: full
options:
  compare:
    description:
      - The plan's comparison (run it in check mode) - never reported as a change - which also asks whether the last
        good record already holds these files, the launch command and the drafter (the plan's C(last_good), RV(last_good)).
    type: bool
    default: false
notes:
  - The role's options are documented in the C(sglang_server) role's argument specification.
seealso:
  - module: llmops.serving.launch_files
  - module: llmops.serving.sglang_server_plan
'''

EXAMPLES = r'''
- name: Compare the launch files with the host's
  llmops.serving.sglang_server_files:
    compare: true
  check_mode: true
  diff: false
  register: compared

- name: Write them where the plan found a difference
  llmops.serving.sglang_server_files:
  when: compared.changed_files | length > 0
'''

RETURN = r'''
changed_files:
  description: The paths created, rewritten or removed; in check mode those that would be (M(llmops.serving.launch_files)).
  returned: success
  type: list
  elements: str
  sample: [/etc/llmops/sglang-main.sh]
users_to_fix:
  description: The server's user where it does not exist or is not in one of its groups.
  returned: success
  type: list
  elements: str
  sample: [sglang]
last_good:
  description: What M(llmops.serving.launch_files) found of the last good record (its C(found), C(current) and C(version)).
  returned: with O(compare)
  type: dict
'''

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = {'compare': {'type': 'bool', 'default': False}}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg='llmops.serving.sglang_server_files runs on the controller (its action plugin)')


if __name__ == '__main__':
    main()
