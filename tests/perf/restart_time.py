# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Staging throughput against ``cp``/``rsync``, and a restart's window with and without staging + warm-up.

Not part of ``make test``. Run from the repository root after the unit tests made ``build/pytest``
(``rsync`` comes with ``make system``):

    .venv/bin/python tests/perf/restart_time.py [--dir DIR] [--shards 4] [--shard-mib 128] [--rounds 3]

It writes a checkpoint of ``--shards`` random shards into DIR (default: a temporary directory under
/var/tmp). Every timing starts with the files it reads evicted from the page cache (``fsync`` +
``posix_fadvise(DONTNEED)`` on each file, which touches only these files).

**Copy**, per round:

- ``manifest``: hashing the source once (``_stage.build_manifest``), the cost paid once per checkpoint;
- ``stage``: ``_stage.stage`` with that manifest into a fresh destination (read, SHA-256 of every byte,
  write through ``.part`` files, ``fsync`` each, rename the directory), what each host pays;
- ``cp``/``rsync``: ``cp -r`` and ``rsync -a`` of the same directory followed by ``sync -f`` on the copy
  (the data on disk, as staging guarantees), and ``cp -r`` alone (the data only in the page cache);
- ``warm``: ``_stage.warm`` of the staged copy, the page cache warm-up.

Prints the median seconds and GB/s of each and the ratios of the staging to the others.

**Window**, per round: the part of a rolling restart's per-host window that staging changes, stop + start
until ``/health`` answers 200, of the SGLang simulator (a test double: its imports, graph capture and
warm-up are scripted pauses of ``--sim-speed`` x the defaults; only its weight loading is real, it reads
every byte of the weight files) serving the checkpoint from

- ``source``: the source directory, cold (what a host reading a shared mount pays; here the source is on
  the same local disk, so the difference to the next is this disk's, not a network file system's);
- ``staged``: the staged copy, cold;
- ``staged + warm``: the staged copy after ``_stage.warm`` ran before the stop, as the role runs it
  while the router drains the host (its time is printed apart: in a rollout the drain hides it).

Prints the median window and the simulator's ``Load weight end. elapsed=`` of each, and the ratio of the
warm window to the source's. The machine is shared (2 cores, other work running): figures move between
runs; compare the ratios, not the absolutes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, 'build', 'pytest'))  # tests/conftest.py links the collection here
sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim'))

from ansible_collections.llmops.serving.plugins.module_utils import _stage  # noqa: E402
import sim_helpers  # noqa: E402 pylint: disable=wrong-import-order


def write_checkpoint(directory, shards, shard_bytes):
    os.makedirs(directory)
    block = 4 * 1024 * 1024
    for i in range(shards):
        with open(os.path.join(directory, 'model-%05d-of-%05d.safetensors' % (i + 1, shards)), 'wb') as handle:
            left = shard_bytes
            while left > 0:
                handle.write(os.urandom(min(block, left)))
                left -= block
    with open(os.path.join(directory, 'config.json'), 'w') as handle:
        handle.write('{"architectures": ["LlamaForCausalLM"]}\n')


def evict(directory):
    for root, dummy, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def timed(func):
    started = time.monotonic()
    func()
    return time.monotonic() - started


def copy_rounds(base, source, rounds):
    """{what: [seconds per round]} of the copies; the last round's staged copy is kept for the window."""
    times = {'manifest': [], 'stage': [], 'cp + sync': [], 'rsync + sync': [], 'cp': [], 'warm': []}
    commands = {'cp + sync': ['cp', '-r'], 'rsync + sync': ['rsync', '-a'], 'cp': ['cp', '-r']}
    staged = manifest = None
    for round_ in range(rounds):
        evict(source)
        holder = {}
        times['manifest'].append(timed(lambda: holder.update(m=_stage.build_manifest(source))))
        manifest = holder['m']
        dest_root = os.path.join(base, 'staged-%d' % round_)
        evict(source)
        times['stage'].append(timed(lambda: _stage.stage(source, dest_root, 'm', manifest, reserve_bytes=0)))
        staged = os.path.join(dest_root, 'm-' + manifest['fingerprint'])
        for label, argv in commands.items():
            copy = os.path.join(base, 'copy-%d' % round_)
            evict(source)

            def copy_files():
                subprocess.run(argv + [source + '/', copy], check=True)
                if label.endswith('+ sync'):
                    subprocess.run(['sync', '-f', copy], check=True)
            times[label].append(timed(copy_files))
            shutil.rmtree(copy)
        evict(staged)
        times['warm'].append(timed(lambda: _stage.warm([staged], budget=10 ** 13)))
        if round_ < rounds - 1:
            shutil.rmtree(dest_root)
    return times, staged


class Simulator:
    """The SGLang simulator (tests/sim's helpers), started and stopped as the role's restart does."""

    def __init__(self, base, speed):
        self.env = dict(os.environ, PYTHONPATH=sim_helpers.SIM_DIR, SGLANG_SIM_SPEED=str(speed),
                        NVSIM_STATE_DIR=os.path.join(base, 'nvsim'))
        subprocess.run([sys.executable, sim_helpers.NVSIM, 'init', '--count', '1'], env=self.env, check=True,
                       stdout=subprocess.DEVNULL)
        self.base = base
        self.sim = None

    def start(self, model):
        port = sim_helpers.free_port()
        log_path = os.path.join(self.base, 'sim-%d.log' % port)
        with open(log_path, 'w', encoding='utf-8') as log:
            proc = subprocess.Popen([sys.executable, '-m', 'sglang.launch_server', '--model-path', model,
                                     '--port', str(port)], env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.sim = sim_helpers.Sim(proc, port, log_path)
        sim_helpers.wait_for(lambda: proc.poll() is not None or self.sim.get('/health', timeout=5)[0] == 200,
                             timeout=300, interval=0.05, what='/health of the simulator')
        if proc.poll() is not None:
            raise SystemExit('the simulator ended (%s):\n%s' % (proc.returncode, self.sim.log()[-2000:]))

    def stop(self):
        if self.sim is not None:
            self.sim.stop()
            self.sim = None

    def load_seconds(self):
        return float(re.findall(r'Load weight end\. elapsed=([0-9.]+) s', self.sim.log())[0])


def window_rounds(base, source, staged, rounds, speed):
    """{case: {'window': [s], 'load': [s], 'warm-up': [s]}} of stop + start of the simulator."""
    cases = {'source': {'window': [], 'load': []}, 'staged': {'window': [], 'load': []},
             'staged + warm': {'window': [], 'load': [], 'warm-up': []}}
    sim = Simulator(base, speed)
    try:
        sim.start(source)
        for dummy in range(rounds):
            for case, figures in cases.items():
                model = source if case == 'source' else staged
                evict(model)
                if case == 'staged + warm':
                    figures['warm-up'].append(timed(lambda: _stage.warm([staged], budget=10 ** 13)))
                figures['window'].append(timed(lambda: (sim.stop(), sim.start(model))))
                figures['load'].append(sim.load_seconds())
    finally:
        sim.stop()
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--dir')
    parser.add_argument('--shards', type=int, default=4)
    parser.add_argument('--shard-mib', type=int, default=128)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--sim-speed', type=float, default=0.1,
                        help='the simulator\'s SGLANG_SIM_SPEED: its scripted phases take this x 11 s')
    args = parser.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix='llmops-restart-time-', dir='/var/tmp')
    source = os.path.join(base, 'source')
    total = args.shards * args.shard_mib * 1024 * 1024
    try:
        write_checkpoint(source, args.shards, args.shard_mib * 1024 * 1024)
        times, staged = copy_rounds(base, source, args.rounds)
        print('checkpoint: %d shards, %.0f MiB in all, %d rounds, files evicted from the page cache before each (%s)'
              % (args.shards, total / 2.0 ** 20, args.rounds, base))
        print('%-13s %9s %8s' % ('copy', 'median s', 'GB/s'))
        medians = {}
        for label, values in times.items():
            medians[label] = statistics.median(values)
            print('%-13s %9.2f %8.2f' % (label, medians[label], total / medians[label] / 1e9))
        print('ratio stage / (cp + sync): %.2f; stage / (rsync + sync): %.2f; stage / cp: %.2f'
              % (medians['stage'] / medians['cp + sync'], medians['stage'] / medians['rsync + sync'],
                 medians['stage'] / medians['cp']))
        cases = window_rounds(base, source, staged, args.rounds, args.sim_speed)
        print('restart window (SIMULATOR, scripted phases at speed %s; weight loading real):' % args.sim_speed)
        print('%-13s %9s %9s %10s' % ('served from', 'window s', 'load s', 'warm-up s'))
        for case, figures in cases.items():
            warm_up = '%10.2f' % statistics.median(figures['warm-up']) if 'warm-up' in figures else '%10s' % '-'
            window, load = statistics.median(figures['window']), statistics.median(figures['load'])
            print('%-13s %9.2f %9.2f %s' % (case, window, load, warm_up))
        print('ratio window staged + warm / source: %.2f; load: %.2f'
              % (statistics.median(cases['staged + warm']['window']) / statistics.median(cases['source']['window']),
                 statistics.median(cases['staged + warm']['load']) / statistics.median(cases['source']['load'])))
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == '__main__':
    main()
