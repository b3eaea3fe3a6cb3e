# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/modules/venv_requirements.py: the pins a virtualenv has, and the engine's import."""

from __future__ import annotations

import os
import sys

import pytest

from ansible_collections.llmops.serving.plugins.modules import venv_requirements
from ansible_collections.llmops.serving.tests.unit.plugins.modules._module_runner import run_main


@pytest.fixture
def venv():
    """The virtualenv the tests run in (the project's .venv, where pytest is installed)."""
    assert os.path.exists(os.path.join(sys.prefix, 'bin', 'python')), 'run the unit tests from the project virtualenv (make test)'
    return sys.prefix


def test_reports_what_is_installed_and_imports(venv, capsys):
    want = 'pytest==' + pytest.__version__
    result = run_main(venv_requirements.main, capsys, venv=venv, requirements=[want], import_module='json')[0]
    assert result['rc'] == 0 and result['missing'] == [] and result['packages'] == {want: pytest.__version__}
    assert not result['changed'] and result['python'] == venv + '/bin/python' and 'version' in result


def test_a_missing_virtualenv_misses_everything(tmp_path, capsys):
    result = run_main(venv_requirements.main, capsys, venv=str(tmp_path / 'none'), requirements=['sglang==1'])[0]
    assert result['rc'] != 0 and result['missing'] == ['sglang==1'] and result['packages'] == {}
    assert not result.get('failed')


def test_fail_unsatisfied_says_why(venv, capsys):
    result = run_main(venv_requirements.main, capsys, venv=venv, requirements=['pytest==0.0.1'], import_module='json',
                      fail_unsatisfied=True)[0]
    assert result['failed'] and result['msg'].startswith('after the install, pytest==0.0.1 not satisfied in %s' % venv)
    result = run_main(venv_requirements.main, capsys, venv=venv, requirements=[], import_module='no_such_module_xyz',
                      fail_unsatisfied=True)[0]
    assert result['failed'] and result['msg'].startswith('import no_such_module_xyz failed in %s/bin/python: ' % venv)
    assert 'No module named' in result['msg']
