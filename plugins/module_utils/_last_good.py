# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The last good record of a server: one JSON file per server under a state directory.

Private helper (not an API), shared by ``last_good_config`` (which writes and restores records) and
``launch_files`` (which tells, read-only, whether a record already holds what a deploy would record).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import time

from ansible_collections.llmops.serving.plugins.module_utils._files import write_atomically

DEFAULT_STATE_DIR = '/var/lib/llmops/last-good'
MAX_HEADER_BYTES = 100 * 1024 * 1024


def read_file(path):
    """(content bytes, mode) of ``path``, or (None, None) when it does not exist."""
    try:
        with open(path, 'rb') as handle:
            return handle.read(), os.fstat(handle.fileno()).st_mode & 0o7777
    except FileNotFoundError:
        return None, None


def _digest(path):
    """SHA-256 of a safetensors file's header (length prefix included), or of a whole config.json."""
    with open(path, 'rb') as handle:
        if not path.endswith('.safetensors'):
            return hashlib.sha256(handle.read()).hexdigest()
        prefix = handle.read(8)
        length = struct.unpack('<Q', prefix)[0] if len(prefix) == 8 else 0
        return hashlib.sha256(prefix + handle.read(min(length, MAX_HEADER_BYTES))).hexdigest()


def fingerprint(paths):
    """``{file: {size, mtime_ns, sha256}}`` of the safetensors files and config.json files in ``paths``."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            files.extend(os.path.join(path, name) for name in sorted(os.listdir(path))
                         if name.endswith('.safetensors') or name == 'config.json')
        elif os.path.exists(path):
            files.append(path)
    out = {}
    for path in files:
        stat = os.stat(path)
        out[path] = dict(size=stat.st_size, mtime_ns=stat.st_mtime_ns, sha256=_digest(path))
    return out


def _content(prints):
    """What a fingerprint compares on: size and hash (a touched mtime alone is no change)."""
    return {path: (item.get('size'), item.get('sha256')) for path, item in (prints or {}).items()}


def recorded_files(data):
    """``{path: (content bytes, mode)}`` of a loaded record (empty for None)."""
    return {item['path']: (item['content'], item['mode']) for item in data['files']} if data else {}


def matches(data, files, metadata, prints):
    """Whether recording ``files`` ({path: (content bytes, mode)}), ``metadata`` and the fingerprints ``prints``
    over the loaded record ``data`` (None: there is none) would change nothing."""
    return (data is not None and recorded_files(data) == files and data['metadata'] == metadata
            and _content(data.get('fingerprints')) == _content(prints))


class Record(object):
    """The JSON record of one server: {"recorded_at", "metadata", "fingerprints",
    "files": [{"path", "mode", "content" (base64)}]}."""

    def __init__(self, state_dir, name):
        if not name or '/' in name or name.startswith('.'):
            raise ValueError('name must be a plain file name, got %r' % name)
        self.state_dir = state_dir
        self.path = os.path.join(state_dir, '%s.json' % name)

    def load(self):
        """The record (file contents decoded to bytes), or None when there is none; ValueError when it is not a
        valid record."""
        try:
            with open(self.path, encoding='utf-8') as handle:
                data = json.load(handle)
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise ValueError('%s is not a valid record: %s' % (self.path, exc))
        try:
            if not isinstance(data['recorded_at'], str) or not isinstance(data['metadata'], dict) \
                    or not isinstance(data.get('fingerprints') or {}, dict):
                raise TypeError('recorded_at must be a string, metadata and fingerprints objects')
            for item in data['files']:
                item['content'] = base64.b64decode(item['content'])
                if not isinstance(item['path'], str) or not isinstance(item['mode'], int):
                    raise TypeError('a file needs a path (string) and a mode (integer)')
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError('%s is not a valid record: %s: %s' % (self.path, type(exc).__name__, exc))
        return data

    def save(self, files, metadata, fingerprints):
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        data = dict(recorded_at=time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), metadata=metadata,
                    fingerprints=fingerprints,
                    files=[dict(path=path, mode=mode, content=base64.b64encode(content).decode('ascii'))
                           for path, (content, mode) in files.items()])
        write_atomically(self.path, json.dumps(data, indent=1, sort_keys=True).encode(), 0o600)
