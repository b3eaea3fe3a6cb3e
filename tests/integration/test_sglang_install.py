"""roles/sglang_install (playbooks/install.yml) on two fleet hosts, with a real pip, a real
virtualenv and a wheelhouse of small real wheels built here: ``sglang`` in two versions (a
package whose ``__init__`` sets ``__version__``) and one extra pinned dependency.

Shows: check mode says what it would install and creates nothing; the first run installs
(the wheelhouse copied to each host, ``import sglang`` works in the virtualenv); a rerun
changes nothing and does not run pip; a wrong installed version is replaced on that host only
(from a wheelhouse already on the host); an unpinned extra package and a host without
nvidia-smi fail with a message that names the variable to set, before anything is installed.
"""

from __future__ import annotations

import os
import re

import pytest

from ansible_collections.llmops.serving.plugins.module_utils._releases import venv_path
from tiny_wheels import build_wheel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(ROOT, 'tests', 'sim')
HOSTS = ['ns1', 'ns2']
VERSION = '0.5.15.post1'
OLD_VERSION = '0.5.11'
DEP = 'llmops-itest-dep==1.0'
# The default virtualenv of this release with the extra pin: /opt/llmops/sglang-0.5.15.post1-<hash>.
VENV = venv_path('sglang', VERSION, [DEP])


@pytest.fixture(scope='module')
def wheelhouse(tmp_path_factory):
    """A directory on the controller (this machine's /tmp, which the fleet hosts also see)."""
    directory = tmp_path_factory.mktemp('wheelhouse')
    for version in (VERSION, OLD_VERSION):
        build_wheel(directory, 'sglang', version, 'sglang', '__version__ = %r\n' % version)
    build_wheel(directory, 'llmops-itest-dep', '1.0', 'llmops_itest_dep', '')
    return str(directory)


@pytest.fixture
def hosts(clean_fleet):
    """ns1 and ns2 wiped (empty /opt), each with two simulated GPUs for the driver check."""
    for host in HOSTS:
        clean_fleet.ssh(host, '/usr/bin/python3 %s/nvsim.py init --count 2' % SIM)
    return clean_fleet


def install_vars(wheelhouse, **overrides):
    base = {
        'sglang_install_wheelhouse': wheelhouse,
        'sglang_install_packages': [DEP],
        'sglang_install_nvidia_smi_path': os.path.join(SIM, 'nvidia-smi'),
        'sglang_install_environment': {'NVSIM_STATE_DIR': '/run/llmops-nvsim'},
    }
    base.update(overrides)
    return base


def task_statuses(stdout, task):
    """The statuses (ok, changed, skipping, fatal) printed under the task named ``task``."""
    section = stdout.split('%s] ***' % task, 1)[1].split('TASK [', 1)[0]
    return set(re.findall(r'^(ok|changed|skipping|fatal): ', section, re.M))


def engine_version(fleet, host):
    """``sglang.__version__`` and the dependency's metadata version, as the venv's python sees them."""
    code = ('import importlib.metadata as m, sglang; '
            'print(sglang.__version__, m.version("llmops-itest-dep"))')
    return fleet.ssh(host, "%s/bin/python -c '%s'" % (VENV, code)).stdout.split()


def test_install_rerun_and_replace_a_wrong_version(hosts, wheelhouse, run_playbook):
    check = run_playbook('playbooks/install.yml', limit=','.join(HOSTS), extra_vars=install_vars(wheelhouse),
                         check=True, expect_rc=0)
    assert check.stdout.count('would install sglang==%s, %s into %s' % (VERSION, DEP, VENV)) == 2, check.stdout
    assert '(installed now: no virtualenv)' in check.stdout
    for host in HOSTS:
        assert hosts.ssh(host, 'test -e %s' % VENV, check=False).returncode == 1, host

    first = run_playbook('playbooks/install.yml', limit=','.join(HOSTS), extra_vars=install_vars(wheelhouse),
                         expect_rc=0)
    for host in HOSTS:
        assert first.changed(host) >= 2, first.stdout   # wheelhouse copied, packages installed
        assert engine_version(hosts, host) == [VERSION, '1.0']
        wheels = hosts.ssh(host, 'ls /opt/llmops/wheelhouse').stdout.split()
        assert 'sglang-%s-py3-none-any.whl' % VERSION in wheels

    again = run_playbook('playbooks/install.yml', limit=','.join(HOSTS), extra_vars=install_vars(wheelhouse),
                         expect_rc=0)
    for host in HOSTS:
        assert again.changed(host) == 0, again.stdout
    assert task_statuses(again.stdout, 'Install the pinned packages into the virtualenv') == {'skipping'}, \
        'a rerun must not even run pip'

    # Someone installs another release by hand on ns1: the role puts the pinned one back there only.
    hosts.ssh('ns1', '%s/bin/pip install -q --no-index --find-links %s sglang==%s'
              % (VENV, wheelhouse, OLD_VERSION))
    assert engine_version(hosts, 'ns1') == [OLD_VERSION, '1.0']
    check = run_playbook('playbooks/install.yml', limit=','.join(HOSTS), extra_vars=install_vars(wheelhouse),
                         check=True, expect_rc=0)
    assert check.stdout.count('would install sglang==%s into %s' % (VERSION, VENV)) == 1, check.stdout
    assert engine_version(hosts, 'ns1') == [OLD_VERSION, '1.0']
    # This time from the wheelhouse where it is: /tmp is shared with the fleet hosts.
    fixed = run_playbook('playbooks/install.yml', limit=','.join(HOSTS), expect_rc=0,
                         extra_vars=install_vars(wheelhouse, sglang_install_wheelhouse_on_host=True))
    assert fixed.changed('ns1') >= 1 and fixed.changed('ns2') == 0, fixed.stdout
    assert engine_version(hosts, 'ns1') == [VERSION, '1.0']


def test_missing_driver_or_unpinned_package_is_a_clear_error_before_anything_is_installed(
        hosts, wheelhouse, run_playbook):
    unpinned = run_playbook('playbooks/install.yml', limit='ns1',
                            extra_vars=install_vars(wheelhouse, sglang_install_packages=['torch', DEP]))
    assert unpinned.rc != 0 and unpinned.recap['ns1']['failed'] == 1
    assert 'sglang_install_packages: torch not pinned: write each as name==version' in ' '.join(unpinned.stdout.split())

    assert hosts.ssh('ns1', 'command -v nvidia-smi', check=False).returncode != 0, 'ns1 must have no nvidia-smi'
    result = run_playbook('playbooks/install.yml', limit='ns1',
                          extra_vars=install_vars(wheelhouse, sglang_install_nvidia_smi_path='nvidia-smi'))
    assert result.rc != 0 and result.recap['ns1']['failed'] == 1, result.stdout
    text = ' '.join(result.stdout.split())   # the YAML callback folds long messages
    assert ('sglang needs a working NVIDIA driver on ns1: nvidia-smi (sglang_install_nvidia_smi_path) not found. '
            'Install the driver') in text, result.stdout
    assert 'or set sglang_install_check_driver: false to skip this check' in text
    assert hosts.ssh('ns1', 'test -e %s' % VENV, check=False).returncode == 1

    skipped = run_playbook('playbooks/install.yml', limit='ns1', expect_rc=0,
                           extra_vars=install_vars(wheelhouse, sglang_install_nvidia_smi_path='nvidia-smi',
                                                   sglang_install_check_driver=False))
    assert skipped.changed('ns1') >= 2
    assert engine_version(hosts, 'ns1') == [VERSION, '1.0']
