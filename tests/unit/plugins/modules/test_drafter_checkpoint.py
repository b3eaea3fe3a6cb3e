# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from ansible_collections.llmops.serving.plugins.modules import drafter_checkpoint
from ansible_collections.llmops.serving.tests.unit.plugins.modules._module_runner import run_main
from ansible_collections.llmops.serving.tests.unit._drafter_factory import (
    drafter_config, drafter_tensors, mla_drafter_config, mla_drafter_tensors, read_all, target_config,
    write_drafter, write_target)


def run(capsys, check=False, diff=False, **args):
    return run_main(drafter_checkpoint.main, capsys, _ansible_check_mode=check, _ansible_diff=diff, **args)[0]


def snapshot(directory):
    """path -> (is link, sha256) of everything under ``directory``."""
    out = {}
    for root, dirs, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, 'rb') as f:
                out[os.path.relpath(path, directory)] = (os.path.islink(path), hashlib.sha256(f.read()).hexdigest())
    return out


def same_data(directory, written, rename):
    after = read_all(directory)
    assert sorted(after) == sorted(rename(n) for n in written)
    for name, array in written.items():
        np.testing.assert_array_equal(after[rename(name)], array)


def to_mid(name):
    return name.replace('layers.0.', 'midlayer.')


def test_fix_layers0_for_sglang_in_place_then_idempotent(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    written = write_drafter(d)
    first = run(capsys, path=d, engine_version='0.5.11')
    assert first['changed'] and first['renamed'] == 10 and first['problems'] == []
    assert (first['layout_before'], first['layout_after']) == ('layers', 'midlayer')
    assert [f['method'] for f in first['files']] == ['header_in_place']
    assert 0 < first['files'][0]['bytes_written'] < 4096
    assert first['tensors'] == 15 and first['parameters'] > 0
    assert first['summary'] == '%s: 15 tensors, layout layers -> midlayer, 10 renamed (header_in_place), config unchanged' % d
    assert len(first['fixed_problems']) == 10 and 'silently dropped' in first['fixed_problems'][0]
    assert first['renames'][0]['to'].startswith('midlayer.')
    same_data(d, written, to_mid)
    second = run(capsys, path=d, engine_version='0.5.11')
    assert not second['changed'] and second['files'][0]['method'] == 'unchanged'
    assert second['layout_before'] == 'midlayer'


def test_check_mode_changes_nothing_and_reports(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    write_drafter(d, architectures=['LlamaForCausalLM'])
    before = snapshot(d)
    result = run(capsys, check=True, diff=True, path=d)
    assert result['changed'] and result['config_changed'] and result['renamed'] == 10
    assert result['files'][0]['method'] == 'header_in_place' and result['files'][0]['bytes_written'] > 0
    assert snapshot(d) == before
    assert 'layers.0.mlp.up_proj.weight' in result['diff']['before']['tensors']
    assert 'midlayer.mlp.up_proj.weight' in result['diff']['after']['tensors']
    assert result['diff']['after']['architectures'] == ['LlamaForCausalLMEagle3']


def test_diff_absent_without_diff_mode(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    write_drafter(d, spelling='midlayer')
    assert 'diff' not in run(capsys, path=d)


@pytest.mark.parametrize('engine, version', [('vllm', None), ('sglang', '0.5.12'), ('sglang', '0.5.23')])
def test_layers0_already_loads(tmp_path, capsys, engine, version):
    d = str(tmp_path / 'drafter')
    write_drafter(d)
    before = snapshot(d)
    result = run(capsys, path=d, engine=engine, engine_version=version)
    assert not result['changed'] and result['layout_after'] == 'layers' and snapshot(d) == before


def test_fix_false_fails_on_problems_and_changes_nothing(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    write_drafter(d)
    before = snapshot(d)
    result = run(capsys, path=d, fix=False, engine_version='0.5.11')
    assert result['failed'] and 'SGLang 0.5.11' in result['msg'] and 'silently dropped' in result['msg']
    assert len(result['problems']) == 10 and not result['changed'] and snapshot(d) == before
    good = run(capsys, path=d, fix=False, engine='vllm')
    assert not good.get('failed') and not good['changed']


def test_vllm_model_prefix_is_stripped(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    written = write_drafter(d, spelling='midlayer', prefix='model.')
    result = run(capsys, path=d, engine='vllm')
    assert result['renamed'] == 15 and result['files'][0]['method'] == 'header_in_place'
    same_data(d, written, lambda n: n[len('model.'):])
    assert not run(capsys, path=d, engine='vllm')['changed']


def test_rename_rule_that_grows_the_header_rewrites_the_file(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    config = drafter_config()
    written = {n.replace('layers.0.', 'L0.'): a for n, a in drafter_tensors(config).items()}
    write_drafter(d, config=config, tensors=written)
    result = run(capsys, path=d, rename=[{'from': 'L0.', 'to': 'midlayer.'}], backup=True)
    entry = result['files'][0]
    assert entry['method'] == 'rewritten' and entry['bytes_written'] == os.path.getsize(entry['path'])
    assert set(load_file(entry['backup_file'])) == set(written)
    same_data(d, written, lambda n: n.replace('L0.', 'midlayer.'))
    assert not run(capsys, path=d, rename=[{'from': 'L0.', 'to': 'midlayer.'}])['changed']


def test_sharded_drafter_and_index(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    written = write_drafter(d, shards=2)
    result = run(capsys, path=d)
    assert [f['method'] for f in result['files']] == ['header_in_place'] * 2 and result['index_changed']
    with open(os.path.join(d, 'model.safetensors.index.json')) as f:
        index = json.load(f)
    assert index['metadata'] == {'total_size': 0}
    assert sorted(index['weight_map']) == sorted(to_mid(n) for n in written)
    for name, fname in index['weight_map'].items():
        assert name in load_file(os.path.join(d, fname))
    same_data(d, written, to_mid)
    assert not run(capsys, path=d)['changed']


def test_architecture_fix_and_its_opt_out(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    write_drafter(d, spelling='midlayer', architectures=['LlamaForCausalLM'])
    refused = run(capsys, path=d, fix_architecture=False)
    assert refused['failed'] and "KeyError: 'midlayer.self_attn.qkv_proj.weight'" in refused['msg']
    result = run(capsys, path=d, backup=True)
    assert result['changed'] and result['config_changed'] and result['files'][0]['method'] == 'unchanged'
    with open(os.path.join(d, 'config.json')) as f:
        config = json.load(f)
    assert config['architectures'] == ['LlamaForCausalLMEagle3'] and config['hidden_size'] == 32
    with open(result['config_backup_file']) as f:
        assert json.load(f)['architectures'] == ['LlamaForCausalLM']
    assert not run(capsys, path=d)['changed']


@pytest.mark.parametrize('version, layout, message', [
    (None, 'auto', 'set engine_version'),
    ('0.5.11', 'auto', 'rejects num_hidden_layers != 1'),
    ('0.5.12', 'midlayer', 'layout midlayer holds one layer'),
])
def test_multi_layer_drafter_errors(tmp_path, capsys, version, layout, message):
    d = str(tmp_path / 'drafter')
    write_drafter(d, layers=2)
    before = snapshot(d)
    result = run(capsys, path=d, engine_version=version, layout=layout)
    assert result['failed'] and message in result['msg'] and snapshot(d) == before


def test_multi_layer_drafter_to_layers(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    written = write_drafter(d, layers=2, spelling='midlayer')
    result = run(capsys, path=d, engine_version='0.5.12', layout='layers')
    assert result['renamed'] == 10 and result['layout_after'] == 'layers'
    same_data(d, written, lambda n: n.replace('midlayer.', 'layers.0.'))


def hf_cache(tmp_path):
    """A Hugging Face cache: snapshots/<rev>/ links into blobs/."""
    src = str(tmp_path / 'src')
    written = write_drafter(src)
    blobs, snap = tmp_path / 'blobs', tmp_path / 'snapshots' / 'rev1'
    blobs.mkdir()
    snap.mkdir(parents=True)
    for name in os.listdir(src):
        blob = str(blobs / hashlib.sha256(name.encode()).hexdigest())
        shutil.move(os.path.join(src, name), blob)
        os.symlink(os.path.relpath(blob, str(snap)), str(snap / name))
    return str(snap), str(blobs), written


def test_symlinked_snapshot_gets_a_private_copy(tmp_path, capsys):
    snap, blobs, written = hf_cache(tmp_path)
    shared = snapshot(blobs)
    result = run(capsys, path=snap)
    entry = result['files'][0]
    assert entry['method'] == 'rewritten' and entry['private_copy']
    assert not os.path.islink(os.path.join(snap, 'model.safetensors'))
    assert os.path.islink(os.path.join(snap, 'config.json'))
    assert snapshot(blobs) == shared
    same_data(snap, written, to_mid)
    assert not run(capsys, path=snap)['changed']


def cp_al(tmp_path, d):
    """A ``cp -al`` backup of drafter ``d``: every file hard-linked into backup/."""
    backup = str(tmp_path / 'backup')
    os.mkdir(backup)
    for name in os.listdir(d):
        os.link(os.path.join(d, name), os.path.join(backup, name))
    return backup


def test_hard_linked_file_gets_a_private_copy(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    written = write_drafter(d)
    backup = cp_al(tmp_path, d)
    kept = snapshot(backup)
    result = run(capsys, path=d, engine_version='0.5.11')
    entry = result['files'][0]
    assert entry['method'] == 'rewritten' and entry['private_copy'] and 'backup_file' not in entry
    assert snapshot(backup) == kept
    assert os.stat(os.path.join(d, 'model.safetensors')).st_nlink == 1
    same_data(d, written, to_mid)
    assert not run(capsys, path=d, engine_version='0.5.11')['changed']


def test_modify_shared_blobs_fixes_a_hard_linked_file_in_place(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    written = write_drafter(d)
    backup = cp_al(tmp_path, d)
    result = run(capsys, path=d, engine_version='0.5.11', modify_shared_blobs=True)
    entry = result['files'][0]
    assert entry['method'] == 'header_in_place' and not entry['private_copy']
    assert os.path.samefile(os.path.join(d, 'model.safetensors'), os.path.join(backup, 'model.safetensors'))
    same_data(backup, written, to_mid)


def test_modify_shared_blobs_fixes_the_blob_in_place(tmp_path, capsys):
    snap, blobs, written = hf_cache(tmp_path)
    shared = snapshot(blobs)
    result = run(capsys, path=snap, modify_shared_blobs=True)
    entry = result['files'][0]
    assert entry['method'] == 'header_in_place' and not entry['private_copy']
    assert os.path.islink(os.path.join(snap, 'model.safetensors'))
    assert snapshot(blobs) != shared
    same_data(snap, written, to_mid)


def test_single_file_path(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    written = write_drafter(d)
    result = run(capsys, path=os.path.join(d, 'model.safetensors'))
    assert result['changed'] and result['files'][0]['method'] == 'header_in_place'
    same_data(d, written, to_mid)


def write_header(path, header, data):
    blob = json.dumps(header).encode()
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(blob)) + blob + data)


def _bad(kind, d):
    """Make drafter ``d`` bad in the way ``kind`` says; return the path to pass."""
    st = os.path.join(d, 'model.safetensors')
    f32 = {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]}
    if kind == 'missing path':
        return os.path.join(d, 'nope')
    if kind == 'no config.json':
        os.unlink(os.path.join(d, 'config.json'))
    elif kind == 'not safetensors':
        with open(st, 'w') as f:
            f.write('version https://git-lfs.github.com/spec/v1\noid sha256:abc\n')
    elif kind == 'truncated':
        with open(st, 'r+b') as f:
            f.truncate(os.path.getsize(st) - 10)
    elif kind == 'header length larger than file':
        with open(st, 'r+b') as f:
            f.write(struct.pack('<Q', os.path.getsize(st)))
    elif kind == 'absurd header length':
        with open(st, 'r+b') as f:
            f.write(struct.pack('<Q', 2 ** 62))
    elif kind == 'invalid JSON':
        write_header(st, {}, b'')
        with open(st, 'r+b') as f:
            f.seek(8)
            f.write(b'[')
    elif kind == 'non-object header':
        with open(st, 'wb') as f:
            f.write(struct.pack('<Q', 2) + b'[]')
    elif kind == 'offsets out of range':
        write_header(st, {'a': f32}, b'x' * 4)
    elif kind == 'overlapping offsets':
        write_header(st, {'a': f32, 'b': {'dtype': 'F32', 'shape': [2], 'data_offsets': [4, 12]}}, b'x' * 12)
    elif kind == 'unknown dtype':
        write_header(st, {'a': dict(f32, dtype='Q4_K')}, b'x' * 8)
    elif kind == 'shape/size mismatch':
        write_header(st, {'a': dict(f32, shape=[3])}, b'x' * 8)
    elif kind == 'duplicate names after renaming':
        config = drafter_config()
        tensors = drafter_tensors(config, 'midlayer')
        tensors['draft.fc.weight'] = tensors['fc.weight']
        write_drafter(d, config=config, tensors=tensors)
        return d
    elif kind == 'both layers.0.x and midlayer.x':
        config = drafter_config()
        tensors = drafter_tensors(config, 'midlayer')
        tensors['layers.0.mlp.up_proj.weight'] = tensors['midlayer.mlp.up_proj.weight']
        write_drafter(d, config=config, tensors=tensors)
    elif kind == 'read-only file':
        os.chmod(st, 0o444)
    elif kind == 'pytorch_model.bin':
        os.unlink(st)
        with open(os.path.join(d, 'pytorch_model.bin'), 'wb') as f:
            f.write(b'PK\x03\x04')
    elif kind == 'metadata value not a string':
        write_header(st, {'__metadata__': {'format': 'pt', 'epoch': 9}, 'a': f32}, b'x' * 8)
    elif kind == 'empty directory':
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))
    return d


@pytest.mark.parametrize('kind, message', [
    ('missing path', 'nope: path does not exist'),
    ('no config.json', 'drafter: no config.json'),
    ('not safetensors', 'model.safetensors: not a safetensors file: header length'),
    ('truncated', 'bytes of data (truncated?)'),
    ('header length larger than file', 'model.safetensors: truncated or not safetensors: header length'),
    ('absurd header length', 'model.safetensors: not a safetensors file: header length 4611686018427387904 is absurdly'),
    ('invalid JSON', 'model.safetensors: header is not valid UTF-8 JSON'),
    ('non-object header', 'model.safetensors: header is JSON list, not an object'),
    ('offsets out of range', "model.safetensors: tensor 'a': data_offsets [0, 8] out of range"),
    ('overlapping offsets', "model.safetensors: tensor 'b': data_offsets [4, 12] overlap"),
    ('unknown dtype', "model.safetensors: tensor 'a': unknown dtype 'Q4_K'"),
    ('shape/size mismatch', "model.safetensors: tensor 'a': size mismatch"),
    ('duplicate names after renaming', "model.safetensors: duplicate tensor name 'fc.weight' after renaming"),
    ('both layers.0.x and midlayer.x', 'duplicate weight'),
    ('read-only file', 'model.safetensors: file is read-only (mode 444)'),
    ('pytorch_model.bin', 'pytorch_model.bin but no .safetensors: convert the checkpoint to safetensors'),
    ('empty directory', 'drafter: empty directory'),
    ('metadata value not a string',
     "model.safetensors: __metadata__ 'epoch': safetensors refuses the file (invalid type: integer `9`, "
     "expected a string)"),
])
def test_bad_input_fails_naming_file_and_modifies_nothing(tmp_path, capsys, kind, message):
    d = str(tmp_path / 'drafter')
    write_drafter(d)
    path = _bad(kind, d)
    before = snapshot(str(tmp_path))
    args = dict(path=path, engine_version='0.5.12')
    if kind == 'duplicate names after renaming':
        args['rename'] = [{'from': 'draft.', 'to': ''}]
    if kind == 'read-only file':
        args['engine_version'] = '0.5.11'  # layers.0 -> midlayer must be written
    result = run(capsys, **args)
    assert result['failed'] and message in result['msg'], result['msg']
    assert snapshot(str(tmp_path)) == before
    assert not [n for n in os.listdir(str(tmp_path)) if n.startswith('.')]


def test_bad_engine_version_and_rename_rule(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    write_drafter(d)
    assert 'not a version' in run(capsys, path=d, engine_version='latest')['msg']
    assert 'non-empty "from"' in run(capsys, path=d, rename=[{'from': '', 'to': 'x'}])['msg']


def test_index_naming_a_missing_shard(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    write_drafter(d, shards=2)
    os.unlink(os.path.join(d, 'model-00002-of-00002.safetensors'))
    result = run(capsys, path=d)
    assert result['failed'] and "names shard 'model-00002-of-00002.safetensors'" in result['msg']


def test_metadata_survives_the_fix(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    write_drafter(d, metadata={'format': 'pt', 'producer': 'specforge'})
    run(capsys, path=d)
    from safetensors import safe_open
    with safe_open(os.path.join(d, 'model.safetensors'), 'np') as f:
        assert f.metadata() == {'format': 'pt', 'producer': 'specforge'}


def test_save_file_roundtrip_helper_is_real_safetensors(tmp_path):
    path = str(tmp_path / 'x.safetensors')
    save_file({'a': np.zeros(3, dtype=np.float32)}, path)
    assert list(load_file(path)) == ['a']


def test_draft_model_prefix_needs_and_takes_a_rename_rule(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    written = write_drafter(d, spelling='midlayer', prefix='draft_model.')
    refused = run(capsys, path=d, engine='vllm')
    assert refused['failed'] and "add the rename rule {from: 'draft_model.', to: ''}" in refused['msg']
    assert "There is no module or parameter named 'draft_model' in Eagle3LlamaForCausalLM" in refused['msg']
    fixed = run(capsys, path=d, engine='vllm', rename=[{'from': 'draft_model.', 'to': ''}])
    assert fixed['changed'] and fixed['renamed'] == 15 and fixed['files'][0]['method'] == 'header_in_place'
    same_data(d, written, lambda n: n[len('draft_model.'):])


def test_single_file_without_config_checks_names_only(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    written = write_drafter(d)
    os.unlink(os.path.join(d, 'config.json'))
    result = run(capsys, path=os.path.join(d, 'model.safetensors'))
    assert result['changed'] and result['problems'] == [] and result['layout_after'] == 'midlayer'
    same_data(d, written, to_mid)
    junk = dict(written, **{'layers.0.rotary.inv_freq': np.zeros(2, dtype=np.float32)})
    save_file(junk, os.path.join(d, 'model.safetensors'))
    refused = run(capsys, path=os.path.join(d, 'model.safetensors'), engine='vllm')
    assert refused['failed'] and "KeyError: 'layers.0.rotary.inv_freq'" in refused['msg']


def test_modify_shared_blobs_also_fixes_a_linked_config(tmp_path, capsys):
    src = str(tmp_path / 'src')
    write_drafter(src, spelling='midlayer', architectures=['LlamaForCausalLM'])
    snap = tmp_path / 'snap'
    snap.mkdir()
    for name in os.listdir(src):
        os.symlink(os.path.join(src, name), str(snap / name))
    result = run(capsys, path=str(snap), modify_shared_blobs=True)
    assert result['config_changed'] and os.path.islink(str(snap / 'config.json'))
    with open(os.path.join(src, 'config.json')) as f:
        assert json.load(f)['architectures'] == ['LlamaForCausalLMEagle3']


def test_header_change_spanning_pages_is_rewritten_not_written_in_place(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    config = drafter_config(layers=6)
    written = {'x.' + n: a for n, a in drafter_tensors(config).items()}
    write_drafter(d, config=config, tensors=written)
    with open(os.path.join(d, 'model.safetensors'), 'rb') as f:
        assert struct.unpack('<Q', f.read(8))[0] > 4096  # the shifted bytes cross a page
    result = run(capsys, path=d, engine_version='0.5.12', rename=[{'from': 'x.', 'to': ''}])
    assert result['files'][0]['method'] == 'rewritten'
    same_data(d, written, lambda n: n[2:])


# ---- the Kimi-K2.5 MLA drafter (Eagle3DeepseekV2ForCausalLM)

def write_mla(directory, **config_changes):
    config = dict(mla_drafter_config(), **config_changes)
    return write_drafter(directory, config=config, tensors=mla_drafter_tensors(mla_drafter_config()))


@pytest.mark.parametrize('fix', [False, True])
def test_mla_drafter_passes_unchanged_on_0_5_23(tmp_path, capsys, fix):
    d = str(tmp_path / 'mla')
    write_mla(d)
    before = snapshot(d)
    result = run(capsys, path=d, engine_version='0.5.23', fix=fix)
    assert not result.get('failed') and result['problems'] == [] and not result['changed']
    assert result['renamed'] == 0 and result['layout_after'] == 'layers'
    assert snapshot(d) == before


def test_mla_drafter_with_a_plain_class_gets_the_mla_class(tmp_path, capsys):
    d = str(tmp_path / 'mla')
    write_mla(d, architectures=['DeepseekV3ForCausalLM'])
    result = run(capsys, path=d, engine_version='0.5.23')
    assert result['changed'] and result['config_changed'] and result['renamed'] == 0
    with open(os.path.join(d, 'config.json')) as f:
        assert json.load(f)['architectures'] == ['Eagle3DeepseekV2ForCausalLM']


@pytest.mark.parametrize('writer, wrong', [
    (lambda d: write_mla(d, architectures=['LlamaForCausalLMEagle3']), 'LlamaForCausalLMEagle3'),
    (lambda d: write_drafter(d, architectures=['Eagle3DeepseekV2ForCausalLM']), 'Eagle3DeepseekV2ForCausalLM'),
])
def test_a_drafter_class_is_never_turned_into_the_other(tmp_path, capsys, writer, wrong):
    d = str(tmp_path / 'drafter')
    writer(d)
    before = snapshot(d)
    result = run(capsys, path=d, engine_version='0.5.23')
    assert result['failed'] and 'never turns one drafter class into the other' in result['msg']
    assert snapshot(d) == before


def test_mla_drafter_before_its_loader_is_refused_naming_the_first_release(tmp_path, capsys):
    d = str(tmp_path / 'mla')
    write_mla(d)
    result = run(capsys, path=d, engine_version='0.5.11')
    assert result['failed'] and len(result['problems']) == 1
    assert 'first ships in SGLang 0.5.12.post1' in result['problems'][0]


# ---- a drafter against its target (target_path)

@pytest.mark.parametrize('drafter, target, field, target_field', [
    (dict(hidden=256), dict(hidden=512), "hidden_size is 256", "hidden_size is 512"),
    (dict(vocab=512, draft_vocab=256), dict(vocab=1024), "vocab_size is 512", "vocab_size is 1024"),
    (dict(eagle_config={'eagle_aux_hidden_state_layer_ids': [1, 2, 40]}), dict(layers=4),
     "eagle_config.eagle_aux_hidden_state_layer_ids is [1, 2, 40]", "num_hidden_layers is 4"),
])
def test_drafter_for_another_target_fails_naming_both_files_and_the_field(tmp_path, capsys, drafter, target,
                                                                          field, target_field):
    d, t = str(tmp_path / 'drafter'), str(tmp_path / 'target')
    config = drafter_config(**{k: v for k, v in drafter.items() if k != 'eagle_config'})
    config.update({k: v for k, v in drafter.items() if k == 'eagle_config'})
    write_drafter(d, config=config, spelling='midlayer')
    write_target(t, **dict(dict(hidden=config['hidden_size'], vocab=config['vocab_size']), **target))
    before = snapshot(d)
    assert run(capsys, path=d, engine_version='0.5.23')['problems'] == []
    result = run(capsys, path=d, engine_version='0.5.23', target_path=t)
    assert result['failed'] and len(result['problems']) == 1
    problem = result['problems'][0]
    assert problem.startswith(os.path.join(d, 'config.json') + ': ' + field)
    assert 'the target %s: %s' % (os.path.join(t, 'config.json'), target_field) in problem
    assert result['target_config'] == os.path.join(t, 'config.json') and snapshot(d) == before


def test_mla_drafter_fits_a_kimi_k25_target_and_no_llama_target(tmp_path, capsys):
    d = str(tmp_path / 'mla')
    write_mla(d, eagle_config={'eagle_aux_hidden_state_layer_ids': [1, 29, 57]})
    kimi = write_target(str(tmp_path / 'kimi'), architectures=['KimiK25ForConditionalGeneration'], hidden=None,
                        text_config=target_config(hidden=32, vocab=96, layers=61, kv_lora_rank=512,
                                                  architectures=['DeepseekV3ForCausalLM']))
    assert run(capsys, path=d, engine_version='0.5.23', target_path=kimi)['problems'] == []
    llama = write_target(str(tmp_path / 'llama'), layers=61)
    result = run(capsys, path=d, engine_version='0.5.23', target_path=os.path.join(llama, 'config.json'))
    assert result['failed'] and len(result['problems']) == 1 and 'no kv_lora_rank' in result['problems'][0]
    # a Llama drafter serves a Kimi target
    llama_drafter = str(tmp_path / 'llama-drafter')
    write_drafter(llama_drafter, spelling='midlayer')
    assert run(capsys, path=llama_drafter, engine_version='0.5.23', target_path=kimi)['problems'] == []


def test_target_path_without_config_json_fails(tmp_path, capsys):
    d = str(tmp_path / 'drafter')
    write_drafter(d, spelling='midlayer')
    result = run(capsys, path=d, target_path=str(tmp_path))
    assert result['failed'] and 'target_path must be the target model directory' in result['msg']


# ---- SpecForge output (layout from SpecForge's public source; its own code is not run here:
# it needs torch and SGLang)

def specforge_tensors(config):
    """What SpecForge's EAGLE-3 export saves: midlayer.* names, fc, norm, lm_head, d2t, t2d, no
    embeddings (its state dict without "embed")."""
    return {n: a for n, a in drafter_tensors(config, 'midlayer').items() if 'embed' not in n}


def test_specforge_run_folder_names_its_checkpoints_and_the_latest(tmp_path, capsys):
    out = tmp_path / 'specforge-out'
    for folder in ('epoch_0_step_500', 'epoch_1_step_1000', 'epoch_10_step_9000', 'epoch_2_step_1500'):
        write_drafter(str(out / folder), tensors=specforge_tensors(drafter_config()))
    result = run(capsys, path=str(out), engine_version='0.5.23')
    assert result['failed'] and '4 checkpoint folder(s)' in result['msg']
    assert result['msg'].endswith('the latest, %s' % (out / 'epoch_10_step_9000'))


@pytest.mark.parametrize('version', ['0.5.11', '0.5.15.post1', '0.5.23'])
def test_specforge_checkpoint_folder_loads_unchanged(tmp_path, capsys, version):
    d = str(tmp_path / 'epoch_9_step_12000')
    write_drafter(d, tensors=specforge_tensors(drafter_config()))
    before = snapshot(d)
    result = run(capsys, path=d, engine_version=version, fix=False)
    assert result['problems'] == [] and not result['changed'] and snapshot(d) == before


def test_specforge_training_state_needs_its_export_first(tmp_path, capsys):
    d = tmp_path / 'run-step1000'
    d.mkdir()
    (d / 'training_state.pt').write_bytes(b'not a pickle')
    result = run(capsys, path=str(d))
    assert result['failed'] and 'specforge export --to sglang --checkpoint %s' % d in result['msg']


def test_d2t_mapping_beyond_the_target_vocabulary_fails(tmp_path, capsys):
    d, t = str(tmp_path / 'drafter'), str(tmp_path / 'target')
    config = drafter_config()  # vocab 96, draft vocab 48
    tensors = drafter_tensors(config, 'midlayer')
    tensors['d2t'] = np.full(48, 60, dtype=np.int64)  # draft token i -> target token i + 60
    write_drafter(d, config=config, tensors=tensors)
    write_target(t, hidden=config['hidden_size'], vocab=96)
    result = run(capsys, path=d, engine_version='0.5.23', target_path=t)
    assert result['failed'] and len(result['problems']) == 1
    assert "tensor 'd2t' maps draft token 36 to target token 96 (12 such)" in result['problems'][0]
    tensors['d2t'] = np.full(48, 48, dtype=np.int64)  # the top half of the target vocabulary
    write_drafter(d, config=config, tensors=tensors)
    assert run(capsys, path=d, engine_version='0.5.23', target_path=t)['problems'] == []
