#!/usr/bin/python
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: model_stage
short_description: Stage a model checkpoint on the host's local disk, verified and never half-copied
version_added: 1.0.0
author: llmops.serving maintainers (@llmops)
description:
  - Copies a checkpoint directory (a target model or an EAGLE-3 drafter) from O(source), a path the host can
    read (a shared mount, an NFS or Lustre export), to O(dest_root)/V(<name>-<fingerprint>) on the host's
    local disk, so that a restart reads local files instead of the shared filesystem.
  - The fingerprint is the first 12 hex digits of the SHA-256 over every file's relative path, size and
    SHA-256 (the manifest). Another content is another directory; the launch files then change, so a deploy
    onto a new copy restarts the server and one onto the same copy does not.
  - The manifest (per file size and SHA-256) is computed once at the source and cached (O(manifest_cache)).
    With O(state=manifest) the module only returns it; hand it to the other hosts as O(manifest) so that the
    source is hashed once for the whole fleet (role P(llmops.serving.model_stage#role) does this).
  - Every file is copied into a hidden directory V(.partial-<name>-<fingerprint>) in O(dest_root) (so in the
    same filesystem), through V(<file>.part), hashed while it is read, synced, and given its name only when its
    size and SHA-256 match the manifest. When all files are there the directory is renamed to its staged name
    in one step; a copy killed half-way never has the staged name, and the next run copies only the files
    that were not finished.
  - A file that no longer matches the manifest at the source (a byte changed after the manifest was made) is
    refused by name and nothing of it is staged. Missing files, other sizes and new files are refused before
    anything is written.
  - The free space of O(dest_root) is checked before the first byte is written.
  - A rerun when the copy is complete reads only the sizes of the staged files and reports no change. A staged copy
    changed on the host afterwards (the drafter role fixing a drafter in place) is left as it is, with a warning.
  - O(prune=true) removes the other copies of the same O(name) (and left-over partial directories) that no
    file under O(prune_protect) names (the servers' launch files, the last good records). Nothing is pruned
    unless asked.
  - Long work shows its progress. Where the module copies, or hashes the source for its manifest, the action
    plugin of the same name prints every O(progress_interval) seconds one line per host with the bytes done, the
    rate and the time left, after the host's name, as in V(staged 1.2 GiB of 4.0 GiB (30 %\), 210.0 MiB/s, 14 s left). The work then
    runs in a process of its own on the host, watched by the module, which the action plugin calls again for each
    line. A run that copies and hashes nothing is one module run, with no progress lines.
  - An option given as V(null) is not given (its default applies).
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: Checks the source against the manifest and the free space, reports what would be copied and
      pruned, writes nothing (not even the manifest cache).
  diff_mode:
    support: full
    details: Shows the staged directory and the number of files and bytes before and after.
  idempotent:
    support: full
  action:
    support: full
    description: An action plugin of the same name runs the module and prints its progress.
    details: Progress lines are printed between runs of the module while it copies or hashes.
  async:
    support: full
    description: Supports being used with the C(async) keyword.
    details: With C(async) the module runs as one job and prints no progress.
options:
  name:
    description:
      - Name of the checkpoint; the staged directory is V(<name>-<fingerprint>).
      - Letters, digits, V(.), V(_) and V(-).
    type: str
    required: true
  source:
    description: Directory of the checkpoint as this host sees it (symbolic links are followed, so a Hugging Face
      snapshot directory works).
    type: path
    required: true
  dest_root:
    description: Directory of the staged copies on the host's local disk.
    type: path
    default: /var/lib/llmops/models
  state:
    description:
      - V(present) stages the copy.
      - V(manifest) only reads (or builds and caches) the manifest of O(source) and returns it as RV(manifest).
    type: str
    choices: [present, manifest]
    default: present
  manifest:
    description:
      - The manifest RV(manifest) of an earlier V(state=manifest) run (on the host that holds the source).
      - When not given, the cached manifest of O(source) is read, or built and cached.
    type: dict
  manifest_cache:
    description:
      - File of the cached manifest.
      - Default V(<source>/.llmops-manifest.json) where the source directory is writable, else (also where
        writing there fails) V(<manifest_cache_dir>/<hash of the source path>.json); both are read.
    type: path
  manifest_cache_dir:
    description: Directory of cached manifests for sources that are not writable.
    type: path
    default: /var/lib/llmops/manifests
  refresh_manifest:
    description: Hash the source again and replace the cached manifest (after the checkpoint was updated on purpose).
    type: bool
    default: false
  exclude:
    description: Patterns (fnmatch, matched against the relative path and each of its parts) of files and directories
      that are not part of the checkpoint.
    type: list
    elements: str
    default: ['.git', '.cache', '*.lock']
  bwlimit:
    description: Average copy rate limit of this host in bytes per second; V(0) for none.
    type: int
    default: 0
  reserve_bytes:
    description: Space that must stay free on the file system of O(dest_root) after the copy.
    type: int
    default: 1073741824
  lock_timeout:
    description: Seconds to wait for another staging run of the same checkpoint on this host.
    type: int
    default: 3600
  prune:
    description: Remove the other copies of O(name) in O(dest_root) (staged or partial) that no file under
      O(prune_protect) names.
    type: bool
    default: false
  prune_protect:
    description: Files and directories whose files are searched for the path of a copy before it is pruned; a copy
      named anywhere there is kept and listed in RV(in_use).
    type: list
    elements: path
    default: [/etc/llmops, /var/lib/llmops/last-good]
  progress_interval:
    description:
      - Seconds between two progress lines while the module copies or hashes (the action plugin prints them).
      - V(0) runs the copy in one module run and prints nothing.
    type: float
    default: 10
    version_added: 1.1.0
notes:
  - Limit the hosts that read the source at the same time with C(throttle) on the task, and the rate of each with
    O(bwlimit).
  - The staged files are owned by the user running the module, mode 0644 (directories 0755).
seealso:
  - module: llmops.serving.page_cache_warm
'''

EXAMPLES = r'''
- name: Hash the checkpoint once, where it is
  llmops.serving.model_stage:
    name: kimi-k2.5-int4
    source: /shared/kimi-k2.5-int4
    state: manifest
  register: kimi_manifest
  run_once: true

- name: Stage it on every host, at most 4 reading the share at once, 500 MB/s each
  llmops.serving.model_stage:
    name: kimi-k2.5-int4
    source: /shared/kimi-k2.5-int4
    manifest: "{{ kimi_manifest.manifest }}"
    bwlimit: 500000000
  throttle: 4
  register: kimi_staged

- name: Serve the staged copy
  ansible.builtin.set_fact:
    sglang_server_model_path: "{{ kimi_staged.path }}"

- name: Stage and remove older copies no server and no good record uses
  llmops.serving.model_stage:
    name: eagle3-drafter
    source: /shared/drafters/kimi-eagle3
    prune: true
'''

RETURN = r'''
name:
  description: The checkpoint's name, O(name).
  returned: always
  type: str
  sample: kimi-k2.5-int4
  version_added: 1.1.0
path:
  description: The staged directory (also in check mode, where it may not exist yet).
  returned: state=present
  type: str
  sample: /var/lib/llmops/models/kimi-k2.5-int4-3f9a0c1b22de
fingerprint:
  description: The checkpoint's fingerprint (from its manifest).
  returned: always
  type: str
  sample: 3f9a0c1b22de
state_before:
  description: V(absent), V(partial) (an interrupted copy is finished), V(complete), V(modified) (complete once,
    changed on the host since, for example a drafter fixed in place by P(llmops.serving.drafter#role); left alone,
    with a warning, see RV(modified)).
  returned: state=present
  type: str
  sample: absent
files:
  description: Number of files of the checkpoint.
  returned: always
  type: int
  sample: 64
bytes:
  description: Size of the checkpoint in bytes.
  returned: always
  type: int
  sample: 595000000000
files_copied:
  description: Files copied by this run (would be copied, in check mode).
  returned: state=present
  type: int
  sample: 64
bytes_copied:
  description: Bytes copied by this run (would be copied, in check mode).
  returned: state=present
  type: int
  sample: 595000000000
seconds:
  description: Time spent copying.
  returned: state=present
  type: float
  sample: 812.4
bytes_per_second:
  description: Copy throughput of this run; null when nothing was copied.
  returned: state=present
  type: int
  sample: 732000000
free_bytes:
  description: Free bytes on the file system of O(dest_root) before the copy.
  returned: state=present
  type: int
  sample: 1800000000000
manifest:
  description: The manifest (V(format), V(source), V(fingerprint), V(bytes), V(files) with V(path), V(size),
    V(mtime_ns), V(sha256)).
  returned: state=manifest
  type: dict
manifest_built:
  description: Whether the source was hashed by this run (no cached manifest, or O(refresh_manifest)).
  returned: when the manifest was not given
  type: bool
manifest_cache:
  description: File of the cached manifest.
  returned: when the manifest was not given
  type: str
modified:
  description: Files of the staged copy that differ in size from the manifest (changed on the host after staging).
  returned: when state_before is V(modified)
  type: list
  elements: str
  sample: ['config.json: 45 bytes, 39 expected']
pruned:
  description: Copies removed (would be removed, in check mode).
  returned: state=present
  type: list
  elements: str
in_use:
  description: Other copies kept because a launch file or a good record names them, with those files.
  returned: state=present
  type: dict
summary:
  description: What was copied (would be, in check mode), how fast, and what was pruned or kept, in one line.
  returned: state=present
  type: str
  sample: "kimi-k2.5-int4 -> /var/lib/llmops/models/kimi-k2.5-int4-3f9a0c1b22de: 64 of 64 files copied (595000000000 bytes, 812.4 s, 732000000 B/s)"
'''

import os
import re

from ansible_collections.llmops.serving.plugins.module_utils import _progress
from ansible_collections.llmops.serving.plugins.module_utils import _stage

ARGUMENT_SPEC = dict(
    name=dict(type='str', required=True),
    source=dict(type='path', required=True),
    dest_root=dict(type='path', default='/var/lib/llmops/models'),
    state=dict(type='str', choices=['present', 'manifest'], default='present'),
    manifest=dict(type='dict'),
    manifest_cache=dict(type='path'),
    manifest_cache_dir=dict(type='path', default='/var/lib/llmops/manifests'),
    refresh_manifest=dict(type='bool', default=False),
    exclude=dict(type='list', elements='str', default=['.git', '.cache', '*.lock']),
    bwlimit=dict(type='int', default=0),
    reserve_bytes=dict(type='int', default=1073741824),
    lock_timeout=dict(type='int', default=3600),
    prune=dict(type='bool', default=False),
    prune_protect=dict(type='list', elements='path', default=['/etc/llmops', '/var/lib/llmops/last-good']),
    progress_interval=dict(type='float', default=10.0),
)


def get_manifest(module, result, job):
    params = module.params
    if params['manifest'] is not None and params['state'] == 'present':
        return _stage.validate_manifest(params['manifest'])
    if not os.path.isdir(params['source']):
        raise _stage.StageError('the source %s is not a directory on this host' % params['source'])
    cache = params['manifest_cache'] or _stage.default_cache_path(params['source'], params['manifest_cache_dir'])
    fallback = None
    if not params['manifest_cache']:
        fallback = _stage.cache_dir_path(params['source'], params['manifest_cache_dir'])
    manifest, built, cached_in = _stage.load_or_build(params['source'], cache, refresh=params['refresh_manifest'],
                                                      exclude=params['exclude'], write=not module.check_mode,
                                                      fallback_path=fallback,
                                                      before=lambda total: job.background('hashed', total),
                                                      progress=job)
    result['manifest_built'] = built
    result['manifest_cache'] = cached_in or cache
    return manifest


def before_copy(module, job, needed):
    """Copy in a worker that the action plugin watches, where there is something to copy."""
    if needed > 0 and not module.check_mode:
        job.background('staged', needed)


def main():
    module = _progress.ProgressModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    job = _progress.Job(module, module.job_request)
    if job.polling:
        job.answer_poll()
    params = module.params
    if not re.match(r'^[A-Za-z0-9._-]+$', params['name']):
        module.fail_json(msg='name %r: use letters, digits, ".", "_" and "-"' % params['name'])
    if params['bwlimit'] < 0 or params['reserve_bytes'] < 0:
        module.fail_json(msg='bwlimit and reserve_bytes must be 0 or more')
    result = dict(changed=False, name=params['name'])
    try:
        manifest = get_manifest(module, result, job)
        result.update(fingerprint=manifest['fingerprint'], files=len(manifest['files']), bytes=manifest['bytes'])
        if params['state'] == 'manifest':
            result['manifest'] = manifest
            result['changed'] = bool(result.get('manifest_built')) and not module.check_mode
            job.exit(**result)
        staged = _stage.stage(params['source'], params['dest_root'], params['name'], manifest,
                              bwlimit=params['bwlimit'], reserve_bytes=params['reserve_bytes'],
                              check_mode=module.check_mode, lock_timeout=params['lock_timeout'],
                              before=lambda needed: before_copy(module, job, needed), meter=job)
        result.update(staged)
        if staged.get('modified'):
            module.warn('%s was changed on this host after it was staged (left as it is): %s'
                        % (staged['path'], '; '.join(staged['modified'][:10])))
        result['pruned'] = []
        result['in_use'] = {}
        if params['prune']:
            removable, in_use = _stage.prune_candidates(params['dest_root'], params['name'], [staged['path']],
                                                        params['prune_protect'])
            result['in_use'] = in_use
            for path in removable:
                if not module.check_mode:
                    _stage.remove_tree(path)
                result['pruned'].append(path)
            if removable:
                result['changed'] = True
    except _stage.StageError as exc:
        job.fail(str(exc), **result)
    except OSError as exc:
        job.fail('%s: %s' % (getattr(exc, 'filename', '') or params['dest_root'], exc.strerror or exc), **result)
    if module._diff:
        result['diff'] = dict(
            before=dict(path=result['path'] if result['state_before'] == 'complete' else '',
                        files=result['files'] if result['state_before'] == 'complete' else 0,
                        pruned=[]),
            after=dict(path=result['path'], files=result['files'], pruned=result['pruned']),
        )
    result['summary'] = _stage.stage_summary(params['name'], result)
    job.exit(**result)


if __name__ == '__main__':
    main()
