#!/usr/bin/python
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: last_good_config
short_description: Keep the last launch files a server passed its checks with, and put one of them back
version_added: 1.0.0
author: llmops.serving maintainers (@llmops)
description:
  - Keeps, per server, the last O(history) good configurations (newest first), each a copy of the files that define
    how it is launched (environment file, launch script or systemd unit, launcher shim) together with a description
    of what ran (engine python and version, argv, speculative depth, drafter fingerprint) and when it passed health,
    smoke and its gates. Each record has an id (a hash of what it holds); the same configuration recorded again
    moves to the front.
  - V(restored) writes the files of one record (O(rollback_to), by default the newest) back where they were, with
    their modes, so that a restart runs that configuration again - with its engine, since the launch files name the
    engine's python, which must still exist (else nothing is written). The automatic rollback of
    P(llmops.serving.deploy#role) and C(playbooks/rollback.yml) use it.
  - The records are one JSON file per server under O(state_dir) (directory mode 0700, file mode 0600), replaced
    atomically (written beside it, synced, renamed), so a crash leaves the previous records or the new ones. A file
    of the single-record format (before 1.0.0) is read as a history of one and rewritten at the next V(recorded).
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
      - V(restored) writes the files of the record O(rollback_to) back; fails when there is no such record.
      - V(read) only returns the newest record and RV(history) (RV(found) false when there is none).
    type: str
    choices: [recorded, restored, read]
    default: read
  files:
    description: Absolute paths of the files to record. Required with O(state=recorded).
    type: list
    elements: path
  metadata:
    description:
      - What ran with these files (argv, version, depth, drafter fingerprint...), returned as recorded.
      - Empty where not set or null.
    type: dict
  fingerprints:
    description:
      - Files or directories (a drafter checkpoint) whose state is recorded with the configuration - for each
        C(*.safetensors) file its size, modification time and the SHA-256 of its header (the tensor names a
        drafter fix rewrites), for each C(config.json) its size, modification time and SHA-256.
      - Size and hash are compared; the modification time is kept for information (a file that was only touched
        has not changed).
      - V(restored) puts back each of these files that differs now from a backup that
        M(llmops.serving.drafter_checkpoint) kept beside it (C(NAME.<time>.header-backup) of an in-place fix,
        C(NAME.<time>.orig) of a rewrite; the drafter role's C(drafter_backup)) and whose content is the
        recorded one (RV(restored_from_backup)); it lists in RV(changed_since_record) and warns about what still
        differs, no backup holding it.
      - None where not set or null.
    type: list
    elements: path
  state_dir:
    description: Directory of the records; C(/var/lib/llmops/last-good) where not set or null.
    type: path
  history:
    description:
      - How many good configurations are kept per server (the newest first), with V(recorded).
      - 3 where not set or null.
    type: int
    version_added: 1.0.0
  rollback_to:
    description:
      - With V(restored), which record is put back - V(last) (the default), the newest, what the server last passed
        its checks with; V(previous), the one before it; a number C(n) of at most 3 digits, the record C(n) good
        configurations back (V(0) is V(last)); or a record id (RV(history[].id), or a unique prefix of at least 4
        characters, digits only included).
      - With V(read), which record RV(selected) names (nothing is written).
    type: str
    version_added: 1.0.0
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

- name: Put back the configuration two good ones before the last (a restart follows)
  llmops.serving.last_good_config:
    name: main
    state: restored
    rollback_to: "2"

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
fingerprint_paths:
  description:
    - The paths of RV(fingerprints), sorted - what O(fingerprints) takes to record this configuration again
      (the sglang_server role does after a rollback to an older record).
  returned: when found
  type: list
  elements: path
  version_added: 1.1.0
history:
  description: The records kept, newest first - no file contents.
  returned: always
  type: list
  elements: dict
  version_added: 1.0.0
  contains:
    index:
      description: How many good configurations back (0 is the newest), as O(rollback_to) takes it.
      type: int
    id:
      description: The record's id.
      type: str
      sample: 3f2a9c1b0d4e
    recorded_at:
      description: When it passed its checks (UTC, ISO 8601).
      type: str
    metadata:
      description: Its O(metadata) (python, version, command, depth, drafter...).
      type: dict
    files:
      description: Its paths.
      type: list
      elements: str
selected:
  description: With V(restored), or V(read) with O(rollback_to), the record chosen (id, index, recorded_at, metadata).
  returned: when O(state=restored), or O(rollback_to) is set
  type: dict
  version_added: 1.0.0
changed_since_record:
  description: With V(restored), the fingerprinted files that differ from the record (changed or gone) and that no
    backup beside them could put back.
  returned: when O(state=restored)
  type: list
  elements: str
restored_from_backup:
  description: With V(restored), the fingerprinted files put back from a backup beside them (in check mode, that
    would be).
  returned: when O(state=restored)
  type: list
  elements: str
  version_added: 1.0.0
restore_summary:
  description:
    - With V(restored), one line on what is put back (in check mode, what would be) - the record's id, how many
      good configurations back, when it passed, its engine, version and depth, the files to restore, the drafter
      files put back from their backups and those that no backup holds.
    - C(playbooks/rollback.yml) shows it for each host before any server stops.
  returned: when O(state=restored) and a record was found
  type: str
  sample: 'record 3f2a9c01 (1 back, passed 2026-12-01T10:00:00Z): sglang 0.5.15, depth 3; files to restore: /etc/llmops/sglang-main.sh'
  version_added: 1.1.0
'''

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils._files import write_atomically
from ansible_collections.llmops.serving.plugins.module_utils._last_good import (
    DEFAULT_HISTORY, DEFAULT_STATE_DIR, Record, fingerprint, matches, read_file, recorded_files, restore_fingerprinted,
    restore_summary, select, summary)

ARGUMENT_SPEC = dict(
    name=dict(type='str', required=True),
    state=dict(type='str', choices=['recorded', 'restored', 'read'], default='read'),
    files=dict(type='list', elements='path'),
    metadata=dict(type='dict'),
    fingerprints=dict(type='list', elements='path'),
    state_dir=dict(type='path'),
    history=dict(type='int'),
    rollback_to=dict(type='str'),
)
# The defaults of the options above: a task may pass null for any of them (a role passes its variable as it
# is), and AnsibleModule applies no spec default to a null, so main() fills them in.
DEFAULTS = dict(metadata={}, fingerprints=[], state_dir=DEFAULT_STATE_DIR, history=DEFAULT_HISTORY)


def record(module, store, history):
    old = history[0] if history else None
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
        store.save(files, params['metadata'], prints, keep=params['history'], history=history)
        history = store.history()
    return changed, changed_files, history


def chosen(module, store, history):
    """The record O(rollback_to) names and its index; fails, listing the records, when there is none."""
    name = module.params['name']
    if not history:
        module.fail_json(msg='no last good configuration is recorded for server %s (%s does not exist): nothing to '
                             'restore' % (name, store.path), found=False, changed_files=[], history=[])
    try:
        return select(history, module.params['rollback_to'])
    except LookupError as exc:
        module.fail_json(msg='rollback_to %s for server %s: %s' % (module.params['rollback_to'], name, exc),
                         found=True, changed_files=[], history=summary(history))


def restore(module, store, history):
    old, dummy = chosen(module, store, history)
    python = old['metadata'].get('python')
    if python and not os.access(python, os.X_OK):
        module.fail_json(msg='the engine of record %s of server %s (%s, version %s) is no longer on this host: '
                             'reinstall it (playbooks/install.yml -e sglang_install_version=%s) and roll back again; '
                             'nothing was changed' % (old['id'], module.params['name'], python,
                                                      old['metadata'].get('version'), old['metadata'].get('version')),
                         found=True, changed_files=[], history=summary(history))
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
    restored, drifted = restore_fingerprinted(old.get('fingerprints') or {}, check_mode=module.check_mode)
    if drifted:
        module.warn('since the last good configuration of server %s was recorded, these files changed and could '
                    'not be put back from a backup beside them: %s; the rollback restores the launch files and '
                    'the engine only' % (module.params['name'], ', '.join(drifted)))
    return changed_files != [] or restored != [], changed_files, old, diffs, drifted, restored


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           required_if=[('state', 'recorded', ('files',))])
    params = module.params
    for name, value in DEFAULTS.items():
        if params[name] is None:
            params[name] = value
    try:
        store = Record(params['state_dir'], params['name'])
        history = store.history()
        diffs, drifted, restored, selected = [], None, None, None
        if params['state'] == 'recorded':
            changed, changed_files, history = record(module, store, history)
            current = history[0] if history else None
        elif params['state'] == 'restored':
            changed, changed_files, current, diffs, drifted, restored = restore(module, store, history)
        else:
            changed, changed_files, current = False, [], history[0] if history else None
            if params['rollback_to'] is not None:
                current = chosen(module, store, history)[0]
        if current is not None and (params['state'] == 'restored' or params['rollback_to'] is not None):
            index = [item['id'] for item in history].index(current['id'])
            selected = dict(id=current['id'], index=index, recorded_at=current['recorded_at'],
                            metadata=current['metadata'])
    except (OSError, ValueError) as exc:
        module.fail_json(msg='last good configuration of server %s: %s' % (params['name'], exc))
    result = dict(changed=changed, changed_files=changed_files, found=current is not None, history=summary(history))
    if selected is not None:
        result['selected'] = selected
    if current is not None:
        result.update(recorded_at=current['recorded_at'], metadata=current['metadata'],
                      fingerprints=current.get('fingerprints') or {},
                      fingerprint_paths=sorted(current.get('fingerprints') or {}),
                      files=[item['path'] for item in current['files']])
    if drifted is not None:
        result.update(changed_since_record=drifted, restored_from_backup=restored)
    if params['state'] == 'restored' and current is not None:
        result['restore_summary'] = restore_summary(selected, current['metadata'], changed_files, restored, drifted)
    if module._diff and diffs:
        result['diff'] = diffs
    module.exit_json(**result)


if __name__ == '__main__':
    main()
