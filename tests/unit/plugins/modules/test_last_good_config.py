"""Tests of plugins/modules/last_good_config.py: record, restore, idempotence, check mode,
diff, a missing record, and the record's privacy."""

from __future__ import annotations

import json
import os
import stat
import struct

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _safetensors as safetensors_io
from ansible_collections.llmops.serving.plugins.modules import last_good_config
from ansible_collections.llmops.serving.tests.unit.plugins.modules._module_runner import record_warnings, run_main


def run(capsys, check=False, diff=False, **args):
    return run_main(last_good_config.main, capsys, _ansible_check_mode=check, _ansible_diff=diff, **args)[0]


@pytest.fixture
def host(tmp_path):
    etc = tmp_path / 'etc'
    etc.mkdir()
    (etc / 'main.env').write_text('A=1\n')
    (etc / 'main.env').chmod(0o600)
    (etc / 'main.sh').write_text('exec server --depth 16\n')
    (etc / 'main.sh').chmod(0o755)
    files = [str(etc / 'main.env'), str(etc / 'main.sh')]
    return dict(etc=etc, files=files, state_dir=str(tmp_path / 'state'))


def test_record_then_restore_puts_content_and_mode_back(capsys, host):
    first = run(capsys, name='main', state='recorded', files=host['files'], state_dir=host['state_dir'],
                metadata={'depth': 16})
    assert first['changed'] and first['found'] and first['metadata'] == {'depth': 16}
    again = run(capsys, name='main', state='recorded', files=host['files'], state_dir=host['state_dir'],
                metadata={'depth': 16})
    assert not again['changed'] and again['changed_files'] == []
    # A new deploy rewrites the script (and loses its exec bit) and removes the env file.
    (host['etc'] / 'main.sh').write_text('exec server --depth 5\n')
    (host['etc'] / 'main.sh').chmod(0o644)
    (host['etc'] / 'main.env').unlink()
    restored = run(capsys, name='main', state='restored', state_dir=host['state_dir'])
    assert restored['changed'] and sorted(restored['changed_files']) == sorted(host['files'])
    assert (host['etc'] / 'main.sh').read_text() == 'exec server --depth 16\n'
    assert stat.S_IMODE((host['etc'] / 'main.sh').stat().st_mode) == 0o755
    assert stat.S_IMODE((host['etc'] / 'main.env').stat().st_mode) == 0o600
    assert not run(capsys, name='main', state='restored', state_dir=host['state_dir'])['changed']


def test_record_is_private_and_replaced_only_on_change(capsys, host):
    run(capsys, name='main', state='recorded', files=host['files'], state_dir=host['state_dir'])
    path = os.path.join(host['state_dir'], 'main.json')
    assert stat.S_IMODE(os.stat(host['state_dir']).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    (host['etc'] / 'main.sh').write_text('exec server --depth 10\n')
    changed = run(capsys, name='main', state='recorded', files=host['files'], state_dir=host['state_dir'])
    assert changed['changed'] and changed['changed_files'] == [host['files'][1]]
    assert os.listdir(host['state_dir']) == ['main.json']  # no temporary file left


def test_check_mode_writes_nothing_and_diff_shows_the_change(capsys, host):
    result = run(capsys, check=True, name='main', state='recorded', files=host['files'], state_dir=host['state_dir'])
    assert result['changed'] and not os.path.exists(host['state_dir'])
    run(capsys, name='main', state='recorded', files=host['files'], state_dir=host['state_dir'])
    (host['etc'] / 'main.sh').write_text('exec server --depth 5\n')
    result = run(capsys, check=True, diff=True, name='main', state='restored', state_dir=host['state_dir'])
    assert result['changed'] and result['changed_files'] == [host['files'][1]]
    assert result['diff'][0]['before'] == 'exec server --depth 5\n'
    assert result['diff'][0]['after'] == 'exec server --depth 16\n'
    assert (host['etc'] / 'main.sh').read_text() == 'exec server --depth 5\n'


def test_restore_without_a_record_fails_naming_the_server(capsys, host):
    result = run(capsys, name='main', state='restored', state_dir=host['state_dir'])
    assert result['failed'] and not result['found']
    assert 'no last good configuration is recorded for server main' in result['msg']
    read = run(capsys, name='main', state='read', state_dir=host['state_dir'])
    assert (read['changed'], read['found'], 'files' in read) == (False, False, False)


def test_missing_file_and_bad_name_are_clear_errors(capsys, host):
    missing = run(capsys, name='main', state='recorded', files=host['files'] + ['/nonexistent/x.service'],
                  state_dir=host['state_dir'])
    assert missing['failed'] and '/nonexistent/x.service' in missing['msg'] and 'server main' in missing['msg']
    assert not os.path.exists(host['state_dir'])
    bad = run(capsys, name='../x', state='read', state_dir=host['state_dir'])
    assert bad['failed'] and 'plain file name' in bad['msg']


def _safetensors(path, names):
    header = json.dumps({name: {'dtype': 'BF16', 'shape': [1], 'data_offsets': [2 * i, 2 * i + 2]}
                         for i, name in enumerate(names)}).encode()
    path.write_bytes(struct.pack('<Q', len(header)) + header + b'\0\0' * len(names))


def test_the_drafter_fingerprint_is_recorded_and_drift_is_reported(capsys, host, tmp_path, monkeypatch):
    drafter = tmp_path / 'drafter'
    drafter.mkdir()
    _safetensors(drafter / 'model.safetensors', ['layers.0.fc.weight'])
    (drafter / 'config.json').write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    (drafter / 'README.md').write_text('not fingerprinted')
    first = run(capsys, name='main', state='recorded', files=host['files'], state_dir=host['state_dir'],
                fingerprints=[str(drafter)])
    assert sorted(first['fingerprints']) == [str(drafter / 'config.json'), str(drafter / 'model.safetensors')]
    os.utime(drafter / 'config.json', ns=(0, 10 ** 18))  # touched, not changed
    again = run(capsys, name='main', state='recorded', files=host['files'], state_dir=host['state_dir'],
                fingerprints=[str(drafter)])
    assert not again['changed']
    warnings = record_warnings(monkeypatch)
    clean = run(capsys, name='main', state='restored', state_dir=host['state_dir'])
    assert clean['changed_since_record'] == [] and warnings == []
    # A later deploy's drafter fix renames the layer in place (same size, new header).
    _safetensors(drafter / 'model.safetensors', ['midlayer.fc.weight'])
    restored = run(capsys, name='main', state='restored', state_dir=host['state_dir'])
    assert restored['changed_since_record'] == [str(drafter / 'model.safetensors')]
    assert warnings and 'model.safetensors' in warnings[0] and 'could not be put back from a backup' in warnings[0]
    assert restored['restored_from_backup'] == []


@pytest.mark.parametrize('fix', ['in place', 'rewritten'])
def test_a_drafter_fixed_after_the_record_is_put_back_from_its_backup(capsys, host, tmp_path, fix):
    """drafter_checkpoint's two ways of fixing a drafter with backup=true (the functions it calls): the header
    rewritten in place (same length, NAME.<time>.header-backup) or the file rewritten (another header length,
    NAME.<time>.orig, a hard link to the original); config.json replaced with a .orig kept. Restoring the record
    puts back the recorded bytes (check mode only says so), and a second restore changes nothing."""
    drafter = tmp_path / 'drafter'
    drafter.mkdir()
    model, config = drafter / 'model.safetensors', drafter / 'config.json'
    _safetensors(model, ['layers.0.fc.weight', 'lm_head.weight'])
    config.write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    original, original_config = model.read_bytes(), config.read_bytes()
    run(capsys, name='main', state='recorded', files=host['files'], state_dir=host['state_dir'], fingerprints=[str(drafter)])

    header = safetensors_io.read_header(str(model))
    if fix == 'in place':  # the same length: 'layers.0' and 'midlayer'
        safetensors_io.write_header_in_place(header, header.raw.replace(b'layers.0', b'midlayer'), backup=True)
    else:
        safetensors_io.rewrite_with_header(header, header.raw.replace(b'layers.0', b'midlayer.0') + b' ' * 6, backup=True)
    os.link(str(config), safetensors_io.backup_path(str(config), 'orig'))
    fixed = drafter / 'fixed.json'
    fixed.write_text('{"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {}}')
    os.replace(str(fixed), str(config))
    assert model.read_bytes() != original

    dry = run(capsys, check=True, name='main', state='restored', state_dir=host['state_dir'])
    assert dry['changed'] and dry['restored_from_backup'] == [str(config), str(model)]
    assert model.read_bytes() != original
    restored = run(capsys, name='main', state='restored', state_dir=host['state_dir'])
    assert restored['changed'] and restored['restored_from_backup'] == [str(config), str(model)]
    assert restored['changed_since_record'] == [] and restored['changed_files'] == []
    assert (model.read_bytes(), config.read_bytes()) == (original, original_config)
    again = run(capsys, name='main', state='restored', state_dir=host['state_dir'])
    assert not again['changed'] and again['restored_from_backup'] == []


def test_a_backup_that_cannot_be_written_back_leaves_the_file_and_warns(capsys, host, tmp_path, monkeypatch):
    """A header region that no longer parses (the same length, garbage): the header backup matches but cannot
    be written through the journalled writer; the rollback goes on with the launch files and names the file."""
    drafter = tmp_path / 'drafter'
    drafter.mkdir()
    model = drafter / 'model.safetensors'
    _safetensors(model, ['layers.0.fc.weight'])
    run(capsys, name='main', state='recorded', files=host['files'], state_dir=host['state_dir'], fingerprints=[str(drafter)])
    header = safetensors_io.read_header(str(model))
    safetensors_io.write_header_in_place(header, header.raw.replace(b'layers.0', b'midlayer'), backup=True)
    data = bytearray(model.read_bytes())
    data[8:8 + header.header_len] = b'#' * header.header_len
    model.write_bytes(bytes(data))
    (host['etc'] / 'main.sh').write_text('exec server --depth 5\n')
    warnings = record_warnings(monkeypatch)
    restored = run(capsys, name='main', state='restored', state_dir=host['state_dir'])
    assert restored['changed'] and restored['changed_files'] == [host['files'][1]]
    assert restored['restored_from_backup'] == [] and restored['changed_since_record'] == [str(model)]
    assert warnings and str(model) in warnings[0]


def record_depth(capsys, host, depth, history=3, **metadata):
    (host['etc'] / 'main.sh').write_text('exec server --depth %d\n' % depth)
    return run(capsys, name='main', state='recorded', files=host['files'], state_dir=host['state_dir'],
               metadata=dict(metadata, depth=depth), history=history)


def test_rollback_to_puts_back_a_record_n_good_configurations_back(capsys, host):
    for depth in (16, 10, 5):
        record_depth(capsys, host, depth)
    read = run(capsys, name='main', state='read', state_dir=host['state_dir'])
    assert [item['metadata']['depth'] for item in read['history']] == [5, 10, 16]
    assert [item['index'] for item in read['history']] == [0, 1, 2] and 'content' not in json.dumps(read['history'])
    two_back = run(capsys, name='main', state='restored', state_dir=host['state_dir'], rollback_to='2')
    assert two_back['changed'] and two_back['selected']['index'] == 2 and two_back['metadata'] == {'depth': 16}
    assert (host['etc'] / 'main.sh').read_text() == 'exec server --depth 16\n'
    by_id = run(capsys, name='main', state='restored', state_dir=host['state_dir'],
                rollback_to=read['history'][1]['id'][:6])
    assert by_id['selected']['index'] == 1 and (host['etc'] / 'main.sh').read_text() == 'exec server --depth 10\n'
    # Restoring changes no record; recording what was restored (it passed its checks) moves it to the front.
    assert [item['metadata']['depth'] for item in by_id['history']] == [5, 10, 16]
    again = run(capsys, name='main', state='recorded', files=host['files'], state_dir=host['state_dir'],
                metadata={'depth': 10})
    assert [item['metadata']['depth'] for item in again['history']] == [10, 5, 16]


def test_only_the_last_history_records_are_kept(capsys, host):
    for depth in (16, 10, 5, 3):
        result = record_depth(capsys, host, depth, history=2)
    assert [item['metadata']['depth'] for item in result['history']] == [3, 5]
    refused = run(capsys, name='main', state='restored', state_dir=host['state_dir'], rollback_to='2')
    assert refused['failed'] and '2 (2 back) is not kept; the 2 records kept, newest first: 0: ' in refused['msg']
    assert (host['etc'] / 'main.sh').read_text() == 'exec server --depth 3\n'


def test_a_record_whose_engine_is_gone_is_refused_before_anything_is_written(capsys, host, tmp_path):
    python = tmp_path / 'sglang-0.5.15.post1' / 'bin' / 'python'
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\n')
    python.chmod(0o755)
    record_depth(capsys, host, 16, python=str(python), version='0.5.15.post1')
    record_depth(capsys, host, 5, python='/usr/bin/python3', version='0.5.23')
    python.unlink()
    refused = run(capsys, name='main', state='restored', state_dir=host['state_dir'], rollback_to='previous')
    assert refused['failed'] and 'is no longer on this host' in refused['msg']
    assert 'playbooks/install.yml -e sglang_install_version=0.5.15.post1' in refused['msg']
    assert (host['etc'] / 'main.sh').read_text() == 'exec server --depth 5\n'


def test_read_with_rollback_to_names_the_record_and_writes_nothing(capsys, host):
    for depth in (16, 5):
        record_depth(capsys, host, depth)
    read = run(capsys, name='main', state='read', state_dir=host['state_dir'], rollback_to='previous')
    assert not read['changed'] and read['selected']['index'] == 1 and read['metadata'] == {'depth': 16}
    assert (host['etc'] / 'main.sh').read_text() == 'exec server --depth 5\n'
    first = run(capsys, check=True, name='other', state='recorded', files=host['files'], state_dir=host['state_dir'],
                rollback_to='previous')
    assert first['changed'] and 'selected' not in first


def test_null_options_take_their_defaults_and_a_restored_record_can_be_recorded_again(capsys, host, tmp_path):
    drafter = tmp_path / 'drafter'
    drafter.mkdir()
    (drafter / 'config.json').write_text('{}')
    first = run(capsys, name='main', state='recorded', files=host['files'], state_dir=host['state_dir'],
                fingerprints=[str(drafter)], metadata=None, history=None)
    assert first['changed'] and first['metadata'] == {}
    restored = run(capsys, name='main', state='restored', state_dir=host['state_dir'], rollback_to=None)
    assert restored['fingerprint_paths'] == [str(drafter / 'config.json')]
    again = run(capsys, name='main', state='recorded', files=restored['files'], state_dir=host['state_dir'],
                fingerprints=restored['fingerprint_paths'], metadata=restored['metadata'])
    assert not again['changed']
    assert run(capsys, name='main', state_dir=host['state_dir'], fingerprints=None)['found']


def test_restored_says_in_one_line_what_it_puts_back(capsys, host):
    run(capsys, name='main', state='recorded', files=host['files'], state_dir=host['state_dir'],
        metadata={'version': '0.5.15', 'depth': 16})
    (host['etc'] / 'main.sh').write_text('exec server --depth 3\n')
    planned = run(capsys, check=True, name='main', state='restored', state_dir=host['state_dir'])
    assert planned['restore_summary'].startswith('record %s (0 back, passed ' % planned['selected']['id'])
    assert planned['restore_summary'].endswith('sglang 0.5.15, depth 16; files to restore: %s' % host['files'][1])
