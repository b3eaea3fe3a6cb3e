# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who listens on a TCP port, from /proc (private: not an API).

A server that fails to bind its port (``[Errno 98] address already in use``) dies while
another server keeps answering on that port; a health check by URL alone then reports the
wrong server ready. These helpers name the processes whose listening sockets hold a port
(``/proc/net/tcp{,6}`` for the socket inodes, ``/proc/<pid>/fd`` for their owners), in the
network namespace of the caller. Only the standard library is used.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from ansible_collections.llmops.serving.plugins.module_utils import _procs

TCP_LISTEN = '0A'


def listening_inodes(port, proc='/proc'):
    """Inodes of the sockets that listen on ``port`` (any address, IPv4 and IPv6)."""
    inodes = set()
    for table in ('tcp', 'tcp6'):
        try:
            with open(os.path.join(proc, 'net', table), encoding='ascii') as handle:
                next(handle, None)
                for line in handle:
                    fields = line.split()
                    if len(fields) < 10 or fields[3] != TCP_LISTEN:
                        continue
                    if int(fields[1].rsplit(':', 1)[1], 16) == int(port) and fields[9] != '0':
                        inodes.add(fields[9])
        except FileNotFoundError:
            continue
    return inodes


def listeners(port, proc='/proc'):
    """The processes (``_procs.ProcessInfo``) holding a listening socket on ``port``, by PID.
    Empty when nothing listens; a socket whose owner this process may not see (another
    user's, without root) has no entry."""
    inodes = listening_inodes(port, proc)
    found = {}
    if not inodes:
        return []
    wanted = {'socket:[%s]' % inode for inode in inodes}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        fd_dir = os.path.join(proc, entry, 'fd')
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        if wanted.intersection(_readlinks(fd_dir, fds)):
            info = _procs.read_process(int(entry), proc)
            if info is not None:
                found[info.pid] = info
    return [found[pid] for pid in sorted(found)]


def _readlinks(fd_dir, fds):
    """Targets of the fd links that still exist (a descriptor may close while we look)."""
    links = set()
    for fd in fds:
        try:
            links.add(os.readlink(os.path.join(fd_dir, fd)))
        except OSError:
            continue
    return links


def describe(infos):
    """``PID 123 (python3 -m http.server 30000)``, ..., for messages."""
    return ', '.join('PID %d (%s)' % (info.pid, info.command[:200]) for info in infos) or 'an unknown process'


LOCAL_HOSTS = ('127.0.0.1', 'localhost', '::1', '0.0.0.0', '::')


def local_port(url):
    """The TCP port of ``url`` when it names this host by a loopback or any-address, else None."""
    parts = urlsplit(url)
    if parts.hostname not in LOCAL_HOSTS:
        return None
    return parts.port or (443 if parts.scheme == 'https' else 80)


def foreign_listeners(port, pid, proc='/proc'):
    """The listeners on ``port`` outside the session of ``pid`` (the server we started leads
    its session, as the process launcher and systemd start it). Empty when every listener is
    ours, or when none is visible (no verdict without evidence)."""
    fields = _procs.read_stat(pid, proc)
    if not fields or len(fields) <= _procs.STAT_SESSION:
        return []
    ours = fields[_procs.STAT_SESSION]
    others = []
    for info in listeners(port, proc):
        stat = _procs.read_stat(info.pid, proc)
        if not stat or len(stat) <= _procs.STAT_SESSION or stat[_procs.STAT_SESSION] != ours:
            others.append(info)
    return others
