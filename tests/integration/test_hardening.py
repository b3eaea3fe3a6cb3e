"""The server as an unprivileged, sandboxed user, GPU subsets, and settings refused before
anything on the host is stopped (issue 23 items 5 and 7, issue 22's model paths), with
playbooks/deploy.yml on the fleet (SGLang simulator on simulated GPUs).

- sd1 (systemd, ProtectSystem=strict) and ns1 (process launcher): every process of the
  server runs as the role's user ``sglang`` with no_new_privs; the key file belongs to that
  user, the log and the configuration stay root's.
- ns2: two TP-4 servers on the 8 GPUs (one by ``sglang_server_gpus``, one by
  ``CUDA_VISIBLE_DEVICES``), each on its own half; TP 16, GPUs the host does not have and a
  missing model or drafter fail naming the variable, and the running server keeps its PID.
"""

from __future__ import annotations

import json

import pytest

from test_deploy import ROOT, SIM, deploy_vars

NAME = 'hard'  # sd1 is not reset between tests: a unit and files of its own
UNIT = 'llmops-sglang-%s.service' % NAME


def hardened_vars(**overrides):
    return deploy_vars(sglang_server_name=NAME, sglang_server_port=30100, **overrides)


def server_processes(fleet, host, pid):
    """``[(user, NoNewPrivs, command)]`` of ``pid`` and every process of its session or unit."""
    if host == 'sd1':
        pids = 'grep -l "/%s$" /proc/[0-9]*/cgroup | cut -d/ -f3' % UNIT
    else:
        pids = 'ps -o pid= --sid %d' % pid
    script = ('for p in $(%s); do echo "$(stat -c %%U /proc/$p) $(awk \'/^NoNewPrivs/{print $2}\' /proc/$p/status)'
              ' $(tr "\\0" " " < /proc/$p/cmdline | cut -c1-60)"; done' % pids)
    return [line.split(' ', 2) for line in fleet.ssh(host, script).stdout.splitlines() if line.strip()]


def main_pid(fleet, host, name):
    if host == 'sd1':
        return int(fleet.ssh(host, 'systemctl show -p MainPID --value llmops-sglang-%s.service' % name).stdout)
    data = json.loads(fleet.ssh(host, 'cat /run/llmops/sglang-%s.pid 2>/dev/null || echo null' % name).stdout)
    return data['pid'] if data else None


def test_server_runs_as_its_own_user_sandboxed_on_systemd_and_process_hosts(clean_fleet, run_playbook,
                                                                            prepare_simulator):
    fleet = clean_fleet
    extra = hardened_vars(sglang_server_protect_system='strict', sglang_server_read_write_paths=['/run/llmops-nvsim'])
    prepare_simulator(limit='sd1,ns1', extra_vars=extra)
    run_playbook('playbooks/deploy.yml', limit='sd1,ns1', extra_vars=extra, expect_rc=0, timeout=600)

    unit = fleet.ssh('sd1', 'systemctl show -p User -p NoNewPrivileges -p ProtectSystem -p PrivateTmp '
                            '-p ReadWritePaths %s' % UNIT).stdout
    # A checkout under /tmp turns PrivateTmp off (deploy_vars): the unit would not see its interpreter.
    private_tmp = 'PrivateTmp=%s' % ('no' if ROOT.startswith('/tmp/') else 'yes')
    for setting in ('User=sglang', 'NoNewPrivileges=yes', 'ProtectSystem=strict', private_tmp,
                    'ReadWritePaths=-/var/lib/sglang -/run/llmops-nvsim'):
        assert setting in unit.splitlines(), unit
    for host in ('sd1', 'ns1'):
        procs = server_processes(fleet, host, main_pid(fleet, host, NAME))
        # launcher shim, scheduler and detokenizer workers, the log filter: all the user's
        assert len(procs) >= 3, procs
        assert all(user == 'sglang' and nnp == '1' for user, nnp, dummy in procs), procs
        files = fleet.ssh(host, 'stat -c "%%U %%a %%n" /etc/llmops/sglang-%s.key /var/log/llmops/sglang-%s.log '
                                '/etc/llmops /var/log/llmops' % (NAME, NAME)).stdout.splitlines()
        assert files == ['sglang 600 /etc/llmops/sglang-%s.key' % NAME, 'root 600 /var/log/llmops/sglang-%s.log' % NAME,
                         'root 755 /etc/llmops', 'root 755 /var/log/llmops'], files
        assert fleet.ssh(host, 'getent passwd sglang | cut -d: -f6,7').stdout.strip() == '/var/lib/sglang:/usr/sbin/nologin'
    # In the server's own mount namespace, only its home and the listed paths are writable (even for root).
    probe = ('for d in /srv/llmops /etc /var/lib/sglang /run/llmops-nvsim; do nsenter -t %d -m -- touch $d/probe '
             '2>/dev/null && echo "$d writable" || echo "$d read-only"; rm -f $d/probe; done' % main_pid(fleet, 'sd1', NAME))
    assert fleet.ssh('sd1', probe).stdout.splitlines() == [
        '/srv/llmops read-only', '/etc read-only', '/var/lib/sglang writable', '/run/llmops-nvsim writable']
    fleet.ssh('sd1', 'systemctl disable --now %s' % UNIT)


@pytest.fixture
def two_servers(clean_fleet, run_playbook, prepare_simulator):
    """ns2 with two TP-4 servers: 'left' on GPUs 0-3 (sglang_server_gpus), 'right' on 4-7
    (CUDA_VISIBLE_DEVICES); returns (fleet, deploy(name, expect_rc, **vars))."""
    def deploy(name, expect_rc=0, **overrides):
        env = dict(deploy_vars()['sglang_server_env'])
        settings = {'left': {'sglang_server_gpus': [0, 1, 2, 3], 'sglang_server_port': 30201},
                    'right': {'sglang_server_port': 30202, 'sglang_server_env': dict(env, CUDA_VISIBLE_DEVICES='4,5,6,7')}}
        extra = deploy_vars(sglang_server_name=name, sglang_server_tp_size=4, **settings[name])
        extra.update(overrides)
        return run_playbook('playbooks/deploy.yml', limit='ns2', extra_vars=extra, expect_rc=expect_rc, timeout=600)
    prepare_simulator(limit='ns2', extra_vars=deploy_vars())
    deploy('left')
    deploy('right')
    return clean_fleet, deploy


def test_two_tp4_servers_share_a_host_and_bad_settings_fail_before_anything_stops(two_servers):
    fleet, deploy = two_servers
    holders = json.loads(fleet.ssh('ns2', 'NVSIM_STATE_DIR=/run/llmops-nvsim /usr/bin/python3 '
                                          '%s/nvsim.py status' % SIM).stdout)['holders']
    used = sorted(int(gpu) for holder in holders for gpu in holder['mib'])
    assert used == list(range(8)), holders
    pids = {name: main_pid(fleet, 'ns2', name) for name in ('left', 'right')}
    assert all(pids.values()), pids

    cases = [
        ({'sglang_server_tp_size': 16, 'sglang_server_gpus': []},
         'sglang_server_tp_size 16 needs GPUs 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 on ns2, '
         'but nvidia-smi lists 8 GPUs (indices 0, 1, 2, 3, 4, 5, 6, 7; missing: 8, 9, 10, 11, 12, 13, 14, 15)'),
        ({'sglang_server_gpus': [6, 7, 8, 9]},
         'sglang_server_tp_size 4 on the GPUs of sglang_server_gpus needs GPUs 6, 7, 8, 9 on ns2'),
        ({'sglang_server_gpus': [0, 1]},
         'sglang_server_tp_size 4 needs 4 GPUs on this host, but sglang_server_gpus names only 2: 0,1'),
        ({'sglang_server_model_path': '/srv/llmops/checkpoints/nowhere'},
         'sglang_server_model_path is /srv/llmops/checkpoints/nowhere, which does not exist on ns2'),
        ({'sglang_server_speculative_draft_model_path': '/srv/llmops/no-drafter'},
         'sglang_server_speculative_draft_model_path is /srv/llmops/no-drafter, which does not exist on ns2'),
    ]
    for overrides, message in cases:
        result = deploy('left', expect_rc=2, sglang_server_speculative_depth=4, **overrides)
        assert message in result.stdout, result.stdout[-3000:]
        assert 'nothing was stopped or changed' in result.stdout
        assert {name: main_pid(fleet, 'ns2', name) for name in pids} == pids
