# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Following a server's log: a file from a byte offset (rotation, truncation) or a systemd unit's journal.

State travels between module runs as plain dicts (``export()``).
"""

from __future__ import annotations

import json
import os
import subprocess

_MAX_PARTIAL = 65536


class LogFollower(object):
    """Follows a file from a byte offset, across calls, noticing rotation and truncation.

    State (``offset``, ``inode``, ``partial``) is a plain dict so it can travel between
    module invocations. Rotation: the path now has another inode (the rest of the old
    file is read first when it is still open). Truncation: same inode, size below the
    offset (reading restarts at 0).
    """

    def __init__(self, path, state=None, start='beginning'):
        self.path = path
        state = state or {}
        self.offset = state.get('offset')
        self.inode = state.get('inode')
        self.partial = state.get('partial', '')
        self.events = []
        self.missing = False
        self._fh = None
        self._start = start

    def export(self):
        return {'offset': self.offset, 'inode': self.inode, 'partial': self.partial[-_MAX_PARTIAL:]}

    def close(self):
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def _open(self, st):
        self.close()
        self._fh = open(self.path, 'rb')
        if self.inode is not None and self.inode != st.st_ino:
            self.events.append('log file %s was replaced (rotated); reading the new file from its start' % self.path)
            self.offset = 0
            self.partial = ''
        elif self.offset is None:
            self.offset = st.st_size if self._start == 'end' else 0
        elif st.st_size < self.offset:
            self.events.append('log file %s was truncated; reading from its start' % self.path)
            self.offset = 0
            self.partial = ''
        self.inode = st.st_ino
        self._fh.seek(self.offset)

    def _read_open(self):
        data = self._fh.read()
        self.offset += len(data)
        return data

    def poll(self):
        """Return the complete new lines (raw text, may hold \\r segments)."""
        try:
            st = os.stat(self.path)
        except OSError:
            self.missing = True
            # a rotated-away file still open: drain it
            return self._split(self._read_open()) if self._fh is not None else []
        self.missing = False
        data = b''
        if self._fh is None:
            self._open(st)
        elif st.st_ino != self.inode:
            data = self._read_open()  # rest of the rotated file
            self._open(st)
        elif st.st_size < self.offset:
            self._open(st)
        data += self._read_open()
        return self._split(data)

    def _split(self, data):
        if not data:
            return []
        text = self.partial + data.decode('utf-8', errors='replace')
        lines = text.split('\n')
        self.partial = lines.pop()
        if len(self.partial) > _MAX_PARTIAL:  # an endless progress bar: emit it
            lines.append(self.partial)
            self.partial = ''
        return lines


class JournalFollower(object):
    """Follows the journal of a systemd unit (current invocation) with ``journalctl -f``.

    State: the journal ``cursor`` of the last entry read and the unit's ``invocation``.
    ``run`` runs a short command, ``(argv) -> (rc, stdout, stderr)`` (the module's
    ``run_command``); ``journalctl -f`` itself is a pipe read while it runs, so it is a
    ``Popen`` of its own.
    """

    settle = 1.0  # seconds journald may need to hand over a crashed unit's last lines

    def __init__(self, unit, state=None, run=None):
        self.unit = unit
        state = state or {}
        self.cursor = state.get('cursor')
        self.invocation = state.get('invocation')
        self.events = []
        self.missing = False
        self._proc = None
        self._buf = b''
        self._run = run

    def export(self):
        return {'cursor': self.cursor, 'invocation': self.invocation}

    def _start(self):
        if not self.invocation:
            rc, out, dummy = self._run(['systemctl', 'show', '-p', 'InvocationID', '--value', self.unit])
            self.invocation = out.strip() if rc == 0 and out.strip() else None
        cmd = ['journalctl', '--no-pager', '-o', 'json', '-f']
        if self.cursor:
            cmd += ['--after-cursor', self.cursor, '-n', 'all']
        else:
            cmd += ['-n', 'all']
        if self.invocation:
            # the unit's own lines and systemd's lines about this run of the unit
            cmd += ['_SYSTEMD_INVOCATION_ID=%s' % self.invocation, '+', 'INVOCATION_ID=%s' % self.invocation]
        else:
            cmd += ['-u', self.unit]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        os.set_blocking(self._proc.stdout.fileno(), False)

    def poll(self):
        if self._proc is None:
            self._start()
        chunks = []
        while True:
            try:
                chunk = self._proc.stdout.read(65536)
            except (BlockingIOError, InterruptedError):
                chunk = None
            if not chunk:
                break
            chunks.append(chunk)
        self._buf += b''.join(chunks)
        *complete, self._buf = self._buf.split(b'\n')
        lines = []
        for raw in complete:
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            message = entry.get('MESSAGE')
            if isinstance(message, list):  # journald stores non-UTF-8 as a byte array
                message = bytes(message).decode('utf-8', errors='replace')
            self.cursor = entry.get('__CURSOR', self.cursor)
            if message is not None:
                lines.extend(str(message).split('\n'))
        return lines

    def close(self):
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc.stdout.close()
            self._proc = None
