# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_install.py: what the sglang_install role decides, and the messages it shows."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _install


@pytest.mark.parametrize('packages, unpinned', [
    ([], None),
    (['torch==2.11.0', 'sgl-kernel==0.3.1+cu130'], None),
    (['torch', 'numpy>=2', 'flashinfer==0.2'], 'torch, numpy>=2'),
])
def test_unpinned_message_names_the_entries(packages, unpinned):
    message = _install.unpinned_message(packages)
    if unpinned is None:
        assert message is None
    else:
        assert message.startswith('sglang_install_packages: %s not pinned: write each as name==version' % unpinned)
        assert message.endswith('so that every host gets the same release and a rerun installs nothing')


@pytest.mark.parametrize('gpus, problem', [
    ({'ready': True}, None),
    ({'ready': False, 'error': 'missing', 'msg': 'nvidia-smi not found'}, '/opt/nv/nvidia-smi (sglang_install_nvidia_smi_path) not found'),
    ({'ready': False, 'msg': 'NVML: driver/library version mismatch.'}, 'NVML: driver/library version mismatch'),
    ({}, 'nvidia-smi failed'),
])
def test_driver_message(gpus, problem):
    message = _install.driver_message(gpus, 'sglang', 'ns1', '/opt/nv/nvidia-smi')
    if problem is None:
        assert message is None
    else:
        assert message == ('sglang needs a working NVIDIA driver on ns1: %s. Install the driver, set '
                           'sglang_install_nvidia_smi_path to its nvidia-smi, or set sglang_install_check_driver: false '
                           'to skip this check on a CPU or test host.' % problem)


def test_requirements_wheelhouse_and_pip_arguments():
    assert _install.requirements('sglang', '0.5.23', ['torch==2.11.0']) == ['sglang==0.5.23', 'torch==2.11.0']
    assert _install.wheelhouse_on_host('', False, '/opt/llmops/wheelhouse') == ''
    assert _install.wheelhouse_on_host('/srv/wheels', False, '/opt/llmops/wheelhouse') == '/opt/llmops/wheelhouse'
    assert _install.wheelhouse_on_host('/srv/wheels', True, '/opt/llmops/wheelhouse') == '/srv/wheels'
    assert _install.pip_extra_args('', '') is None
    assert _install.pip_extra_args('', '--no-cache-dir') == '--no-cache-dir'
    assert _install.pip_extra_args('/w', '--no-cache-dir') == '--no-index --find-links /w --no-cache-dir'


def test_refusal_names_the_processes_and_the_records():
    venvs = [{'path': '/opt/llmops/sglang-0.5.23', 'in_use': [4242], 'records': ['main:3']},
             {'path': '/opt/llmops/sglang-0.5.22', 'in_use': [], 'records': []}]
    message = _install.refusal_message('/opt/llmops/sglang-0.5.23/', ['sglang==0.5.23'], 'ns1', venvs)
    assert message.startswith('/opt/llmops/sglang-0.5.23/ misses sglang==0.5.23 but on ns1 it is run by PID 4242 and '
                              "named by the good configuration(s) main:3: installing would change a server's engine")
    assert message.endswith('deploy the servers onto it, then install again; nothing was installed')
    assert _install.refusal_message('/opt/llmops/sglang-0.5.22', ['x==1'], 'ns1', venvs) is None
    assert _install.refusal_message('/opt/llmops/sglang-0.5.21', ['x==1'], 'ns1', venvs) is None


def test_would_install_message():
    assert _install.would_install_message(['sglang==1', 'dep==1.0'], '/v', {}, '') == \
        'would install sglang==1, dep==1.0 into /v (installed now: no virtualenv) from the package index'
    assert _install.would_install_message(['sglang==1'], '/v', {'sglang==1': '0.9'}, '/srv/w') == \
        'would install sglang==1 into /v (installed now: {"sglang==1": "0.9"}) from the wheelhouse /srv/w'


def test_verify_message():
    ok = {'rc': 0, 'missing': [], 'packages': {'sglang==1': '1'}}
    assert _install.verify_message('sglang', '/v/bin/python', '/v', ok) is None
    failed = {'rc': 1, 'stderr': 'Traceback\nImportError: no torch\n', 'missing': [], 'packages': {}}
    assert _install.verify_message('sglang', '/v/bin/python', '/v', failed) == \
        'import sglang failed in /v/bin/python: ImportError: no torch'
    assert _install.verify_message('sglang', '/v/bin/python', '/v', dict(failed, stderr='')) == \
        'import sglang failed in /v/bin/python: '
    missing = {'rc': 0, 'missing': ['dep==2'], 'packages': {'sglang==1': '1', 'dep==2': None}}
    assert _install.verify_message('sglang', '/v/bin/python', '/v', missing) == \
        'after the install, dep==2 not satisfied in /v (installed: {"sglang==1": "1", "dep==2": null})'


def test_probe_meets_a_pin_with_its_local_build():
    out = subprocess.run([sys.executable, '-c', _install.PROBE, '--import', 'json', 'pytest==' + pytest.__version__,
                          'pytest==0.0.1', 'no-such-package-here==1.0'], check=True, capture_output=True, text=True).stdout
    answer = json.loads(out)
    assert answer['missing'] == ['pytest==0.0.1', 'no-such-package-here==1.0']
    assert answer['packages']['no-such-package-here==1.0'] is None and 'version' in answer


@pytest.mark.parametrize('mode,backend,cuda,expected', [
    (None, None, '13', []),
    (None, 'nixl', '13', []),
    ('prefill', None, '13', ['mooncake-transfer-engine-cuda13==0.3.14']),
    ('decode', 'mooncake', '12', ['mooncake-transfer-engine==0.3.14']),
    ('prefill', 'mooncake_tcp', '13', ['mooncake-transfer-engine-cuda13==0.3.14']),
    ('decode', 'nixl', '12', ['nixl-cu12==1.5.1']),
    ('prefill', 'nixl', '13', ['nixl-cu13==1.5.1']),
    ('decode', 'fake', '13', []),
])
def test_transfer_engine_of_a_pd_server(mode, backend, cuda, expected):
    versions = {'mooncake': '0.3.14', 'nixl': '1.5.1'}
    assert _install.transfer_engine_requirements(mode, backend, cuda, versions) == expected


def test_an_unknown_backend_names_the_variable():
    with pytest.raises(ValueError, match='sglang_install_transfer_backend ascend is no transfer backend'):
        _install.transfer_engine_requirements('decode', 'ascend', '13', {'mooncake': '1', 'nixl': '1'})


def test_the_transfer_engine_follows_the_pins_and_yields_to_the_sites():
    assert _install.requirements('sglang', '0.5.15.post1', ['torch==2.11.0'], ['nixl-cu13==1.5.1']) == [
        'sglang==0.5.15.post1', 'torch==2.11.0', 'nixl-cu13==1.5.1']
    # a pin of the same package in sglang_install_packages wins
    assert _install.requirements('sglang', '0.5.15.post1', ['nixl_cu13==1.5.0'], ['nixl-cu13==1.5.1']) == [
        'sglang==0.5.15.post1', 'nixl_cu13==1.5.0']
