"""Tests of plugins/modules/sglang_launch_check.py against the SGLang simulator (a fake
``sglang`` package without dist-info, so the version comes from ``sglang.__version__``)."""

from __future__ import annotations

import json
import os
import sys

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmops.serving.plugins.modules import sglang_launch_check

SIM = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'sim')


def run(capsys, **args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            sglang_launch_check.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize('version, has_old_flag', [('0.5.15.post1', True), ('0.5.23', False)])
def test_detects_version_and_flags(capsys, version, has_old_flag):
    result = run(capsys, python=sys.executable, env={'PYTHONPATH': SIM, 'SGLANG_SIM_VERSION': version})
    assert not result.get('failed'), result
    assert result['version'] == version and not result['changed']
    options = result['cli']['options']
    assert options['--model-path']['takes_value'] and not options['--enable-metrics']['takes_value']
    assert ('--cuda-graph-max-bs' in options) is has_old_flag


def test_bad_flag_fails_naming_it(capsys):
    result = run(capsys, python=sys.executable, env={'PYTHONPATH': SIM},
                 argv=['--model-path', '/m', '--num-speculative-tokens', '16'])
    assert result['failed'] and 'unrecognized flag --num-speculative-tokens' in result['msg']
    assert result['version'] == '0.5.15.post1'


@pytest.mark.parametrize('python, env, message', [
    ('/nonexistent/bin/python', {}, 'not an executable Python interpreter'),
    (sys.executable, {'PYTHONPATH': '/nonexistent'}, 'detecting the sglang version'),
])
def test_missing_engine_fails_readably(capsys, python, env, message):
    result = run(capsys, python=python, env=env)
    assert result['failed'] and message in result['msg']
    # the message names the variable to set
    assert 'set sglang_server_python to the interpreter' in result['msg']


def test_help_cache_is_read_back_and_keyed_by_version(capsys, tmp_path):
    cache = str(tmp_path / 'help-cache')
    env = {'PYTHONPATH': SIM, 'SGLANG_SIM_VERSION': '0.5.15.post1'}
    first = run(capsys, python=sys.executable, env=env, help_cache_dir=cache)
    assert not first['help_cached'] and len(os.listdir(cache)) == 1
    # A cached list is used as is: plant a marker option and see it come back.
    path = os.path.join(cache, os.listdir(cache)[0])
    with open(path, encoding='utf-8') as handle:
        options = json.load(handle)
    options['--planted-by-test'] = {'takes_value': False}
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump(options, handle)
    second = run(capsys, python=sys.executable, env=env, help_cache_dir=cache)
    assert second['help_cached'] and '--planted-by-test' in second['cli']['options']
    # Another version is another key: --help runs again.
    other = run(capsys, python=sys.executable, env=dict(env, SGLANG_SIM_VERSION='0.5.23'), help_cache_dir=cache)
    assert not other['help_cached'] and '--planted-by-test' not in other['cli']['options']
    assert len(os.listdir(cache)) == 2


def test_unreadable_help_cache_is_rewritten_and_check_mode_writes_nothing(capsys, tmp_path):
    cache = str(tmp_path / 'help-cache')
    env = {'PYTHONPATH': SIM}
    checked = run(capsys, python=sys.executable, env=env, help_cache_dir=cache, _ansible_check_mode=True)
    assert not checked['help_cached'] and not os.path.exists(cache)
    run(capsys, python=sys.executable, env=env, help_cache_dir=cache)
    path = os.path.join(cache, os.listdir(cache)[0])
    with open(path, 'w', encoding='utf-8') as handle:
        handle.write('{not json')
    again = run(capsys, python=sys.executable, env=env, help_cache_dir=cache)
    assert not again['help_cached'] and again['cli']['options']['--model-path']['takes_value']
    with open(path, encoding='utf-8') as handle:
        assert '--model-path' in json.load(handle)


def test_help_cache_notices_a_reinstalled_release(capsys, tmp_path):
    """Same version, other files (a dist-info whose RECORD changed, as a reinstall leaves it): --help runs again."""
    dist = tmp_path / 'site' / 'sglang-0.5.15.post1.dist-info'
    dist.mkdir(parents=True)
    (dist / 'METADATA').write_text('Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.15.post1\n')
    (dist / 'RECORD').write_text('sglang/__init__.py,sha256=one,10\n')
    env = {'PYTHONPATH': '%s:%s' % (tmp_path / 'site', SIM)}
    cache = str(tmp_path / 'help-cache')
    assert not run(capsys, python=sys.executable, env=env, help_cache_dir=cache)['help_cached']
    assert run(capsys, python=sys.executable, env=env, help_cache_dir=cache)['help_cached']
    (dist / 'RECORD').write_text('sglang/__init__.py,sha256=two,10\n')
    assert not run(capsys, python=sys.executable, env=env, help_cache_dir=cache)['help_cached']


def test_missing_paths_are_named_and_nothing_is_probed(capsys, tmp_path):
    model = tmp_path / 'model'
    model.mkdir()
    paths = {'sglang_server_model_path': str(model), 'sglang_server_speculative_draft_model_path': '/nonexistent/drafter'}
    # an interpreter that does not exist: a missing path is reported before the engine is probed
    result = run(capsys, python='/nonexistent/bin/python', paths=paths)
    assert not result.get('failed'), result
    assert result['missing_paths'] == {'sglang_server_speculative_draft_model_path': '/nonexistent/drafter'}
    assert 'version' not in result

    result = run(capsys, python=sys.executable, env={'PYTHONPATH': SIM}, paths={'model': str(model)})
    assert result['missing_paths'] == {} and result['version'] == '0.5.15.post1'


@pytest.mark.parametrize('fact, booted, expected', [
    ('systemd', True, 'systemd'), ('systemd', False, 'other'), ('sysvinit', False, 'other'), ('process_api', True, 'other'),
])
def test_service_manager_is_ansibles_fact_where_systemd_is_booted(monkeypatch, fact, booted, expected):
    """ansible-core's fact decides, except where it says systemd only because systemd is installed (a container
    whose /sbin/init links to it): a unit needs a booted systemd."""
    collector = sglang_launch_check.ServiceMgrFactCollector
    monkeypatch.setattr(collector, 'collect', lambda self, module=None, collected_facts=None: {'service_mgr': fact})
    monkeypatch.setattr(collector, 'is_systemd_managed', staticmethod(lambda module: booted))
    assert sglang_launch_check.service_manager(object()) == expected
