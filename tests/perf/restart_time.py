# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Staging throughput of llmops.serving.model_stage against ``cp`` of the same files, on this machine.

Not part of ``make test``. Run from the repository root after the unit tests made ``build/pytest``:

    .venv/bin/python tests/perf/restart_time.py [--dir DIR] [--shards 4] [--shard-mib 128] [--rounds 3]

It writes a checkpoint of ``--shards`` random shards into DIR (default: a temporary directory under
/var/tmp), then per round, with the source evicted from the page cache first (``fsync`` +
``posix_fadvise(DONTNEED)`` on each source file, which touches only these files), times:

- ``manifest``: hashing the source once (``_stage.build_manifest``), the cost paid once per checkpoint;
- ``stage``: ``_stage.stage`` with that manifest into a fresh destination (read, SHA-256 of every byte,
  write through ``.part`` files, ``fsync`` each, rename the directory), what each host pays;
- ``cp``: ``cp -r`` of the same directory followed by ``sync -f`` on the copy (the data on disk, as staging
  guarantees), and ``cp -r`` alone (the data only in the page cache);
- ``warm``: ``_stage.warm`` of the staged copy (after evicting it), the page cache warm-up.

Prints the median seconds and GB/s of each and the ratio stage / (cp + sync). The test machine is
shared (2 cores, other work running): figures move between runs; compare the ratio, not the absolutes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, 'build', 'pytest'))  # tests/conftest.py links the collection here

from ansible_collections.llmops.serving.plugins.module_utils import _stage  # noqa: E402


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--dir')
    parser.add_argument('--shards', type=int, default=4)
    parser.add_argument('--shard-mib', type=int, default=128)
    parser.add_argument('--rounds', type=int, default=3)
    args = parser.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix='llmops-restart-time-', dir='/var/tmp')
    source = os.path.join(base, 'source')
    total = args.shards * args.shard_mib * 1024 * 1024
    try:
        write_checkpoint(source, args.shards, args.shard_mib * 1024 * 1024)
        times = {'manifest': [], 'stage': [], 'cp + sync': [], 'cp': [], 'warm': []}
        for round_ in range(args.rounds):
            evict(source)
            holder = {}
            times['manifest'].append(timed(lambda: holder.update(m=_stage.build_manifest(source))))
            manifest = holder['m']
            dest_root = os.path.join(base, 'staged-%d' % round_)
            evict(source)
            times['stage'].append(timed(lambda: _stage.stage(source, dest_root, 'm', manifest, reserve_bytes=0)))
            staged = os.path.join(dest_root, 'm-' + manifest['fingerprint'])
            for label, sync in (('cp + sync', True), ('cp', False)):
                copy = os.path.join(base, 'cp-%d-%s' % (round_, 'sync' if sync else 'nosync'))
                evict(source)

                def cp():
                    subprocess.run(['cp', '-r', source, copy], check=True)
                    if sync:
                        subprocess.run(['sync', '-f', copy], check=True)
                times[label].append(timed(cp))
                shutil.rmtree(copy)
            evict(staged)
            times['warm'].append(timed(lambda: _stage.warm([staged], budget=10 ** 13)))
            shutil.rmtree(dest_root)
        print('checkpoint: %d shards, %.0f MiB in all, %d rounds, source evicted before each (%s)'
              % (args.shards, total / 2.0 ** 20, args.rounds, base))
        print('%-10s %9s %8s' % ('what', 'median s', 'GB/s'))
        medians = {}
        for label, values in times.items():
            medians[label] = statistics.median(values)
            print('%-10s %9.2f %8.2f' % (label, medians[label], total / medians[label] / 1e9))
        print('ratio stage / (cp + sync): %.2f; stage / cp: %.2f'
              % (medians['stage'] / medians['cp + sync'], medians['stage'] / medians['cp']))
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == '__main__':
    main()
