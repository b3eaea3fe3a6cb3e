#!/usr/bin/python
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: launch_files
short_description: Compare or write a server's launch files on the host in one call
version_added: 1.0.0
author: llmops.serving maintainers (@llmops)
description:
  - Brings a set of files whose content was rendered on the controller (for example with
    C(lookup('ansible.builtin.template', ...))), a set of directories and a set of paths that must not exist to the
    wanted state in one module run, instead of one M(ansible.builtin.template), M(ansible.builtin.copy) or
    M(ansible.builtin.file) task per path (each of them one or more SSH round trips).
  - P(llmops.serving.sglang_server#role) runs it once in check mode in its plan (to decide whether the server must
    restart) and once for real in its apply, only when the plan found a difference.
  - A file is rewritten when its content, its mode or its owner differs. Each file is written to a temporary file
    in its directory, with its mode and owner already set, synced and renamed over the old one, so it is never seen
    half-written or with other rights.
  - The files of O(secrets) are compared and written like those of O(files), but their content is never returned
    or shown in a diff (the diff only says that the secret content changed).
  - With O(last_good), the same run also tells (RV(last_good)) whether the server's last good record, written by
    M(llmops.serving.last_good_config), already holds what would be recorded once these files have their wanted
    content and modes. P(llmops.serving.sglang_server#role) uses it in its plan to skip the drafter check and the
    record task on a no-op redeploy, with no extra SSH round trip.
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: Reports what would be created, written or removed (RV(changed_files)) and changes nothing.
  diff_mode:
    support: full
    details: One diff per changed path; the content of O(secrets) files is replaced by a placeholder.
  idempotent:
    support: full
options:
  directories:
    description: Directories to create when missing (parents included) and whose mode is set.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the directory.
        type: path
        required: true
      mode:
        description: Octal mode of the directory, as a string.
        type: str
        default: '0755'
  files:
    description: Files whose content is given here; their content may be returned in a diff.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the file. Its directory must exist or be listed in O(directories).
        type: path
        required: true
      content:
        description: The whole content of the file (a trailing newline is not added).
        type: str
        required: true
      mode:
        description: Octal mode of the file, as a string.
        type: str
        default: '0644'
      owner:
        description:
          - Name of the user that owns the file. Empty - a new file belongs to the user running the module, an
            existing one keeps its owner.
          - When the user does not exist, check mode reports the file as changed (the user may be created before
            the files are written); otherwise the module fails.
        type: str
        default: ''
  secrets:
    description:
      - Files like those of O(files) whose content holds secrets (an environment file with tokens, an API key
        file). Their content is marked C(no_log) and never appears in the result or a diff.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: As the O(files[].path) of O(files).
        type: path
        required: true
      content:
        description: As the O(files[].content) of O(files); never shown.
        type: str
        required: true
      mode:
        description: Octal mode of the file, as a string; only its owner may read it by default.
        type: str
        default: '0600'
      owner:
        description: As the O(files[].owner) of O(files).
        type: str
        default: ''
  absent:
    description: Files that must not exist (removed when they do).
    type: list
    elements: path
    default: []
  users:
    description:
      - Users the files and the server need, with the groups each must be in. The module creates no user; it only
        reports in RV(users_to_fix) those that are missing or not in one of their groups, so that a user task runs
        only then.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Name of the user.
        type: str
        required: true
      groups:
        description: Groups (names) the user must be a member of.
        type: list
        elements: str
        default: []
  last_good:
    description:
      - Compares the last good record of server O(last_good.name), read-only, with what
        M(llmops.serving.last_good_config) would record with O(last_good.files), O(last_good.metadata) and
        O(last_good.fingerprints) after this run has brought the files to their wanted content and modes (the
        content and mode given here are compared, not the host's files). The answer is RV(last_good).
      - The record is never written, and the comparison is the same in check mode.
      - An unreadable or invalid record gives a warning and RV(last_good.current=false); it does not fail the
        module.
    type: dict
    suboptions:
      name:
        description: Name of the server, as the O(llmops.serving.last_good_config#module:name) of its record.
        type: str
        required: true
      state_dir:
        description: Directory of the records, as the O(llmops.serving.last_good_config#module:state_dir).
        type: path
        default: /var/lib/llmops/last-good
      files:
        description:
          - The paths the record holds. Each must be the path of one of O(files) or O(secrets), otherwise the module
            fails naming it.
        type: list
        elements: path
        required: true
      metadata:
        description: The metadata that would be recorded, compared with the recorded one.
        type: dict
        default: {}
      fingerprints:
        description:
          - Files or directories (a drafter checkpoint) whose fingerprint (size and SHA-256 of each
            C(*.safetensors) header and C(config.json)) would be recorded, compared with the recorded one as
            M(llmops.serving.last_good_config) does.
        type: list
        elements: path
        default: []
notes:
  - The paths of O(files), O(secrets) and O(absent) must be distinct.
seealso:
  - module: ansible.builtin.template
  - module: llmops.serving.last_good_config
'''

EXAMPLES = r'''
# compared.last_good.current: the last good record already holds these files, this metadata and drafter
- name: Compare the launch files with the host's and with the last good record (the plan; nothing is written)
  llmops.serving.launch_files:
    directories:
      - path: /etc/llmops
      - path: /var/log/llmops
    files:
      - path: /etc/llmops/sglang-main.sh
        content: "{{ lookup('ansible.builtin.template', 'launch.sh.j2') }}"
        mode: '0755'
    secrets:
      - path: /etc/llmops/sglang-main.env
        content: "{{ lookup('ansible.builtin.template', 'env.j2') }}"
      - path: /etc/llmops/sglang-main.key
        content: "{{ api_key }}\n"
        owner: sglang
    users:
      - name: sglang
        groups: [video]
    last_good:
      name: main
      files: [/etc/llmops/sglang-main.env, /etc/llmops/sglang-main.sh]
      metadata:
        version: 0.5.15.post1
        depth: 16
      fingerprints: [/models/drafter]
  check_mode: true
  changed_when: false
  register: compared

- name: Write them where the plan found a difference
  llmops.serving.launch_files:
    files:
      - path: /etc/llmops/sglang-main.sh
        content: "{{ lookup('ansible.builtin.template', 'launch.sh.j2') }}"
        mode: '0755'
    absent:
      - /etc/llmops/sglang-main.key
  when: compared.changed_files | length > 0
'''

RETURN = r'''
changed_files:
  description: The paths created, rewritten (content, mode or owner) or removed; in check mode those that would be.
  returned: always
  type: list
  elements: str
  sample: [/etc/llmops/sglang-main.sh]
users_to_fix:
  description: The names of O(users) that do not exist or are not in one of their O(users[].groups).
  returned: always
  type: list
  elements: str
  sample: [sglang]
last_good:
  description: What O(last_good) found (no file content is returned).
  returned: when O(last_good) is set
  type: dict
  contains:
    found:
      description: Whether a record of server O(last_good.name) exists.
      type: bool
      returned: success
    current:
      description:
        - Whether M(llmops.serving.last_good_config) with O(last_good.files), O(last_good.metadata) and
          O(last_good.fingerprints) would change nothing once the files have their wanted content and modes - the
          recorded paths, contents and modes, metadata and fingerprints (size and hash) are the same.
        - False when there is no record or it cannot be read.
      type: bool
      returned: success
    version:
      description:
        - The engine version of the newest record (its C(metadata.version)), what the server last passed its checks
          with; null when there is none. The deploy summary shows it as C(0.5.15.post1 -> 0.5.23) where the plan
          changes the version.
      type: str
      returned: success
      version_added: 1.0.0
    command:
      description:
        - The launch command of the newest record (its C(metadata.command)); empty when there is none. The fleet
          preflight compares it with the plan's for the servers of a prefill/decode router.
      type: list
      elements: str
      returned: success
      version_added: 1.1.0
  sample: {found: true, current: true, version: 0.5.15.post1, command: [/opt/llmops/sglang-0.5.15.post1/bin/python]}
'''

import grp
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils._files import write_atomically
from ansible_collections.llmops.serving.plugins.module_utils._last_good import (
    DEFAULT_STATE_DIR, Record, fingerprint, matches)

FILE_SPEC = dict(
    path=dict(type='path', required=True),
    content=dict(type='str', required=True),
    mode=dict(type='str', default='0644'),
    owner=dict(type='str', default=''),
)
SECRET_SPEC = dict(FILE_SPEC, content=dict(type='str', required=True, no_log=True), mode=dict(type='str', default='0600'))
ARGUMENT_SPEC = dict(
    directories=dict(type='list', elements='dict', default=[],
                     options=dict(path=dict(type='path', required=True), mode=dict(type='str', default='0755'))),
    files=dict(type='list', elements='dict', default=[], options=FILE_SPEC),
    # The list itself is no secret (its paths and modes may show); each content is no_log.
    secrets=dict(type='list', elements='dict', default=[], options=SECRET_SPEC, no_log=False),
    absent=dict(type='list', elements='path', default=[]),
    users=dict(type='list', elements='dict', default=[],
               options=dict(name=dict(type='str', required=True), groups=dict(type='list', elements='str', default=[]))),
    last_good=dict(type='dict', options=dict(
        name=dict(type='str', required=True),
        state_dir=dict(type='path', default=DEFAULT_STATE_DIR),
        files=dict(type='list', elements='path', required=True),
        metadata=dict(type='dict', default={}),
        fingerprints=dict(type='list', elements='path', default=[]),
    )),
)
SECRET_PLACEHOLDER = '(content not shown: it holds secrets)\n'


def wanted_state(item):
    """(content bytes, mode) that a file of O(files) or O(secrets) is brought to."""
    return item['content'].encode('utf-8'), parse_mode(item['mode'], item['path'])


def parse_mode(text, path):
    try:
        mode = int(str(text), 8)
    except ValueError:
        raise ValueError('mode %r of %s is not an octal number' % (text, path))
    if not 0 <= mode <= 0o7777:
        raise ValueError('mode %r of %s is out of range' % (text, path))
    return mode


def lookup_uid(owner):
    """uid of ``owner``; None when the user does not exist."""
    try:
        return pwd.getpwnam(owner).pw_uid
    except KeyError:
        return None


def attributes(mode, uid):
    return 'mode %04o, owner %s\n' % (mode, owner_name(uid))


def owner_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class Plan(object):
    """What the module changes (or would change), and the diffs that show it."""

    def __init__(self, module):
        self.module = module
        self.changed_files = []
        self.diffs = []

    def note(self, path, before, after, header_suffix=''):
        self.changed_files.append(path)
        self.diffs.append(dict(before_header=path + header_suffix, after_header=path + header_suffix,
                               before=before, after=after))

    def directory(self, item):
        path, mode = item['path'], parse_mode(item['mode'], item['path'])
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        if current is not None and not stat.S_ISDIR(current.st_mode):
            raise ValueError('%s exists and is not a directory' % path)
        if current is not None and stat.S_IMODE(current.st_mode) == mode:
            return
        before = 'absent\n' if current is None else 'directory, mode %04o\n' % stat.S_IMODE(current.st_mode)
        self.note(path, before, 'directory, mode %04o\n' % mode)
        if not self.module.check_mode:
            os.makedirs(path, mode=mode, exist_ok=True)
            self.module.set_mode_if_different(path, mode, False)

    def file(self, item, secret):
        path = item['path']
        wanted, mode = wanted_state(item)
        uid = lookup_uid(item['owner']) if item['owner'] else -1
        if uid is None and not self.module.check_mode:
            raise ValueError('owner %s of %s does not exist on this host' % (item['owner'], path))
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        if current is not None and not stat.S_ISREG(current.st_mode):
            raise ValueError('%s exists and is not a regular file' % path)
        content = None
        if current is not None:
            with open(path, 'rb') as handle:
                content = handle.read()
        same_owner = uid == -1 or (current is not None and current.st_uid == uid)
        if content == wanted and stat.S_IMODE(current.st_mode) == mode and same_owner:
            return
        if content != wanted:
            before = '' if content is None else content.decode('utf-8', errors='replace')
            after = wanted.decode('utf-8')
            if secret:
                before, after = ('' if content is None else '(old) ' + SECRET_PLACEHOLDER), '(new) ' + SECRET_PLACEHOLDER
            self.note(path, before, after)
        if current is not None and (stat.S_IMODE(current.st_mode) != mode or not same_owner):
            wanted_owner = item['owner'] or owner_name(current.st_uid)
            change = (attributes(stat.S_IMODE(current.st_mode), current.st_uid), 'mode %04o, owner %s\n' % (mode, wanted_owner))
            if content == wanted:
                self.note(path, *change, header_suffix=' (mode, owner)')
            else:
                self.diffs.append(dict(before_header=path + ' (mode, owner)', after_header=path + ' (mode, owner)',
                                       before=change[0], after=change[1]))
        if self.module.check_mode:
            return
        if content == wanted:
            self.module.set_mode_if_different(path, mode, False)
            if uid != -1:
                self.module.set_owner_if_different(path, uid, False)
            return
        if uid == -1 and current is not None:
            uid, gid = current.st_uid, current.st_gid
        else:
            gid = -1
        # Written here, not with AnsibleModule.atomic_move: that makes a new file 0666 & ~umask after the rename,
        # and an environment file holds the API key; this one has its mode and owner before it is renamed.
        write_atomically(path, wanted, mode, uid, gid)
        # The context SELinux policy gives this path (a unit file systemd's), which a file renamed into place lacks.
        self.module.set_context_if_different(path, self.module.selinux_default_context(path), False)

    def absent(self, path):
        if not os.path.lexists(path):
            return
        if os.path.isdir(path) and not os.path.islink(path):
            raise ValueError('%s is a directory: only files are removed' % path)
        self.note(path, 'present\n', 'absent\n')
        if not self.module.check_mode:
            os.unlink(path)


def users_to_fix(users):
    """Names of ``users`` that are missing or not in one of their groups."""
    out = []
    for user in users:
        try:
            entry = pwd.getpwnam(user['name'])
        except KeyError:
            out.append(user['name'])
            continue
        member_of = set(group.gr_name for group in grp.getgrall() if user['name'] in group.gr_mem)
        try:
            member_of.add(grp.getgrgid(entry.pw_gid).gr_name)
        except KeyError:
            pass
        if set(user['groups']) - member_of:
            out.append(user['name'])
    return out


def last_good_state(module, store, wanted):
    """``{found, current, version, command}`` of the newest record ``store`` of O(last_good) against the files of ``wanted`` ({path: item});
    an unreadable or invalid record is a warning, and not current."""
    options = module.params['last_good']
    found, old = False, None
    try:
        found = os.path.exists(store.path)
        old = store.load()
        files = {path: wanted_state(wanted[path]) for path in options['files']}
        current = matches(old, files, options['metadata'], fingerprint(options['fingerprints']))
    except (OSError, ValueError) as exc:
        module.warn('the last good record of server %s cannot be compared (taken as not current): %s'
                    % (options['name'], exc))
        current = False
    metadata = (old or {}).get('metadata') or {}
    version = metadata.get('version')
    return dict(found=found, current=current, version=None if version is None else str(version),
                command=[str(arg) for arg in metadata.get('command') or []])


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    paths = [item['path'] for item in params['files'] + params['secrets']] + params['absent']
    repeated = sorted(set(path for path in paths if paths.count(path) > 1))
    if repeated:
        module.fail_json(msg='these paths are listed more than once: %s' % ', '.join(repeated))
    wanted = {item['path']: item for item in params['files'] + params['secrets']}
    store = None
    if params['last_good']:
        unknown = [path for path in params['last_good']['files'] if path not in wanted]
        if unknown:
            module.fail_json(msg='last_good.files must be paths of files or secrets; not among them: %s'
                                 % ', '.join(unknown))
        try:
            store = Record(params['last_good']['state_dir'], params['last_good']['name'])
        except ValueError as exc:
            module.fail_json(msg='last_good: %s' % exc)
    plan = Plan(module)
    try:
        for item in params['directories']:
            plan.directory(item)
        for item in params['files']:
            plan.file(item, secret=False)
        for item in params['secrets']:
            plan.file(item, secret=True)
        for path in params['absent']:
            plan.absent(path)
    except (OSError, ValueError) as exc:
        module.fail_json(msg='launch files: %s' % exc, changed_files=plan.changed_files)
    result = dict(changed=plan.changed_files != [], changed_files=plan.changed_files,
                  users_to_fix=users_to_fix(params['users']))
    if store is not None:
        result['last_good'] = last_good_state(module, store, wanted)
    if module._diff and plan.diffs:
        result['diff'] = plan.diffs
    module.exit_json(**result)


if __name__ == '__main__':
    main()
