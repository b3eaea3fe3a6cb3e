"""Tests of plugins/modules/model_stage.py and page_cache_warm.py: manifest once then staging with it,
rerun unchanged, check and diff mode, a corrupted source file refused by name, pruning, warming."""

from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _stage
from ansible_collections.llmops.serving.plugins.modules import model_stage, page_cache_warm
from ansible_collections.llmops.serving.tests.unit.plugins.modules._module_runner import record_warnings, run_main


def run(capsys, main=model_stage.main, check=False, diff=False, **args):
    return run_main(main, capsys, _ansible_check_mode=check, _ansible_diff=diff, **args)[0]


@pytest.fixture
def ckpt(tmp_path):
    src = tmp_path / 'src'
    src.mkdir()
    (src / 'model.safetensors').write_bytes(os.urandom(300000))
    (src / 'config.json').write_text('{"architectures": ["LlamaForCausalLM"]}')
    return src


def test_manifest_then_stage_then_rerun(capsys, ckpt, tmp_path):
    root = str(tmp_path / 'models')
    made = run(capsys, name='m', source=str(ckpt), state='manifest')
    assert made['changed'] and made['manifest_built'] and made['manifest']['bytes'] == made['bytes']
    cached = run(capsys, name='m', source=str(ckpt), state='manifest')
    assert not cached['changed'] and not cached['manifest_built']
    checked = run(capsys, check=True, diff=True, name='m', source=str(ckpt), dest_root=root,
                  manifest=made['manifest'], reserve_bytes=0)
    assert checked['changed'] and checked['bytes_copied'] == made['bytes'] and not os.path.exists(root)
    assert checked['diff']['before']['path'] == '' and checked['diff']['after']['path'] == checked['path']
    first = run(capsys, name='m', source=str(ckpt), dest_root=root, manifest=made['manifest'], reserve_bytes=0)
    assert first['changed'] and first['path'] == os.path.join(root, 'm-' + made['fingerprint'])
    assert first['files_copied'] == 2 and first['bytes_copied'] == made['bytes']
    second = run(capsys, name='m', source=str(ckpt), dest_root=root, manifest=made['manifest'], reserve_bytes=0)
    assert not second['changed'] and second['files_copied'] == 0 and second['state_before'] == 'complete'


def test_without_a_manifest_the_cached_one_is_used(capsys, ckpt, tmp_path):
    root = str(tmp_path / 'models')
    first = run(capsys, name='m', source=str(ckpt), dest_root=root, reserve_bytes=0)
    assert first['changed'] and first['manifest_built']
    second = run(capsys, name='m', source=str(ckpt), dest_root=root, reserve_bytes=0)
    assert not second['changed'] and not second['manifest_built']


def test_a_corrupted_file_is_refused_by_name(capsys, ckpt, tmp_path):
    root = str(tmp_path / 'models')
    made = run(capsys, name='m', source=str(ckpt), state='manifest')
    with open(str(ckpt / 'model.safetensors'), 'r+b') as handle:
        handle.seek(1234)
        byte = handle.read(1)
        handle.seek(1234)
        handle.write(bytes([byte[0] ^ 1]))
    failed = run(capsys, name='m', source=str(ckpt), dest_root=root, manifest=made['manifest'], reserve_bytes=0)
    assert failed['failed'] and 'model.safetensors does not match its manifest' in failed['msg']
    assert not os.path.exists(os.path.join(root, 'm-' + made['fingerprint']))


def test_bad_name_and_missing_source_fail_with_a_message(capsys, tmp_path):
    bad = run(capsys, name='../x', source=str(tmp_path))
    assert bad['failed'] and 'name' in bad['msg']
    missing = run(capsys, name='m', source=str(tmp_path / 'nope'))
    assert missing['failed'] and 'not a directory' in missing['msg']


def test_prune_removes_only_unreferenced_copies(capsys, ckpt, tmp_path):
    root = tmp_path / 'models'
    (root / 'm-111111111111').mkdir(parents=True)
    (root / 'm-222222222222').mkdir()
    etc = tmp_path / 'etc'
    etc.mkdir()
    (etc / 'sglang-main.env').write_text('MODEL=%s\n' % (root / 'm-111111111111'))
    checked = run(capsys, check=True, name='m', source=str(ckpt), dest_root=str(root), reserve_bytes=0,
                  prune=True, prune_protect=[str(etc)])
    assert checked['pruned'] == [str(root / 'm-222222222222')] and (root / 'm-222222222222').exists()
    done = run(capsys, name='m', source=str(ckpt), dest_root=str(root), reserve_bytes=0,
               prune=True, prune_protect=[str(etc)])
    assert done['pruned'] == [str(root / 'm-222222222222')] and not (root / 'm-222222222222').exists()
    assert list(done['in_use']) == [str(root / 'm-111111111111')]
    again = run(capsys, name='m', source=str(ckpt), dest_root=str(root), reserve_bytes=0,
                prune=True, prune_protect=[str(etc)])
    assert not again['changed'] and again['pruned'] == []


def test_page_cache_warm_reads_and_never_changes(capsys, ckpt, monkeypatch):
    monkeypatch.setattr(_stage, 'mem_available', lambda: 10 ** 9)
    warnings = record_warnings(monkeypatch)
    warm = run(capsys, main=page_cache_warm.main, paths=[str(ckpt)])
    assert not warm['changed'] and warm['files'] == 2 and warm['bytes'] > 300000
    assert warm['budget_bytes'] == int(10 ** 9 * 0.8)
    bounded = run(capsys, main=page_cache_warm.main, paths=[str(ckpt)], max_bytes=1000)
    assert bounded['files'] == 1 and bounded['skipped_files'] == 1
    assert any('did not fit' in w for w in warnings)
    checked = run(capsys, main=page_cache_warm.main, check=True, paths=[str(ckpt)])
    assert checked['bytes'] == 0 and not checked['changed']
    missing = run(capsys, main=page_cache_warm.main, paths=[str(ckpt / 'nope')])
    assert missing['failed'] and 'does not exist' in missing['msg']
