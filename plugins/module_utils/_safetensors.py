# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Safetensors headers: read, validate and rewrite without touching tensor data.

Private helper (not an API), standard library only: no torch, no numpy.

A safetensors file is an 8-byte little-endian header length ``N``, ``N`` bytes of UTF-8
JSON (``{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}``,
offsets relative to the first byte after the header, which may be padded with spaces)
and then the tensor data. Renaming tensors therefore only changes the JSON.

Two ways to write a new header:

``write_header_in_place``
    When the new JSON fits in the ``N`` bytes that are there (space padded), ``N`` and
    the data stay where they are and only the bytes that differ are written: one
    ``pwrite`` of the changed span.
``rewrite_with_header``
    Otherwise the data is streamed (``os.copy_file_range``, else ``os.sendfile``, else
    1 MiB reads) into a temporary file in the same directory, which is fsynced and
    renamed over the original.

Crash safety (a SIGKILL or power loss at any instant leaves each file either as it was
or fully fixed, and the next run finishes the job):

* ``rewrite_with_header`` and ``atomic_write`` only ever change the visible file with
  ``rename(2)``, which is atomic; the temporary file is fsynced before and the directory
  after. A leftover temporary file (``.NAME.drafter-tmp-PID``) is not a safetensors
  name and is removed by ``recover``.
* ``write_header_in_place`` is used only when the changed span lies inside one page of
  the page cache (the header of a drafter is 1-3 KiB, so it is the normal case; callers
  use ``rewrite_with_header`` otherwise). A ``pwrite`` is copied into the page cache
  page by page and a fatal signal is acted upon only between pages or on the return to
  user space, so a killed process leaves that page all old or all new. Against power
  loss (a torn write on disk) a journal ``.NAME.drafter-journal`` holding the offset,
  the old bytes and the new bytes is written to a temporary name, fsynced, renamed into
  place and the directory fsynced *before* the file is touched; the file is fsynced
  before the journal is removed. ``recover`` (run first by every caller) finds a
  journal only if the header write may not be durable. If the span holds neither the old
  nor the new bytes (a torn write after power loss), it writes the old bytes back; in
  every case it fsyncs the file before removing the journal. The file is then original
  (and the normal run applies the fix) or fixed. A journal whose checksum does not match
  was torn before its rename was durable, so the file was never touched and the journal
  is simply removed.
* Every durable step (each write, fsync, rename, link or unlink) ends with a call of
  ``durable_step()``, which does nothing; the crash-safety tests replace it to kill the
  process after each step in turn.

Concurrent runs (hosts sharing one model store): ``DirectoryLocks`` takes ``flock(2)`` on
a lock file ``.drafter-lock`` in each directory before ``recover`` and holds it until the
last write, so one run never removes another run's journal or temporary file, and a run
that waited reads the headers the other run left. The lock file is kept (removing it
would let two runs lock two different files). On local file systems ``flock`` is the
kernel's own lock. On NFS the Linux client (2.6.12 and later) emulates ``flock`` with a
whole-file POSIX byte-range lock, which the server arbitrates for every client: NFSv4
carries it in the protocol (the lock is released when the client's lease expires, by
default 90 s, if a host dies); NFSv3 needs the NLM side protocol (``lockd`` and
``rpc.statd`` running on client and server), and a mount with ``nolock`` or
``local_lock=flock``/``all`` makes the lock local to each host, which does not protect
runs on different hosts.
"""

from __future__ import annotations

import datetime
import errno
import hashlib
import json
import fcntl
import mmap
import os
import stat
import struct

# Bytes per element for every dtype the safetensors format defines.
DTYPE_SIZES = {
    'BOOL': 1, 'U8': 1, 'I8': 1, 'F8_E5M2': 1, 'F8_E4M3': 1, 'F8_E8M0': 1,
    'I16': 2, 'U16': 2, 'F16': 2, 'BF16': 2,
    'I32': 4, 'U32': 4, 'F32': 4,
    'I64': 8, 'U64': 8, 'F64': 8,
}
# The safetensors library refuses headers larger than this (HeaderTooLarge).
MAX_HEADER_BYTES = 100 * 1000 * 1000
PAGE_SIZE = mmap.PAGESIZE
COPY_CHUNK = 64 * 1024 * 1024
JOURNAL_MAGIC = b'LLMOPS-DRAFTER-JOURNAL-1\n'
JOURNAL_SUFFIX = '.drafter-journal'  # .NAME.drafter-journal beside NAME
TMP_MARK = '.drafter-tmp-'  # .NAME.drafter-tmp-PID beside NAME
LOCK_NAME = '.drafter-lock'


class SafetensorsError(Exception):
    """A file is not a valid safetensors file; the message names the file."""


def durable_step():
    """Called after each durable step; a hook for the crash-safety tests (see module doc)."""


class Header:
    """The parsed header of one safetensors file."""

    __slots__ = ('path', 'header_len', 'tensors', 'metadata', 'data_len', 'raw')

    def __init__(self, path, header_len, tensors, metadata, data_len, raw):
        self.path = path
        self.header_len = header_len  # N, the JSON region including padding
        self.tensors = tensors  # name -> {'dtype', 'shape', 'data_offsets'}, file order
        self.metadata = metadata  # the __metadata__ object or None
        self.data_len = data_len
        self.raw = raw  # the N bytes of the header region as read

    @property
    def data_start(self):
        return 8 + self.header_len

    def parameters(self):
        total = 0
        for info in self.tensors.values():
            total += _numel(info['shape'])
        return total


def _numel(shape):
    count = 1
    for dim in shape:
        count *= dim
    return count


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _serde_kind(value):
    """How the safetensors library (Rust serde) names an unexpected JSON value."""
    if isinstance(value, bool):
        return 'boolean `%s`' % json.dumps(value)
    if isinstance(value, int):
        return 'integer `%d`' % value
    if isinstance(value, float):
        return 'floating point `%r`' % value
    if value is None:
        return 'null'
    return 'sequence' if isinstance(value, list) else 'map'


def read_header(path):
    """Read and validate the header of ``path``; raise SafetensorsError naming the problem."""
    try:
        with open(path, 'rb') as f:
            size = os.fstat(f.fileno()).st_size
            prefix = f.read(8)
            if len(prefix) < 8:
                raise SafetensorsError(
                    '%s: truncated: %d bytes, shorter than the 8-byte header length of a '
                    'safetensors file' % (path, size))
            header_len = struct.unpack('<Q', prefix)[0]
            if header_len > MAX_HEADER_BYTES:
                raise SafetensorsError(
                    '%s: not a safetensors file: header length %d is absurdly large (limit %d '
                    'bytes)' % (path, header_len, MAX_HEADER_BYTES))
            if header_len > size - 8:
                raise SafetensorsError(
                    '%s: truncated or not safetensors: header length %d is larger than the '
                    '%d bytes that follow it' % (path, header_len, size - 8))
            raw = f.read(header_len)
    except OSError as exc:
        raise SafetensorsError('%s: cannot read: %s' % (path, exc.strerror or exc))
    return parse_header(path, raw, size)


INT_FORMATS = {'I8': 'b', 'U8': 'B', 'I16': 'h', 'I32': 'i', 'I64': 'q'}
MAX_INT_TENSOR_BYTES = 64 << 20  # a d2t of a 163840-token draft vocabulary is 1.3 MB


def read_int_tensor(header, name):
    """The values of the small integer tensor ``name`` (a draft -> target map, d2t), as a
    list, or None when its dtype is not an integer one or it is larger than MAX_INT_TENSOR_BYTES."""
    info = header.tensors[name]
    code = INT_FORMATS.get(info['dtype'])
    begin, end = info['data_offsets']
    if code is None or end - begin > MAX_INT_TENSOR_BYTES:
        return None
    try:
        with open(header.path, 'rb') as f:
            f.seek(header.data_start + begin)
            data = f.read(end - begin)
    except OSError as exc:
        raise SafetensorsError('%s: cannot read tensor %r: %s' % (header.path, name, exc.strerror or exc))
    if len(data) != end - begin:
        raise SafetensorsError('%s: truncated: tensor %r ends past the end of the file' % (header.path, name))
    return list(struct.unpack('<%d%s' % (len(data) // struct.calcsize(code), code), data))


def parse_header(path, raw, size):
    """Validate the header region ``raw`` of a file of ``size`` bytes."""
    try:
        doc = json.loads(raw.decode('utf-8'))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SafetensorsError('%s: header is not valid UTF-8 JSON: %s' % (path, exc))
    if not isinstance(doc, dict):
        raise SafetensorsError(
            '%s: header is JSON %s, not an object of tensors' % (path, type(doc).__name__))
    metadata = doc.pop('__metadata__', None)
    if metadata is not None and not isinstance(metadata, dict):
        raise SafetensorsError('%s: __metadata__ is not an object' % path)
    for key, value in (metadata or {}).items():
        if not isinstance(value, str):
            raise SafetensorsError(
                '%s: __metadata__ %r: safetensors refuses the file (invalid type: %s, expected '
                'a string): metadata values must be strings' % (path, key, _serde_kind(value)))
    data_len = size - 8 - len(raw)
    spans = []
    for name, info in doc.items():
        where = '%s: tensor %r' % (path, name)
        if not isinstance(info, dict):
            raise SafetensorsError('%s: entry is not an object' % where)
        dtype = info.get('dtype')
        if dtype not in DTYPE_SIZES:
            raise SafetensorsError('%s: unknown dtype %r' % (where, dtype))
        shape = info.get('shape')
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise SafetensorsError('%s: shape %r is not a list of non-negative integers'
                                   % (where, shape))
        offsets = info.get('data_offsets')
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(_is_int(o) and o >= 0 for o in offsets) or offsets[1] < offsets[0]):
            raise SafetensorsError('%s: data_offsets %r are not [begin, end]' % (where, offsets))
        if offsets[1] > data_len:
            raise SafetensorsError(
                '%s: data_offsets %r out of range: the file holds %d bytes of data (truncated?)'
                % (where, offsets, data_len))
        expected = _numel(shape) * DTYPE_SIZES[dtype]
        if offsets[1] - offsets[0] != expected:
            raise SafetensorsError(
                '%s: size mismatch: shape %r of %s needs %d bytes, data_offsets %r hold %d'
                % (where, shape, dtype, expected, offsets, offsets[1] - offsets[0]))
        spans.append((offsets[0], offsets[1], name))
    # The format requires the tensors to tile the data region without gaps or overlaps.
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            kind = 'overlap' if begin < position else 'leave a gap before'
            raise SafetensorsError(
                '%s: tensor %r: data_offsets [%d, %d] %s the previous tensor (ends at %d): '
                'overlapping or unsorted offsets' % (path, name, begin, end, kind, position))
        position = end
    if position != data_len:
        raise SafetensorsError(
            '%s: tensors cover %d bytes of data but the file holds %d: truncated or trailing '
            'bytes' % (path, position, data_len))
    return Header(path, len(raw), doc, metadata, data_len, raw)


def encode_header(tensors, metadata, size=None):
    """JSON for ``tensors`` (file order kept), space padded to ``size`` or to 8 bytes.

    Returns None when ``size`` is given and the JSON does not fit.
    """
    doc = {}
    if metadata is not None:
        doc['__metadata__'] = metadata
    doc.update(tensors)
    data = json.dumps(doc, separators=(',', ':'), ensure_ascii=False).encode('utf-8')
    if size is None:
        size = (len(data) + 7) // 8 * 8
    if len(data) > size:
        return None
    return data + b' ' * (size - len(data))


def changed_span(old, new):
    """(begin, end) of the bytes that differ between two equal-length regions, or None."""
    if old == new:
        return None
    begin = 0
    while old[begin] == new[begin]:
        begin += 1
    end = len(old)
    while old[end - 1] == new[end - 1]:
        end -= 1
    return begin, end


def in_place_is_atomic(old, new):
    """True when writing ``new`` over ``old`` (at file offset 8) touches a single page."""
    span = changed_span(old, new)
    if span is None:
        return True
    return (8 + span[0]) // PAGE_SIZE == (8 + span[1] - 1) // PAGE_SIZE


def journal_path(path):
    head, tail = os.path.split(path)
    return os.path.join(head, '.%s%s' % (tail, JOURNAL_SUFFIX))


def _tmp_path(path):
    head, tail = os.path.split(path)
    return os.path.join(head, '.%s%s%d' % (tail.lstrip('.'), TMP_MARK, os.getpid()))


def backup_path(path, kind):
    """A new name beside ``path`` for a backup (``kind``: header-backup or orig)."""
    stamp = datetime.datetime.now().strftime('%Y%m%dT%H%M%S')
    candidate = '%s.%s.%s' % (path, stamp, kind)
    n = 1
    while os.path.lexists(candidate):
        n += 1
        candidate = '%s.%s-%d.%s' % (path, stamp, n, kind)
    return candidate


def fsync_dir(path):
    fd = os.open(os.path.dirname(os.path.abspath(path)) or '.', os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd, data, offset=None):
    view = memoryview(data)
    while view:
        if offset is None:
            n = os.write(fd, view)
        else:
            n = os.pwrite(fd, view, offset)
            offset += n
        view = view[n:]


def atomic_write(path, data, mode=None):
    """Replace ``path`` (a symlink is replaced, not followed) with ``data``, durably."""
    tmp = _tmp_path(path)
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            mode = 0o644
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        _write_all(fd, data)
        durable_step()
        os.fsync(fd)
        durable_step()
    finally:
        os.close(fd)
    try:
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    durable_step()
    fsync_dir(path)
    durable_step()


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _encode_journal(offset, old, new):
    body = JOURNAL_MAGIC + struct.pack('<QQ', offset, len(old)) + old + new
    return body + hashlib.sha256(body).digest()


def _decode_journal(data):
    """(offset, old, new) or None when the journal is torn or foreign."""
    if len(data) < len(JOURNAL_MAGIC) + 16 + 32 or not data.startswith(JOURNAL_MAGIC):
        return None
    body, digest = data[:-32], data[-32:]
    if hashlib.sha256(body).digest() != digest:
        return None
    offset, length = struct.unpack('<QQ', body[len(JOURNAL_MAGIC):len(JOURNAL_MAGIC) + 16])
    rest = body[len(JOURNAL_MAGIC) + 16:]
    if len(rest) != 2 * length:
        return None
    return offset, rest[:length], rest[length:]


def _leftovers(directory):
    """(journals, temporary files) that interrupted runs left in ``directory``."""
    journals, temps = [], []
    for name in sorted(os.listdir(directory)):
        if not name.startswith('.'):
            continue
        if TMP_MARK in name:
            temps.append(os.path.join(directory, name))
        elif name.endswith(JOURNAL_SUFFIX):
            journals.append(os.path.join(directory, name))
    return journals, temps


class DirectoryLocks:
    """``flock`` on ``LOCK_NAME`` in each of ``directories`` (see module doc), as a context.

    ``exclusive``: an exclusive lock where the directory is writable, on a lock file that
    exists or, with ``create``, is created; a shared lock elsewhere (check mode, a
    directory this user cannot write), so that a reader never sees a header half
    written. No lock where there is no lock file to take. ``self.exclusive``: the
    directories locked exclusively. The directories are locked in sorted order, so two
    runs never wait for each other in a cycle.
    """

    def __init__(self, directories, exclusive=True, create=False):
        self.directories = sorted(set(directories))
        self.want_exclusive = exclusive
        self.create = create
        self.exclusive = set()
        self.fds = []

    def __enter__(self):
        try:
            for directory in self.directories:
                self._lock(directory)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _lock(self, directory):
        path = os.path.join(directory, LOCK_NAME)
        exclusive = self.want_exclusive and os.access(directory, os.W_OK)
        flags = os.O_RDWR | (os.O_CREAT if self.create else 0) if exclusive else os.O_RDONLY
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.EACCES) and not (exclusive and self.create):
                return
            raise
        self.fds.append(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        except OSError as exc:
            raise SafetensorsError(
                '%s: cannot lock: %s (on NFSv3 the lock needs lockd and rpc.statd on the client '
                'and the server)' % (path, exc.strerror or exc))
        if exclusive:
            self.exclusive.add(directory)

    def __exit__(self, *exc_info):
        while self.fds:
            os.close(self.fds.pop())


def pending_recovery(directory):
    """True when an interrupted fix left a journal or temporary file in ``directory``."""
    journals, temps = _leftovers(directory)
    return bool(journals or temps)


def recover(directory):
    """Undo interrupted in-place writes and drop leftovers of interrupted rewrites.

    Returns a list of what was done (empty when nothing was pending).
    """
    done = []
    journals, temps = _leftovers(directory)
    for path in temps:
        os.unlink(path)
        done.append('removed leftover temporary file %s' % path)
    for journal in journals:
        target = os.path.join(directory, os.path.basename(journal)[1:-len(JOURNAL_SUFFIX)])
        with open(journal, 'rb') as f:
            entry = _decode_journal(f.read())
        if entry is not None and os.path.exists(target):
            offset, old, new = entry
            fd = os.open(target, os.O_RDWR)
            try:
                current = os.pread(fd, len(new), offset)
                if current not in (old, new):
                    _write_all(fd, old, offset)
                    done.append('restored the original header of %s' % target)
                os.fsync(fd)
            finally:
                os.close(fd)
        os.unlink(journal)
        fsync_dir(journal)
        done.append('removed journal %s' % journal)
    return done


def write_header_in_place(header, new_region, backup=False):
    """Write ``new_region`` (same length as the header) over the header of ``header.path``.

    The caller has checked ``in_place_is_atomic``. Returns (bytes written, backup path).
    """
    path = header.path
    old_region = header.raw
    if len(new_region) != len(old_region):
        raise ValueError('in-place header must keep its length')
    span = changed_span(old_region, new_region)
    if span is None:
        return 0, None
    saved = None
    if backup:
        saved = backup_path(path, 'header-backup')
        atomic_write(saved, struct.pack('<Q', header.header_len) + old_region, 0o644)
    offset = 8 + span[0]
    old, new = old_region[span[0]:span[1]], new_region[span[0]:span[1]]
    fd = os.open(path, os.O_RDWR)
    try:
        _verify_unchanged(header, fd)
        atomic_write(journal_path(path), _encode_journal(offset, old, new), 0o600)
        _write_all(fd, new, offset)
        durable_step()
        os.fsync(fd)
        durable_step()
    finally:
        os.close(fd)
    os.unlink(journal_path(path))
    durable_step()
    fsync_dir(path)
    durable_step()
    return len(new), saved


def _verify_unchanged(header, fd):
    """Raise unless the open file ``fd`` still has the header and size ``header`` was read
    with (another writer may have changed it since: its data would be at other offsets)."""
    expected = struct.pack('<Q', header.header_len) + header.raw
    if (os.pread(fd, len(expected), 0) != expected
            or os.fstat(fd).st_size != header.data_start + header.data_len):
        raise SafetensorsError('%s: header changed while it was being fixed' % header.path)


def _copy_range(src, dst, src_offset, dst_offset, length):
    """Copy ``length`` bytes between file descriptors in the kernel where possible."""
    copy_file_range = getattr(os, 'copy_file_range', None)
    while length > 0:
        chunk = min(length, COPY_CHUNK)
        n = 0
        if copy_file_range is not None:
            try:
                n = copy_file_range(src, dst, chunk, src_offset, dst_offset)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                copy_file_range = None
        if not n:
            os.lseek(dst, dst_offset, os.SEEK_SET)
            try:
                n = os.sendfile(dst, src, src_offset, chunk)
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.ENOSYS):
                    raise
                data = os.pread(src, min(chunk, 1024 * 1024), src_offset)
                _write_all(dst, data)
                n = len(data)
        if not n:
            raise OSError(errno.EIO, 'unexpected end of file while copying tensor data')
        src_offset += n
        dst_offset += n
        length -= n


def rewrite_with_header(header, new_region, dest=None, backup=False):
    """Stream ``header.path`` with ``new_region`` as its header into ``dest`` (default: the
    same path) through a fsynced temporary file and one rename.

    ``dest`` may be a symlink pointing at ``header.path``: it is replaced by a private
    file and the link target is left untouched. Returns (bytes written, backup path).
    """
    src_path = header.path
    dest = dest or src_path
    mode = stat.S_IMODE(os.stat(src_path).st_mode)
    tmp = _tmp_path(dest)
    saved = None
    fd_in = os.open(src_path, os.O_RDONLY)
    try:
        _verify_unchanged(header, fd_in)
        fd_out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            _write_all(fd_out, struct.pack('<Q', len(new_region)) + new_region)
            _copy_range(fd_in, fd_out, header.data_start, 8 + len(new_region), header.data_len)
            durable_step()
            os.fsync(fd_out)
            durable_step()
        finally:
            os.close(fd_out)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    finally:
        os.close(fd_in)
    if backup and not os.path.islink(dest):
        saved = backup_path(dest, 'orig')
        os.link(dest, saved)
        durable_step()
    os.rename(tmp, dest)
    durable_step()
    fsync_dir(dest)
    durable_step()
    return 8 + len(new_region) + header.data_len, saved
