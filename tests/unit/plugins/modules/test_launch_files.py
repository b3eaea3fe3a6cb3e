"""Tests of plugins/modules/launch_files.py: one run compares or writes directories, files, secrets
and absent paths; check mode, diff (secrets never shown), idempotence, owners, atomic writes; and
last_good, whether the last good record (last_good_config) already holds the wanted files."""

from __future__ import annotations

import grp
import os
import pwd
import stat

import pytest

from ansible_collections.llmops.serving.plugins.modules import last_good_config, launch_files
from ansible_collections.llmops.serving.tests.unit._drafter_factory import write_drafter
from ansible_collections.llmops.serving.tests.unit.plugins.modules._module_runner import record_warnings, run_main

SECRET = 'sk-very-secret-key-1234'


def run(capsys, check=False, diff=False, **args):
    return run_main(launch_files.main, capsys, _ansible_check_mode=check, _ansible_diff=diff, **args)


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def wanted(tmp_path):
    etc, log = tmp_path / 'etc' / 'llmops', tmp_path / 'log'
    return dict(
        directories=[dict(path=str(etc)), dict(path=str(log), mode='0750')],
        files=[dict(path=str(etc / 'main.sh'), content='exec server \\\n    --depth 16\n', mode='0755')],
        secrets=[dict(path=str(etc / 'main.env'), content='TOKEN=%s\n' % SECRET),
                 dict(path=str(etc / 'main.key'), content=SECRET + '\n')],
        absent=[str(etc / 'old.key')],
    )


def test_first_run_writes_everything_second_changes_nothing(capsys, tmp_path, wanted):
    result = run(capsys, **wanted)[0]
    etc = tmp_path / 'etc' / 'llmops'
    assert result['changed']
    assert result['changed_files'] == [str(etc), str(tmp_path / 'log'), str(etc / 'main.sh'), str(etc / 'main.env'),
                                       str(etc / 'main.key')]
    assert (etc / 'main.sh').read_text() == 'exec server \\\n    --depth 16\n'
    assert (etc / 'main.key').read_text() == SECRET + '\n'
    assert (mode_of(etc), mode_of(tmp_path / 'log')) == (0o755, 0o750)
    assert (mode_of(etc / 'main.sh'), mode_of(etc / 'main.env'), mode_of(etc / 'main.key')) == (0o755, 0o600, 0o600)
    again = run(capsys, **wanted)[0]
    assert not again['changed'] and again['changed_files'] == []
    assert sorted(os.listdir(etc)) == ['main.env', 'main.key', 'main.sh']  # no temporary file left


def test_check_mode_reports_and_writes_nothing(capsys, tmp_path, wanted):
    result = run(capsys, check=True, **wanted)[0]
    assert result['changed'] and len(result['changed_files']) == 5
    assert not (tmp_path / 'etc').exists() and not (tmp_path / 'log').exists()


def test_only_the_changed_file_is_rewritten_and_diffed(capsys, tmp_path, wanted):
    run(capsys, **wanted)
    script = tmp_path / 'etc' / 'llmops' / 'main.sh'
    inode = os.stat(script).st_ino
    wanted['files'][0]['content'] = 'exec server \\\n    --depth 5\n'
    result, out = run(capsys, check=True, diff=True, **wanted)
    assert result['changed_files'] == [str(script)]
    assert result['diff'] == [dict(before_header=str(script), after_header=str(script),
                                   before='exec server \\\n    --depth 16\n', after='exec server \\\n    --depth 5\n')]
    assert script.read_text().endswith('--depth 16\n') and os.stat(script).st_ino == inode
    result = run(capsys, **wanted)[0]
    assert result['changed_files'] == [str(script)]
    assert script.read_text().endswith('--depth 5\n')
    assert os.stat(script).st_ino != inode  # replaced by a rename, not rewritten in place
    assert mode_of(script) == 0o755


def test_secrets_never_appear_in_the_result_or_its_diff(capsys, tmp_path, wanted):
    run(capsys, **wanted)
    wanted['secrets'][0]['content'] = 'TOKEN=%s-rotated\n' % SECRET
    wanted['secrets'][1]['content'] = SECRET + '-rotated\n'
    result, out = run(capsys, diff=True, **wanted)
    assert SECRET not in out
    key = str(tmp_path / 'etc' / 'llmops' / 'main.key')
    assert result['changed_files'] == [str(tmp_path / 'etc' / 'llmops' / 'main.env'), key]
    assert [d['after'] for d in result['diff']] == ['(new) ' + launch_files.SECRET_PLACEHOLDER] * 2
    with open(key, encoding='utf-8') as handle:
        assert handle.read() == SECRET + '-rotated\n'


def test_a_mode_change_alone_is_applied_in_place(capsys, tmp_path, wanted):
    run(capsys, **wanted)
    env = tmp_path / 'etc' / 'llmops' / 'main.env'
    env.chmod(0o644)
    result = run(capsys, diff=True, **wanted)[0]
    assert result['changed_files'] == [str(env)] and mode_of(env) == 0o600
    assert result['diff'][0]['before'].startswith('mode 0644') and result['diff'][0]['after'].startswith('mode 0600')


def test_absent_paths_are_removed(capsys, tmp_path, wanted):
    run(capsys, **wanted)
    old = tmp_path / 'etc' / 'llmops' / 'old.key'
    old.write_text('x\n')
    assert run(capsys, check=True, **wanted)[0]['changed_files'] == [str(old)] and old.exists()
    assert run(capsys, **wanted)[0]['changed_files'] == [str(old)] and not old.exists()


def test_owner_is_set_and_a_missing_owner_is_a_change_in_check_mode_only(capsys, tmp_path, wanted):
    me = pwd.getpwuid(os.getuid()).pw_name
    wanted['secrets'][1]['owner'] = me
    run(capsys, **wanted)
    assert os.stat(wanted['secrets'][1]['path']).st_uid == os.getuid()
    assert not run(capsys, **wanted)[0]['changed']
    wanted['secrets'][1]['owner'] = 'llmops-no-such-user'
    result = run(capsys, check=True, **wanted)[0]
    assert result['changed_files'] == [wanted['secrets'][1]['path']]
    failed = run(capsys, **wanted)[0]
    assert failed['failed'] and 'owner llmops-no-such-user of' in failed['msg']


def test_users_to_fix_lists_missing_users_and_missing_groups(capsys, tmp_path):
    me = pwd.getpwuid(os.getuid())
    primary = grp.getgrgid(me.pw_gid).gr_name
    users = [dict(name=me.pw_name, groups=[primary]), dict(name='llmops-no-such-user'),
             dict(name=me.pw_name + '-x')]
    result = run(capsys, check=True, users=users)[0]
    assert result['users_to_fix'] == ['llmops-no-such-user', me.pw_name + '-x'] and not result['changed']
    other = [g.gr_name for g in grp.getgrall() if g.gr_gid != me.pw_gid and me.pw_name not in g.gr_mem][0]
    assert run(capsys, users=[dict(name=me.pw_name, groups=[other])])[0]['users_to_fix'] == [me.pw_name]


@pytest.mark.parametrize('bad, message', [
    (dict(files=[dict(path='/x/a', content='1'), dict(path='/x/a', content='2')]), 'listed more than once: /x/a'),
    (dict(files=[dict(path='{tmp}/f', content='1', mode='0x9')]), 'is not an octal number'),
    (dict(files=[dict(path='{tmp}', content='1')]), 'is not a regular file'),
    (dict(directories=[dict(path='{tmp}/file')]), 'is not a directory'),
])
def test_bad_input_fails_clearly(capsys, tmp_path, bad, message):
    (tmp_path / 'file').write_text('x')
    for key, items in bad.items():
        for item in items:
            item['path'] = item['path'].format(tmp=tmp_path)
    result = run(capsys, **bad)[0]
    assert result['failed'] and message in result['msg']


def test_a_failed_write_leaves_the_old_file_whole(capsys, tmp_path, wanted, monkeypatch):
    run(capsys, **wanted)
    script = tmp_path / 'etc' / 'llmops' / 'main.sh'
    wanted['files'][0]['content'] = 'exec server --depth 5\n'

    def broken_fsync(fd):
        raise OSError(28, 'No space left on device')

    monkeypatch.setattr(os, 'fsync', broken_fsync)
    result = run(capsys, **wanted)[0]
    assert result['failed'] and 'No space left' in result['msg']
    assert script.read_text() == 'exec server \\\n    --depth 16\n'
    assert sorted(os.listdir(script.parent)) == ['main.env', 'main.key', 'main.sh']


# The launch command a record holds (RV(last_good.command), the fleet preflight's previous command).
COMMAND = ['/opt/llmops/sglang-0.5.15/bin/python', '/etc/llmops/llmops_launch.py', 'sglang.launch_server', '--port', '30000']


@pytest.fixture
def recorded(capsys, tmp_path, wanted):
    """``wanted`` written, and recorded by last_good_config with a drafter fingerprint; its ``last_good`` option
    asks about that record."""
    run(capsys, **wanted)
    drafter = tmp_path / 'drafter'
    write_drafter(str(drafter))
    last_good = dict(name='main', state_dir=str(tmp_path / 'state'), metadata={'version': '0.5.15', 'depth': 16, 'command': COMMAND},
                     files=[wanted['secrets'][0]['path'], wanted['files'][0]['path']], fingerprints=[str(drafter)])
    record = run_main(last_good_config.main, capsys, state='recorded', **last_good)[0]
    assert record['changed'] and len(record['fingerprints']) == 2
    return dict(wanted, last_good=last_good)


def would_record(capsys, case):
    """last_good_config state=recorded, in check mode, with the files, metadata and fingerprints of ``case``."""
    return run_main(last_good_config.main, capsys, _ansible_check_mode=True, state='recorded', **case['last_good'])[0]


@pytest.mark.parametrize('check', [True, False])
def test_last_good_is_current_for_the_files_and_metadata_recorded(capsys, recorded, check):
    result, out = run(capsys, check=check, **recorded)
    assert result['last_good'] == dict(found=True, current=True, version='0.5.15', command=COMMAND) and not result['changed']
    assert SECRET not in out
    assert not would_record(capsys, recorded)['changed']


def test_last_good_compares_the_wanted_files_not_the_hosts(capsys, recorded):
    """The host's file differs but will be brought to the recorded content: current. The record is not written."""
    script = recorded['files'][0]['path']
    with open(script, 'w', encoding='utf-8') as handle:
        handle.write('edited by hand\n')
    os.chmod(script, 0o644)
    record = os.path.join(recorded['last_good']['state_dir'], 'main.json')
    before = os.stat(record).st_mtime_ns
    result = run(capsys, check=True, **recorded)[0]
    assert result['changed_files'] == [script] and result['last_good'] == dict(found=True, current=True, version='0.5.15', command=COMMAND)
    assert os.stat(record).st_mtime_ns == before


def _other_metadata(case, tmp_path):
    case['last_good']['metadata']['depth'] = 5


def _other_script(case, tmp_path):
    case['files'][0]['content'] += '# changed\n'


def _other_secret(case, tmp_path):
    case['secrets'][0]['content'] = 'TOKEN=%s-rotated\n' % SECRET


def _other_mode(case, tmp_path):
    case['files'][0]['mode'] = '0750'


def _other_drafter_header(case, tmp_path):
    write_drafter(str(tmp_path / 'drafter'), spelling='midlayer')  # a drafter fix renames the layers


def _other_drafter_config(case, tmp_path):
    config = tmp_path / 'drafter' / 'config.json'
    config.write_text(config.read_text().replace('"num_hidden_layers": 1', '"num_hidden_layers": 2'))


def _fewer_files(case, tmp_path):
    case['last_good']['files'] = case['last_good']['files'][:1]


@pytest.mark.parametrize('change', [_other_metadata, _other_script, _other_secret, _other_mode,
                                    _other_drafter_header, _other_drafter_config, _fewer_files])
@pytest.mark.parametrize('check', [True, False])
def test_last_good_is_not_current_when_a_recorded_part_differs(capsys, tmp_path, recorded, change, check):
    change(recorded, tmp_path)
    result, out = run(capsys, check=check, **recorded)
    assert result['last_good'] == dict(found=True, current=False, version='0.5.15', command=COMMAND)
    assert SECRET not in out
    if not check:  # last_good_config agrees: recording now that the files are written would change the record
        assert would_record(capsys, recorded)['changed']


@pytest.mark.parametrize('check', [True, False])
def test_last_good_without_a_record_is_not_found(capsys, tmp_path, wanted, check):
    last_good = dict(name='main', state_dir=str(tmp_path / 'state'), files=[wanted['files'][0]['path']])
    result = run(capsys, check=check, last_good=last_good, **wanted)[0]
    assert result['last_good'] == dict(found=False, current=False, version=None, command=[])
    assert not (tmp_path / 'state').exists()


def test_without_the_option_nothing_is_returned_about_it(capsys, wanted):
    assert 'last_good' not in run(capsys, check=True, **wanted)[0]


@pytest.mark.parametrize('content', ['{not json', '{"files": [{"path": "/x"}]}', '[]'])
def test_a_bad_record_is_a_warning_and_not_current(capsys, monkeypatch, recorded, content):
    with open(os.path.join(recorded['last_good']['state_dir'], 'main.json'), 'w', encoding='utf-8') as handle:
        handle.write(content)
    warnings = record_warnings(monkeypatch)
    result = run(capsys, check=True, **recorded)[0]
    assert result['last_good'] == dict(found=True, current=False, version=None, command=[]) and 'failed' not in result
    assert len(warnings) == 1 and 'main.json is not a valid record' in warnings[0]


def test_a_last_good_path_outside_files_and_secrets_fails_naming_it(capsys, tmp_path, recorded):
    recorded['last_good']['files'].append(recorded['absent'][0])
    result = run(capsys, **recorded)[0]
    assert result['failed'] and recorded['absent'][0] in result['msg'] and 'last_good.files' in result['msg']
    assert not os.path.exists(recorded['absent'][0]) and 'changed_files' not in result
