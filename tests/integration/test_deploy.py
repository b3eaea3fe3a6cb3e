"""playbooks/deploy.yml on the test fleet: three namespace hosts (process launcher) and the
systemd-nspawn host sd1 (systemd launcher), all running the SGLang simulator on simulated GPUs.

Shows: all hosts ready; a rerun changes nothing and keeps every PID; a depth change on one
host restarts only that host; a fault on one host of a 2-host batch stops the rollout and
leaves the other hosts untouched; shell metacharacters stay one literal argument; the API
key is in no output (-vvv) and its file is 0600; --check --diff shows the command and
changes nothing; stop.yml leaves no process behind.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(ROOT, 'tests', 'sim')
NS = ['ns1', 'ns2', 'ns3']
ALL = NS + ['sd1']
API_KEY = 'sk-llmops-itest-9f8e7d6c'
ENV_FILE = '/etc/llmops/sglang-main.env'


def deploy_vars(**overrides):
    """Extra vars for deploy.yml on the fleet (simulator, fast phases, per-host overrides
    through templates evaluated on each host)."""
    base = {
        'llmops_simulator': True,
        'llmops_simulated_gpus': 8,
        'llmops_simulator_dir': SIM,
        'llmops_simulator_checkpoints': '/srv/llmops/checkpoints',
        # the test bed's own names, which the deploy's preflight would warn about
        'llmops_known_variables': ['llmops_simulator', 'llmops_simulated_gpus', 'llmops_simulator_dir',
                                   'llmops_simulator_checkpoints'],
        'sglang_server_python': '/usr/bin/python3',
        'sglang_server_model_path': '/srv/llmops/checkpoints/target',
        'sglang_server_speculative_draft_model_path': '/srv/llmops/checkpoints/drafter',
        'sglang_server_speculative_depth': 16,
        'sglang_server_min_accept_length': 1.5,
        'sglang_server_served_model_name': 'tiny-llama',
        'sglang_server_api_key': API_KEY,
        'sglang_server_health_interval': 1,
        'sglang_server_health_timeout': 120,
        'sglang_server_env': {'PYTHONPATH': SIM, 'NVSIM_STATE_DIR': '/run/llmops-nvsim',
                              'SGLANG_SIM_SPEED': '0.05'},
        'gpu_preflight_nvidia_smi_path': os.path.join(SIM, 'nvidia-smi'),
        'gpu_preflight_environment': {'NVSIM_STATE_DIR': '/run/llmops-nvsim'},
        'gpu_preflight_wait_timeout': 20,
        # The simulator is this checkout: a unit's private /tmp would hide a checkout under /tmp.
        'sglang_server_private_tmp': not ROOT.startswith('/tmp/'),
        # The whole fleet in one batch (the playbook's default is one host at a time): the tests
        # of batching set llmops_serial themselves.
        'llmops_serial': '100%',
    }
    base.update(overrides)
    return base


def server_pids(fleet):
    """host -> PID of the running server (pidfile or the unit's MainPID), None when none."""
    pids = {}
    for host in ALL:
        if host == 'sd1':
            out = fleet.ssh(host, 'systemctl show -p MainPID --value llmops-sglang-main.service')
            pids[host] = int(out.stdout.strip())
        else:
            data = json.loads(fleet.ssh(host, 'cat /run/llmops/sglang-main.pid 2>/dev/null || echo null').stdout)
            pids[host] = data['pid'] if data else None
    return pids


def http_json(fleet, host, path):
    """GET path from the server on host (with the API key, sent through stdin)."""
    code = ('import json, sys, urllib.request; key = sys.stdin.read().strip(); '
            'req = urllib.request.Request("http://127.0.0.1:30000%s", headers={"Authorization": "Bearer " + key}); '
            'print(urllib.request.urlopen(req, timeout=10).read().decode())' % path)
    return json.loads(fleet.ssh(host, "/usr/bin/python3 -c '%s'" % code, input=API_KEY).stdout)


def summary_rows(result):
    """host -> the cells of its row in deploy.yml's summary table (the last one printed;
    columns host, state, action, ready_s, version, depth, accept, url / reason)."""
    block = result.stdout.rpartition('TASK [Show state, ready time')[2].partition('PLAY RECAP')[0]
    rows = [re.split(r' {2,}', line.strip()) for line in block.splitlines()]
    header = next(index for index, row in enumerate(rows) if row[:2] == ['host', 'state'])
    return {row[0]: row for row in rows[header + 1:] if len(row) == 8}


def changed_tasks(result):
    """The tasks that reported a change, with their hosts (for assertion messages)."""
    task, found = None, []
    for line in result.stdout.splitlines():
        if line.startswith('TASK ['):
            task = line
        elif line.startswith('changed: ['):
            found.append('%s -> %s' % (task, line[:120]))
    return '\n'.join(found) or result.stdout[-3000:]


_FIRST_DEPLOY = {}


@pytest.fixture
def deployed(fleet, run_playbook, prepare_simulator):
    """The fleet after one deploy to all four hosts (run once per session; the tests below
    build on that state in order)."""
    if 'result' not in _FIRST_DEPLOY:
        prepare_simulator(extra_vars=deploy_vars())
        _FIRST_DEPLOY['result'] = run_playbook('playbooks/deploy.yml', extra_vars=deploy_vars(), expect_rc=0,
                                               timeout=600)
    return fleet, _FIRST_DEPLOY['result']


def test_first_deploy_all_ready(deployed):
    fleet, result = deployed
    for host in ALL:
        assert result.recap[host]['failed'] == 0
    rows = summary_rows(result)
    assert sorted(rows) == sorted(ALL), result.stdout[-3000:]
    assert rows['sd1'][1:3] == ['ready', 'start']
    assert all(row[4] == 'sglang 0.5.15.post1 SIMULATOR' and row[5] == '16' and float(row[6]) >= 1.5
               for row in rows.values()), rows
    assert fleet.ssh('sd1', 'systemctl is-active llmops-sglang-main.service').stdout.strip() == 'active'


def test_rerun_changes_nothing_and_keeps_pids(deployed, run_playbook):
    fleet = deployed[0]
    before = server_pids(fleet)
    result = run_playbook('playbooks/deploy.yml', extra_vars=deploy_vars(), expect_rc=0)
    assert {host: result.changed(host) for host in ALL} == {host: 0 for host in ALL}, changed_tasks(result)
    assert server_pids(fleet) == before


def test_status_shows_every_host_without_deprecated_endpoints(deployed, run_playbook):
    from status_output import status_table  # tests/integration/status_output.py
    fleet = deployed[0]
    pids = server_pids(fleet)
    result = run_playbook('playbooks/status.yml', extra_vars=deploy_vars(), expect_rc=0)
    assert all(result.changed(host) == 0 for host in ALL)
    table = status_table(result.stdout)
    for host in ALL:
        row = table[host]
        assert (row['running'], row['pid'], row['healthy'], row['version'], row['depth'], row['refused/why']) == \
            ('yes', str(pids[host]), 'yes', '0.5.15.post1', '16', '-'), row
        assert float(row['accept length']) >= 1.5 and re.fullmatch(r'\d+ MiB on 8 GPUs', row['GPU used']), row
    assert API_KEY not in result.stdout
    # The simulator logs, as SGLang 0.5.15 does, a deprecation for every /get_server_info.
    log = fleet.ssh('ns1', 'cat /var/log/llmops/sglang-main.log').stdout
    assert '"GET /server_info HTTP/1.1" 200' in log
    assert 'is deprecated' not in log


def test_status_without_the_key_says_the_server_refused_and_which_variable(deployed, run_playbook):
    """Issue 23 item 6: without the key, status said healthy=True with empty version, depth and accept length."""
    from status_output import status_table  # tests/integration/status_output.py
    result = run_playbook('playbooks/status.yml', extra_vars=deploy_vars(sglang_server_api_key=''), expect_rc=0)
    table = status_table(result.stdout)
    for host in ALL:
        row = table[host]
        assert (row['running'], row['healthy'], row['version'], row['depth'], row['accept length']) == \
            ('yes', 'yes', '-', '-', '-'), row
        assert 'HTTP 401' in row['refused/why'] and 'sglang_server_api_key' in row['refused/why'], row


def test_depth_change_restarts_only_that_host(deployed, run_playbook):
    fleet = deployed[0]
    before = server_pids(fleet)
    depth = "{{ 10 if inventory_hostname == 'ns2' else 16 }}"
    result = run_playbook('playbooks/deploy.yml', extra_vars=deploy_vars(sglang_server_speculative_depth=depth),
                          expect_rc=0)
    after = server_pids(fleet)
    assert after['ns2'] != before['ns2']
    assert {h: after[h] for h in ALL if h != 'ns2'} == {h: before[h] for h in ALL if h != 'ns2'}
    assert result.changed('ns2') > 0 and all(result.changed(h) == 0 for h in ALL if h != 'ns2'), changed_tasks(result)
    script = fleet.ssh('ns2', 'cat /etc/llmops/sglang-main.sh').stdout
    # one flag per line
    assert {'    --speculative-num-steps 9 \\', '    --speculative-eagle-topk 1 \\'} <= set(script.splitlines()), script
    assert '--speculative-num-draft-tokens 10' in script
    assert '--num-speculative-tokens' not in script


def test_api_key_in_no_output_and_env_file_0600(deployed, run_playbook):
    fleet = deployed[0]
    result = run_playbook('playbooks/deploy.yml', extra_vars=deploy_vars(), verbosity=3, expect_rc=0,
                          limit='ns1,sd1')
    assert API_KEY not in result.stdout and API_KEY not in result.stderr
    for host in ('ns1', 'sd1'):
        assert fleet.ssh(host, 'stat -c %a ' + ENV_FILE).stdout.strip() == '600'
        cmdline = fleet.ssh(host, 'cat /proc/$(pgrep -f -o "[l]lmops_launch.py")/cmdline | tr "\\0" " "').stdout
        assert 'sglang.launch_server' in cmdline and API_KEY not in cmdline
        # ... and yet the server enforces it: the shim passed it on.
        status = fleet.ssh(host, '/usr/bin/python3 -c \'import urllib.request, urllib.error\n'
                                 'try: urllib.request.urlopen("http://127.0.0.1:30000/v1/models"); print(200)\n'
                                 'except urllib.error.HTTPError as e: print(e.code)\'').stdout.strip()
        assert status == '401'
        assert http_json(fleet, host, '/v1/models')['data']
        # The server prints its arguments (ServerArgs(... api_key=...)): the key is filtered
        # out of its log, no process of it has the key in its environment, and both the log and
        # the key file are private.
        log = fleet.ssh(host, 'cat /var/log/llmops/sglang-main.log').stdout
        assert "api_key='<redacted>'" in log and API_KEY not in log
        assert fleet.ssh(host, 'stat -c %a /var/log/llmops/sglang-main.log /etc/llmops/sglang-main.key').stdout.split() \
            == ['600', '600']
        environ = fleet.ssh(host, 'cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n"').stdout
        assert 'LLMOPS_SERVER_API_KEY_FILE=/etc/llmops/sglang-main.key' in environ and API_KEY not in environ
    unit = fleet.ssh('sd1', 'cat /etc/systemd/system/llmops-sglang-main.service').stdout
    assert API_KEY not in unit and 'EnvironmentFile=' + ENV_FILE in unit and 'KillMode=control-group' in unit


@pytest.mark.parametrize('playbook', ['playbooks/deploy.yml', 'playbooks/benchmark.yml'])
def test_serial_from_the_inventory_is_refused(run_playbook, tmp_path, playbook):
    """Ansible batches before it reads inventory variables: llmops_serial there would be ignored."""
    (tmp_path / 'group_vars').mkdir()
    (tmp_path / 'group_vars' / 'all.yml').write_text('llmops_serial: 2\n')
    hosts = {'h%d' % n: {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable} for n in (1, 2, 3)}
    (tmp_path / 'hosts.json').write_text(json.dumps({'all': {'hosts': hosts}}))
    result = run_playbook(playbook, inventory=str(tmp_path / 'hosts.json'), expect_rc=2)
    # The first batch fails on the check (deploy.yml's default batch is one host: the rollout
    # stops there) and nothing of the server role ran anywhere.
    assert result.recap['h1']['failed'] == 1
    assert '-e llmops_serial=2' in result.stdout
    assert 'TASK [llmops.serving.sglang_server' not in result.stdout, result.stdout[-3000:]


def test_check_diff_shows_command_and_changes_nothing(deployed, run_playbook):
    fleet = deployed[0]
    before = server_pids(fleet)
    result = run_playbook('playbooks/deploy.yml', check=True, diff=True, expect_rc=0,
                          extra_vars=deploy_vars(sglang_server_speculative_depth=5))
    lines = result.stdout.splitlines()
    # the launch script's diff names the changed flags, one per line
    flags = {line.rstrip(' \\') for line in lines}
    assert {'-    --speculative-num-steps 15', '+    --speculative-num-steps 4',
            '-    --speculative-num-draft-tokens 16', '+    --speculative-num-draft-tokens 5'} <= flags, result.stdout[-4000:]
    assert not any(line.startswith(('+exec ', '-exec ')) for line in lines)
    assert any(line.startswith('+ExecStart=') and '"--speculative-num-draft-tokens" "5"' in line for line in lines)
    # The plan only compares the launch files (one module run, in check mode): no `changed:` and no diff for it,
    # neither in the fleet preflight nor where the rollout plans a changing host again; the start shows the change.
    sections = result.stdout.split('TASK [')
    plans = [section for section in sections if section.startswith('llmops.serving.sglang_server : Plan the server')
             and '[ns1]' in section]
    assert len(plans) == 2, plans
    assert all('changed: [' not in section and '--- before' not in section for section in plans), plans
    starts = [section for section in sections if section.startswith('llmops.serving.sglang_server : Start or restart the server')
              and '[ns1]' in section]
    assert len(starts) == 1 and 'changed: [ns1]' in starts[0] and '+    --speculative-num-steps 4' in starts[0], starts
    assert server_pids(fleet) == before
    assert '--speculative-num-draft-tokens 16' in fleet.ssh('ns1', 'cat /etc/llmops/sglang-main.sh').stdout


def test_tags_plan_changes_nothing(deployed, run_playbook):
    """--tags plan plans a depth change (and runs the fleet checks) but stops, writes and records
    nothing (roles/deploy/README.md, "Tags")."""
    fleet = deployed[0]
    before = server_pids(fleet)
    planned = run_playbook('playbooks/deploy.yml', tags='plan', expect_rc=0,
                           extra_vars=deploy_vars(sglang_server_speculative_depth=6))
    assert 'TASK [Plan the server]' in planned.stdout and 'Check the fleet as a whole' in planned.stdout
    assert all(planned.changed(host) == 0 for host in ALL), changed_tasks(planned)
    assert 'Stop our previous server' not in planned.stdout and 'Start the server' not in planned.stdout
    assert server_pids(fleet) == before
    assert '--speculative-num-draft-tokens 16' in fleet.ssh('ns1', 'cat /etc/llmops/sglang-main.sh').stdout


def test_shell_metacharacters_stay_one_argument(deployed, run_playbook):
    fleet = deployed[0]
    nasty = 'tiny "llama"; touch /tmp/pwned $(touch /tmp/pwned2) `id` %n'
    run_playbook('playbooks/deploy.yml', limit='ns3,sd1', expect_rc=0,
                 extra_vars=deploy_vars(sglang_server_served_model_name=nasty))
    for host in ('ns3', 'sd1'):
        assert http_json(fleet, host, '/v1/models')['data'][0]['id'] == nasty
        assert fleet.ssh(host, 'ls /tmp/pwned /tmp/pwned2 2>/dev/null; true').stdout.strip() == ''


def test_unreachable_host_is_reported_without_hanging(deployed, run_playbook, tmp_path):
    """A host that does not answer (an unused address of the fleet's own subnet) ends the run
    in bounded time, reported as unreachable; the reachable host keeps its server."""
    fleet = deployed[0]
    ns1_before = server_pids(fleet)['ns1']
    inventory = tmp_path / 'inventory'
    inventory.mkdir()
    shutil.copy(fleet.inventory, inventory / 'fleet.yml')
    unused = fleet.hosts['ns1']['address'].rsplit('.', 1)[0] + '.250'
    (inventory / 'unreachable.yml').write_text('fleet_ns:\n  hosts:\n    ghost:\n      ansible_host: %s\n' % unused)
    started = time.monotonic()
    result = run_playbook('playbooks/deploy.yml', inventory=str(inventory), limit='ns1,ghost',
                          extra_vars=deploy_vars(), timeout=300)
    assert time.monotonic() - started < 240
    assert result.rc != 0 and result.recap['ghost']['unreachable'] == 1, result.stdout[-3000:]
    assert 'UNREACHABLE' in result.stdout
    assert server_pids(fleet)['ns1'] == ns1_before


@pytest.mark.parametrize('fault, reason', [
    ('crash', 'Traceback'),
    ('busy_gpu', 'trainer'),
    ('bad_drafter', 'truncated or not safetensors'),
])
def test_fault_in_first_batch_stops_rollout(fault, reason, deployed, run_playbook):
    """ns1 and ns2 form the first batch, ns3 the second; a fault on ns1 fails ns1 with a
    readable reason and the rollout stops before ns3, which keeps serving untouched."""
    fleet = deployed[0]
    before = server_pids(fleet)
    ns3_before = before['ns3']
    overrides = {'sglang_server_speculative_depth': 5, 'llmops_serial': 2, 'llmops_max_fail_percentage': 0}
    holder = None
    if fault == 'crash':
        overrides['sglang_server_env'] = dict(deploy_vars()['sglang_server_env'], SGLANG_SIM_FAULT=(
            "{{ 'crash:load' if inventory_hostname == 'ns1' else '' }}"))
    elif fault == 'busy_gpu':
        holder = fleet.ssh('ns1', 'NVSIM_STATE_DIR=/run/llmops-nvsim setsid /usr/bin/python3 %s/nvsim.py hold '
                                  '--gpus 0 --mib 100000 --name trainer >/dev/null 2>&1 </dev/null & echo $!'
                           % SIM).stdout.strip()
    else:
        fleet.ssh('ns1', 'rm -rf /srv/llmops/bad && cp -r /srv/llmops/checkpoints/drafter /srv/llmops/bad && '
                         'truncate -s 20 /srv/llmops/bad/model.safetensors')
        overrides['sglang_server_speculative_draft_model_path'] = (
            "{{ '/srv/llmops/bad' if inventory_hostname == 'ns1' else '/srv/llmops/checkpoints/drafter' }}")
    try:
        result = run_playbook('playbooks/deploy.yml', limit=','.join(NS), extra_vars=deploy_vars(**overrides))
    finally:
        if holder:
            fleet.ssh('ns1', 'kill %s' % holder)
    output = result.stdout[-8000:]
    assert result.rc != 0, output
    assert result.recap['ns1']['failed'] == 1, output
    assert reason in result.stdout, output
    if fault == 'bad_drafter':
        # found by the fleet preflight, before the first batch: nothing stopped anywhere
        assert 'PLAY [Deploy SGLang servers with EAGLE-3 drafters]' not in result.stdout or \
            'TASK [Deploy the server' not in result.stdout.split('PLAY [Deploy SGLang servers')[1], output
        assert server_pids(fleet) == before
        return
    assert 'ns3' not in result.recap or result.recap['ns3']['changed'] == 0, output
    assert server_pids(fleet)['ns3'] == ns3_before
    # the rollout stopped, and yet every host has its summary row: ns1 with its reason
    rows = summary_rows(result)
    # the row gives the root cause (wait_for_llm_health's first line), not the traceback's start
    row_reason = 'RuntimeError: simulated crash during load' if fault == 'crash' else reason
    assert rows['ns1'][1] in ('failed', 'rolled_back') and row_reason in rows['ns1'][7], rows
    # ns2 restarts at depth 5 in the first of these runs and has nothing to change in the next ones
    assert rows['ns2'][1] == 'ready' and rows['ns2'][2] in ('restart', 'none') and rows['ns2'][5] == '5', rows
    assert rows['ns3'][1] == 'not reached', rows


def test_stop_leaves_no_process(deployed, run_playbook):
    fleet = deployed[0]
    run_playbook('playbooks/stop.yml', expect_rc=0, extra_vars={'sglang_server_stop_timeout': 20})
    for host in NS:
        assert fleet.ssh(host, 'pgrep -f "[s]glang.launch_server" || true').stdout.strip() == ''
    assert fleet.ssh('sd1', 'systemctl is-active llmops-sglang-main.service || true').stdout.strip() == 'inactive'


ENGINE_VENV = os.environ.get('LLMOPS_ENGINE_VENV', os.path.join(ROOT, '.cache', 'vllm-venv'))
_ENGINE_MODELS = {}


def engine_models(tmp_dir):
    """Tiny target and drafters for vLLM's CPU build (tests/engines/make_models.py), once."""
    if 'manifest' not in _ENGINE_MODELS:
        out = os.path.join(tmp_dir, 'engine-models')
        subprocess.run([os.path.join(ENGINE_VENV, 'bin', 'python'), os.path.join(ROOT, 'tests', 'engines',
                                                                                 'make_models.py'),
                        out, '--shape', 'cpu'], check=True, capture_output=True, timeout=600)
        with open(os.path.join(out, 'manifest.json'), encoding='utf-8') as handle:
            manifest = json.load(handle)
        _ENGINE_MODELS['manifest'] = manifest
        _ENGINE_MODELS['out'] = out
    return _ENGINE_MODELS['out'], _ENGINE_MODELS['manifest']


def local_inventory(path):
    """An inventory of this machine alone (local connection, the test's Python); returns its path."""
    with open(path, 'w', encoding='utf-8') as handle:
        handle.write('all:\n  hosts:\n    localhost:\n      ansible_connection: local\n'
                     '      ansible_python_interpreter: %s\n' % sys.executable)
    return path


def vllm_server_vars(out, manifest, drafter, state, port, name):
    """sglang_server_* of the real vLLM CPU engine on this machine, serving ``drafter`` of
    make_models.py's ``manifest`` with its files under ``state``."""
    return {
        'sglang_server_engine': 'vllm',
        'sglang_server_python': os.path.join(ENGINE_VENV, 'bin', 'python'),
        # The models and the server's files live in this test's temporary folders (root's).
        'sglang_server_user': '',
        'sglang_server_launcher': 'process',
        'sglang_server_name': name,
        'sglang_server_model_path': os.path.join(out, manifest['target']['path']),
        'sglang_server_speculative_draft_model_path': os.path.join(out, manifest['drafters'][drafter]['path']),
        'sglang_server_speculative_depth': 4,
        'sglang_server_min_accept_length': 1.5,
        'sglang_server_tp_size': 1,
        'sglang_server_port': port,
        'sglang_server_extra_args': ['--max-model-len', '1024', '--dtype', 'bfloat16', '--enforce-eager'],
        'sglang_server_env': {'HF_HUB_OFFLINE': '1', 'TRANSFORMERS_OFFLINE': '1', 'VLLM_CPU_KVCACHE_SPACE': '1',
                              'VLLM_NO_USAGE_STATS': '1'},
        'sglang_server_config_dir': os.path.join(state, 'etc'),
        'sglang_server_run_dir': os.path.join(state, 'run'),
        'sglang_server_log_path': os.path.join(state, 'server.log'),
        'sglang_server_health_timeout': 600,
    }
