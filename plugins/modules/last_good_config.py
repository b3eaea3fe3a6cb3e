#!/usr/bin/python
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: last_good_config
short_description: Record the launch files a server passed its checks with, and put them back
version_added: 1.0.0
author: llmops.serving maintainers (@llmops)
description:
  - Keeps, per server, one copy of the files that define how it is launched (environment file, launch script or
    systemd unit, launcher shim) together with a description of what ran (argv, engine version, speculative depth,
    drafter fingerprint), taken after the server passed health, smoke and its gates.
  - V(restored) writes those files back where they were, with their modes, so that a restart runs the last good
    configuration again. The automatic rollback of P(llmops.serving.deploy#role) and C(playbooks/rollback.yml) use it.
  - The record is one JSON file per server under O(state_dir) (directory mode 0700, file mode 0600), replaced
    atomically (written beside it, synced, renamed), so a crash leaves the previous record or the new one.
  - Do not list secret files such as the API key file; the record is only as private as its directory.
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: Reports what would be recorded or restored and writes nothing.
  diff_mode:
    support: full
    details: V(restored) shows, per file, the content on the host against the recorded one.
  idempotent:
    support: full
options:
  name:
    description: Name of the server (one record per name).
    type: str
    required: true
  state:
    description:
      - V(recorded) stores the content and mode of every file in O(files) and O(metadata).
      - V(restored) writes the recorded files back; fails when nothing was recorded.
      - V(read) only returns the record (RV(found) false when there is none).
    type: str
    choices: [recorded, restored, read]
    default: read
  files:
    description: Absolute paths of the files to record. Required with O(state=recorded).
    type: list
    elements: path
  metadata:
    description: What ran with these files (argv, version, depth, drafter fingerprint...), returned as recorded.
    type: dict
    default: {}
  fingerprints:
    description:
      - Files or directories (a drafter checkpoint) whose state is recorded with the configuration - for each
        C(*.safetensors) file its size, modification time and the SHA-256 of its header (the tensor names a
        drafter fix rewrites), for each C(config.json) its size, modification time and SHA-256.
      - Size and hash are compared; the modification time is kept for information (a file that was only touched
        has not changed).
      - V(restored) lists in RV(changed_since_record) what differs now and warns; it does not change these files
        (with C(drafter_backup) the drafter role keeps the original header beside a fixed file).
    type: list
    elements: path
    default: []
  state_dir:
    description: Directory of the records.
    type: path
    default: /var/lib/llmops/last-good
'''

EXAMPLES = r'''
- name: Remember what the server passed its checks with
  llmops.serving.last_good_config:
    name: main
    state: recorded
    files:
      - /etc/llmops/sglang-main.env
      - /etc/llmops/sglang-main.sh
      - /etc/llmops/llmops_launch.py
    metadata:
      version: 0.5.15.post1
      depth: 16

- name: Put the last good launch files back (a restart follows)
  llmops.serving.last_good_config:
    name: main
    state: restored
  register: restored
'''

RETURN = r'''
found:
  description: Whether a record exists (after the task).
  returned: always
  type: bool
recorded_at:
  description: When the record was taken (UTC, ISO 8601).
  returned: when found
  type: str
  sample: '2026-12-03T08:01:02Z'
files:
  description: The recorded paths.
  returned: when found
  type: list
  elements: str
changed_files:
  description: The paths that were (or in check mode would be) written by V(restored), or whose recorded content
    changed with V(recorded).
  returned: always
  type: list
  elements: str
metadata:
  description: The recorded O(metadata).
  returned: when found
  type: dict
fingerprints:
  description: The recorded state of the O(fingerprints) files, by path (size, mtime_ns, sha256).
  returned: when found
  type: dict
changed_since_record:
  description: With V(restored), the fingerprinted files that differ from the record (changed or gone).
  returned: when O(state=restored)
  type: list
  elements: str
'''

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils._files import write_atomically
from ansible_collections.llmops.serving.plugins.module_utils._last_good import (
    DEFAULT_STATE_DIR, Record, _content, fingerprint, matches, read_file, recorded_files)

ARGUMENT_SPEC = dict(
    name=dict(type='str', required=True),
    state=dict(type='str', choices=['recorded', 'restored', 'read'], default='read'),
    files=dict(type='list', elements='path'),
    metadata=dict(type='dict', default={}),
    fingerprints=dict(type='list', elements='path', default=[]),
    state_dir=dict(type='path', default=DEFAULT_STATE_DIR),
)


def record(module, store, old):
    params = module.params
    if not params['files']:
        module.fail_json(msg='files is required with state=recorded')
    files = {}
    for path in params['files']:
        content, mode = read_file(path)
        if content is None:
            module.fail_json(msg='cannot record %s for server %s: the file does not exist' % (path, params['name']))
        files[path] = (content, mode)
    before = recorded_files(old)
    changed_files = sorted(path for path in files if before.get(path) != files[path])
    prints = fingerprint(params['fingerprints'])
    changed = not matches(old, files, params['metadata'], prints)
    if changed and not module.check_mode:
        store.save(files, params['metadata'], prints)
    new = store.load() if not module.check_mode else old
    return changed, changed_files, new


def restore(module, store, old):
    if old is None:
        module.fail_json(msg='no last good configuration is recorded for server %s (%s does not exist): nothing to '
                             'restore' % (module.params['name'], store.path), found=False, changed_files=[])
    changed_files, diffs = [], []
    for item in old['files']:
        content, mode = read_file(item['path'])
        if (content, mode) == (item['content'], item['mode']):
            continue
        changed_files.append(item['path'])
        diffs.append(dict(before_header=item['path'], after_header=item['path'] + ' (last good)',
                          before=(content or b'').decode(errors='replace'),
                          after=item['content'].decode(errors='replace')))
        if not module.check_mode:
            os.makedirs(os.path.dirname(item['path']), exist_ok=True)
            write_atomically(item['path'], item['content'], item['mode'])
    recorded = old.get('fingerprints') or {}
    now = fingerprint(list(recorded))
    before, after = _content(recorded), _content(now)
    drifted = sorted(path for path in set(before) | set(after) if before.get(path) != after.get(path))
    if drifted:
        module.warn('since the last good configuration of server %s was recorded, these files changed: %s; the '
                    'rollback restores the launch files only' % (module.params['name'], ', '.join(drifted)))
    return changed_files != [], changed_files, old, diffs, drifted


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           required_if=[('state', 'recorded', ('files',))])
    params = module.params
    try:
        store = Record(params['state_dir'], params['name'])
        old = store.load()
        diffs, drifted = [], None
        if params['state'] == 'recorded':
            changed, changed_files, current = record(module, store, old)
        elif params['state'] == 'restored':
            changed, changed_files, current, diffs, drifted = restore(module, store, old)
        else:
            changed, changed_files, current = False, [], old
    except (OSError, ValueError) as exc:
        module.fail_json(msg='last good configuration of server %s: %s' % (params['name'], exc))
    result = dict(changed=changed, changed_files=changed_files, found=current is not None)
    if current is not None:
        result.update(recorded_at=current['recorded_at'], metadata=current['metadata'],
                      fingerprints=current.get('fingerprints') or {},
                      files=[item['path'] for item in current['files']])
    if drifted is not None:
        result['changed_since_record'] = drifted
    if module._diff and diffs:
        result['diff'] = diffs
    module.exit_json(**result)


if __name__ == '__main__':
    main()
