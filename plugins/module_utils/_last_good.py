# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The last good records of a server (its history, newest first): one JSON file per server under a state
directory.

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

from ansible_collections.llmops.serving.plugins.module_utils import _safetensors
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


def _digest(path, kind_of=None):
    """SHA-256 of a safetensors file's header (length prefix included), or of a whole config.json; a backup
    is hashed as the file ``kind_of`` it was taken of."""
    with open(path, 'rb') as handle:
        if not (kind_of or path).endswith('.safetensors'):
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


def backups_of(path):
    """The backups drafter_checkpoint keeps beside ``path`` (``NAME.<time>.header-backup``: the length prefix
    and header region an in-place fix overwrote; ``NAME.<time>.orig``: a hard link to the file it replaced),
    newest first."""
    head, tail = os.path.split(path)
    try:
        names = os.listdir(head or '.')
    except OSError:
        return []
    return sorted((os.path.join(head, name) for name in names
                   if name.startswith(tail + '.') and name.endswith(('.header-backup', '.orig'))), reverse=True)


def _is_backup_of(backup, path, want):
    """Whether ``backup`` holds ``path`` as fingerprinted in ``want`` ({size, sha256}) and can be put back."""
    if backup.endswith('.header-backup'):
        with open(backup, 'rb') as handle:
            saved = handle.read(MAX_HEADER_BYTES + 8)
        with open(path, 'rb') as handle:
            prefix = handle.read(8)
        # Written over the same region: the file keeps its size and header length.
        return (hashlib.sha256(saved).hexdigest() == want.get('sha256') and os.path.getsize(path) == want.get('size')
                and len(prefix) == 8 and saved[:8] == prefix)
    return os.path.getsize(backup) == want.get('size') and _digest(backup, kind_of=path) == want.get('sha256')


def _put_back(backup, path):
    if backup.endswith('.header-backup'):
        with open(backup, 'rb') as handle:
            saved = handle.read()
        _safetensors.write_header_in_place(_safetensors.read_header(path), saved[8:])
        return
    temporary = '%s.llmops-restore-%d' % (path, os.getpid())
    os.link(backup, temporary)  # the original inode, as the fix left it beside the file
    os.replace(temporary, path)
    _safetensors.fsync_dir(path)


def restore_fingerprinted(recorded, check_mode=False):
    """Put back, from drafter_checkpoint's backups, each file of ``recorded`` (a record's fingerprints) whose
    size or hash differs now. Returns (restored paths, paths that still differ: no backup holds them, or
    putting it back failed - the rollback then goes on with the launch files, as it did before backups)."""
    now = _content(fingerprint(list(recorded)))
    restored, left = [], []
    for path, want in sorted(recorded.items()):
        if now.get(path) == (want.get('size'), want.get('sha256')):
            continue
        source = next((b for b in backups_of(path) if os.path.exists(path) and _is_backup_of(b, path, want)), None)
        try:
            if source is not None and not check_mode:
                _put_back(source, path)
        except (OSError, _safetensors.SafetensorsError):
            source = None
        (left if source is None else restored).append(path)
    return restored, left


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


DEFAULT_HISTORY = 3
ID_CHARS = 12


def record_id(files, metadata, prints):
    """A record's id: the first 12 hex digits of the SHA-256 of what it holds (file paths, modes and
    contents, metadata, and the fingerprints' sizes and hashes): the same configuration recorded again
    has the same id."""
    body = dict(files=sorted([path, mode, hashlib.sha256(content).hexdigest()]
                             for path, (content, mode) in files.items()),
                metadata=metadata, fingerprints=sorted([path, list(item)] for path, item in _content(prints).items()))
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:ID_CHARS]


def _decoded(item, where):
    """One record of the file, its contents decoded to bytes and its id set (a record written before
    the history had none); ValueError naming ``where`` when it is not a valid record."""
    try:
        if not isinstance(item['recorded_at'], str) or not isinstance(item['metadata'], dict) \
                or not isinstance(item.get('fingerprints') or {}, dict):
            raise TypeError('recorded_at must be a string, metadata and fingerprints objects')
        for entry in item['files']:
            entry['content'] = base64.b64decode(entry['content'])
            if not isinstance(entry['path'], str) or not isinstance(entry['mode'], int):
                raise TypeError('a file needs a path (string) and a mode (integer)')
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError('%s is not a valid record: %s: %s' % (where, type(exc).__name__, exc))
    item['fingerprints'] = item.get('fingerprints') or {}
    item['id'] = item.get('id') or record_id(recorded_files(item), item['metadata'], item['fingerprints'])
    return item


def _encoded(item):
    return dict(item, files=[dict(path=entry['path'], mode=entry['mode'],
                                  content=base64.b64encode(entry['content']).decode('ascii'))
                             for entry in item['files']])


def select(history, which):
    """The record of ``history`` (newest first) that ``which`` names, and its index: none, V(last) or
    0 the newest (what the server last passed its checks with), V(previous) the one before it, a
    number ``n`` of at most 3 digits the record ``n`` good configurations back, anything else a record
    id (or a unique prefix of one, at least 4 characters, so an id prefix of digits only is no count).
    LookupError, listing the records, when there is none such."""
    which = 'last' if which is None or str(which).strip() == '' else str(which).strip()
    if which in ('last', 'previous') or (which.isdigit() and len(which) < 4):
        index = {'last': 0, 'previous': 1}.get(which, None)
        index = int(which) if index is None else index
        if index < len(history):
            return history[index], index
        problem = '%s (%d back) is not kept' % (which, index)
    else:
        found = [i for i, item in enumerate(history) if len(which) >= 4 and item['id'].startswith(which.lower())]
        if len(found) == 1:
            return history[found[0]], found[0]
        problem = 'no record has the id %s' % which if not found else 'the id %s is ambiguous' % which
    kept = '; '.join('%d: %s %s (version %s)' % (i, item['id'], item['recorded_at'], item['metadata'].get('version'))
                     for i, item in enumerate(history)) or 'none'
    raise LookupError('%s; the %d records kept, newest first: %s' % (problem, len(history), kept))


def restore_summary(selected, metadata, changed_files, restored_from_backup, changed_since_record):
    """One line on what ``state=restored`` puts back (or would, in check mode): the ``selected`` record, its
    engine (``metadata``), the files it restores and the drafter files put back from their backups."""
    selected, metadata = selected or {}, metadata or {}
    text = 'record %s (%s back, passed %s): %s %s, depth %s; files to restore: %s' % (
        selected.get('id'), selected.get('index'), selected.get('recorded_at'), metadata.get('engine', 'sglang'),
        metadata.get('version'), metadata.get('depth'), ', '.join(changed_files) if changed_files else 'none')
    if restored_from_backup:
        text += '; drafter files put back from their backups: ' + ', '.join(restored_from_backup)
    if changed_since_record:
        text += '; changed since it was recorded, no backup holds it, not restored: ' + ', '.join(changed_since_record)
    return text


def summary(history):
    """What ``state=read`` shows of each record (newest first): no file contents."""
    return [dict(index=i, id=item['id'], recorded_at=item['recorded_at'], metadata=item['metadata'],
                 files=[entry['path'] for entry in item['files']]) for i, item in enumerate(history)]


class Record(object):
    """The records of one server, newest first, in one JSON file:
    {"format": 2, "records": [{"id", "recorded_at", "metadata", "fingerprints",
    "files": [{"path", "mode", "content" (base64)}]}, ...]}. A file of the single-record format
    (the record's fields at the top level) reads as a history of one, rewritten at the next save."""

    def __init__(self, state_dir, name):
        if not name or '/' in name or name.startswith('.'):
            raise ValueError('name must be a plain file name, got %r' % name)
        self.state_dir = state_dir
        self.path = os.path.join(state_dir, '%s.json' % name)

    def history(self):
        """The records, newest first (empty when there is none); ValueError when the file is not valid."""
        try:
            with open(self.path, encoding='utf-8') as handle:
                data = json.load(handle)
        except FileNotFoundError:
            return []
        except ValueError as exc:
            raise ValueError('%s is not a valid record: %s' % (self.path, exc))
        if not isinstance(data, dict):
            raise ValueError('%s is not a valid record: not a JSON object' % self.path)
        items = data.get('records') if 'records' in data else [data]
        if not isinstance(items, list):
            raise ValueError('%s is not a valid record: records must be a list' % self.path)
        return [_decoded(item, '%s (record %d)' % (self.path, i) if 'records' in data else self.path)
                for i, item in enumerate(items)]

    def load(self):
        """The newest record (file contents decoded to bytes), or None when there is none; ValueError when
        the file is not valid."""
        history = self.history()
        return history[0] if history else None

    def save(self, files, metadata, fingerprints, keep=DEFAULT_HISTORY, history=None):
        """Records ``files`` ({path: (content bytes, mode)}), ``metadata`` and ``fingerprints`` as the
        newest record; the same configuration recorded before moves to the front (with the new time);
        the ``keep`` newest are kept. ``history``: the records as loaded (read again when None)."""
        history = self.history() if history is None else history
        item = dict(id=record_id(files, metadata, fingerprints),
                    recorded_at=time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), metadata=metadata,
                    fingerprints=fingerprints,
                    files=[dict(path=path, mode=mode, content=content) for path, (content, mode) in files.items()])
        records = [item] + [old for old in history if old['id'] != item['id']]
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        data = dict(format=2, records=[_encoded(old) for old in records[:max(1, keep)]])
        write_atomically(self.path, json.dumps(data, indent=1, sort_keys=True).encode(), 0o600)
