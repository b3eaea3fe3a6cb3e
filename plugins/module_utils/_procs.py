# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Process identity from /proc and careful signalling (private: not an API).

A process is identified by its PID *and* its start time (field 22 of
``/proc/<pid>/stat``, clock ticks since boot) and command line, so that a PID reused by
an unrelated process between listing and signalling is never signalled. Where the
kernel offers pidfds (Linux >= 5.3, Python >= 3.9) the pidfd is opened *before* the
identity re-check, which closes the remaining race: the signal goes to the process
that was checked or to nobody. Only the standard library is used.
"""

from __future__ import annotations

import errno
import json
import os
import pwd
import re
import signal
import time

SIGNALS = ('TERM', 'INT', 'HUP', 'QUIT', 'USR1', 'USR2')


class ProcessInfo:
    """What /proc says about one process at one moment."""

    __slots__ = ('pid', 'starttime', 'cmdline', 'state', 'uid', 'user')

    def __init__(self, pid, starttime, cmdline, state, uid, user):
        self.pid = pid
        self.starttime = starttime
        self.cmdline = tuple(cmdline)
        self.state = state
        self.uid = uid
        self.user = user

    @property
    def command(self):
        """The full command line as one string (arguments joined by spaces)."""
        return ' '.join(self.cmdline)

    @property
    def exited(self):
        """A zombie has released its memory; only its parent's wait() is missing."""
        return self.state in ('Z', 'X')

    def same_process(self, other):
        return (other is not None and other.pid == self.pid and other.starttime == self.starttime
                and other.cmdline == self.cmdline)

    def __repr__(self):
        return 'ProcessInfo(pid=%d, starttime=%d, state=%s, command=%r)' % (
            self.pid, self.starttime, self.state, self.command)


def _user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


# Indexes into read_stat()'s list: the fields after comm, so field N of proc(5) is at N - 3.
STAT_STATE = 0        # field 3
STAT_SESSION = 3      # field 6
STAT_STARTTIME = 19   # field 22, clock ticks since boot
STAT_EXIT_CODE = 49   # field 52, the waitpid status a zombie keeps (Linux >= 3.5)


def read_stat(pid, proc='/proc'):
    """The fields of ``/proc/<pid>/stat`` after comm (see the STAT_* indexes), or None when unreadable."""
    try:
        with open(os.path.join(proc, str(pid), 'stat'), 'rb') as f:
            stat = f.read().decode('utf-8', 'replace')
    except (IOError, OSError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    return stat[stat.rfind(')') + 2:].split()


def read_process(pid, proc='/proc'):
    """Return the ProcessInfo of ``pid``, or None when no such process is visible here.

    "Visible" means present in this PID namespace's procfs: PIDs that nvidia-smi reports
    for processes of another PID namespace (containers) are not, or belong to someone else.
    """
    base = os.path.join(proc, str(pid))
    fields = read_stat(pid, proc)
    try:
        with open(os.path.join(base, 'cmdline'), 'rb') as f:
            raw_cmdline = f.read()
        uid = os.stat(base).st_uid
        state, starttime = fields[STAT_STATE], int(fields[STAT_STARTTIME])
    except (IOError, OSError, TypeError, IndexError, ValueError):
        return None
    cmdline = [a.decode('utf-8', 'replace') for a in raw_cmdline.split(b'\0')]
    while cmdline and cmdline[-1] == '':
        cmdline.pop()
    return ProcessInfo(pid, starttime, cmdline, state, uid, _user_name(uid))


def session_members(sid, proc='/proc'):
    """ProcessInfo of every live process whose session ID is ``sid``."""
    members = []
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        fields = read_stat(entry, proc)
        if fields and len(fields) > STAT_SESSION and fields[STAT_SESSION] == str(sid):
            info = read_process(int(entry), proc)
            if info is not None and not info.exited:
                members.append(info)
    return members


def read_pidfile(path):
    """``(pid, starttime)`` from a pidfile, ``(None, None)`` when it is missing or unreadable.

    Two formats: the JSON llmops.serving.server_process writes (``{"pid", "starttime",
    "command"}``) and a plain integer, as most daemons write (``starttime`` None then).
    """
    try:
        with open(path) as handle:
            text = handle.read()
    except (IOError, OSError):
        return None, None
    try:
        data = json.loads(text)
    except ValueError:
        data = text.split()[0] if text.split() else None
    try:
        if isinstance(data, dict):
            return int(data['pid']), int(data['starttime'])
        if isinstance(data, bool):
            return None, None
        return int(data), None
    except (KeyError, TypeError, ValueError):
        return None, None


def compile_patterns(patterns, what='reclaim pattern'):
    """Compile the user's regular expressions; raise ValueError naming the bad one (``what`` says whose)."""
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise ValueError('%s %r is not a valid regular expression: %s' % (what, pattern, exc))
    return compiled


def matching_pattern(command, compiled):
    """The first pattern (source string) that ``re.search`` finds in ``command``, or None."""
    for pattern in compiled:
        if pattern.search(command):
            return pattern.pattern
    return None


def signal_number(name):
    return getattr(signal, 'SIG' + name.upper().replace('SIG', '', 1))


def send_if_same(info, signum, proc='/proc'):
    """Send ``signum`` to ``info.pid`` only if it is still the same process.

    Returns ``sent``, ``gone`` (exited, or a zombie), ``reused`` (the PID now belongs to
    another process) or ``denied``.
    """
    pidfd = None
    pidfd_open = getattr(os, 'pidfd_open', None)
    if pidfd_open is not None:
        try:
            pidfd = pidfd_open(info.pid)
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                return 'gone'
            pidfd = None  # kernel without pidfd support: fall back to kill()
    try:
        current = read_process(info.pid, proc)
        if current is None or (current.starttime == info.starttime and current.exited):
            return 'gone'
        if not info.same_process(current):
            return 'reused'
        try:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signum)
            else:
                os.kill(info.pid, signum)
        except ProcessLookupError:
            return 'gone'
        except PermissionError:
            return 'denied'
        return 'sent'
    finally:
        if pidfd is not None:
            os.close(pidfd)


def is_running(info, proc='/proc'):
    """True while the very process ``info`` describes exists and has not exited."""
    current = read_process(info.pid, proc)
    return current is not None and current.starttime == info.starttime and not current.exited


def stop_processes(targets, signal_name='TERM', grace_period=10.0, kill_timeout=10.0, poll_interval=0.1,
                   proc='/proc', clock=time.monotonic, sleep=time.sleep, send=send_if_same):
    """Stop every process in ``targets`` (ProcessInfo): signal, wait ``grace_period``, KILL survivors.

    All targets are signalled together, so N processes take one grace period, not N.
    Returns one dict per target: ``pid``, ``signals`` (names actually sent), ``exited``
    (bool) and ``outcome``: ``exited``, ``gone before signal``, ``pid reused``,
    ``permission denied`` or ``survived KILL``.
    """
    results = dict((t.pid, {'pid': t.pid, 'signals': [], 'exited': False, 'outcome': None}) for t in targets)

    def deliver(batch, name):
        for target in batch:
            status = send(target, signal_number(name), proc)
            result = results[target.pid]
            if status == 'sent':
                result['signals'].append(name)
            elif status == 'gone':
                result.update(exited=True, outcome='exited' if result['signals'] else 'gone before signal')
            elif status == 'reused':
                result['outcome'] = 'pid reused'
            else:
                result['outcome'] = 'permission denied'

    def wait(batch, timeout):
        deadline = clock() + timeout
        while True:
            alive = [t for t in batch if is_running(t, proc)]
            for target in batch:
                if target not in alive:
                    results[target.pid].update(exited=True, outcome='exited')
            if not alive or clock() >= deadline:
                return alive
            sleep(min(poll_interval, max(deadline - clock(), 0)))

    def pending(batch):
        return [t for t in batch if results[t.pid]['outcome'] is None]

    deliver(targets, signal_name.upper())
    survivors = wait(pending(targets), grace_period)
    if survivors:
        deliver(survivors, 'KILL')
        for target in wait(pending(survivors), kill_timeout):
            results[target.pid]['outcome'] = 'survived KILL'
    return [results[t.pid] for t in targets]


# --------------------------------------------------------------------------------------
# Watching a server process while it starts (llmops.serving.wait_for_llm_health)
# --------------------------------------------------------------------------------------
def zombie_exit_status(pid, proc_root='/proc'):
    """The waitpid-style status a zombie keeps in /proc/PID/stat."""
    try:
        return int(read_stat(pid, proc_root)[STAT_EXIT_CODE])
    except (TypeError, ValueError, IndexError):
        return None


def decode_wait_status(status):
    """waitpid status -> exit code (negative signal number when killed)."""
    if status is None:
        return None
    if status & 0x7f:
        return -(status & 0x7f)
    return (status >> 8) & 0xff


class ProcessWatch(object):
    """Watches the server process given by pid, pidfile or systemd unit.

    ``check()`` returns None while it runs (or has not appeared yet), else a dict with
    ``exit_code`` (None when it cannot be known) and ``detail``. Cheap enough to call
    every 0.1 s: /proc reads; ``systemctl show`` at most every ``unit_period`` seconds.
    ``run`` runs ``systemctl``, ``(argv) -> (rc, stdout, stderr)`` (the module's
    ``run_command``); needed only with ``unit``.
    """

    def __init__(self, pid=None, pidfile=None, unit=None, state=None, run=None, proc_root='/proc',
                 unit_period=1.0, clock=time.monotonic):
        self.pid = pid
        self.pidfile = pidfile
        self.unit = unit
        state = state or {}
        self.seen_pid = state.get('pid')
        self.seen_starttime = state.get('starttime')
        self.unit_main_pid = state.get('main_pid')
        self.notes = []
        self._run = run
        self._proc_root = proc_root
        self._unit_period = unit_period
        self._clock = clock
        self._next_unit_check = 0.0

    def export(self):
        return {'pid': self.seen_pid, 'starttime': self.seen_starttime, 'main_pid': self.unit_main_pid}

    def describe(self):
        if self.unit:
            return 'systemd unit %s' % self.unit
        if self.pidfile:
            return 'process %s (pidfile %s)' % (self.seen_pid or '?', self.pidfile)
        if self.pid:
            return 'process %s' % self.pid
        return None

    def _watch_pid(self, pid, origin, starttime=None):
        """Check one PID; remembers its start time (or takes the pidfile's) to catch PID reuse."""
        info = read_process(pid, self._proc_root)
        if self.seen_pid != pid:
            if self.seen_pid is not None:
                return {'exit_code': None,
                        'detail': '%s changed from PID %s to %s: the process was restarted' % (origin, self.seen_pid, pid)}
            if info is None:
                return {'exit_code': None, 'detail': 'PID %s (%s) does not exist' % (pid, origin)}
            self.seen_pid, self.seen_starttime = pid, starttime or info.starttime
        if info is None:
            return {'exit_code': None, 'detail': 'PID %s exited (exit code unknown: not our child)' % pid}
        if info.starttime != self.seen_starttime:
            return {'exit_code': None, 'detail': 'PID %s exited (the PID now belongs to another process)' % pid}
        if info.exited:
            return {'exit_code': decode_wait_status(zombie_exit_status(pid, self._proc_root)),
                    'detail': 'PID %s exited' % pid}
        return None

    def _unit_show(self):
        rc, out, dummy = self._run(['systemctl', 'show', self.unit, '-p', 'MainPID', '-p', 'ActiveState', '-p', 'SubState',
                                    '-p', 'ExecMainStatus', '-p', 'ExecMainCode', '-p', 'Result', '-p', 'LoadState'])
        props = {}
        for line in out.splitlines():
            key, sep, value = line.partition('=')
            if sep:
                props[key] = value
        return rc, props

    def _unit_verdict(self, props):
        """None while the unit runs, else the crash dict (exit code from ExecMainStatus)."""
        active, sub = props.get('ActiveState'), props.get('SubState')
        main_pid = int(props.get('MainPID') or 0)
        if active in ('failed', 'inactive') or sub == 'auto-restart' or \
                (self.unit_main_pid and main_pid and main_pid != self.unit_main_pid):
            exit_code = None
            status = props.get('ExecMainStatus')
            if status not in (None, '') and props.get('ExecMainCode') not in (None, '', '0'):
                # ExecMainCode: 1 = exited (status = exit code), 2/3 = killed/dumped (signal)
                exit_code = int(status) if props.get('ExecMainCode') == '1' else -int(status)
            return {'exit_code': exit_code,
                    'detail': 'systemd unit %s is %s (%s, result %s)' % (self.unit, active, sub, props.get('Result'))}
        if main_pid:
            self.unit_main_pid = main_pid
        return None

    def _check_unit(self, now):
        if self.unit_main_pid and now < self._next_unit_check:
            gone = self._watch_pid(self.unit_main_pid, 'unit %s' % self.unit)
            if gone is None:
                return None
            # the main process is gone: systemd notices within milliseconds; ask it for the exit status
            for dummy in range(10):
                rc, props = self._unit_show()
                verdict = self._unit_verdict(props)
                if verdict is not None or int(props.get('MainPID') or 0) != self.unit_main_pid:
                    return verdict or gone
                time.sleep(0.05)
            return gone
        self._next_unit_check = now + self._unit_period
        rc, props = self._unit_show()
        if rc != 0 or props.get('LoadState') == 'not-found':
            return {'exit_code': None, 'detail': 'systemd unit %s not found (systemctl show: rc %s)' % (self.unit, rc)}
        verdict = self._unit_verdict(props)
        if verdict is None and self.unit_main_pid:
            return self._watch_pid(self.unit_main_pid, 'unit %s' % self.unit)
        return verdict

    def check(self):
        """Return None while running, else {'exit_code', 'detail'}."""
        self.notes = []
        if self.unit:
            return self._check_unit(self._clock())
        if self.pidfile:
            pid, starttime = read_pidfile(self.pidfile)
            if pid is None:
                if self.seen_pid is not None:
                    return {'exit_code': None, 'detail': 'pidfile %s disappeared: the process %s stopped' % (self.pidfile, self.seen_pid)}
                self.notes.append('pidfile %s does not exist (yet)' % self.pidfile)
                return None
            return self._watch_pid(pid, 'pidfile %s' % self.pidfile, starttime)
        if self.pid:
            return self._watch_pid(self.pid, 'pid')
        return None
