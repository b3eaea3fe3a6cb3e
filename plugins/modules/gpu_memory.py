#!/usr/bin/python
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_memory
short_description: Check that GPUs are present, free and balanced; stop only the processes you name
version_added: 1.0.0
description:
  - Lists the GPUs and the compute processes on them with C(nvidia-smi) and checks every
    selected GPU against O(max_used_mib), O(min_free_mib) and O(balance); with
    O(expected_count), the number of GPUs must match exactly.
  - A process on a selected GPU whose full command line (from C(/proc/<pid>/cmdline),
    arguments joined by spaces) matches one of the O(reclaim) regular expressions is
    stopped - O(reclaim_signal), then C(SIGKILL) after O(grace_period) - and the module
    waits for its memory to be released. Processes that match no pattern are never
    signalled. With the default O(reclaim=[]) nothing is ever signalled.
  - Processes the driver lists but that are not visible in this PID namespace (for
    example those of another container) are reported and never signalled. Right before
    each signal the process identity (PID, start time and command line) is checked again,
    so a PID reused by an unrelated process is not signalled.
  - Memory held by processes that go away by themselves (such as SGLang workers that
    outlive a killed launcher for a few seconds) is waited for, up to O(wait_timeout).
  - On failure the message names every blocking process with its PID, GPU, memory,
    command line and the reason it was not reclaimed.
  - To list the GPUs and their processes without checking anything, use M(llmops.serving.gpu_info).
  - An option given as V(null) is not given (its default applies).
author:
  - llmops.serving contributors (@llmops)
requirements:
  - C(nvidia-smi) (NVIDIA driver utilities) on the host
attributes:
  check_mode:
    support: full
    description:
      - Reports in RV(would_reclaim) which processes would be stopped and signals none. The
        checks are evaluated as if their memory were already released.
  diff_mode:
    support: none
    description: No configuration is changed, so there is nothing to diff.
  idempotent:
    support: full
    description:
      - Changes something only while a process matching O(reclaim) holds a selected GPU;
        once such processes are gone, a second run reports no change.
options:
  gpus:
    description:
      - The GPUs to check, by index (C(0)) or UUID (C(GPU-16b0d5eb-...)); V(all) checks
        every GPU the driver lists. Processes on other GPUs are neither checked nor stopped.
    type: list
    elements: str
    default: [all]
  expected_count:
    description:
      - Fail unless the driver lists exactly this many GPUs (all GPUs, regardless of O(gpus)).
      - Not checked when omitted.
    type: int
  max_used_mib:
    description:
      - Fail when a selected GPU has more memory in use than this (MiB). An idle GPU shows
        0 MiB; one idle process with a CUDA context holds about 500 MiB, a real workload
        gigabytes. The default allows one such context (a monitoring agent, for example)
        and nothing bigger.
      - V(-1) disables the check.
    type: int
    default: 1024
  min_free_mib:
    description: Fail when a selected GPU has less free memory than this (MiB). Not checked when omitted.
    type: int
  balance:
    description:
      - Fail when a selected GPU has less free memory than this fraction of the free
        memory of the best selected GPU. SGLang refuses to start with tensor parallelism
        when a GPU has under 90 % of the free memory of the local one (C(The memory
        capacity is unbalanced)).
      - V(0) disables the check.
    type: float
    default: 0.9
  reclaim:
    description:
      - Regular expressions (Python C(re.search)) matched against the full command line
        of each process on a selected GPU. A process that matches is stopped.
      - Example patterns are C(^sglang::) (orphaned SGLang workers) and
        C(python3? .*train\.py).
      - A matching process that keeps coming back under new PIDs (restarted by a
        supervisor) is stopped in at most three rounds, then reported as blocking.
    type: list
    elements: str
    default: []
  reclaim_signal:
    description: First signal sent to a matching process; C(SIGKILL) follows after O(grace_period).
    type: str
    choices: [TERM, INT, HUP, QUIT, USR1, USR2]
    default: TERM
  grace_period:
    description: Seconds a process gets to exit after O(reclaim_signal) before it is sent C(SIGKILL).
    type: float
    default: 10
  wait_timeout:
    description:
      - Seconds to wait for the checks to pass, polling every O(poll_interval) - for
        transient holders to go away, and, counted again from the end of each reclaim,
        for the driver to release the memory of stopped processes. Also how long a
        process may take to die after C(SIGKILL).
      - V(0) checks once.
    type: float
    default: 30
  poll_interval:
    description: Seconds between two C(nvidia-smi) queries while waiting.
    type: float
    default: 0.5
  nvidia_smi_path:
    description: The C(nvidia-smi) executable, a name looked up in E(PATH) or a path.
    type: str
    default: nvidia-smi
  required_gpus:
    description:
      - GPUs (indices or UUIDs) that the host must list, whatever O(gpus) selects; the module fails, naming the
        missing ones and O(required_by), before any other check. RV(listing) says what was found.
      - Not checked when omitted.
    type: list
    elements: str
    version_added: 1.1.0
  required_by:
    description: Who needs O(required_gpus), as the failure message names it.
    type: str
    default: the server
    version_added: 1.1.0
  host_name:
    description: The host's name as the failure message of O(required_gpus) names it (the inventory name); the
      host's node name when omitted.
    type: str
    version_added: 1.1.0
notes:
  - Uses C(nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free
    --format=csv,noheader,nounits) and C(--query-compute-apps=pid,process_name,used_memory,gpu_uuid).
    Fields the driver cannot fill (C([N/A]), C([No data])) are returned as V(null).
  - Memory the driver reports as used but no listed process holds (for example processes
    of other containers on drivers that hide them) fails the checks like any other use.
seealso:
  - name: SGLang server arguments
    description: C(--mem-fraction-static) and tensor parallelism, which need free and balanced GPUs.
    link: https://docs.sglang.ai/advanced_features/server_arguments.html
"""

EXAMPLES = r"""
- name: Require 8 idle GPUs, stopping leftovers of earlier SGLang servers and trainings
  llmops.serving.gpu_memory:
    expected_count: 8
    reclaim:
      - '^sglang::'
      - 'torchrun .*train\.py'
    grace_period: 15
    wait_timeout: 60

- name: Only report (never signal anything) about GPUs 0 and 1
  llmops.serving.gpu_memory:
    gpus: [0, 1]
    max_used_mib: -1
    min_free_mib: 100000
  register: gpu_state

- name: Show what would be stopped
  llmops.serving.gpu_memory:
    reclaim: ['^sglang::']
  check_mode: true
  register: would
"""

RETURN = r"""
ready:
  description: Whether every selected GPU passed the checks.
  returned: always
  type: bool
  sample: true
gpus:
  description: Every GPU the driver lists, from the last query.
  returned: when nvidia-smi answered
  type: list
  elements: dict
  contains:
    index:
      description: GPU index.
      type: int
      returned: always
      sample: 0
    uuid:
      description: GPU UUID.
      type: str
      returned: always
      sample: GPU-16b0d5eb-b6eb-afd8-95b9-178a9196b640
    name:
      description: Product name.
      type: str
      returned: always
      sample: NVIDIA H200
    total_mib:
      description: Total memory (MiB).
      type: int
      returned: always
      sample: 143771
    used_mib:
      description: Used memory (MiB); null when the driver printed C([N/A]).
      type: int
      returned: always
      sample: 0
    free_mib:
      description: Free memory (MiB); null when the driver printed C([N/A]).
      type: int
      returned: always
      sample: 143156
    selected:
      description: Whether O(gpus) selects this GPU.
      type: bool
      returned: always
      sample: true
    problems:
      description: Why this GPU fails the checks; empty when it passes.
      type: list
      elements: str
      returned: always
      sample: []
processes:
  description: Compute processes on the selected GPUs, from the last query (one entry per process and GPU).
  returned: when nvidia-smi answered
  type: list
  elements: dict
  contains:
    pid:
      description: PID as the driver reports it.
      type: int
      returned: always
      sample: 444
    gpu:
      description: GPU index; null when the driver names an unknown GPU UUID.
      type: int
      returned: always
      sample: 0
    used_mib:
      description: Memory the process holds on this GPU (MiB); null when unknown.
      type: int
      returned: always
      sample: 41570
    name:
      description: Process name as nvidia-smi prints it; null for C([No data]).
      type: str
      returned: always
      sample: python3
    cmdline:
      description: Full command line from C(/proc); null when not visible.
      type: str
      returned: always
      sample: python3 train.py
    user:
      description: Owner of the process; null when not visible.
      type: str
      returned: always
      sample: root
    visible:
      description: Whether the PID exists in this PID namespace.
      type: bool
      returned: always
      sample: true
    matched:
      description: Whether the command line matches a O(reclaim) pattern.
      type: bool
      returned: always
      sample: false
    pattern:
      description: The first matching O(reclaim) pattern.
      type: str
      returned: always
      sample: null
reclaimed:
  description: Processes this run signalled (or tried to).
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID.
      type: int
      returned: always
      sample: 444
    gpus:
      description: GPU indices the process held.
      type: list
      elements: int
      returned: always
      sample: [0]
    used_mib:
      description: Memory it held over those GPUs (MiB).
      type: int
      returned: always
      sample: 41570
    cmdline:
      description: Full command line.
      type: str
      returned: always
      sample: python3 train.py
    signals:
      description: Signals actually sent, in order.
      type: list
      elements: str
      returned: always
      sample: [TERM]
    exited:
      description: Whether the process is gone.
      type: bool
      returned: always
      sample: true
    outcome:
      description: C(exited), C(gone before signal), C(pid reused), C(permission denied) or C(survived KILL).
      type: str
      returned: always
      sample: exited
would_reclaim:
  description: In check mode, the processes that would be stopped (same keys as RV(processes)).
  returned: always
  type: list
  elements: dict
blocking:
  description:
    - Processes on GPUs that fail the checks, each with C(reason) (C(not matched by any reclaim
      pattern), C(not visible in this PID namespace), C(survived KILL), ...). Empty when ready.
  returned: always
  type: list
  elements: dict
summary:
  description:
    - A table of the selected GPUs (used, free, state, processes), one line per entry, then
      one line per process stopped (or, in check mode, that would be stopped).
  returned: when nvidia-smi answered
  type: list
  elements: str
  sample:
    - 'GPU  used MiB  free MiB  state    processes'
    - '  0     41579    101578  BLOCKED  444 root 41570 MiB "python3 train.py" (not matched by any reclaim pattern)'
listing:
  description:
    - Whether the host lists every GPU of O(required_gpus) (C(ok)), those it misses (C(missing)), the number of
      GPUs it lists (C(count)) and the message, the refusal or what was found (C(msg)).
  returned: when O(required_gpus) is given and nvidia-smi answered
  type: dict
  sample: {ok: true, missing: [], count: 8, msg: '4 GPU(s) 0, 1, 2, 3 of 8 on gpu-node-1'}
  version_added: 1.1.0
error:
  description:
    - Why the GPUs could not be checked at all - C(missing) (no nvidia-smi), C(no_devices),
      C(driver) (NVML/driver error), C(failed), C(timeout), C(unparsable) (nvidia-smi output),
      C(count) (not O(expected_count) GPUs), C(selection) (O(gpus) names an unknown GPU), C(listing) (the host
      does not list every GPU of O(required_gpus)).
  returned: on those failures
  type: str
  sample: no_devices
elapsed:
  description: Seconds the module ran.
  returned: always
  type: float
  sample: 0.05
"""

import os
import time

from ansible_collections.llmops.serving.plugins.module_utils._null_unset import NullIsUnsetModule

from ansible_collections.llmops.serving.plugins.module_utils import _nvidia_smi as smi
from ansible_collections.llmops.serving.plugins.module_utils import _procs as procs

# A matching process that keeps coming back (restarted by a supervisor) is not chased forever.
MAX_RECLAIM_ROUNDS = 3

ARGUMENT_SPEC = dict(
    gpus=dict(type='list', elements='str', default=['all']),
    expected_count=dict(type='int'),
    max_used_mib=dict(type='int', default=1024),
    min_free_mib=dict(type='int'),
    balance=dict(type='float', default=0.9),
    reclaim=dict(type='list', elements='str', default=[]),
    reclaim_signal=dict(type='str', choices=list(procs.SIGNALS), default='TERM'),
    grace_period=dict(type='float', default=10.0),
    wait_timeout=dict(type='float', default=30.0),
    poll_interval=dict(type='float', default=0.5),
    nvidia_smi_path=dict(type='str', default='nvidia-smi'),
    required_gpus=dict(type='list', elements='str'),
    required_by=dict(type='str', default='the server'),
    host_name=dict(type='str'),
)


class GpuMemoryError(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


class GpuMemory:
    """One run: query, reclaim, wait, judge. Clock, sleep and /proc root are injectable for tests."""

    def __init__(self, params, check_mode, runner=None, proc='/proc', clock=time.monotonic, sleep=time.sleep):
        self.params = params
        self.check_mode = check_mode
        self.runner = runner
        self.proc = proc
        self.clock = clock
        self.sleep = sleep
        self.patterns = procs.compile_patterns(params['reclaim'])
        self.max_used = params['max_used_mib'] if params['max_used_mib'] is not None and params['max_used_mib'] >= 0 else None
        self.reclaimed = []
        self.would_reclaim = []
        self.handled = {}  # (pid, starttime) -> entry in self.reclaimed
        self.rounds = 0
        self.listing = None
        self.host = params.get('host_name') or os.uname()[1]

    def describe(self, app, infos):
        pid = app['pid']
        if pid not in infos:
            infos[pid] = procs.read_process(pid, self.proc) if pid is not None else None
        info = infos[pid]
        pattern = procs.matching_pattern(info.command, self.patterns) if info else None
        return dict(smi.process_row(app, info), matched=pattern is not None, pattern=pattern, _info=info)

    def query(self):
        gpus, apps = smi.snapshot(self.params['nvidia_smi_path'], self.runner)
        if self.params.get('required_gpus') is not None:
            self.listing = smi.listing_check(gpus, self.params['required_gpus'], self.params['required_by'], self.host)
            if not self.listing['ok']:
                raise GpuMemoryError('listing', self.listing['msg'])
        count = self.params['expected_count']
        if count is not None and len(gpus) != count:
            raise GpuMemoryError('count', 'expected %d GPUs, nvidia-smi lists %d (indices %s)'
                                 % (count, len(gpus), ', '.join(str(g['index']) for g in gpus)))
        selected, on_them = smi.selection(gpus, apps, self.params['gpus'])
        infos = {}
        processes = [self.describe(a, infos) for a in on_them]
        return gpus, selected, processes

    def targets(self, processes):
        """Matching, visible processes not yet handled in this run: one ProcessInfo per PID."""
        found = {}
        for p in processes:
            info = p['_info']
            if p['matched'] and info and not info.exited and (info.pid, info.starttime) not in self.handled:
                found.setdefault(info.pid, (info, []))[1].append(p)
        return list(found.values())

    def reclaim(self, targets):
        results = procs.stop_processes(
            [info for info, dummy in targets], self.params['reclaim_signal'], self.params['grace_period'],
            kill_timeout=max(self.params['wait_timeout'], 1.0), proc=self.proc, clock=self.clock, sleep=self.sleep)
        for (info, entries), result in zip(targets, results):
            result.update(gpus=sorted(set(e['gpu'] for e in entries if e['gpu'] is not None)),
                          used_mib=sum(e['used_mib'] or 0 for e in entries), cmdline=info.command)
            self.reclaimed.append(result)
            self.handled[(info.pid, info.starttime)] = result

    def problems(self, selected, processes):
        gpus = selected
        if self.check_mode and self.would_reclaim:
            # Judge as if the processes that would be stopped had released their memory.
            released = {}
            for p in processes:
                if p['matched'] and p['visible'] and p['used_mib']:
                    released[p['gpu']] = released.get(p['gpu'], 0) + p['used_mib']
            gpus = [dict(g, used_mib=None if g['used_mib'] is None else g['used_mib'] - released.get(g['index'], 0),
                         free_mib=None if g['free_mib'] is None else g['free_mib'] + released.get(g['index'], 0))
                    for g in selected]
        return smi.evaluate(gpus, self.max_used, self.params['min_free_mib'], self.params['balance'])

    def reason(self, p):
        if not p['visible']:
            return 'not visible in this PID namespace (another container?); never signalled'
        info = p['_info']
        handled = self.handled.get((info.pid, info.starttime))
        if handled:
            if handled['exited']:
                return 'exited after %s; the driver has not released its memory yet' % '+'.join(handled['signals'] or ['no signal'])
            if handled['outcome'] == 'permission denied':
                return 'permission denied (run the task as root: become: true)'
            return handled['outcome']
        if info.exited:
            return 'exited (zombie); the driver has not released its memory yet'
        if p['matched'] and self.rounds >= MAX_RECLAIM_ROUNDS:
            return ('matched, but matching processes reappeared after %d reclaim rounds (restarted by a '
                    'supervisor? stop that first)' % MAX_RECLAIM_ROUNDS)
        if p['matched']:
            return 'would be reclaimed (check mode)' if self.check_mode else 'matched'
        if not self.patterns:
            return 'not matched: reclaim is empty'
        return 'not matched by any reclaim pattern'

    def run(self):
        start = self.clock()
        deadline = start + self.params['wait_timeout']
        while True:
            gpus, selected, processes = self.query()
            targets = self.targets(processes)
            if targets and self.check_mode:
                for info, entries in targets:
                    self.would_reclaim.extend(self.public(p) for p in entries)
                    self.handled[(info.pid, info.starttime)] = None
            elif targets and self.rounds < MAX_RECLAIM_ROUNDS:
                self.rounds += 1
                self.reclaim(targets)
                deadline = max(deadline, self.clock() + self.params['wait_timeout'])
                continue
            problems = self.problems(selected, processes)
            ready = not any(problems.values())
            if ready or self.clock() >= deadline:
                break
            self.sleep(min(self.params['poll_interval'], max(deadline - self.clock(), 0)))
        return self.result(gpus, selected, processes, problems, ready, self.clock() - start)

    @staticmethod
    def public(p):
        return dict((k, v) for k, v in p.items() if not k.startswith('_'))

    def result(self, gpus, selected, processes, problems, ready, elapsed):
        wanted = set(g['index'] for g in selected)
        bad = set(i for i, found in problems.items() if found)
        blocking = [dict(self.public(p), reason=self.reason(p)) for p in processes
                    if p['gpu'] in bad or (p['gpu'] is None and bad)]
        return dict(
            ready=ready,
            changed=any(r['signals'] for r in self.reclaimed) or (self.check_mode and bool(self.would_reclaim)),
            gpus=[dict(g, selected=g['index'] in wanted, problems=problems.get(g['index'], [])) for g in gpus],
            processes=[self.public(p) for p in processes],
            reclaimed=self.reclaimed,
            would_reclaim=self.would_reclaim,
            blocking=[] if ready else blocking,
            summary=summary_table(selected, problems, processes, blocking) + [
                'stopped pid %d (%s, %s) "%s"' % (r['pid'], '+'.join(r['signals']) or 'no signal', r['outcome'], r['cmdline'])
                for r in self.reclaimed] + [
                'would stop pid %d on GPU %s (check mode) "%s"' % (w['pid'], w['gpu'], w['cmdline']) for w in self.would_reclaim],
            elapsed=round(elapsed, 2),
            msg=None if ready else failure_message(selected, problems, blocking, elapsed),
            **({} if self.listing is None else {'listing': self.listing})
        )


def describe_process(p):
    text = p['cmdline'] or p['name'] or '[No data]'
    mib = '?' if p['used_mib'] is None else p['used_mib']
    return '%s %s %s MiB "%s"' % (p['pid'], p['user'] or '?', mib, text)


def summary_table(selected, problems, processes, blocking):
    reasons = dict((b['pid'], b['reason']) for b in blocking)
    lines = ['GPU  used MiB  free MiB  state    processes']
    for g in selected:
        procs_here = ['%s (%s)' % (describe_process(p), reasons[p['pid']]) if p['pid'] in reasons else describe_process(p)
                      for p in processes if p['gpu'] == g['index']]
        lines.append('%3d  %8s  %8s  %-7s  %s' % (
            g['index'], '?' if g['used_mib'] is None else g['used_mib'], '?' if g['free_mib'] is None else g['free_mib'],
            'BLOCKED' if problems.get(g['index']) else 'ok', '; '.join(procs_here) or '-'))
    return lines


def failure_message(selected, problems, blocking, elapsed):
    parts = []
    for g in selected:
        if not problems.get(g['index']):
            continue
        holders = [b for b in blocking if b['gpu'] == g['index']]
        # who holds the GPU comes before the figures: a summary that cuts the line keeps it
        who = '; '.join('pid %s (user %s, %s MiB): "%s", %s' % (
            b['pid'], b['user'] or '?', '?' if b['used_mib'] is None else b['used_mib'],
            b['cmdline'] or b['name'] or '[No data]', b['reason']) for b in holders) or 'no process listed by the driver'
        parts.append('GPU %d held by %s; %s.' % (g['index'], who, ', '.join(problems[g['index']])))
    unattributed = [b for b in blocking if b['gpu'] is None]
    if unattributed:
        parts.append('on an unknown GPU: ' + '; '.join('pid %s: %s' % (b['pid'], b['reason']) for b in unattributed))
    return 'GPU memory not ready after %.1f s on %d of %d selected GPUs. %s' % (
        elapsed, len([1 for found in problems.values() if found]), len(selected), ' '.join(parts))


def main():
    module = NullIsUnsetModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    for key in ('grace_period', 'wait_timeout'):
        if p[key] < 0:
            module.fail_json(msg='%s must be >= 0, got %s' % (key, p[key]), ready=False)
    if p['poll_interval'] <= 0:
        module.fail_json(msg='poll_interval must be > 0, got %s' % p['poll_interval'], ready=False)
    if not 0 <= p['balance'] <= 1:
        module.fail_json(msg='balance must be between 0 and 1, got %s' % p['balance'], ready=False)
    try:
        checker = GpuMemory(p, module.check_mode)
    except ValueError as exc:
        module.fail_json(msg=str(exc), ready=False)
    start = time.monotonic()
    try:
        result = checker.run()
    except (smi.NvidiaSmiError, GpuMemoryError) as exc:
        extra = {} if checker.listing is None else {'listing': checker.listing}
        module.fail_json(msg=str(exc), error=exc.kind, ready=False, **extra,
                         changed=any(r['signals'] for r in checker.reclaimed), reclaimed=checker.reclaimed,
                         elapsed=round(time.monotonic() - start, 2))
    if result['ready']:
        del result['msg']
        module.exit_json(**result)
    module.fail_json(**result)


if __name__ == '__main__':
    main()
