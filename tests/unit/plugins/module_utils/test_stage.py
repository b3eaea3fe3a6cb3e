"""Tests of plugins/module_utils/_stage.py: manifest and its cache, the verified copy, atomicity (a copy
killed with SIGKILL half-way), corruption at the source, free space, the rate limit, pruning, warming and
the JIT cache environment."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _stage


def make_checkpoint(root, shards=3, shard_bytes=64 * 1024):
    root.mkdir(parents=True, exist_ok=True)
    for i in range(shards):
        (root / ('model-%05d-of-%05d.safetensors' % (i + 1, shards))).write_bytes(os.urandom(shard_bytes))
    (root / 'config.json').write_text(json.dumps({'architectures': ['LlamaForCausalLM']}))
    (root / 'sub').mkdir(exist_ok=True)
    (root / 'sub' / 'tokenizer.json').write_text('{}')
    (root / '.git').mkdir(exist_ok=True)
    (root / '.git' / 'HEAD').write_text('ref')
    return root


@pytest.fixture
def ckpt(tmp_path):
    return make_checkpoint(tmp_path / 'src')


def test_manifest_lists_files_with_size_and_hash_and_skips_excluded(ckpt):
    manifest = _stage.build_manifest(str(ckpt), exclude=['.git'])
    paths = [f['path'] for f in manifest['files']]
    assert paths == sorted(paths) and 'sub/tokenizer.json' in paths and not any('.git' in p for p in paths)
    assert manifest['bytes'] == sum(f['size'] for f in manifest['files'])
    assert len(manifest['fingerprint']) == _stage.FINGERPRINT_CHARS
    assert _stage.validate_manifest(manifest) is manifest


def test_fingerprint_follows_content_not_mtime(ckpt):
    first = _stage.build_manifest(str(ckpt))
    os.utime(str(ckpt / 'config.json'), (1, 1))
    assert _stage.build_manifest(str(ckpt))['fingerprint'] == first['fingerprint']
    (ckpt / 'config.json').write_text('{"changed": 1}')
    assert _stage.build_manifest(str(ckpt))['fingerprint'] != first['fingerprint']


def test_manifest_is_cached_and_not_rebuilt(ckpt, tmp_path):
    cache = _stage.default_cache_path(str(ckpt), str(tmp_path / 'cache'))
    assert cache == str(ckpt / _stage.MANIFEST_NAME)
    first, built, where = _stage.load_or_build(str(ckpt), cache)
    assert built and where == cache and os.path.exists(cache)
    second, built, where = _stage.load_or_build(str(ckpt), cache)
    assert not built and second == first and where == cache
    # the manifest itself is never part of the checkpoint
    assert _stage.MANIFEST_NAME not in [f['path'] for f in _stage.build_manifest(str(ckpt))['files']]


def test_read_only_source_caches_in_the_cache_dir(ckpt, tmp_path, monkeypatch):
    monkeypatch.setattr(os, 'access', lambda path, mode: False)
    cache = _stage.default_cache_path(str(ckpt), str(tmp_path / 'cache'))
    assert cache.startswith(str(tmp_path / 'cache') + '/')


def test_a_source_that_refuses_the_write_caches_in_the_cache_dir(ckpt, tmp_path, monkeypatch):
    beside = str(ckpt / _stage.MANIFEST_NAME)
    fallback = _stage.cache_dir_path(str(ckpt), str(tmp_path / 'cache'))
    real = _stage.write_json_atomically

    def refuse_beside(path, data, mode=0o644):
        if path == beside:
            raise PermissionError(13, 'Permission denied', path)
        return real(path, data, mode)

    monkeypatch.setattr(_stage, 'write_json_atomically', refuse_beside)
    first, built, where = _stage.load_or_build(str(ckpt), beside, fallback_path=fallback)
    assert built and where == fallback and not os.path.exists(beside)
    again, built, where = _stage.load_or_build(str(ckpt), beside, fallback_path=fallback)
    assert not built and where == fallback and again == first


@pytest.mark.parametrize('tamper', ['fingerprint', 'path', 'sha'])
def test_a_tampered_manifest_is_refused(ckpt, tamper):
    manifest = _stage.build_manifest(str(ckpt))
    if tamper == 'fingerprint':
        manifest['fingerprint'] = '0' * 12
    elif tamper == 'path':
        manifest['files'][0]['path'] = '../etc/passwd'
    else:
        manifest['files'][0]['sha256'] = 'x'
    with pytest.raises(_stage.StageError):
        _stage.validate_manifest(manifest)


def test_stage_copies_renames_and_a_rerun_copies_nothing(ckpt, tmp_path):
    manifest = _stage.build_manifest(str(ckpt), exclude=['.git'])
    root = str(tmp_path / 'models')
    first = _stage.stage(str(ckpt), root, 'm', manifest)
    dest = os.path.join(root, 'm-' + manifest['fingerprint'])
    assert first['changed'] and first['path'] == dest and first['files_copied'] == len(manifest['files'])
    assert first['state_before'] == 'absent'
    for entry in manifest['files']:
        assert _stage.file_sha256(os.path.join(dest, entry['path'])) == entry['sha256']
    assert sorted(os.listdir(root)) == ['.lock-m-' + manifest['fingerprint'], 'm-' + manifest['fingerprint']]
    again = _stage.stage(str(ckpt), root, 'm', manifest)
    assert not again['changed'] and again['files_copied'] == 0 and again['state_before'] == 'complete'


def test_check_mode_writes_nothing(ckpt, tmp_path):
    manifest = _stage.build_manifest(str(ckpt))
    root = tmp_path / 'models'
    result = _stage.stage(str(ckpt), str(root), 'm', manifest, check_mode=True)
    assert result['changed'] and result['bytes_copied'] == manifest['bytes'] and not root.exists()


def test_corrupted_source_file_is_refused_by_name_and_nothing_is_staged(ckpt, tmp_path):
    manifest = _stage.build_manifest(str(ckpt))
    shard = ckpt / 'model-00002-of-00003.safetensors'
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))  # same size: only the hash can tell
    root = str(tmp_path / 'models')
    with pytest.raises(_stage.StageError) as err:
        _stage.stage(str(ckpt), root, 'm', manifest)
    assert 'model-00002-of-00003.safetensors does not match its manifest' in str(err.value)
    assert not os.path.exists(os.path.join(root, 'm-' + manifest['fingerprint']))
    partial = os.path.join(root, _stage.PARTIAL_PREFIX + 'm-' + manifest['fingerprint'])
    assert not os.path.exists(os.path.join(partial, 'model-00002-of-00003.safetensors'))
    assert not os.path.exists(os.path.join(partial, 'model-00002-of-00003.safetensors.part'))


@pytest.mark.parametrize('change, message', [
    ('remove', 'config.json: missing at the source'),
    ('grow', 'config.json: '),
    ('add', 'extra.bin: at the source but not in the manifest'),
])
def test_source_changes_are_refused_before_anything_is_written(ckpt, tmp_path, change, message):
    manifest = _stage.build_manifest(str(ckpt))
    if change == 'remove':
        (ckpt / 'config.json').unlink()
    elif change == 'grow':
        (ckpt / 'config.json').write_text('{"architectures": ["LlamaForCausalLM"], "more": 1}')
    else:
        (ckpt / 'extra.bin').write_bytes(b'x')
    root = tmp_path / 'models'
    with pytest.raises(_stage.StageError) as err:
        _stage.stage(str(ckpt), str(root), 'm', manifest)
    assert message in str(err.value) and not root.exists()


def test_too_little_free_space_is_refused_before_copying(ckpt, tmp_path, monkeypatch):
    manifest = _stage.build_manifest(str(ckpt))
    monkeypatch.setattr(_stage, 'free_bytes', lambda path: manifest['bytes'] + 10)
    root = tmp_path / 'models'
    with pytest.raises(_stage.StageError) as err:
        _stage.stage(str(ckpt), str(root), 'm', manifest, reserve_bytes=100)
    assert 'bytes free' in str(err.value) and not root.exists()
    assert _stage.stage(str(ckpt), str(root), 'm', manifest, reserve_bytes=10)['changed']


def test_throttle_keeps_the_average_rate():
    now = [0.0]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    throttle = _stage.Throttle(1000, clock=lambda: now[0], sleep=sleep)
    for dummy in range(10):
        throttle.account(500)
    assert now[0] == pytest.approx(5.0)
    assert _stage.Throttle(0).account(10 ** 12) is None


def _stage_slowly(source, root, manifest):
    _stage.stage(source, root, 'm', manifest, bwlimit=256 * 1024, chunk=16 * 1024)


def test_a_copy_killed_half_way_leaves_no_usable_directory_and_the_rerun_finishes_it(tmp_path):
    ckpt = make_checkpoint(tmp_path / 'src', shards=4, shard_bytes=256 * 1024)
    manifest = _stage.build_manifest(str(ckpt), exclude=['.git'])
    root = str(tmp_path / 'models')
    dest = os.path.join(root, 'm-' + manifest['fingerprint'])
    partial = os.path.join(root, _stage.PARTIAL_PREFIX + 'm-' + manifest['fingerprint'])
    child = multiprocessing.get_context('fork').Process(target=_stage_slowly, args=(str(ckpt), root, manifest))
    child.start()
    deadline = time.monotonic() + 30
    # wait until at least one file is finished and the next one is half-written
    while time.monotonic() < deadline:
        names = os.listdir(partial) if os.path.isdir(partial) else []
        finished = [n for n in names if n.endswith('.safetensors')]
        if finished and any(n.endswith('.part') for n in names):
            break
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    assert child.exitcode == -signal.SIGKILL
    assert not os.path.exists(dest)
    state, problems = _stage.staged_state(dest, manifest)
    assert state == 'absent'
    done_before = len(manifest['files']) - len(_stage.pending_files(partial, manifest))
    assert 0 < done_before < len(manifest['files'])
    rerun = _stage.stage(str(ckpt), root, 'm', manifest)
    assert rerun['changed'] and rerun['state_before'] == 'partial'
    assert rerun['files_copied'] == len(manifest['files']) - done_before
    assert not os.path.exists(partial)
    for entry in manifest['files']:
        assert _stage.file_sha256(os.path.join(dest, entry['path'])) == entry['sha256']
    assert not [n for n in os.listdir(dest) if n.endswith('.part')]


def test_a_staged_copy_changed_on_the_host_is_reported_and_left_alone(ckpt, tmp_path):
    manifest = _stage.build_manifest(str(ckpt))
    root = str(tmp_path / 'models')
    dest = _stage.stage(str(ckpt), root, 'm', manifest)['path']
    # the drafter role fixing config.json's architectures in place changes its size
    with open(os.path.join(dest, 'config.json'), 'w') as handle:
        handle.write('{"architectures": ["LlamaForCausalLMEagle3"]}')
    again = _stage.stage(str(ckpt), root, 'm', manifest)
    assert not again['changed'] and again['state_before'] == 'modified'
    assert again['modified'] == ['config.json: 45 bytes, 39 expected']
    with open(os.path.join(dest, 'config.json')) as handle:
        assert 'Eagle3' in handle.read()


def test_prune_keeps_copies_a_launch_file_names(ckpt, tmp_path):
    root = tmp_path / 'models'
    old_in_use = root / 'm-aaaaaaaaaaaa'
    old_unused = root / 'm-bbbbbbbbbbbb'
    partial = root / '.partial-m-cccccccccccc'
    other = root / 'other-dddddddddddd'
    current = root / 'm-eeeeeeeeeeee'
    for d in (old_in_use, old_unused, partial, other, current):
        d.mkdir(parents=True)
    etc = tmp_path / 'etc'
    etc.mkdir()
    (etc / 'sglang-main.sh').write_text('exec python -m sglang.launch_server --model-path %s --port 1\n' % old_in_use)
    # a longer name that starts with an old copy's path does not protect it
    (etc / 'note').write_text('%sX\n' % old_unused)
    removable, in_use = _stage.prune_candidates(str(root), 'm', [str(current)], [str(etc), str(tmp_path / 'none')])
    assert sorted(removable) == sorted([str(old_unused), str(partial)])
    assert in_use == {str(old_in_use): [str(etc / 'sglang-main.sh')]}
    (root / '.lock-m-bbbbbbbbbbbb').write_text('')
    (root / '.lock-m-eeeeeeeeeeee').write_text('')
    for path in removable:
        _stage.remove_tree(path)
    assert sorted(os.listdir(str(root))) == ['.lock-m-eeeeeeeeeeee', 'm-aaaaaaaaaaaa', 'm-eeeeeeeeeeee',
                                             'other-dddddddddddd']


def test_warm_reads_within_the_budget(ckpt):
    total = sum(os.path.getsize(os.path.join(r, f)) for r, dummy, fs in os.walk(str(ckpt)) for f in fs
                if '.git' not in r)
    everything = _stage.warm([str(ckpt)], budget=10 ** 12, exclude=['.git'])
    assert everything['bytes'] == total and everything['skipped_files'] == 0
    bounded = _stage.warm([str(ckpt)], budget=100 * 1024, exclude=['.git'])
    assert bounded['bytes'] <= 100 * 1024 and bounded['skipped_files'] > 0
    assert bounded['bytes'] + bounded['skipped_bytes'] == total
    asked = _stage.warm([str(ckpt), str(ckpt / 'config.json')], budget=10 ** 12, method='willneed')
    assert asked['files'] == everything['files'] + 1  # .git/HEAD not excluded here; config.json once


def test_mem_available_reads_meminfo(tmp_path):
    meminfo = tmp_path / 'meminfo'
    meminfo.write_text('MemTotal:       1000 kB\nMemAvailable:    512 kB\n')
    assert _stage.mem_available(str(meminfo)) == 512 * 1024


def test_jit_cache_env_puts_every_cache_under_one_directory():
    env = _stage.jit_cache_env('/var/lib/llmops/jit-cache/main/')
    assert env['TRITON_CACHE_DIR'] == '/var/lib/llmops/jit-cache/main/triton'
    assert env['TORCHINDUCTOR_CACHE_DIR'] == '/var/lib/llmops/jit-cache/main/torchinductor'
    # tvm-ffi (FlashInfer's JIT) reads only its own variable, not XDG_CACHE_HOME
    assert env['TVM_FFI_CACHE_DIR'] == '/var/lib/llmops/jit-cache/main/tvm-ffi'
    assert set(env) == set(_stage.JIT_CACHE_ENV)
    assert all(v.startswith('/var/lib/llmops/jit-cache/main/') for v in env.values())
