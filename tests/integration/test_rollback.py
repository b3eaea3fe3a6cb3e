"""Automatic rollback and the canary gate (roles/deploy, sglang_server tasks rollback and
record_good, plugins/modules/last_good_config.py) on three namespace hosts of the fleet, with
the SGLang simulator (a test double: its figures are not GPU figures).

A server of its own name and port ('rb', 31100) so that the other files' servers are left
alone. One host per batch: the first host's failure stops the rollout, the others are never
touched; the failed host serves its last good configuration again (same launch script, a
new PID), or is left as it failed with llmops_rollback false.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from test_deploy import SIM, deploy_vars, engine_models, local_inventory, summary_rows, vllm_server_vars

HOSTS = ['ns1', 'ns2', 'ns3']
PORT = 31100
SCRIPT = '/etc/llmops/sglang-rb.sh'
RANDOM_DRAFTER = '/srv/llmops/rb-random/drafter'


def rb_vars(**overrides):
    base = deploy_vars(sglang_server_name='rb', sglang_server_port=PORT, llmops_serial=1,
                       sglang_server_api_key='')
    base.update(overrides)
    return base


def pids(fleet):
    out = {}
    for host in HOSTS:
        data = json.loads(fleet.ssh(host, 'cat /run/llmops/sglang-rb.pid 2>/dev/null || echo null').stdout)
        out[host] = data['pid'] if data else None
    return out


def scripts(fleet):
    return {host: fleet.ssh(host, 'cat %s' % SCRIPT).stdout for host in HOSTS}


def serving(fleet, host):
    """The running server's speculative settings and acceptance length, from the host itself."""
    code = ('import json, urllib.request; '
            'print(urllib.request.urlopen("http://127.0.0.1:%d/server_info", timeout=10).read().decode())' % PORT)
    return json.loads(fleet.ssh(host, "/usr/bin/python3 -c '%s'" % code).stdout)


def flat(result):
    return ' '.join(result.stdout.split())


_GOOD = {}


@pytest.fixture
def good(fleet, run_playbook, prepare_simulator, request):
    """The three hosts deployed with the good drafter at depth 16 (recorded as last good),
    once, on hosts wiped first (servers that earlier tests left would hold the GPUs); the
    tests below build on that state in order. The last test stops the servers."""
    if not _GOOD:
        request.getfixturevalue('clean_fleet')
        prepare_simulator(limit=','.join(HOSTS), extra_vars=rb_vars())
        for host in HOSTS:
            fleet.ssh(host, '/usr/bin/python3 %s/make_tiny_checkpoint.py /srv/llmops/rb-random --quality random' % SIM)
        run_playbook('playbooks/deploy.yml', limit=','.join(HOSTS), extra_vars=rb_vars(), expect_rc=0, timeout=600)
        _GOOD['done'] = True
    return fleet


@pytest.fixture
def run_playbook_here(run_playbook):
    return run_playbook


def assert_first_host_rolled_back(fleet, result, before_pids, before_scripts, reason):
    text = flat(result)
    assert result.rc != 0 and result.recap['ns1']['failed'] == 1, result.stdout[-4000:]
    assert 'rolled_back: ' + reason in text, result.stdout[-4000:]
    after = pids(fleet)
    # ns1 serves its last good configuration again: the same launch script, a new process.
    assert scripts(fleet)['ns1'] == before_scripts['ns1']
    assert after['ns1'] not in (None, before_pids['ns1'])
    info = serving(fleet, 'ns1')
    assert info['speculative_num_steps'] == 15 and info['speculative_draft_model_path'] != RANDOM_DRAFTER
    # The rest of the fleet was never touched.
    assert {h: after[h] for h in HOSTS[1:]} == {h: before_pids[h] for h in HOSTS[1:]}
    # (the fleet preflight planned them, in check mode: nothing changed there)
    assert all(result.recap.get(h, {}).get('changed', 0) == 0 for h in HOSTS[1:]), result.recap
    assert scripts(fleet)['ns2'] == before_scripts['ns2']


def test_a_drafter_below_the_floor_rolls_the_first_host_back(good, run_playbook_here):
    fleet = good
    before_pids, before_scripts = pids(fleet), scripts(fleet)
    start = time.monotonic()
    result = run_playbook_here('playbooks/deploy.yml', limit=','.join(HOSTS),
                               extra_vars=rb_vars(sglang_server_speculative_draft_model_path=RANDOM_DRAFTER))
    print('drafter change to rolled back and serving: %.1f s (whole run)' % (time.monotonic() - start))
    assert_first_host_rolled_back(fleet, result, before_pids, before_scripts, 'the drafter is not being accepted')


def test_a_crash_at_start_rolls_back_the_same_way(good, run_playbook_here):
    fleet = good
    before_pids, before_scripts = pids(fleet), scripts(fleet)
    env = dict(rb_vars()['sglang_server_env'], SGLANG_SIM_FAULT='crash:load')
    result = run_playbook_here('playbooks/deploy.yml', limit=','.join(HOSTS), extra_vars=rb_vars(sglang_server_env=env))
    assert_first_host_rolled_back(fleet, result, before_pids, before_scripts, '')
    assert 'Traceback' in result.stdout


def test_check_mode_changes_nothing(good, run_playbook_here):
    fleet = good
    before = pids(fleet)
    result = run_playbook_here('playbooks/deploy.yml', limit=','.join(HOSTS), check=True, expect_rc=0,
                               extra_vars=rb_vars(sglang_server_speculative_draft_model_path=RANDOM_DRAFTER))
    assert all(result.recap[h]['failed'] == 0 for h in HOSTS)
    assert pids(fleet) == before


def test_without_rollback_the_host_is_left_as_it_failed_then_rolled_back_by_hand(good, run_playbook_here):
    fleet = good
    before_scripts = scripts(fleet)
    env = dict(rb_vars()['sglang_server_env'], SGLANG_SIM_FAULT='crash:load')
    result = run_playbook_here('playbooks/deploy.yml', limit=','.join(HOSTS),
                               extra_vars=rb_vars(sglang_server_env=env, llmops_rollback=False))
    assert result.rc != 0 and result.recap['ns1']['failed'] == 1
    assert 'the host is left as it failed (deploy_rollback is false)' in flat(result)
    assert 'rolled_back' not in flat(result)
    assert 'SGLANG_SIM_FAULT="crash:load"' in fleet.ssh('ns1', 'cat /etc/llmops/sglang-rb.env').stdout
    by_hand = run_playbook_here('playbooks/rollback.yml', limit='ns1', expect_rc=0, extra_vars=rb_vars())
    assert re.search(r'ns1: rolled_back to record [0-9a-f]+, pid \d+, sglang [0-9a-z.]+, depth 16', flat(by_hand)), by_hand.stdout[-3000:]
    assert 'SGLANG_SIM_FAULT' not in fleet.ssh('ns1', 'cat /etc/llmops/sglang-rb.env').stdout
    assert scripts(fleet)['ns1'] == before_scripts['ns1']


def test_a_host_with_no_last_good_configuration_is_left_stopped(good, run_playbook_here):
    fleet = good
    fleet.ssh('ns1', 'rm -f /var/lib/llmops/last-good/rb.json')
    env = dict(rb_vars()['sglang_server_env'], SGLANG_SIM_FAULT='crash:load')
    result = run_playbook_here('playbooks/deploy.yml', limit=','.join(HOSTS), extra_vars=rb_vars(sglang_server_env=env))
    assert result.rc != 0 and result.recap['ns1']['failed'] == 1
    assert 'no last good configuration was recorded, the server is left stopped' in flat(result)
    assert fleet.ssh('ns1', 'pgrep -f "[-]-port %d" || true' % PORT).stdout.strip() == ''
    # A good deploy serves again and records it.
    run_playbook_here('playbooks/deploy.yml', limit='ns1', expect_rc=0, extra_vars=rb_vars())
    assert fleet.ssh('ns1', 'stat -c %a /var/lib/llmops/last-good/rb.json').stdout.strip() == '600'


def test_canary_gate_rolls_back_a_slower_server_and_passes_a_neutral_change(good, run_playbook_here):
    fleet = good
    base_env = dict(rb_vars()['sglang_server_env'], SGLANG_SIM_SPEED='0.5')
    canary = dict(llmops_canary_hosts=['ns1'], sglang_server_benchmark_rounds=3, sglang_server_benchmark_num_prompts=16)
    run_playbook_here('playbooks/deploy.yml', limit='ns1', expect_rc=0, extra_vars=rb_vars(sglang_server_env=base_env))
    before_pid = pids(fleet)['ns1']
    slower = dict(base_env, SGLANG_SIM_SPEED='0.65')  # every decode step 30 % longer
    result = run_playbook_here('playbooks/deploy.yml', limit=','.join(HOSTS),
                               extra_vars=rb_vars(sglang_server_env=slower, **canary))
    text = flat(result)
    print(re.findall(r'canary gate: output throughput fell [^)]*\)', text)[:1])
    assert result.rc != 0 and 'rolled_back: canary gate: output throughput fell' in text, result.stdout[-4000:]
    assert '0.65' not in fleet.ssh('ns1', 'cat /etc/llmops/sglang-rb.env').stdout
    assert pids(fleet)['ns1'] != before_pid
    neutral = dict(base_env, LLMOPS_NEUTRAL_CHANGE='1')
    passed = run_playbook_here('playbooks/deploy.yml', limit='ns1', expect_rc=0,
                               extra_vars=rb_vars(sglang_server_env=neutral, **canary))
    assert 'ns1 canary gate: passed ns1 figure before (min / median / max)' in flat(passed), passed.stdout[-3000:]


def test_a_key_added_by_a_failed_change_stays_after_the_rollback(good, run_playbook_here):
    """The last good configuration was recorded without a key; the failed change adds one. The
    rolled-back server must not serve without it: the recorded launch files never decide
    whether there is a key, the current key file does."""
    fleet = good
    key = 'sk-rb-kept-3c2b1a'
    result = run_playbook_here('playbooks/deploy.yml', limit=','.join(HOSTS), extra_vars=rb_vars(
        sglang_server_speculative_draft_model_path=RANDOM_DRAFTER, sglang_server_api_key=key))
    assert result.rc != 0 and 'rolled_back: the drafter is not being accepted' in flat(result), result.stdout[-4000:]
    assert key not in result.stdout
    probe = ('import sys, urllib.request, urllib.error; key = sys.stdin.read().strip(); '
             'headers = {"Authorization": "Bearer " + key} if key else {}; '
             'req = urllib.request.Request("http://127.0.0.1:%d/server_info", headers=headers)\n'
             'try:\n    print(urllib.request.urlopen(req, timeout=10).status)\n'
             'except urllib.error.HTTPError as exc:\n    print(exc.code)' % PORT)
    status = {given: fleet.ssh('ns1', "/usr/bin/python3 -c '%s'" % probe, input=given).stdout.strip()
              for given in ('', key)}
    assert status == {'': '401', key: '200'}, status


def test_stop_leaves_no_rollback_server(good, run_playbook_here):
    run_playbook_here('playbooks/stop.yml', limit=','.join(HOSTS), expect_rc=0,
                      extra_vars=rb_vars(sglang_server_stop_timeout=20))
    for host in HOSTS:
        assert good.ssh(host, 'pgrep -f "[-]-port %d" || true' % PORT).stdout.strip() == ''


@pytest.mark.engine
def test_vllm_good_to_random_drafter_rolls_back_to_good(run_playbook, tmp_path_factory):
    """The real vLLM CPU engine on this machine through playbooks/deploy.yml (GPU preflight on
    the nvidia-smi stand-in with one simulated GPU): the good drafter serves, the random one
    fails the acceptance floor and the host is back on the good one."""
    tmp = str(tmp_path_factory.getbasetemp())
    out, manifest = engine_models(tmp)
    state = os.path.join(tmp, 'vllm-rollback')
    nvsim = os.path.join(state, 'nvsim')
    os.makedirs(nvsim, exist_ok=True)
    subprocess.run([sys.executable, os.path.join(SIM, 'nvsim.py'), 'init', '--count', '1'], check=True,
                   env=dict(os.environ, NVSIM_STATE_DIR=nvsim))
    inventory = local_inventory(os.path.join(state, 'inventory.yml'))
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
    drafters = {name: os.path.join(out, manifest['drafters'][name]['path']) for name in ('good-layers0', 'random-layers0')}
    extra = dict(vllm_server_vars(out, manifest, 'good-layers0', state, port, 'vllm-rb'),
                 sglang_server_state_dir=os.path.join(state, 'last-good'),
                 gpu_preflight_nvidia_smi_path=os.path.join(SIM, 'nvidia-smi'),
                 gpu_preflight_environment={'NVSIM_STATE_DIR': nvsim})
    script = os.path.join(state, 'etc', 'sglang-vllm-rb.sh')
    try:
        first = run_playbook('playbooks/deploy.yml', inventory=inventory, extra_vars=extra, expect_rc=0)
        row = summary_rows(first)['localhost']
        assert row[1] == 'ready' and row[4].startswith('vllm 0.') and 'SIMULATOR' not in row[4], row
        with open(script, encoding='utf-8') as handle:
            good_script = handle.read()
        start = time.monotonic()
        result = run_playbook('playbooks/deploy.yml', inventory=inventory,
                              extra_vars=dict(extra, sglang_server_speculative_draft_model_path=drafters['random-layers0']))
        print('vLLM: random drafter deployed, failed, rolled back and serving the good one: %.1f s (whole run)'
              % (time.monotonic() - start))
        text = flat(result)
        assert result.rc != 0 and 'rolled_back: the drafter is not being accepted' in text, result.stdout[-4000:]
        with open(script, encoding='utf-8') as handle:
            assert handle.read() == good_script
        assert drafters['good-layers0'] in good_script
        with urllib.request.urlopen('http://127.0.0.1:%d/v1/models' % port, timeout=30) as response:
            assert json.loads(response.read())['data']
    finally:
        run_playbook('playbooks/stop.yml', inventory=inventory, extra_vars=extra, expect_rc=0)
