"""Real-GPU proof of llmops.serving.gpu_memory (see gpu_memory_proof.sh).

Starts three processes that each hold GPU_GIB GiB on GPU 0 with torch:
``llmops-proof-trainer-a`` (stops on SIGTERM), ``llmops-proof-trainer-b`` (ignores SIGTERM)
and ``llmops-proof-bystander``, then runs the module's own logic (class ``GpuMemory`` of
plugins/modules/gpu_memory.py, with the real nvidia-smi and /proc) four times:

1. detect: no reclaim - every holder found with its PID and MiB, the GPU blocked;
2. check mode with the reclaim pattern - both trainers in would_reclaim, nothing signalled;
3. reclaim by pattern - trainer-a gets TERM, trainer-b TERM then KILL, both exit, their
   memory is released; the bystander is left running and reported as the blocker;
4. after the bystander is stopped by this script: the GPU is back to its starting usage.

Ansible is not installed on the GPU machine: when ``ansible`` cannot be imported, a stub
stands in for ``ansible.module_utils.basic`` (only ``main()`` uses AnsibleModule; the
logic proved here does not). Exit status 0 when every expectation held.
"""

from __future__ import annotations

import argparse
import copy
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATTERN = r'llmops-proof-trainer'
GPU_GIB = 10
HOLDERS = (('llmops-proof-trainer-a', False), ('llmops-proof-trainer-b', True), ('llmops-proof-bystander', False))


def import_module():
    """Import plugins/modules/gpu_memory.py as part of the collection, from this checkout."""
    top = tempfile.mkdtemp(prefix='gpu-proof-')
    os.makedirs(os.path.join(top, 'ansible_collections', 'llmops'))
    os.symlink(ROOT, os.path.join(top, 'ansible_collections', 'llmops', 'serving'))
    sys.path.insert(0, top)
    try:
        import ansible.module_utils.basic  # noqa: F401  pylint: disable=unused-import
        stubbed = False
    except ImportError:
        for name in ('ansible', 'ansible.module_utils', 'ansible.module_utils.basic'):
            sys.modules[name] = types.ModuleType(name)
        sys.modules['ansible.module_utils.basic'].AnsibleModule = None
        stubbed = True
    from ansible_collections.llmops.serving.plugins.modules import gpu_memory
    return gpu_memory, stubbed, top


class Report:
    def __init__(self):
        self.lines = []
        self.failures = []

    def say(self, text=''):
        print(text, flush=True)
        self.lines.append(text)

    def expect(self, ok, what):
        self.say('  [%s] %s' % ('ok' if ok else 'FAIL', what))
        if not ok:
            self.failures.append(what)


def start_holders(simulate, state_dir):
    children = {}
    for tag, ignore_term in HOLDERS:
        if simulate:
            argv = [sys.executable, os.path.join(ROOT, 'tests', 'sim', 'nvsim.py'), 'hold', '--gpus', '0',
                    '--mib', str(GPU_GIB * 1024), '--name', tag]
        else:
            argv = [sys.executable, os.path.join(ROOT, 'tests', 'gpu', 'torch_holder.py'), '--tag', tag,
                    '--gib', str(GPU_GIB)]
        if ignore_term:
            argv.append('--ignore-term')
        env = dict(os.environ, NVSIM_STATE_DIR=state_dir) if simulate else None
        children[tag] = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 90
    for tag, child in children.items():
        while True:
            readable = select.select([child.stdout], [], [], max(deadline - time.monotonic(), 0))[0]
            if not readable or child.poll() is not None:
                raise RuntimeError('%s did not start (exit status %s)' % (tag, child.poll()))
            line = child.stdout.readline()
            if line.startswith(b'ready') or line.startswith(b'nvsim: pid'):
                break
    return children


def run_check(gpu_memory, base, check_mode=False, **params):
    p = copy.deepcopy(base)
    p.update(params)
    return gpu_memory.GpuMemory(p, check_mode).run()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--simulate', action='store_true', help='use the nvidia-smi stand-in (tests/sim), no GPU')
    args = parser.parse_args()
    gpu_memory, stubbed, import_dir = import_module()
    report = Report()
    state_dir = tempfile.mkdtemp(prefix='gpu-proof-nvsim-') if args.simulate else None
    smi_path = os.path.join(ROOT, 'tests', 'sim', 'nvidia-smi') if args.simulate else 'nvidia-smi'
    if args.simulate:
        os.environ['NVSIM_STATE_DIR'] = state_dir
        subprocess.run([sys.executable, os.path.join(ROOT, 'tests', 'sim', 'nvsim.py'), 'init', '--count', '1'],
                       check=True, stdout=subprocess.DEVNULL)
    elif not shutil.which('nvidia-smi'):
        sys.exit('nvidia-smi not found: run this on the GPU machine (or use --simulate)')
    base = dict((k, copy.deepcopy(v.get('default'))) for k, v in gpu_memory.ARGUMENT_SPEC.items())
    base.update(nvidia_smi_path=smi_path, gpus=['0'], poll_interval=0.2)

    start = time.monotonic()
    gpu0 = gpu_memory.smi.snapshot(smi_path)[0][0]
    base_used = gpu0['used_mib']
    report.say('gpu_memory real-GPU proof (%s, ansible %s)' % (
        'SIMULATED with tests/sim/nvidia-smi' if args.simulate else 'real nvidia-smi',
        'stub (not installed)' if stubbed else 'installed'))
    report.say('GPU 0: %s, %s, total %s MiB, used %s MiB, free %s MiB at start' % (
        gpu0['name'], gpu0['uuid'], gpu0['total_mib'], base_used, gpu0['free_mib']))
    base['max_used_mib'] = base_used + 1024
    base['balance'] = 0.0  # one GPU (gpus: [0]): balance is meaningless

    children = {}
    try:
        children = start_holders(args.simulate, state_dir)
        pids = dict((tag, child.pid) for tag, child in children.items())
        report.say('holders started in %.1f s: %s' % (time.monotonic() - start, ', '.join(
            '%s=%d' % item for item in pids.items())))

        report.say('\n1. detect (reclaim: [])')
        detected = run_check(gpu_memory, base, wait_timeout=0)
        listed = dict((p['pid'], p) for p in detected['processes'])
        for line in detected['summary']:
            report.say('   ' + line)
        report.expect(not detected['ready'], 'GPU 0 reported busy (ready=false)')
        for tag, pid in pids.items():
            entry = listed.get(pid)
            report.expect(entry is not None and entry['visible'] and tag in (entry['cmdline'] or ''),
                          '%s found by PID %d with its command line' % (tag, pid))
            mib = entry['used_mib'] if entry else None
            report.expect(mib is not None and GPU_GIB * 1024 <= mib <= GPU_GIB * 1024 + 2048,
                          '%s holds %s MiB (allocated %d MiB + CUDA context)' % (tag, mib, GPU_GIB * 1024))
        report.expect(not detected['reclaimed'] and all(c.poll() is None for c in children.values()),
                      'nothing signalled without reclaim')

        report.say('\n2. check mode (reclaim: [%s])' % PATTERN)
        checked = run_check(gpu_memory, base, check_mode=True, reclaim=[PATTERN], wait_timeout=0)
        would = sorted(w['pid'] for w in checked['would_reclaim'])
        report.expect(would == sorted([pids['llmops-proof-trainer-a'], pids['llmops-proof-trainer-b']]),
                      'would_reclaim = both trainers %s' % would)
        report.expect(checked['changed'] and all(c.poll() is None for c in children.values()),
                      'changed=true predicted, every holder still running')

        report.say('\n3. reclaim (reclaim: [%s], grace_period 3, wait_timeout 8)' % PATTERN)
        t0 = time.monotonic()
        reclaimed = run_check(gpu_memory, base, reclaim=[PATTERN], grace_period=3, wait_timeout=8)
        took = time.monotonic() - t0
        for line in reclaimed['summary']:
            report.say('   ' + line)
        by_pid = dict((r['pid'], r) for r in reclaimed['reclaimed'])
        a, b = by_pid.get(pids['llmops-proof-trainer-a']), by_pid.get(pids['llmops-proof-trainer-b'])
        report.expect(a is not None and a['signals'] == ['TERM'] and a['exited'], 'trainer-a: TERM, exited')
        report.expect(b is not None and b['signals'] == ['TERM', 'KILL'] and b['exited'],
                      'trainer-b (ignores TERM): TERM, KILL after the grace period, exited')
        report.expect(children['llmops-proof-bystander'].poll() is None and len(by_pid) == 2,
                      'bystander left running, not signalled')
        blockers = [(x['pid'], x['reason']) for x in reclaimed['blocking']]
        report.expect(blockers == [(pids['llmops-proof-bystander'], 'not matched by any reclaim pattern')],
                      'bystander reported as the only blocker: %s' % blockers)
        used_after = reclaimed['gpus'][0]['used_mib']
        report.expect(used_after is not None and used_after <= base_used + GPU_GIB * 1024 + 2048,
                      'trainers\' memory released: used %s MiB (start %s MiB + one holder) after %.1f s'
                      % (used_after, base_used, took))
        report.expect(reclaimed['changed'] and not reclaimed['ready'], 'changed=true, ready=false (bystander)')

        report.say('\n4. bystander stopped by this script; check again (reclaim: [])')
        children['llmops-proof-bystander'].terminate()
        children['llmops-proof-bystander'].wait(30)
        final = run_check(gpu_memory, base, wait_timeout=20)
        for line in final['summary']:
            report.say('   ' + line)
        report.expect(final['ready'] and not final['changed'],
                      'GPU 0 free again: used %s MiB, free %s MiB (start: used %s MiB), after %.1f s' % (
                          final['gpus'][0]['used_mib'], final['gpus'][0]['free_mib'], base_used, final['elapsed']))
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
            child.wait()
        shutil.rmtree(import_dir, ignore_errors=True)
        if state_dir:
            shutil.rmtree(state_dir, ignore_errors=True)

    report.say('\n%s in %.1f s' % ('PASSED' if not report.failures else 'FAILED: ' + '; '.join(report.failures),
                                   time.monotonic() - start))
    if os.environ.get('OUT'):
        with open(os.path.join(os.environ['OUT'], 'gpu_memory_proof.txt'), 'w') as f:
            f.write('\n'.join(report.lines) + '\n')
    return 1 if report.failures else 0


if __name__ == '__main__':
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit('stopped by SIGTERM'))
    sys.exit(main())
