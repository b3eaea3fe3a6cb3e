# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Simulated NVIDIA GPUs shared by the test doubles (TEST DOUBLE, never real GPU figures).

State lives in ``$NVSIM_STATE_DIR`` (default ``/run/llmops-nvsim``):

- ``gpus.json``: ``{"count": 8, "name": "NVIDIA H200", "total_mib": 143771, "fault": null}``
  (``fault``: ``missing``, ``no_devices``, ``nvml_error``; optional ``temp_c``, ``power_w``,
  ``fixed_time`` to reproduce a recorded table byte for byte);
- ``holders/<pid>.json``: ``{"pid", "starttime", "name", "mib": {"<gpu index>": MiB}}`` for
  every process that holds simulated memory. A holder whose PID is gone, or whose start time
  differs (PID reuse), no longer counts.

Command line (``python3 nvsim.py ...``):

- ``init --count 8 [--name 'NVIDIA H200'] [--total-mib 143771] [--fault F]``
- ``hold --gpus 0,1 --mib 40000 [--ignore-term] [--name python3]``: a stand-in "trainer" that
  holds memory until it gets SIGTERM/SIGINT (SIGTERM ignored with ``--ignore-term``).
- ``status``: the GPUs and live holders as JSON.
- ``smi ARGS...``: what ``tests/sim/nvidia-smi`` runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time

DEFAULT_STATE_DIR = '/run/llmops-nvsim'
DEFAULT_NAME = 'NVIDIA H200'
DEFAULT_TOTAL_MIB = 143771
FAULTS = ('missing', 'no_devices', 'nvml_error')
DRIVER_VERSION = '580.159.04'
CUDA_VERSION = '13.0'
# Memory the driver keeps for itself, and what each process's context adds on top of its
# own allocation. Fractional so that rounding reproduces the recorded 1-GPU figures:
# idle free 143156 MiB; one holder of 41570 MiB -> used 41579, free 101578.
RESERVED_MIB = 614.6
CONTEXT_MIB = 8.8
_RECORDED_UUID = 'GPU-16b0d5eb-b6eb-afd8-95b9-178a9196b640'


def state_dir():
    return os.environ.get('NVSIM_STATE_DIR') or DEFAULT_STATE_DIR


def _write_json(path, data):
    tmp = '%s.%d.tmp' % (path, os.getpid())
    with open(tmp, 'w', encoding='utf-8') as f:
        json.dump(data, f)
    os.replace(tmp, path)


def load_gpus(directory=None):
    """Return the GPU description, or None when there is no ``gpus.json``."""
    path = os.path.join(directory or state_dir(), 'gpus.json')
    try:
        with open(path, encoding='utf-8') as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    data.setdefault('count', 8)
    data.setdefault('name', DEFAULT_NAME)
    data.setdefault('total_mib', DEFAULT_TOTAL_MIB)
    data.setdefault('fault', None)
    return data


def init(count=8, name=DEFAULT_NAME, total_mib=DEFAULT_TOTAL_MIB, fault=None, directory=None, **extra):
    directory = directory or state_dir()
    os.makedirs(os.path.join(directory, 'holders'), exist_ok=True)
    # Real GPUs are usable by every user (device nodes 0666): so are simulated ones, for
    # servers that run as an unprivileged user (sticky, like /tmp).
    os.chmod(os.path.join(directory, 'holders'), 0o1777)
    data = {'count': count, 'name': name, 'total_mib': total_mib, 'fault': fault}
    data.update(extra)
    _write_json(os.path.join(directory, 'gpus.json'), data)
    return data


def gpu_uuid(index):
    if index == 0:
        return _RECORDED_UUID
    h = hashlib.sha256(('llmops-nvsim-gpu-%d' % index).encode()).hexdigest()
    return 'GPU-%s-%s-%s-%s-%s' % (h[:8], h[8:12], h[12:16], h[16:20], h[20:32])


def gpu_bus_id(index):
    return '00000000:00:%02X.0' % (0x06 + index)


def proc_starttime(pid):
    """Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat), or None."""
    try:
        with open('/proc/%d/stat' % pid, encoding='utf-8', errors='replace') as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(')') + 2:].split()
    if fields[0] == 'Z':
        return None
    return int(fields[19])


def holder_path(pid, directory=None):
    return os.path.join(directory or state_dir(), 'holders', '%d.json' % pid)


def write_holder(mib, name, pid=None, directory=None):
    """Record that ``pid`` (default: this process) holds ``mib`` ({gpu index: MiB})."""
    pid = pid or os.getpid()
    directory = directory or state_dir()
    os.makedirs(os.path.join(directory, 'holders'), exist_ok=True)
    data = {'pid': pid, 'starttime': proc_starttime(pid), 'name': name,
            'mib': dict((str(k), int(v)) for k, v in mib.items())}
    _write_json(holder_path(pid, directory), data)
    return data


def remove_holder(pid=None, directory=None):
    try:
        os.unlink(holder_path(pid or os.getpid(), directory))
    except FileNotFoundError:
        pass


def live_holders(directory=None):
    """Holders whose process still runs (same PID and start time), sorted by PID."""
    folder = os.path.join(directory or state_dir(), 'holders')
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    result = []
    for entry in names:
        if not entry.endswith('.json'):
            continue
        try:
            with open(os.path.join(folder, entry), encoding='utf-8') as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        start = proc_starttime(int(data['pid']))
        if start is None or start != data.get('starttime'):
            continue
        result.append(data)
    return sorted(result, key=lambda h: h['pid'])


def gpu_memory(gpus, holders, exclude_pids=()):
    """Per GPU index: (used MiB, free MiB) as floats, from the live holders."""
    result = {}
    for index in range(gpus['count']):
        used = 0.0
        for h in holders:
            if h['pid'] in exclude_pids:
                continue
            mib = h['mib'].get(str(index))
            if mib is not None:
                used += mib + CONTEXT_MIB
        result[index] = (used, gpus['total_mib'] - RESERVED_MIB - used)
    return result


def _round(value):
    return int(value + 0.5) if value > 0 else 0


# ---------------------------------------------------------------- nvidia-smi stand-in

_GPU_FIELDS = {
    # name: (header, unit, value(ctx))
    'index': ('index', None, lambda c: str(c['index'])),
    'count': ('count', None, lambda c: str(c['count'])),
    'uuid': ('uuid', None, lambda c: gpu_uuid(c['index'])),
    'gpu_uuid': ('uuid', None, lambda c: gpu_uuid(c['index'])),
    'name': ('name', None, lambda c: c['name']),
    'gpu_name': ('name', None, lambda c: c['name']),
    'memory.total': ('memory.total', 'MiB', lambda c: str(c['total'])),
    'memory.used': ('memory.used', 'MiB', lambda c: str(c['used'])),
    'memory.free': ('memory.free', 'MiB', lambda c: str(c['free'])),
    'memory.reserved': ('memory.reserved', 'MiB', lambda c: str(_round(RESERVED_MIB))),
    'utilization.gpu': ('utilization.gpu', '%', lambda c: '0'),
    'pci.bus_id': ('pci.bus_id', None, lambda c: gpu_bus_id(c['index'])),
    'gpu_bus_id': ('pci.bus_id', None, lambda c: gpu_bus_id(c['index'])),
    'driver_version': ('driver_version', None, lambda c: DRIVER_VERSION),
    'temperature.gpu': ('temperature.gpu', None, lambda c: str(c['temp'])),
    'power.draw': ('power.draw', 'W', lambda c: '%.2f' % c['power']),
}

_APP_FIELDS = {
    'pid': ('pid', None, lambda p: str(p['pid'])),
    'process_name': ('process_name', None, lambda p: p['name']),
    'name': ('process_name', None, lambda p: p['name']),
    'used_memory': ('used_gpu_memory', 'MiB', lambda p: str(p['mib'])),
    'used_gpu_memory': ('used_gpu_memory', 'MiB', lambda p: str(p['mib'])),
    'gpu_uuid': ('gpu_uuid', None, lambda p: gpu_uuid(p['gpu'])),
    'gpu_bus_id': ('gpu_bus_id', None, lambda p: gpu_bus_id(p['gpu'])),
    'gpu_name': ('gpu_name', None, lambda p: p['gpu_name']),
}


def _gpu_rows(gpus, holders):
    memory = gpu_memory(gpus, holders)
    rows = []
    for index in range(gpus['count']):
        used, free = memory[index]
        rows.append({'index': index, 'count': gpus['count'], 'name': gpus['name'], 'total': gpus['total_mib'],
                     'used': _round(used), 'free': _round(free),
                     'temp': gpus.get('temp_c', 41), 'power': gpus.get('power_w', 126)})
    return rows


def _app_rows(gpus, holders):
    rows = []
    for index in range(gpus['count']):
        for h in holders:
            mib = h['mib'].get(str(index))
            if mib is not None:
                rows.append({'pid': h['pid'], 'name': h['name'], 'mib': mib, 'gpu': index, 'gpu_name': gpus['name']})
    return rows


def _csv(fields, table, rows, fmt, out):
    opts = set(fmt.split(','))
    specs = []
    for field in fields:
        if field not in table:
            out.write('Field "%s" is not a valid field to query.\n\n' % field)
            return 2
        specs.append(table[field])
    if 'noheader' not in opts:
        out.write(', '.join(h + (' [%s]' % u if u else '') for h, u, dummy in specs) + '\n')
    for row in rows:
        values = []
        for dummy, unit, value in specs:
            text = value(row)
            if unit and 'nounits' not in opts:
                text += ' ' + unit
            values.append(text)
        out.write(', '.join(values) + '\n')
    return 0


def _table(gpus, holders, out):
    sep = '+-----------------------------------------+------------------------+----------------------+\n'
    wide = '+-----------------------------------------------------------------------------------------+\n'
    now = gpus.get('fixed_time') or time.strftime('%a %b %e %H:%M:%S %Y')
    out.write(now + '       \n')
    out.write(wide)
    out.write('| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|\n' % (DRIVER_VERSION, DRIVER_VERSION, CUDA_VERSION))
    out.write(sep)
    out.write('| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n')
    out.write('| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n')
    out.write('|                                         |                        |               MIG M. |\n')
    out.write('|' + sep[1:-2].replace('-', '=') + '|\n')
    for row in _gpu_rows(gpus, holders):
        out.write('|%4d  %-31sOn  |%19s Off |%21s |\n' % (row['index'], row['name'][:31], gpu_bus_id(row['index']), '0'))
        out.write('| N/A   %2dC    P0%15dW /  700W |%8dMiB / %6dMiB |%7d%%      Default |\n'
                  % (row['temp'], row['power'], row['used'], row['total'], 0))
        out.write('|                                         |                        |             Disabled |\n')
        out.write(sep)
    out.write('\n')
    out.write(wide)
    out.write('| Processes:                                                                              |\n')
    out.write('|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |\n')
    out.write('|        ID   ID                                                               Usage      |\n')
    out.write('|' + wide[1:-2].replace('-', '=') + '|\n')
    apps = _app_rows(gpus, holders)
    if not apps:
        out.write('|  No running processes found                                                             |\n')
    for app in apps:
        name = app['name'] if len(app['name']) <= 34 else '...' + app['name'][-31:]
        out.write('|%5d   N/A  N/A%16d%7s   %-34s%9dMiB |\n' % (app['gpu'], app['pid'], 'C', name, app['mib']))
    out.write(wide)
    return 0


def smi_main(argv, out=None, err=None):
    """nvidia-smi stand-in. Returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    gpus = load_gpus()
    fault = gpus['fault'] if gpus else 'no_devices'
    if fault == 'missing':
        err.write('nvidia-smi: command not found\n')
        return 127
    if fault == 'no_devices':
        out.write('No devices were found\n')
        return 6
    if fault == 'nvml_error':
        out.write('Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.159\n')
        return 18
    holders = live_holders()
    query = fmt = None
    kind = 'table'
    for arg in argv:
        if arg.startswith('--query-gpu='):
            kind, query = 'gpu', arg.split('=', 1)[1]
        elif arg.startswith('--query-compute-apps='):
            kind, query = 'apps', arg.split('=', 1)[1]
        elif arg.startswith('--format='):
            fmt = arg.split('=', 1)[1]
        elif arg in ('-L', '--list-gpus'):
            kind = 'list'
        else:
            err.write('Invalid combination of input arguments. Please run \'nvidia-smi -h\' for help.\n')
            return 2
    if kind == 'list':
        for row in _gpu_rows(gpus, holders):
            out.write('GPU %d: %s (UUID: %s)\n' % (row['index'], row['name'], gpu_uuid(row['index'])))
        return 0
    if kind == 'table':
        return _table(gpus, holders, out)
    if not fmt or not fmt.split(',')[0] == 'csv':
        err.write('Invalid combination of input arguments. Please run \'nvidia-smi -h\' for help.\n')
        return 2
    fields = [f.strip() for f in query.split(',') if f.strip()]
    if kind == 'gpu':
        return _csv(fields, _GPU_FIELDS, _gpu_rows(gpus, holders), fmt, out)
    return _csv(fields, _APP_FIELDS, _app_rows(gpus, holders), fmt, out)


# ---------------------------------------------------------------- stand-in trainer

def hold(gpu_indexes, mib, name='python3', ignore_term=False):
    """Hold ``mib`` MiB on each GPU until SIGTERM/SIGINT (SIGTERM ignored with ignore_term)."""
    def stop(signum, frame):
        remove_holder()
        sys.exit(0)

    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore_term else stop)
    signal.signal(signal.SIGINT, stop)
    write_holder(dict((i, mib) for i in gpu_indexes), name)
    print('nvsim: pid %d holds %d MiB on GPU %s (simulated)' % (os.getpid(), mib, ','.join(map(str, gpu_indexes))), flush=True)
    while True:
        signal.pause()


def main(argv=None):
    parser = argparse.ArgumentParser(prog='nvsim.py', description='Simulated NVIDIA GPUs for tests (test double).')
    sub = parser.add_subparsers(dest='command', required=True)
    p = sub.add_parser('init', help='describe the simulated GPUs (gpus.json)')
    p.add_argument('--count', type=int, default=8)
    p.add_argument('--name', default=DEFAULT_NAME)
    p.add_argument('--total-mib', type=int, default=DEFAULT_TOTAL_MIB)
    p.add_argument('--fault', choices=FAULTS)
    p = sub.add_parser('hold', help='hold simulated memory until stopped (a stand-in trainer)')
    p.add_argument('--gpus', required=True, help='comma-separated GPU indexes')
    p.add_argument('--mib', type=int, required=True)
    p.add_argument('--name', default='python3', help='process name that nvidia-smi shows')
    p.add_argument('--ignore-term', action='store_true')
    sub.add_parser('status', help='print GPUs and live holders as JSON')
    p = sub.add_parser('smi', help='behave like nvidia-smi')
    p.add_argument('args', nargs=argparse.REMAINDER)
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ['smi']:
        return smi_main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == 'init':
        print(json.dumps(init(args.count, args.name, args.total_mib, args.fault)))
    elif args.command == 'hold':
        hold([int(i) for i in args.gpus.split(',')], args.mib, args.name, args.ignore_term)
    elif args.command == 'status':
        print(json.dumps({'gpus': load_gpus(), 'holders': live_holders()}, indent=1))
    return 0


if __name__ == '__main__':
    sys.exit(main())
