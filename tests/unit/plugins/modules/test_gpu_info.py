"""Module llmops.serving.gpu_info against the fake nvidia-smi of test_gpu_memory.py: it lists, and changes nothing."""

from __future__ import annotations

import json

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmops.serving.plugins.modules import gpu_info
from test_gpu_memory import FakeGpus


@pytest.fixture
def fake(tmp_path, monkeypatch):
    gpus = FakeGpus(tmp_path, monkeypatch, count=2)
    yield gpus
    gpus.cleanup()


def run_module(capsys, fake, **args):
    args.setdefault('nvidia_smi_path', str(fake.path))
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            gpu_info.main()
    return json.loads(capsys.readouterr().out)


def test_lists_gpus_and_processes_and_leaves_them_alone(capsys, fake):
    child = fake.hold(gpu=1, mib=40000, tag='train.py')
    fake.state['holders'].append({'pid': 999999, 'gpu': 0, 'mib': 1000, 'static': True, 'name': 'other'})
    fake.save()
    result = run_module(capsys, fake)
    assert not result['changed'] and not result.get('failed')
    assert [(g['index'], g['used_mib'], g['free_mib']) for g in result['gpus']] == [(0, 1000, 142156), (1, 40000, 103156)]
    mine = [p for p in result['processes'] if p['pid'] == child.pid]
    assert len(mine) == 1 and mine[0]['visible'] and 'train.py' in mine[0]['cmdline'] and mine[0]['gpu'] == 1
    other = [p for p in result['processes'] if p['pid'] == 999999]
    assert other == [{'pid': 999999, 'gpu': 0, 'used_mib': 1000, 'name': 'other', 'cmdline': None, 'user': None,
                      'visible': False}]
    assert child.poll() is None


def test_selection_and_driver_errors(capsys, fake):
    result = run_module(capsys, fake, gpus=['1'])
    assert [g['index'] for g in result['gpus']] == [1]
    result = run_module(capsys, fake, gpus=['7'])
    assert result['failed'] and result['error'] == 'selection' and 'gpus names 7' in result['msg']
    fake.state['fault'] = 'nvml'
    fake.save()
    result = run_module(capsys, fake)
    assert result['failed'] and result['error'] == 'driver'
