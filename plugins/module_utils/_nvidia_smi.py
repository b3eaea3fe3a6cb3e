# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia-smi invocation, parsing and the per-GPU memory rules (private: not an API).

Only the standard library is used, so the functions can be unit-tested and run on a
GPU host without Ansible. Output format: ``--format=csv,noheader,nounits`` prints one
line per GPU (or compute process), fields separated by ``", "``; fields the driver
cannot fill read ``[N/A]``, ``[No data]``, ``[Not Supported]`` and the like.
"""

from __future__ import annotations

import re
import subprocess

GPU_FIELDS = ('index', 'uuid', 'name', 'memory.total', 'memory.used', 'memory.free')
APP_FIELDS = ('pid', 'process_name', 'used_memory', 'gpu_uuid')

# Free-text fields: the only ones whose value may itself contain ", ".
_TEXT_FIELDS = ('name', 'process_name')
_UNAVAILABLE = re.compile(r'^\[[^\]]*\]$')

_NO_DEVICES = re.compile(r'No devices were found', re.IGNORECASE)
_DRIVER_ERROR = re.compile(
    r'NVML|NVIDIA driver|GPU is lost|Unable to determine the device handle|Unknown Error|'
    r'Driver/library version mismatch',
    re.IGNORECASE,
)

QUERY_TIMEOUT = 60


class NvidiaSmiError(Exception):
    """nvidia-smi could not report the GPUs.

    ``kind`` is one of ``missing``, ``no_devices``, ``driver``, ``failed``, ``timeout``,
    ``unparsable``.
    """

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind
        self.message = message


def gpu_query_argv(path):
    return [path, '--query-gpu=' + ','.join(GPU_FIELDS), '--format=csv,noheader,nounits']


def apps_query_argv(path):
    return [path, '--query-compute-apps=' + ','.join(APP_FIELDS), '--format=csv,noheader,nounits']


def subprocess_runner(argv):
    """Default runner: ``(rc, stdout, stderr)``; raises ``OSError`` when argv[0] cannot run."""
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=QUERY_TIMEOUT, check=False)
    return (proc.returncode, proc.stdout.decode('utf-8', 'replace'),
            proc.stderr.decode('utf-8', 'replace'))


def _first_line(text):
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ''


def classify_failure(command, rc, stdout, stderr):
    """Return the NvidiaSmiError for a run that failed or printed an error instead of CSV."""
    output = (stderr + '\n' + stdout).strip()
    detail = _first_line(stderr) or _first_line(stdout) or 'no output'
    if rc == 127 or 'command not found' in output or 'No such file or directory' in output:
        return NvidiaSmiError('missing', '%s: not found (%s). Install the NVIDIA driver utilities or '
                              'set nvidia_smi_path.' % (command, detail))
    if _NO_DEVICES.search(output):
        return NvidiaSmiError('no_devices', '%s: No devices were found (exit status %s): the driver sees '
                              'no GPU on this host.' % (command, rc))
    if _DRIVER_ERROR.search(output):
        return NvidiaSmiError('driver', '%s: NVML/driver error (exit status %s): %s' % (command, rc, detail))
    return NvidiaSmiError('failed', '%s failed (exit status %s): %s' % (command, rc, detail))


def run_query(argv, runner=None):
    """Run one query and return its stdout; raise NvidiaSmiError on any failure."""
    runner = runner or subprocess_runner
    command = ' '.join(argv)
    try:
        rc, stdout, stderr = runner(argv)
    except subprocess.TimeoutExpired:
        raise NvidiaSmiError('timeout', '%s did not answer within %d s (hung driver?)' % (command, QUERY_TIMEOUT))
    except OSError as exc:
        raise NvidiaSmiError('missing', '%s: cannot run %s (%s). Install the NVIDIA driver utilities or '
                                        'set nvidia_smi_path.' % (command, argv[0], exc.strerror or exc))
    # Some versions print "No devices were found" with exit status 0.
    if rc != 0 or _NO_DEVICES.match(_first_line(stdout)):
        raise classify_failure(command, rc, stdout, stderr)
    return stdout


def _value(raw):
    raw = raw.strip()
    return None if _UNAVAILABLE.match(raw) else raw


def _integer(raw, field, line):
    value = _value(raw)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise NvidiaSmiError('unparsable', 'nvidia-smi printed %r for %s, expected a number, in line %r'
                             % (value, field, line))


def parse_rows(text, fields):
    """Split CSV output into one dict per line, keyed by field name (values stripped, raw)."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(', ')
        extra = len(parts) - len(fields)
        text_field = next((i for i, f in enumerate(fields) if f in _TEXT_FIELDS), None)
        if extra > 0 and text_field is not None:
            parts[text_field:text_field + extra + 1] = [', '.join(parts[text_field:text_field + extra + 1])]
        if len(parts) != len(fields):
            raise NvidiaSmiError('unparsable', 'nvidia-smi printed %d fields where %d (%s) were expected: %r'
                                 % (len(parts), len(fields), ','.join(fields), line))
        rows.append(dict(zip(fields, [p.strip() for p in parts]), _line=line))
    return rows


def parse_gpus(text, fields=GPU_FIELDS):
    """Parse ``--query-gpu`` output. Unavailable numbers become None."""
    gpus = []
    for row in parse_rows(text, fields):
        line = row['_line']
        index = _integer(row['index'], 'index', line)
        if index is None:
            raise NvidiaSmiError('unparsable', 'nvidia-smi printed no GPU index in line %r' % line)
        gpus.append({
            'index': index,
            'uuid': _value(row['uuid']),
            'name': _value(row['name']),
            'total_mib': _integer(row['memory.total'], 'memory.total', line),
            'used_mib': _integer(row['memory.used'], 'memory.used', line),
            'free_mib': _integer(row['memory.free'], 'memory.free', line),
        })
    return gpus


def parse_apps(text, fields=APP_FIELDS):
    """Parse ``--query-compute-apps`` output (empty when no process uses a GPU)."""
    apps = []
    for row in parse_rows(text, fields):
        line = row['_line']
        apps.append({
            'pid': _integer(row['pid'], 'pid', line),
            'name': _value(row['process_name']),
            'used_mib': _integer(row['used_memory'], 'used_memory', line),
            'gpu_uuid': _value(row['gpu_uuid']) if 'gpu_uuid' in row else None,
        })
    return apps


def snapshot(path, runner=None):
    """Query GPUs and compute processes; each process gets ``gpu`` (index or None)."""
    gpus = parse_gpus(run_query(gpu_query_argv(path), runner))
    if not gpus:
        raise NvidiaSmiError('no_devices', '%s listed no GPU (empty output)' % ' '.join(gpu_query_argv(path)))
    apps = parse_apps(run_query(apps_query_argv(path), runner))
    by_uuid = dict((g['uuid'], g['index']) for g in gpus if g['uuid'])
    for app in apps:
        app['gpu'] = by_uuid.get(app['gpu_uuid'])
    return gpus, apps


def select_gpus(gpus, wanted):
    """Return ``(selected, unknown)``: GPUs named by index or UUID in ``wanted`` (``all`` = every GPU)."""
    wanted = [str(w).strip() for w in wanted]
    if not wanted or 'all' in wanted:
        return list(gpus), []
    selected, unknown = [], []
    for ident in wanted:
        match = [g for g in gpus if str(g['index']) == ident or (g['uuid'] or '').lower() == ident.lower()]
        if not match:
            unknown.append(ident)
        for gpu in match:
            if gpu not in selected:
                selected.append(gpu)
    return sorted(selected, key=lambda g: g['index']), unknown


def selection(gpus, apps, wanted):
    """Return ``(selected, apps_on_them)``: the GPUs ``wanted`` names (``select_gpus``) and the processes on
    them; a process on a GPU the driver does not list counts only when every GPU is selected. A name the driver
    does not list raises NvidiaSmiError ``selection``."""
    selected, unknown = select_gpus(gpus, wanted)
    if unknown:
        raise NvidiaSmiError('selection', 'gpus names %s, which nvidia-smi does not list (it lists %s)'
                             % (', '.join(unknown), ', '.join('%d %s' % (g['index'], g['uuid']) for g in gpus)))
    indices = set(g['index'] for g in selected)
    every = len(selected) == len(gpus)
    return selected, [a for a in apps if a['gpu'] in indices or (every and a['gpu'] is None)]


def process_row(app, info):
    """One process on a GPU as the modules return it: the driver's figures and, where ``info`` (a
    ``_procs.ProcessInfo``, None when the PID is not visible here) is known, its owner and command line."""
    return dict(pid=app['pid'], gpu=app['gpu'], used_mib=app['used_mib'], name=app['name'],
                cmdline=info.command if info else None, user=info.user if info else None, visible=info is not None)


def evaluate(gpus, max_used_mib=None, min_free_mib=None, balance=None):
    """Return ``{index: [problem, ...]}`` for every GPU in ``gpus`` (empty list = fine).

    ``balance``: a GPU fails when its free memory is below ``balance`` times the free
    memory of the best GPU in ``gpus`` (SGLang refuses to start with tensor parallelism
    when a GPU has under 90 % of the local one's free memory).
    """
    best_free = max([g['free_mib'] for g in gpus if g['free_mib'] is not None] or [0])
    problems = {}
    for gpu in gpus:
        found = []
        used, free = gpu['used_mib'], gpu['free_mib']
        if (max_used_mib is not None and used is None) or ((min_free_mib is not None or balance) and free is None):
            found.append('memory figures unavailable (nvidia-smi printed [N/A])')
        if max_used_mib is not None and used is not None and used > max_used_mib:
            found.append('used %d MiB > max_used_mib %d' % (used, max_used_mib))
        if min_free_mib is not None and free is not None and free < min_free_mib:
            found.append('free %d MiB < min_free_mib %d' % (free, min_free_mib))
        if balance and free is not None and free < balance * best_free:
            found.append('free %d MiB < %.2f x %d MiB free on the best GPU (unbalanced)' % (free, balance, best_free))
        problems[gpu['index']] = found
    return problems


def listing_check(listed, wanted, required_by, host):
    """Whether the GPUs nvidia-smi ``listed`` (gpu_memory's ``gpus``) include each of ``wanted`` (indices
    or UUIDs), as ``{'ok', 'missing', 'count', 'msg'}``: ``msg`` is the refusal, or what was found."""
    names = [str(gpu['index']) for gpu in listed] + [gpu['uuid'] for gpu in listed]
    missing = [str(gpu) for gpu in wanted if str(gpu) not in names]
    count, shown = len(listed), ', '.join(str(gpu) for gpu in wanted)
    if missing:
        msg = ('%s needs GPU%s %s on %s, but nvidia-smi lists %d GPU%s (indices %s; missing: %s); nothing was '
               'stopped or changed' % (required_by, 's' if len(wanted) > 1 else '', shown, host, count,
                                       '' if count == 1 else 's', ', '.join(str(gpu['index']) for gpu in listed),
                                       ', '.join(missing)))
    else:
        msg = '%d GPU(s) %s of %d on %s' % (len(wanted), shown, count, host)
    return {'ok': not missing, 'missing': missing, 'count': count, 'msg': msg}
