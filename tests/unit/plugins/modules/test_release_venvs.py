# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/modules/release_venvs.py and _releases.survey: which release virtualenvs something needs (a running
process, a kept good configuration, the host's settings), and pruning the rest."""

from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _releases
from ansible_collections.llmops.serving.plugins.module_utils._last_good import Record
from ansible_collections.llmops.serving.plugins.modules import release_venvs
from ansible_collections.llmops.serving.tests.unit.plugins.modules._module_runner import run_main


def make_venv(root, name, size=1000):
    path = root / name
    (path / 'bin').mkdir(parents=True)
    (path / 'pyvenv.cfg').write_text('home = /usr/bin\n')
    (path / 'bin' / 'python').write_bytes(b'x' * size)
    return str(path)


def fake_process(proc, pid, argv):
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / 'cmdline').write_bytes(b'\0'.join(arg.encode() for arg in argv) + b'\0')
    (proc / str(pid) / 'stat').write_text('%d (python) S %s\n' % (pid, ' '.join(['1'] * 50)))


@pytest.fixture
def host(tmp_path):
    root, state, proc = tmp_path / 'opt', tmp_path / 'state', tmp_path / 'proc'
    venvs = {name: make_venv(root, 'sglang-' + name) for name in ('0.5.11', '0.5.15.post1', '0.5.22', '0.5.23')}
    (root / 'wheelhouse').mkdir()
    os.symlink(venvs['0.5.11'], str(root / 'sglang-current'))
    fake_process(proc, 4242, [venvs['0.5.22'] + '/bin/python', '-m', 'sglang.launch_server'])
    fake_process(proc, 4243, ['/usr/bin/python3', venvs['0.5.11'] + '/bin/python'])   # only mentions it
    Record(str(state), 'main').save({'/etc/llmops/sglang-main.sh': (b'exec', 0o755)},
                                    {'python': venvs['0.5.15.post1'] + '/bin/python', 'version': '0.5.15.post1'}, {})
    return dict(root=str(root), state=str(state), proc=str(proc), venvs=venvs)


def test_survey_says_what_needs_each_virtualenv(host):
    found = _releases.survey(host['root'], keep=[host['venvs']['0.5.23'] + '/bin/python'], state_dirs=[host['state']],
                             proc=host['proc'])
    by_name = {os.path.basename(item['path']): item for item in found}
    assert sorted(by_name) == ['sglang-0.5.11', 'sglang-0.5.15.post1', 'sglang-0.5.22', 'sglang-0.5.23']
    assert by_name['sglang-0.5.22']['in_use'] == [4242] and by_name['sglang-0.5.22']['why'] == 'run by PID 4242'
    assert by_name['sglang-0.5.15.post1']['records'] == ['main:' + Record(host['state'], 'main').load()['id']]
    assert by_name['sglang-0.5.23']['why'] == "wanted by this host's settings"
    assert (by_name['sglang-0.5.11']['kept'], by_name['sglang-0.5.11']['why']) == (False, 'nothing needs it')
    assert all(item['bytes'] >= 1000 for item in found)


def run(capsys, host, monkeypatch, check=False, **args):
    real = _releases.venv_users
    monkeypatch.setattr(_releases, 'venv_users', lambda venvs, proc='/proc': real(venvs, host['proc']))
    return run_main(release_venvs.main, capsys, _ansible_check_mode=check, root=host['root'],
                    state_dirs=[host['state']], keep=[host['venvs']['0.5.23']], **args)[0]


def test_prune_removes_only_what_nothing_needs_and_reports_the_space(capsys, host, monkeypatch):
    listed = run(capsys, host, monkeypatch)
    assert not listed['changed'] and listed['removed'] == [] and len(listed['venvs']) == 4
    check = run(capsys, host, monkeypatch, check=True, prune=True)
    assert check['changed'] and check['removed'] == [host['venvs']['0.5.11']] and check['freed_bytes'] >= 1000
    assert os.path.isdir(host['venvs']['0.5.11'])
    pruned = run(capsys, host, monkeypatch, prune=True)
    assert pruned['removed'] == [host['venvs']['0.5.11']] and pruned['freed_bytes'] == check['freed_bytes']
    assert not os.path.exists(host['venvs']['0.5.11'])
    assert all(os.path.isdir(host['venvs'][name]) for name in ('0.5.15.post1', '0.5.22', '0.5.23'))
    assert os.path.isdir(os.path.join(host['root'], 'wheelhouse'))
    again = run(capsys, host, monkeypatch, prune=True)
    assert not again['changed'] and again['freed_bytes'] == 0


def test_an_unreadable_record_removes_nothing(capsys, host, monkeypatch):
    with open(os.path.join(host['state'], 'other.json'), 'w', encoding='utf-8') as handle:
        handle.write('{broken')
    result = run(capsys, host, monkeypatch, prune=True)
    assert result['failed'] and 'nothing was removed' in result['msg'] and 'other.json' in result['msg']
    assert os.path.isdir(host['venvs']['0.5.11'])
