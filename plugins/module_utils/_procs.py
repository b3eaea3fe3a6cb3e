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


def read_process(pid, proc='/proc'):
    """Return the ProcessInfo of ``pid``, or None when no such process is visible here.

    "Visible" means present in this PID namespace's procfs: PIDs that nvidia-smi reports
    for processes of another PID namespace (containers) are not, or belong to someone else.
    """
    base = os.path.join(proc, str(pid))
    try:
        with open(os.path.join(base, 'stat'), 'rb') as f:
            stat = f.read().decode('utf-8', 'replace')
        with open(os.path.join(base, 'cmdline'), 'rb') as f:
            raw_cmdline = f.read()
        uid = os.stat(base).st_uid
    except (IOError, OSError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = stat[stat.rfind(')') + 2:].split()
    try:
        state, starttime = rest[0], int(rest[19])
    except (IndexError, ValueError):
        return None
    cmdline = [a.decode('utf-8', 'replace') for a in raw_cmdline.split(b'\0')]
    while cmdline and cmdline[-1] == '':
        cmdline.pop()
    return ProcessInfo(pid, starttime, cmdline, state, uid, _user_name(uid))


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
