#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: venv_requirements
short_description: Which pinned packages a virtualenv has, and whether its engine imports
version_added: 1.1.0
description:
  - Runs the virtualenv's python once; it reports the installed version of each requirement
    (C(importlib.metadata)), and with O(import_module) imports that module and reports its C(__version__).
  - C(name==V) is met by C(V) and, as pip has it, by a local build C(V+cu130).
  - Used by the C(sglang_install) role (through M(llmops.serving.sglang_install_plan) before the install, and
    to verify the install after it). Changes nothing.
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.info_module
options:
  venv:
    description: The virtualenv; its python is C(<venv>/bin/python).
    type: str
    required: true
  requirements:
    description: The pins, each C(name==version).
    type: list
    elements: str
    required: true
  import_module:
    description: A module to import in the virtualenv (the engine), whose version is returned as RV(version).
    type: str
  fail_unsatisfied:
    description:
      - "Fail when O(import_module) does not import or a requirement is not met, saying which
        (C(import sglang failed in ...: <the last line of the error>), C(after the install, ... not satisfied in ...))."
      - V(false) reports the same without failing (a virtualenv that does not exist yet misses every requirement).
    type: bool
    default: false
author:
  - llmops.serving contributors (@llmops)
'''

EXAMPLES = r'''
- name: Verify that the engine imports and has the pinned version
  llmops.serving.venv_requirements:
    venv: /opt/llmops/sglang-0.5.23
    requirements: [sglang==0.5.23]
    import_module: sglang
    fail_unsatisfied: true
'''

RETURN = r'''
python:
  description: The virtualenv's python.
  returned: always
  type: str
  sample: /opt/llmops/sglang-0.5.23/bin/python
rc:
  description: Exit status of the virtualenv's python (not 0 where it does not exist or the import failed).
  returned: always
  type: int
packages:
  description: Each requirement and the version installed (V(null) for none); empty where the python did not answer.
  returned: always
  type: dict
  sample: {"sglang==0.5.23": "0.5.23"}
missing:
  description: The requirements not met (all of them where the python did not answer).
  returned: always
  type: list
  elements: str
version:
  description: The C(__version__) of O(import_module).
  returned: when O(import_module) imported
  type: str
  sample: 0.5.23
stderr:
  description: What the virtualenv's python printed on error.
  returned: always
  type: str
'''

import json

from ansible_collections.llmops.serving.plugins.module_utils._null_unset import NullIsUnsetModule
from ansible_collections.llmops.serving.plugins.module_utils._install import PROBE, verify_message

ARGUMENT_SPEC = dict(
    venv=dict(type='str', required=True),
    requirements=dict(type='list', elements='str', required=True),
    import_module=dict(type='str'),
    fail_unsatisfied=dict(type='bool', default=False),
)


def probe(run, python, requirements, import_module=None):
    """PROBE's answer with ``rc`` and ``stderr``; every requirement missing where the python does not answer."""
    argv = [python, '-c', PROBE] + (['--import', import_module] if import_module else []) + list(requirements)
    try:
        rc, out, err = run(argv)
    except OSError as exc:
        rc, out, err = 2, '', str(exc)
    answer = None
    if rc == 0:
        try:
            answer = json.loads(out)
        except ValueError:
            rc, err = 1, 'not JSON: %s' % out.strip()
    if answer is None:
        answer = {'packages': {}, 'missing': list(requirements)}
    answer.update(rc=rc, stderr=err)
    return answer


def main():
    module = NullIsUnsetModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    python = params['venv'] + '/bin/python'
    result = probe(lambda argv: module.run_command(argv, handle_exceptions=False), python, params['requirements'],
                   params['import_module'])
    result.update(changed=False, python=python)
    problem = params['fail_unsatisfied'] and verify_message(params['import_module'] or 'the engine', python,
                                                            params['venv'], result)
    if problem:
        module.fail_json(msg=problem, **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
