#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: role_module
short_description: Run a module with the arguments a role's variables give
version_added: 1.1.0
description:
  - Runs O(module) on the host (one module run) with, for each name of O(options), the value of the variable
    C(<prefix><name>) (the host's, as the task sees it), read once on the controller. A variable that is not
    defined or is V(null) leaves the module's default.
  - O(args) are passed as they are and win over the variables; O(defaults) are passed where the variable of the
    option is not defined or is V(null).
  - Returns the module's result. Check mode and diff mode are the module's; C(async) runs the module in the
    background as it would run alone.
  - The roles of this collection use it where their options are the module's options under the role's prefix
    (C(drafter_path) is M(llmops.serving.drafter_checkpoint)'s O(llmops.serving.drafter_checkpoint#module:path)).
attributes:
  check_mode:
    support: full
    details: As O(module) supports it.
  diff_mode:
    support: full
    details: As O(module) supports it.
  idempotent:
    support: full
    details: As O(module) is.
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.controller_action
options:
  module:
    description: The module to run, by its full name.
    type: str
    required: true
  prefix:
    description: The prefix of the variables, the role's name and C(_).
    type: str
    required: true
  options:
    description: The names of the module's options read from the variables.
    type: list
    elements: str
    required: true
  args:
    description: Arguments passed as they are.
    type: dict
    default: {}
  defaults:
    description: Arguments for options of O(options) whose variable is not defined or is V(null) (the role's defaults).
    type: dict
    default: {}
author:
  - llmops.serving contributors (@llmops)
'''

EXAMPLES = r'''
- name: Validate the EAGLE-3 drafter with the drafter role's options (drafter_path, drafter_engine, ...)
  llmops.serving.role_module:
    module: llmops.serving.drafter_checkpoint
    prefix: drafter_
    options: [path, engine, engine_version, layout, target_path]
  register: drafter_result
'''

RETURN = r'''
changed:
  description: Whether O(module) changed something; the rest of the result is O(module)'s own.
  returned: always
  type: bool
'''

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = dict(
    module=dict(type='str', required=True),
    prefix=dict(type='str', required=True),
    options=dict(type='list', elements='str', required=True),
    args=dict(type='dict', default={}),
    defaults=dict(type='dict', default={}),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg='llmops.serving.role_module runs on the controller (its action plugin)')


if __name__ == '__main__':
    main()
