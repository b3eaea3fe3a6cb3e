#!/usr/bin/python
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: release_venvs
short_description: List the engine releases' virtualenvs, who needs each, and remove those nobody needs
version_added: 1.0.0
author: llmops.serving maintainers (@llmops)
description:
  - Role P(llmops.serving.sglang_install#role) installs each release into its own virtualenv under O(root)
    (C(/opt/llmops/sglang-<version>)). This module lists those virtualenvs (directories with a C(pyvenv.cfg)) with
    their size and what needs each - a process that runs its python (a server), a kept good configuration of a
    server (M(llmops.serving.last_good_config) records under O(state_dirs), whose launch files name that python), or
    O(keep) (the release the host's settings install and run).
  - With O(prune=true) it removes the virtualenvs directly under O(root) that nothing needs, and reports the space
    freed. A rollback can then no longer go back to a record whose engine was removed - none is, since every kept
    record keeps its virtualenv.
  - An unreadable record fails the module before anything is removed.
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: Reports what would be removed and the space that would be freed; removes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  root:
    description: The directory of the virtualenvs (C(sglang_install_root)).
    type: path
    default: /opt/llmops
  venvs:
    description: More virtualenvs to report on (for example C(sglang_install_venv) set outside O(root)); only reported,
      never removed.
    type: list
    elements: path
    default: []
  keep:
    description: Virtualenvs, or pythons in them (C(<venv>/bin/python)), never removed.
    type: list
    elements: path
    default: []
  state_dirs:
    description: Directories of the servers' good configurations (C(sglang_server_state_dir)).
    type: list
    elements: path
    default: [/var/lib/llmops/last-good]
  prune:
    description: Remove the virtualenvs directly under O(root) that nothing needs.
    type: bool
    default: false
seealso:
  - module: llmops.serving.last_good_config
'''

EXAMPLES = r'''
- name: Remove the releases that no server runs and no kept good configuration names
  llmops.serving.release_venvs:
    keep: [/opt/llmops/sglang-0.5.23]
    prune: true
  register: pruned

- name: Say how much was freed
  ansible.builtin.debug:
    msg: "{{ pruned.removed | join(', ') }}: {{ (pruned.freed_bytes / 1048576) | round(1) }} MiB freed"
'''

RETURN = r'''
venvs:
  description: The virtualenvs found (before any removal), by name.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The virtualenv.
      type: str
      sample: /opt/llmops/sglang-0.5.15.post1
    bytes:
      description: Size of its files.
      type: int
    in_use:
      description: PIDs of the processes that run its python.
      type: list
      elements: int
    records:
      description: The good configurations that run it, as C(<server>:<record id>).
      type: list
      elements: str
    kept:
      description: Whether something needs it (then it is never removed).
      type: bool
    why:
      description: What needs it, or V(nothing needs it).
      type: str
removed:
  description: The virtualenvs removed (in check mode, that would be removed); empty without O(prune).
  returned: always
  type: list
  elements: str
freed_bytes:
  description: The space the removal freed (or would free).
  returned: always
  type: int
summary:
  description: What was (in check mode, would be) removed, the space freed in MiB and the virtualenvs kept, in one line.
  returned: always
  type: str
  sample: "removed /opt/llmops/sglang-0.5.22, 5120.0 MiB freed; kept (needed): /opt/llmops/sglang-0.5.23"
'''

import os
import shutil

from ansible_collections.llmops.serving.plugins.module_utils._null_unset import NullIsUnsetModule
from ansible_collections.llmops.serving.plugins.module_utils._releases import DEFAULT_ROOT, prune_summary, survey

ARGUMENT_SPEC = dict(
    root=dict(type='path', default=DEFAULT_ROOT),
    venvs=dict(type='list', elements='path', default=[]),
    keep=dict(type='list', elements='path', default=[]),
    state_dirs=dict(type='list', elements='path', default=['/var/lib/llmops/last-good']),
    prune=dict(type='bool', default=False),
)


def main():
    module = NullIsUnsetModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    root = os.path.normpath(params['root'])
    try:
        venvs = survey(root, params['keep'], params['state_dirs'], params['venvs'])
    except (OSError, ValueError) as exc:
        module.fail_json(msg='cannot tell which virtualenvs under %s are needed (nothing was removed): %s'
                             % (root, exc))
    removed, freed = [], 0
    if params['prune']:
        for venv in venvs:
            if venv['kept'] or os.path.dirname(venv['path']) != root:
                continue
            if not module.check_mode:
                try:
                    shutil.rmtree(venv['path'])
                except OSError as exc:
                    module.fail_json(msg='removing %s failed: %s' % (venv['path'], exc), venvs=venvs,
                                     removed=removed, freed_bytes=freed, changed=bool(removed))
            removed.append(venv['path'])
            freed += venv['bytes']
    module.exit_json(changed=bool(removed), venvs=venvs, removed=removed, freed_bytes=freed,
                     summary=prune_summary(removed, freed, venvs, module.check_mode))


if __name__ == '__main__':
    main()
