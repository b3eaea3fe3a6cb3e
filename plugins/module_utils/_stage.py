# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Staging model checkpoints on a host's local disk, and warming the page cache before a restart.

One place for: the manifest of a checkpoint directory (per file size and SHA-256, computed once and
cached), its fingerprint, the staged copy (written into a hidden partial directory in the same
filesystem, each file verified against the manifest while it is copied, then the directory renamed
into place, so a half-copied model never has the staged name), the free-space check, pruning of old
copies that no launch file or record names, reading files into the page cache bounded by
``MemAvailable``, and the environment variables that put the engines' JIT caches in one persistent
directory.
"""

from __future__ import annotations

import errno
import fcntl
import fnmatch
import hashlib
import json
import os
import shutil
import time

MANIFEST_NAME = '.llmops-manifest.json'
MANIFEST_FORMAT = 1
PARTIAL_PREFIX = '.partial-'
LOCK_PREFIX = '.lock-'
CHUNK = 8 * 1024 * 1024
FINGERPRINT_CHARS = 12

# Where each JIT compiler of the engines keeps what it compiled, relative to one cache directory.
# TRITON_CACHE_DIR: Triton kernels (default ~/.triton/cache); TORCHINDUCTOR_CACHE_DIR: torch.compile
# (default /tmp/torchinductor_<user>, which a unit with PrivateTmp=true loses at every restart);
# FLASHINFER_WORKSPACE_BASE: FlashInfer's JIT modules (default ~/.cache/flashinfer); DG_JIT_CACHE_DIR:
# DeepGEMM cubins (default ~/.deep_gemm); TORCH_EXTENSIONS_DIR: torch C++/CUDA extensions;
# CUDA_CACHE_PATH: the driver's PTX JIT cache (default ~/.nv/ComputeCache); TVM_FFI_CACHE_DIR: tvm-ffi's
# JIT extensions, which FlashInfer builds on (default ~/.cache/tvm-ffi whatever XDG_CACHE_HOME says:
# apache-tvm-ffi 0.1.11, tvm_ffi/cpp/extension.py; 7.2 MB, and 30 s of graph capture when missing on the
# H200, tests/gpu/results/2026-12-05-h200); XDG_CACHE_HOME: whatever else follows the XDG rule (~/.cache).
JIT_CACHE_ENV = {
    'TRITON_CACHE_DIR': 'triton',
    'TORCHINDUCTOR_CACHE_DIR': 'torchinductor',
    'FLASHINFER_WORKSPACE_BASE': 'flashinfer',
    'DG_JIT_CACHE_DIR': 'deep_gemm',
    'TORCH_EXTENSIONS_DIR': 'torch_extensions',
    'CUDA_CACHE_PATH': 'cuda',
    'TVM_FFI_CACHE_DIR': 'tvm-ffi',
    'XDG_CACHE_HOME': 'xdg',
}


class StageError(Exception):
    """A refusal with a message a person can act on."""


def jit_cache_env(cache_dir):
    """The environment variables that put every known JIT cache under ``cache_dir``."""
    cache_dir = cache_dir.rstrip('/')
    return dict((name, '%s/%s' % (cache_dir, sub)) for name, sub in sorted(JIT_CACHE_ENV.items()))


def file_sha256(path, chunk=CHUNK, progress=None):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        _advise(handle.fileno(), 'SEQUENTIAL')
        while True:
            block = handle.read(chunk)
            if not block:
                break
            digest.update(block)
            if progress is not None:
                progress.add(len(block))
    return digest.hexdigest()


def _advise(fd, what, offset=0, length=0):
    advice = getattr(os, 'POSIX_FADV_' + what, None)
    if advice is None or not hasattr(os, 'posix_fadvise'):
        return
    try:
        os.posix_fadvise(fd, offset, length, advice)
    except OSError:
        pass


def list_files(source, exclude=()):
    """Relative paths of the regular files under ``source`` (symbolic links followed, as a Hugging Face
    snapshot's files are links into its blobs), sorted; the manifest and anything matching ``exclude``
    (fnmatch against the relative path and against each part of it) left out."""
    found = []
    for root, dirs, files in os.walk(source, followlinks=True):
        rel_root = os.path.relpath(root, source)
        dirs[:] = sorted(d for d in dirs if not _excluded(_join(rel_root, d), exclude))
        for name in files:
            rel = _join(rel_root, name)
            if name == MANIFEST_NAME or _excluded(rel, exclude):
                continue
            if os.path.isfile(os.path.join(root, name)):
                found.append(rel)
    return sorted(found)


def _join(rel_root, name):
    return name if rel_root in ('.', '') else '%s/%s' % (rel_root, name)


def _excluded(rel, exclude):
    parts = rel.split('/')
    for pattern in exclude:
        if fnmatch.fnmatch(rel, pattern) or any(fnmatch.fnmatch(part, pattern) for part in parts):
            return True
    return False


def fingerprint(files):
    """Short hash of the checkpoint's content: every relative path with its size and SHA-256."""
    canonical = json.dumps([[f['path'], f['size'], f['sha256']] for f in sorted(files, key=lambda f: f['path'])],
                           separators=(',', ':'))
    return hashlib.sha256(canonical.encode('utf-8')).hexdigest()[:FINGERPRINT_CHARS]


def build_manifest(source, exclude=(), before=None, progress=None):
    """Hash every file of ``source`` once: ``{format, source, exclude, fingerprint, bytes, files: [{path,
    size, mtime_ns, sha256}]}`` (``exclude``, the patterns it was built with, is not part of the
    fingerprint). ``before(total bytes)`` is called before the first byte is read; ``progress.add(n)``
    counts the bytes hashed."""
    files = []
    found = []
    for rel in list_files(source, exclude):
        full = os.path.join(source, rel)
        found.append((rel, full, os.stat(full)))
    if before is not None:
        before(sum(st.st_size for rel, full, st in found))
    for rel, full, st in found:
        files.append({'path': rel, 'size': st.st_size, 'mtime_ns': st.st_mtime_ns,
                      'sha256': file_sha256(full, progress=progress)})
    if not files:
        raise StageError('%s has no files to stage' % source)
    return _manifest(source, files, exclude)


def _manifest(source, files, exclude=()):
    return {
        'format': MANIFEST_FORMAT,
        'source': source,
        'exclude': list(exclude),
        'fingerprint': fingerprint(files),
        'bytes': sum(f['size'] for f in files),
        'files': files,
    }


def validate_manifest(manifest):
    """Check a manifest handed over as an argument or read from a cache; returns it with a recomputed
    fingerprint check."""
    if not isinstance(manifest, dict) or manifest.get('format') != MANIFEST_FORMAT:
        raise StageError('not a manifest of format %d: %r' % (MANIFEST_FORMAT, str(manifest)[:200]))
    files = manifest.get('files')
    if not isinstance(files, list) or not files:
        raise StageError('the manifest lists no files')
    for entry in files:
        path = entry.get('path', '')
        if not path or path.startswith('/') or '..' in path.split('/'):
            raise StageError('the manifest names an unsafe path: %r' % path)
        if not isinstance(entry.get('size'), int) or len(str(entry.get('sha256', ''))) != 64:
            raise StageError('the manifest entry of %s has no size or SHA-256' % path)
    if fingerprint(files) != manifest.get('fingerprint'):
        raise StageError('the manifest fingerprint %s does not match its files (%s)'
                         % (manifest.get('fingerprint'), fingerprint(files)))
    return manifest


def default_cache_path(source, cache_dir):
    """Beside the source where it is writable, else one file per source in ``cache_dir``."""
    if os.access(source, os.W_OK):
        return os.path.join(source, MANIFEST_NAME)
    return cache_dir_path(source, cache_dir)


def cache_dir_path(source, cache_dir):
    key = hashlib.sha256(os.path.realpath(source).encode('utf-8')).hexdigest()[:16]
    return os.path.join(cache_dir, '%s.json' % key)


def read_cached(cache_path):
    try:
        with open(cache_path) as handle:
            return validate_manifest(json.load(handle))
    except (OSError, ValueError):
        return None
    except StageError:
        return None


def source_problems(source, manifest, exclude=()):
    """What no longer agrees between the source and its manifest, by file name, without reading data:
    missing files, other sizes, files the manifest does not know. A file rewritten in place with its size
    kept is only found by its hash while it is copied."""
    problems = []
    known = set()
    for entry in manifest['files']:
        known.add(entry['path'])
        full = os.path.join(source, entry['path'])
        try:
            st = os.stat(full)
        except OSError:
            problems.append('%s: missing at the source' % entry['path'])
            continue
        if st.st_size != entry['size']:
            problems.append('%s: %d bytes at the source, %d in the manifest' % (entry['path'], st.st_size, entry['size']))
    for rel in list_files(source, exclude):
        if rel not in known:
            problems.append('%s: at the source but not in the manifest' % rel)
    return problems


def write_json_atomically(path, data, mode=0o644):
    directory = os.path.dirname(path)
    tmp = os.path.join(directory, '.%s.%d.tmp' % (os.path.basename(path), os.getpid()))
    with open(tmp, 'w') as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        handle.write('\n')
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    _fsync_dir(directory)


def _fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_or_build(source, cache_path, refresh=False, exclude=(), write=True, fallback_path=None, before=None,
                  progress=None):
    """The cached manifest of ``source`` (built and cached when there is none or ``refresh``).
    ``fallback_path`` is read too, and written where ``cache_path`` cannot be (a share that says it is
    writable and refuses root, for example). ``before`` and ``progress`` go to build_manifest(). Returns
    ``(manifest, built, path it is cached in or None)``."""
    paths = [cache_path] + ([fallback_path] if fallback_path and fallback_path != cache_path else [])
    if not refresh:
        for path in paths:
            cached = read_cached(path)
            if cached is not None and os.path.realpath(cached.get('source', '')) == os.path.realpath(source):
                return cached, False, path
    manifest = build_manifest(source, exclude, before, progress)
    if not write:
        return manifest, True, None
    last = None
    for path in paths:
        try:
            directory = os.path.dirname(path)
            if not os.path.isdir(directory):
                os.makedirs(directory, 0o755)
            write_json_atomically(path, manifest)
            return manifest, True, path
        except OSError as exc:
            last = exc
    raise last


def staged_name(name, manifest):
    return '%s-%s' % (name, manifest['fingerprint'])


def staged_state(dest, manifest):
    """``complete`` when ``dest`` holds this manifest and every file with its size, ``absent`` when it does
    not exist, else a list of what is wrong."""
    if not os.path.isdir(dest):
        return 'absent', []
    problems = []
    held = read_cached(os.path.join(dest, MANIFEST_NAME))
    if held is None or held['fingerprint'] != manifest['fingerprint']:
        problems.append('%s: no manifest with fingerprint %s' % (MANIFEST_NAME, manifest['fingerprint']))
    for entry in manifest['files']:
        try:
            size = os.stat(os.path.join(dest, entry['path'])).st_size
        except OSError:
            problems.append('%s: missing' % entry['path'])
            continue
        if size != entry['size']:
            problems.append('%s: %d bytes, %d expected' % (entry['path'], size, entry['size']))
    return ('complete' if not problems else 'damaged'), problems


def free_bytes(path):
    while not os.path.exists(path):
        path = os.path.dirname(path) or '/'
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def pending_files(partial, manifest):
    """The manifest entries not yet finished in ``partial`` (a finished file has its final name and size:
    it was verified and synced before it got that name)."""
    pending = []
    for entry in manifest['files']:
        try:
            done = os.stat(os.path.join(partial, entry['path'])).st_size == entry['size']
        except OSError:
            done = False
        if not done:
            pending.append(entry)
    return pending


class Throttle(object):
    """Keeps the average rate at or under ``rate`` bytes per second (0: no limit)."""

    def __init__(self, rate, clock=time.monotonic, sleep=time.sleep):
        self.rate = rate
        self.clock = clock
        self.sleep = sleep
        self.start = clock()
        self.done = 0

    def account(self, nbytes):
        if not self.rate:
            return
        self.done += nbytes
        ahead = self.done / float(self.rate) - (self.clock() - self.start)
        if ahead > 0:
            self.sleep(ahead)


def copy_verified(src, dst, entry, throttle, chunk=CHUNK, progress=None):
    """Copy ``src`` to ``dst`` through ``dst.part``, hashing what is read; the file gets its name only when
    its SHA-256 and size match ``entry``, after fsync. Raises StageError naming the file otherwise."""
    part = dst + '.part'
    parent = os.path.dirname(dst)
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o755)
    digest = hashlib.sha256()
    size = 0
    try:
        with open(src, 'rb') as reader, open(part, 'wb') as writer:
            _advise(reader.fileno(), 'SEQUENTIAL')
            while True:
                block = reader.read(chunk)
                if not block:
                    break
                digest.update(block)
                writer.write(block)
                size += len(block)
                if progress is not None:
                    progress.add(len(block))
                throttle.account(len(block))
            writer.flush()
            os.fsync(writer.fileno())
            # What was staged is what the server will read; drop it from the source's cache only.
            _advise(reader.fileno(), 'DONTNEED')
        if size != entry['size'] or digest.hexdigest() != entry['sha256']:
            raise StageError(
                '%s does not match its manifest (size %d, expected %d; sha256 %s, expected %s): changed or corrupted '
                'at the source after the manifest was made. Nothing was staged from it. If the source was updated '
                'on purpose, rebuild the manifest (refresh_manifest).'
                % (entry['path'], size, entry['size'], digest.hexdigest(), entry['sha256']))
        os.chmod(part, 0o644)
        os.rename(part, dst)
    except BaseException:
        if os.path.exists(part):
            os.unlink(part)
        raise
    return size


class DirLock(object):
    """An exclusive flock on ``path`` (created), held for one staging of one checkpoint on one host."""

    def __init__(self, path, timeout=None):
        self.path = path
        self.timeout = timeout
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if deadline is not None and time.monotonic() > deadline:
                    os.close(self.fd)
                    raise StageError('%s is held by another staging run' % self.path)
                time.sleep(0.2)

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def stage(source, dest_root, name, manifest, bwlimit=0, reserve_bytes=0, check_mode=False,
          lock_timeout=None, chunk=CHUNK, progress=None, before=None, meter=None):
    """Make ``dest_root/<name>-<fingerprint>`` a complete copy of ``source`` as ``manifest`` describes it.

    Returns a dict: path, changed, state_before (absent, partial, complete, modified: complete once and changed
    on the host since, listed in ``modified`` and left alone), files_copied,
    bytes_copied, seconds, bytes_per_second, free_bytes. Refuses (StageError) before writing anything
    when the source disagrees with the manifest or the disk has too little space. ``before(bytes to copy)`` is
    called once the checks passed, before anything is written; ``meter.add(n)`` counts the bytes copied;
    ``progress(entry, result)`` is called after each file."""
    validate_manifest(manifest)
    dest = os.path.join(dest_root, staged_name(name, manifest))
    partial = os.path.join(dest_root, PARTIAL_PREFIX + staged_name(name, manifest))
    result = {'path': dest, 'fingerprint': manifest['fingerprint'], 'files': len(manifest['files']),
              'bytes': manifest['bytes'], 'files_copied': 0, 'bytes_copied': 0, 'seconds': 0.0,
              'bytes_per_second': None, 'changed': False}
    state, problems = staged_state(dest, manifest)
    result['state_before'] = state
    if state == 'complete':
        result['free_bytes'] = free_bytes(dest_root)
        return result
    if state == 'damaged':
        # A staged directory only ever gets its name complete: what differs now was changed on the host
        # afterwards (the drafter role fixing a drafter's header or config.json in place). It is left alone.
        result['state_before'] = 'modified'
        result['modified'] = problems
        result['free_bytes'] = free_bytes(dest_root)
        return result
    problems = source_problems(source, manifest, manifest.get('exclude') or ())
    if problems:
        raise StageError('the source %s no longer matches its manifest (fingerprint %s): %s. If it was updated '
                         'on purpose, rebuild the manifest (refresh_manifest).'
                         % (source, manifest['fingerprint'], '; '.join(problems[:20])))
    pending = pending_files(partial, manifest) if os.path.isdir(partial) else list(manifest['files'])
    if len(pending) < len(manifest['files']):
        result['state_before'] = 'partial'
    needed = sum(entry['size'] for entry in pending)
    free = free_bytes(dest_root)
    result['free_bytes'] = free
    result['bytes_to_copy'] = needed
    if needed + reserve_bytes > free:
        raise StageError('%s has %d bytes free; staging %s needs %d more (%d to copy + %d reserve)'
                         % (dest_root, free, dest, needed + reserve_bytes - free, needed, reserve_bytes))
    result['changed'] = True
    if check_mode:
        result['files_copied'] = len(pending)
        result['bytes_copied'] = needed
        return result
    if before is not None:
        before(needed)
    if not os.path.isdir(dest_root):
        os.makedirs(dest_root, 0o755)
    started = time.monotonic()
    with DirLock(os.path.join(dest_root, LOCK_PREFIX + staged_name(name, manifest)), lock_timeout):
        state, problems = staged_state(dest, manifest)
        if state == 'complete':  # another run finished it while this one waited
            result['changed'] = False
            return result
        if not os.path.isdir(partial):
            os.makedirs(partial, 0o755)
        _remove_part_files(partial)
        throttle = Throttle(bwlimit)
        if bwlimit:  # blocks of at most an eighth of a second's worth: a smooth rate, and progress to show
            chunk = min(chunk, max(64 * 1024, bwlimit // 8))
        for entry in pending_files(partial, manifest):
            result['bytes_copied'] += copy_verified(os.path.join(source, entry['path']),
                                                    os.path.join(partial, entry['path']), entry, throttle, chunk,
                                                    meter)
            result['files_copied'] += 1
            if progress is not None:
                progress(entry, result)
        write_json_atomically(os.path.join(partial, MANIFEST_NAME), manifest)
        for root, dirs, files in os.walk(partial):
            _fsync_dir(root)
        os.rename(partial, dest)
        _fsync_dir(dest_root)
    result['seconds'] = round(time.monotonic() - started, 3)
    if result['seconds'] > 0:
        result['bytes_per_second'] = int(result['bytes_copied'] / result['seconds'])
    return result


def _remove_part_files(partial):
    for root, dirs, files in os.walk(partial):
        for name in files:
            if name.endswith('.part'):
                os.unlink(os.path.join(root, name))


def _references(path, search_dirs, max_file=1024 * 1024):
    """Files under ``search_dirs`` whose text names ``path`` (launch files, last good records)."""
    needle = path.rstrip('/').encode('utf-8')
    found = []
    for top in search_dirs:
        if os.path.isfile(top):
            candidates = [top]
        else:
            candidates = []
            for root, dirs, files in os.walk(top):
                candidates.extend(os.path.join(root, name) for name in files)
        for candidate in candidates:
            try:
                if os.path.getsize(candidate) > max_file:
                    continue
                with open(candidate, 'rb') as handle:
                    data = handle.read()
            except OSError:
                continue
            at = data.find(needle)
            while at >= 0:
                after = data[at + len(needle):at + len(needle) + 1]
                if after in (b'', b'/', b'"', b"'", b' ', b'\n', b'\\', b',', b'\t'):
                    found.append(candidate)
                    break
                at = data.find(needle, at + 1)
    return found


def prune_candidates(dest_root, name, keep, search_dirs):
    """Other copies of ``name`` under ``dest_root`` (staged or partial) and, for each, the files that still
    name it. Returns ``(removable, in_use)``: a list of paths and a dict path -> referencing files."""
    removable = []
    in_use = {}
    if not os.path.isdir(dest_root):
        return removable, in_use
    prefix = name + '-'
    for entry in sorted(os.listdir(dest_root)):
        bare = entry[len(PARTIAL_PREFIX):] if entry.startswith(PARTIAL_PREFIX) else entry
        if not bare.startswith(prefix) or len(bare) != len(prefix) + FINGERPRINT_CHARS:
            continue
        if not all(c in '0123456789abcdef' for c in bare[len(prefix):]):
            continue
        full = os.path.join(dest_root, entry)
        if full in keep or not os.path.isdir(full):
            continue
        users = _references(full, search_dirs)
        if users:
            in_use[full] = users
        else:
            removable.append(full)
    return removable, in_use


def remove_tree(path):
    """Rename out of the way first (atomic), then delete: a crash never leaves a half-deleted copy under
    the staged name."""
    parent, base = os.path.split(path)
    doomed = os.path.join(parent, '.delete-%s-%d' % (base, os.getpid()))
    os.rename(path, doomed)
    shutil.rmtree(doomed)
    bare = base[len(PARTIAL_PREFIX):] if base.startswith(PARTIAL_PREFIX) else base
    lock = os.path.join(parent, LOCK_PREFIX + bare)
    if os.path.exists(lock) and not os.path.exists(os.path.join(parent, bare)) \
            and not os.path.exists(os.path.join(parent, PARTIAL_PREFIX + bare)):
        os.unlink(lock)


def mem_available(meminfo='/proc/meminfo'):
    with open(meminfo) as handle:
        for line in handle:
            if line.startswith('MemAvailable:'):
                return int(line.split()[1]) * 1024
    raise StageError('%s has no MemAvailable line' % meminfo)


def warm_files(paths, exclude=()):
    """The regular files under each of ``paths`` (a file or a directory), in order, each once."""
    seen = set()
    out = []
    for top in paths:
        if os.path.isfile(top):
            rels = [top]
        elif os.path.isdir(top):
            rels = [os.path.join(top, rel) for rel in list_files(top, exclude)]
        else:
            raise StageError('%s does not exist' % top)
        for full in rels:
            real = os.path.realpath(full)
            if real not in seen:
                seen.add(real)
                out.append(real)
    return out


def warm_plan(paths, budget, exclude=()):
    """The files of ``paths`` to read within ``budget`` bytes, in order, as ``[(path, size)]``, and the result
    counters of those left out: a file that would go over the budget is skipped (and so is every later one
    that does not fit)."""
    plan = []
    taken = 0
    skipped = {'skipped_files': 0, 'skipped_bytes': 0}
    for full in warm_files(paths, exclude):
        try:
            size = os.path.getsize(full)
        except OSError:
            continue
        if taken + size > budget:
            skipped['skipped_files'] += 1
            skipped['skipped_bytes'] += size
            continue
        taken += size
        plan.append((full, size))
    return plan, skipped


def warm(paths, budget, method='read', exclude=(), chunk=CHUNK, before=None, progress=None):
    """Read the files under ``paths`` into the page cache, at most ``budget`` bytes: a file that would go
    over it is skipped (and so is every later one that does not fit). ``method`` ``read`` asks the kernel
    to read ahead (``posix_fadvise(WILLNEED)``) and then reads the file sequentially (done when it
    returns); ``willneed`` only asks (returns at once, the kernel reads in the background).
    Returns ``{files, bytes, seconds, skipped_files, skipped_bytes}``."""
    plan, skipped = warm_plan(paths, budget, exclude)
    if before is not None and method == 'read':
        before(sum(size for full, size in plan))
    started = time.monotonic()
    result = {'files': 0, 'bytes': 0}
    result.update(skipped)
    buf = bytearray(chunk)
    view = memoryview(buf)
    for full, size in plan:
        try:
            fd = os.open(full, os.O_RDONLY)
        except OSError:
            continue
        try:
            _advise(fd, 'WILLNEED')
            if method == 'read':
                _advise(fd, 'SEQUENTIAL')
                with os.fdopen(os.dup(fd), 'rb', buffering=0) as handle:
                    while True:
                        count = handle.readinto(view)
                        if not count:
                            break
                        if progress is not None:
                            progress.add(count)
        finally:
            os.close(fd)
        result['files'] += 1
        result['bytes'] += size
    result['seconds'] = round(time.monotonic() - started, 3)
    return result


def stage_summary(name, result):
    """One line on a staged copy: what was copied, how fast, what was pruned or kept."""
    line = '%s -> %s: %d of %d files copied (%d bytes, %s s%s)' % (
        name, result['path'], result['files_copied'], result['files'], result['bytes_copied'], result['seconds'],
        ', %d B/s' % result['bytes_per_second'] if result.get('bytes_per_second') else '')
    if result.get('pruned'):
        line += ', pruned ' + ', '.join(result['pruned'])
    if result.get('in_use'):
        line += ', kept (in use) ' + ', '.join(result['in_use'])
    return line


def warm_summary(result):
    """One line on a page cache warm-up."""
    return 'page cache warm-up: %(bytes)d bytes in %(files)d files, %(seconds)s s (bound %(budget_bytes)d bytes, ' \
           'skipped %(skipped_bytes)d bytes)' % result
