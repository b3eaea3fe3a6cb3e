#!/usr/bin/python
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: page_cache_warm
short_description: Read a model's weights and the engine's files into the page cache before a restart
version_added: 1.0.0
author: llmops.serving maintainers (@llmops)
description:
  - Reads the files under O(paths) (a staged checkpoint, the drafter, the engine's virtualenv) into the page
    cache, so that the server's next start loads its weights and imports its libraries from memory.
  - Each file is first announced with C(posix_fadvise(WILLNEED)) and then, with O(method=read), read
    sequentially to its end, so that the task returns when the files are cached; O(method=willneed) returns at
    once and lets the kernel read in the background.
  - The bytes read are bounded by O(memory_fraction) of C(MemAvailable) in C(/proc/meminfo) at the start (and by
    O(max_bytes) where given); files that would go over the bound are skipped and counted in RV(skipped_bytes),
    so warming never pushes the running server's memory out.
  - Run it while the server is being drained, before it stops, so that the reading overlaps the drain instead of
    adding to the restart. Page cache is not changed state, so the task never reports a change.
  - Long work shows its progress. While the module reads (O(method=read)), the action plugin of the same name
    prints every O(progress_interval) seconds one line per host with the bytes read, the rate and the time left.
    The reading then runs in a process of its own on the host, watched by the module, which the action plugin
    calls again for each line. With C(async) (the C(model_stage) role's C(warm_begin)) the module runs as one job
    and prints nothing.
  - An option given as V(null) is not given (its default applies).
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.info_module
attributes:
  action:
    support: full
    description: An action plugin of the same name runs the module and prints its progress.
    details: Progress lines are printed between runs of the module while it reads.
  async:
    support: full
    description: Supports being used with the C(async) keyword.
    details: With C(async) the module runs as one job and prints no progress.
options:
  paths:
    description:
      - Files or directories to read; directories are walked (symbolic links followed), each file read once.
      - Required unless O(job) is given.
    type: list
    elements: path
  method:
    description: V(read) reads every byte (returns when cached); V(willneed) only asks the kernel to read ahead.
    type: str
    choices: [read, willneed]
    default: read
  memory_fraction:
    description: Part of C(MemAvailable) that may be filled (0 to 1).
    type: float
    default: 0.8
  max_bytes:
    description: Upper bound of the bytes read, on top of O(memory_fraction); V(0) for none.
    type: int
    default: 0
  exclude:
    description: Patterns (fnmatch on the relative path and each of its parts) of files not to read.
    type: list
    elements: str
    default: ['.git', '__pycache__', '*.pyc']
  progress_interval:
    description:
      - Seconds between two progress lines while the module reads (the action plugin prints them).
      - V(0) reads in one module run and prints nothing.
    type: float
    default: 10
    version_added: 1.1.0
  wait:
    description:
      - V(false) starts the reading in a process of its own on the host and returns at once, with RV(job); a later
        task waits for it with O(job) (the C(model_stage) role's C(warm_begin) and C(warm_end), around the drain).
    type: bool
    default: true
    version_added: 1.1.0
  job:
    description:
      - RV(job) of an earlier run with O(wait=false) on this host; waits for that reading, printing its progress,
        and returns its result. Excludes O(paths).
    type: str
    version_added: 1.1.0
  timeout:
    description:
      - With O(job), seconds to wait; the reading is then stopped and the task fails. No limit when omitted.
    type: float
    version_added: 1.1.0
seealso:
  - module: llmops.serving.model_stage
'''

EXAMPLES = r'''
- name: Start reading the model while the server drains
  llmops.serving.page_cache_warm:
    paths: [/var/lib/llmops/models/kimi-k2.5-int4-3f9a0c1b22de]
    wait: false
  register: warm_job

- name: Wait for it before the server stops, printing its progress
  llmops.serving.page_cache_warm:
    job: "{{ warm_job.job }}"
    timeout: 1800
  register: warm_done

- name: Warm the staged model and the engine while the server drains
  llmops.serving.page_cache_warm:
    paths:
      - /var/lib/llmops/models/kimi-k2.5-int4-3f9a0c1b22de
      - /var/lib/llmops/models/kimi-eagle3-0be2d4a1c9f0
      - /opt/llmops/sglang-venv
  register: warm

- name: Report
  ansible.builtin.debug:
    msg: "{{ warm.bytes }} bytes in {{ warm.seconds }} s"
'''

RETURN = r'''
files:
  description: Files read (or announced with V(willneed)).
  returned: when the reading is done (not with O(wait=false))
  type: int
  sample: 66
bytes:
  description: Bytes read (or announced).
  returned: when the reading is done (not with O(wait=false))
  type: int
  sample: 16060000000
seconds:
  description: Time it took.
  returned: when the reading is done (not with O(wait=false))
  type: float
  sample: 9.8
bytes_per_second:
  description: Throughput of the reading; null when nothing was read.
  returned: when the reading is done (not with O(wait=false))
  type: int
  sample: 1630000000
budget_bytes:
  description: The bound that applied (from C(MemAvailable), O(memory_fraction), O(max_bytes)).
  returned: when the reading is done (not with O(wait=false))
  type: int
  sample: 1200000000000
mem_available:
  description: C(MemAvailable) at the start, in bytes.
  returned: when the reading is done (not with O(wait=false))
  type: int
  sample: 1500000000000
skipped_files:
  description: Files left out because they did not fit in the bound.
  returned: when the reading is done (not with O(wait=false))
  type: int
  sample: 0
skipped_bytes:
  description: Their size.
  returned: when the reading is done (not with O(wait=false))
  type: int
  sample: 0
job:
  description: The reading that goes on in the background, for O(job) of a later task (its status file on the host).
  returned: when O(wait=false), not in check mode
  type: str
  sample: /tmp/.llmops-progress-k2x8w1.json
  version_added: 1.1.0
summary:
  description: What was read, how long it took and the bound, in one line.
  returned: when the reading is done (not with O(wait=false))
  type: str
  sample: "page cache warm-up: 21280000000 bytes in 64 files, 20.9 s (bound 1200000000000 bytes, skipped 0 bytes)"
'''

from ansible_collections.llmops.serving.plugins.module_utils import _progress
from ansible_collections.llmops.serving.plugins.module_utils import _stage

ARGUMENT_SPEC = dict(
    paths=dict(type='list', elements='path'),
    method=dict(type='str', choices=['read', 'willneed'], default='read'),
    memory_fraction=dict(type='float', default=0.8),
    max_bytes=dict(type='int', default=0),
    exclude=dict(type='list', elements='str', default=['.git', '__pycache__', '*.pyc']),
    progress_interval=dict(type='float', default=10.0),
    wait=dict(type='bool', default=True),
    job=dict(type='str'),
    timeout=dict(type='float'),
)


def warm_in_background(module, job, total):
    """Read in a worker that the action plugin watches, where there is something to read, and always with
    wait=false (a later task waits for it with job)."""
    if not module.params['wait']:
        job.background('read into the page cache', total, detach=True)
    elif total and module.params['method'] == 'read':
        job.background('read into the page cache', total)


def main():
    module = _progress.ProgressModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                                      required_one_of=[('paths', 'job')], mutually_exclusive=[('paths', 'job')])
    job = _progress.Job(module, module.job_request)
    if job.polling:
        job.answer_poll()
    params = module.params
    if params['job']:
        module.fail_json(msg='job %s: waiting for a warm-up needs the action plugin of llmops.serving.page_cache_warm'
                         % params['job'])
    if not 0 < params['memory_fraction'] <= 1:
        module.fail_json(msg='memory_fraction must be above 0 and at most 1, not %s' % params['memory_fraction'])
    try:
        available = _stage.mem_available()
        budget = int(available * params['memory_fraction'])
        if params['max_bytes'] > 0:
            budget = min(budget, params['max_bytes'])
        if module.check_mode:
            result = dict(files=0, bytes=0, seconds=0.0, skipped_files=0, skipped_bytes=0)
            _stage.warm_files(params['paths'], params['exclude'])
        else:
            result = _stage.warm(params['paths'], budget, method=params['method'], exclude=params['exclude'],
                                 before=lambda total: warm_in_background(module, job, total),
                                 progress=job)
    except _stage.StageError as exc:
        job.fail(str(exc))
    except OSError as exc:
        job.fail('%s: %s' % (getattr(exc, 'filename', '') or 'page cache', exc.strerror or exc))
    if result['skipped_files']:
        module.warn('%d files (%d bytes) were not read: they did not fit in %d bytes (%s of MemAvailable %d)'
                    % (result['skipped_files'], result['skipped_bytes'], budget, params['memory_fraction'], available))
    result['bytes_per_second'] = int(result['bytes'] / result['seconds']) if result['seconds'] > 0 else None
    result.update(budget_bytes=budget, mem_available=available)
    job.exit(changed=False, summary=_stage.warm_summary(result), **result)


if __name__ == '__main__':
    main()
