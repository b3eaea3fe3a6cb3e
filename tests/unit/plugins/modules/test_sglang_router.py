"""Module sglang_router writes the router's files and key, and decides its start or restart."""

from __future__ import annotations

import os
import stat

from ansible_collections.llmops.serving.plugins.modules import sglang_router as module
from ansible_collections.llmops.serving.tests.unit.plugins.modules._module_runner import run_main

KEY = 'sk-router-key'


def run(capsys, tmp_path, **args):
    params = dict(workers={'a': 'http://10.0.0.1:30000'}, config_dir=str(tmp_path / 'etc'), run_dir=str(tmp_path / 'run'),
                  log_path=str(tmp_path / 'log' / 'router.log'), launcher='process', api_key=KEY, name=None, port=None)
    params.update(args)
    return run_main(module.main, capsys, **params)


def test_check_mode_is_the_plan_and_writes_nothing(capsys, tmp_path):
    result, out = run(capsys, tmp_path, _ansible_check_mode=True, _ansible_diff=True)
    assert result['changed'] and result['state'] == 'restarted' and not (tmp_path / 'etc').exists()
    assert KEY not in out and result['script'] == str(tmp_path / 'etc' / 'sglang-router-main.sh')
    assert any(d['after'].startswith('#!/bin/sh') for d in result['diff'])
    assert result['result'] == {'state': 'restarted', 'launcher': 'process', 'url': 'http://127.0.0.1:30080',
                                'workers': ['http://10.0.0.1:30000']}


def test_writes_then_changes_nothing_and_restarts_on_a_change(capsys, tmp_path):
    first, out = run(capsys, tmp_path)
    key_file = tmp_path / 'etc' / 'sglang-router-main.key'
    assert first['changed'] and KEY not in out and key_file.read_text() == KEY + '\n'
    assert stat.S_IMODE(os.stat(str(key_file)).st_mode) == 0o600 and (tmp_path / 'log').is_dir()
    again, dummy = run(capsys, tmp_path)
    assert not again['changed'] and again['state'] == 'started' and again['files'] == []
    installed, dummy = run(capsys, tmp_path, restart_on=[{'changed': True}])
    assert not installed['changed'] and installed['state'] == 'restarted'
    forced, dummy = run(capsys, tmp_path, restart=True)
    assert forced['state'] == 'restarted'
    flags, dummy = run(capsys, tmp_path, retry_max_retries=4, _ansible_diff=True)
    assert flags['changed'] and flags['state'] == 'restarted' and flags['files'] == [str(tmp_path / 'etc' / 'sglang-router-main.sh')]
    assert '--retry-max-retries 4' in (tmp_path / 'etc' / 'sglang-router-main.sh').read_text()
    keyless, dummy = run(capsys, tmp_path, api_key='')
    assert keyless['state'] == 'restarted' and not key_file.exists()
    stopped, dummy = run(capsys, tmp_path, api_key='', state='stopped')
    assert not stopped['changed'] and stopped['state'] == 'stopped'


def test_a_change_of_workers_alone_restarts_no_router_that_lists_them_already(capsys, tmp_path):
    """A fleet moved to TLS by a rolling deploy: the running router lists the https:// workers its register added;
    router.yml then writes them into the launch file for its next start, and restarts nothing. A router that does not
    list them all (or does not answer) restarts, as does any other change."""
    from ansible_collections.llmops.serving.tests.unit.plugins.modules.test_router_worker import FakeRouter
    fake = FakeRouter('https://10.0.0.1:30000')
    port = fake.server.server_address[1]
    try:
        first, dummy = run(capsys, tmp_path, host='127.0.0.1', port=port)
        assert first['state'] == 'restarted' and not first['kept_running']
        moved, dummy = run(capsys, tmp_path, host='127.0.0.1', port=port, workers={'a': 'https://10.0.0.1:30000'})
        assert moved['changed'] and moved['state'] == 'started' and moved['kept_running']
        assert 'https://10.0.0.1:30000' in (tmp_path / 'etc' / 'sglang-router-main.sh').read_text()
        grown, dummy = run(capsys, tmp_path, host='127.0.0.1', port=port,
                           workers={'a': 'https://10.0.0.1:30000', 'b': 'https://10.0.0.2:30000'})
        assert grown['state'] == 'restarted' and not grown['kept_running']
        fake.entries[0]['is_healthy'] = False
        sick, dummy = run(capsys, tmp_path, host='127.0.0.1', port=port, workers={'a': 'https://10.0.0.1:30000'})
        assert sick['state'] == 'restarted'
        fake.entries[0]['is_healthy'] = True
        both, dummy = run(capsys, tmp_path, host='127.0.0.1', port=port, workers={'a': 'http://10.0.0.1:30000'},
                          retry_max_retries=4)
        assert both['state'] == 'restarted' and not both['kept_running']
    finally:
        fake.server.shutdown()
