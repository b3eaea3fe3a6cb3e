"""An SGLang release upgrade as a rolling change that can roll back (issue 31): each release in its
own virtualenv (roles/sglang_install, plugins/module_utils/_releases.py), the servers' python following
``sglang_install_version``, the deploy moving them, and ``playbooks/rollback.yml -e
llmops_rollback_to=previous`` bringing launch files and engine back together.

The "releases" are wheels built here (``sglang==V`` from the test's wheelhouse, real pip and venv):
each holds only a ``.pth`` file that puts the simulator (tests/sim, a TEST DOUBLE) on the path and
makes it simulate release V (``SGLANG_SIM_VERSION``), so the virtualenv decides the version a server
runs, as with real releases. Three namespace hosts, one at a time, behind the real sglang-router (on the
systemd host) under streaming load; a server of its own name and port. On the systemd host, a server of the
old release that crashes after the new one was installed, before the rollout reaches it, is restarted by its
unit on the old release.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from ansible_collections.llmops.serving.plugins.module_utils._releases import venv_path
from router_bed import Load, healthy_workers, router_vars, systemd_router  # noqa: F401  pylint: disable=unused-import
from test_deploy import SIM, deploy_vars, summary_rows
from test_sglang_install import install_vars
from tiny_wheels import build_wheel

HOSTS = ['ns1', 'ns2', 'ns3']
OLD, NEW = '0.5.15.post1', '0.5.23'
BAD = '0.5.22'  # a release the servers crash on while loading (the simulator's fault, set by its wheel)
PORT = 31200
DRAFTER = '/srv/llmops/checkpoints/drafter/model.safetensors'
ROUTER = router_vars('ru', 31280)


def build_releases(directory):
    """Write the wheels of three simulated releases into ``directory``, the last one crashing."""
    for version in (OLD, NEW, BAD):
        pth = '%s\nimport os; os.environ.setdefault("SGLANG_SIM_VERSION", %r)\n' % (SIM, version)
        if version == BAD:
            pth += 'import os; os.environ.setdefault("SGLANG_SIM_FAULT", "crash:load")\n'
        build_wheel(directory, 'sglang', version, 'llmops_sim_release', '', {'llmops-sim-release.pth': pth})
    return str(directory)


@pytest.fixture(scope='module')
def releases(tmp_path_factory):
    """The simulated releases' wheelhouse (this machine's /tmp, which the fleet hosts see)."""
    return build_releases(tmp_path_factory.mktemp('releases'))


def server_vars(version, **overrides):
    """deploy.yml's vars without sglang_server_python: the server runs the python of ``version``'s virtualenv."""
    # Servers and router beyond loopback without a key: open by choice (llmops_allow_open), else the preflight refuses.
    base = deploy_vars(sglang_server_name='ru', sglang_server_port=PORT, llmops_serial=1, sglang_server_api_key='',
                       sglang_install_version=version, sglang_server_host='0.0.0.0', llmops_allow_open=True, **ROUTER)
    del base['sglang_server_python']
    base.update(overrides)
    return base


def drafter_digests(fleet):
    """host -> SHA-256 of the drafter's safetensors file."""
    return {host: fleet.ssh(host, 'sha256sum %s' % DRAFTER).stdout.split()[0] for host in HOSTS}


def running(fleet):
    """host -> (PID, the python its command line starts with) of the server."""
    out = {}
    for host in HOSTS:
        pid = json.loads(fleet.ssh(host, 'cat /run/llmops/sglang-ru.pid').stdout)['pid']
        argv0 = fleet.ssh(host, "tr '\\0' '\\n' < /proc/%d/cmdline | head -1" % pid).stdout.strip()
        out[host] = (pid, argv0)
    return out


def test_a_release_upgrade_is_a_rolling_change_and_rolls_back(clean_fleet, prepare_simulator, run_playbook, run_adhoc,
                                                              releases, systemd_router):
    """Behind the router, 8 streaming clients throughout: install the new release beside the old one (nothing
    that serves is touched), a dry run naming the change, the rolling upgrade (each host drained, restarted
    exactly once on the new python, registered again), a rerun (restarts nothing), the drafter fixed in place,
    another good change, rollback.yml two steps back (engine, argv and the drafter from its backup together,
    listed by status.yml), then a release the servers
    fail on: the first host is put back on the release it ran and the rollout stops. No request fails."""
    fleet, limit = clean_fleet, ','.join(HOSTS)
    old_python, new_python = (os.path.join(venv_path('sglang', v), 'bin', 'python') for v in (OLD, NEW))
    # The test bed (simulated GPUs, tiny checkpoints) is prepared with the system's python.
    prepare_simulator(limit=limit, extra_vars=dict(server_vars(OLD), sglang_server_python='/usr/bin/python3'))

    def install(version):
        run_playbook('playbooks/install.yml', limit=limit, expect_rc=0,
                     extra_vars=install_vars(releases, sglang_install_version=version, sglang_install_packages=[]))

    install(OLD)
    first = run_playbook('playbooks/deploy.yml', limit=limit, extra_vars=server_vars(OLD), expect_rc=0, timeout=600)
    assert {h: summary_rows(first)[h][4] for h in HOSTS} == {h: 'sglang %s SIMULATOR' % OLD for h in HOSTS}
    inventory, dummy, router = systemd_router(HOSTS, server_vars(OLD))
    before = running(fleet)
    assert {argv0 for dummy, argv0 in before.values()} == {old_python}

    def deploy(version, expect_rc=0, **overrides):
        return run_playbook('playbooks/deploy.yml', inventory=inventory, limit=limit, expect_rc=expect_rc, timeout=900,
                            extra_vars=server_vars(version, **overrides))

    def rollback(to):
        return run_playbook('playbooks/rollback.yml', inventory=inventory, limit=limit, expect_rc=0, timeout=900,
                            extra_vars=server_vars(NEW, llmops_rollback_to=to))

    def drained(result):
        # the deploy's drain task, or the rollback's
        return result.stdout.count('Drain the server - take it out of the routers') + \
            result.stdout.count('TASK [Take the server out of the routers')

    with Load(router, model='tiny-llama', clients=4, pause=0.1) as load:
        # The new release installs beside the old one; nothing that serves is touched.
        install(NEW)
        assert running(fleet) == before
        for host in HOSTS:
            fleet.ssh(host, 'test -x %s && test -x %s' % (old_python, new_python))

        dry = run_playbook('playbooks/deploy.yml', inventory=inventory, limit=limit, extra_vars=server_vars(NEW),
                           check=True, expect_rc=0)
        assert {h: summary_rows(dry)[h][4] for h in HOSTS} == {h: 'sglang %s -> %s SIMULATOR' % (OLD, NEW) for h in HOSTS}
        assert running(fleet) == before

        upgrade = deploy(NEW)
        rows = summary_rows(upgrade)
        assert {h: rows[h][1:3] + [rows[h][4]] for h in HOSTS} == \
            {h: ['ready', 'restart', 'sglang %s -> %s SIMULATOR' % (OLD, NEW)] for h in HOSTS}
        assert drained(upgrade) == len(HOSTS)
        upgraded = running(fleet)
        assert all(upgraded[h][0] != before[h][0] and upgraded[h][1] == new_python for h in HOSTS), upgraded
        deploy(NEW)
        assert running(fleet) == upgraded  # the rerun restarts nothing

        # The drafter fixed in place by drafter_checkpoint with backup=true (the drafter role's drafter_backup),
        # so the next good record holds the fixed drafter and the records before it the original.
        original = drafter_digests(fleet)
        fixed = run_adhoc(limit, 'llmops.serving.drafter_checkpoint', {
            'path': DRAFTER, 'engine_version': NEW, 'layout': 'layers', 'backup': True}, inventory=inventory)
        assert fixed.hosts == {h: 'CHANGED' for h in HOSTS}, fixed.stdout[-2000:]
        assert all(drafter_digests(fleet)[h] != original[h] for h in HOSTS)

        # Another good change (the new release at depth 3), then two steps back: the configuration before the
        # upgrade, engine, argv and drafter together, through the same drain and checks.
        deploy(NEW, sglang_server_speculative_depth=3)
        changed = running(fleet)
        assert all(changed[h][0] != upgraded[h][0] and changed[h][1] == new_python for h in HOSTS), changed
        back = rollback('2')
        flat = ' '.join(back.stdout.split())
        assert flat.count('(2 back, passed') == len(HOSTS) and drained(back) == len(HOSTS), back.stdout[-3000:]
        assert all('%s: rolled_back to record' % h in flat and 'sglang %s' % OLD in flat for h in HOSTS)
        assert flat.count('drafter files put back from their backups: ') == len(HOSTS), back.stdout[-3000:]
        assert drafter_digests(fleet) == original
        restored = running(fleet)
        for host in HOSTS:
            argv = fleet.ssh(host, "tr '\\0' ' ' < /proc/%d/cmdline" % restored[host][0]).stdout
            assert restored[host][0] != changed[host][0] and restored[host][1] == old_python, restored
            assert '--speculative-num-draft-tokens 16' in argv and '--speculative-num-draft-tokens 3 ' not in argv, argv

        # The restored configuration is the newest record again, the change and the upgrade behind it.
        status = run_playbook('playbooks/status.yml', inventory=inventory, limit=limit, expect_rc=0,
                              extra_vars=server_vars(NEW, llmops_status_history=True))
        listed = ' '.join(status.stdout.split())
        assert listed.index('%s 16 %s' % (OLD, old_python)) < listed.index('%s 3 %s' % (NEW, new_python)) < \
            listed.index('%s 16 %s' % (NEW, new_python)), status.stdout[-3000:]

        # A release the servers fail on: the first host of the rollout is put back on the release it ran
        # (its virtualenv, through its last good launch files) and the rollout stops before the second.
        install(BAD)
        failed = deploy(BAD, expect_rc=2)
        flat = ' '.join(failed.stdout.split())
        assert 'simulated crash during load' in flat, failed.stdout[-3000:]
        back_again = running(fleet)
        assert back_again[HOSTS[0]][0] != restored[HOSTS[0]][0] and back_again[HOSTS[0]][1] == old_python, back_again
        assert {h: back_again[h] for h in HOSTS[1:]} == {h: restored[h] for h in HOSTS[1:]}, (back_again, restored)
        assert healthy_workers(router) == sorted('http://%s:%d' % (fleet.hosts[h]['address'], PORT) for h in HOSTS)
    print('\nrelease upgrade %s -> %s, a change, a rollback two back, a failing release, behind the router (%d servers, '
          'serial 1): %d requests, %d failed, %d truncated' % (OLD, NEW, len(HOSTS), load.sent, load.failed, load.truncated))
    assert load.sent > 100 and (load.failed, load.truncated) == (0, 0)


def test_a_crash_before_its_turn_restarts_on_its_own_release(fleet, prepare_simulator, run_playbook, releases):
    """systemd (sd1): a server of the old release that crashes after the new release was installed beside it,
    before the rollout reaches it, is restarted by its unit (Restart=on-failure) on the old release: the unit
    names the python of the old release's virtualenv, which the install did not touch."""
    host, unit = 'sd1', 'llmops-sglang-ru.service'
    old_python = os.path.join(venv_path('sglang', OLD), 'bin', 'python')

    def main_pid():
        return int(fleet.ssh(host, 'systemctl show -p MainPID --value %s' % unit).stdout.strip() or 0)

    def argv0(pid):
        return fleet.ssh(host, "tr '\\0' '\\n' < /proc/%d/cmdline | head -1" % pid).stdout.strip()

    prepare_simulator(limit=host, extra_vars=dict(server_vars(OLD), sglang_server_python='/usr/bin/python3'))
    for version in (OLD, NEW):
        run_playbook('playbooks/install.yml', limit=host, expect_rc=0,
                     extra_vars=install_vars(releases, sglang_install_version=version, sglang_install_packages=[]))
        if version == OLD:
            run_playbook('playbooks/deploy.yml', limit=host, extra_vars=server_vars(OLD), expect_rc=0, timeout=600)
            crashed = main_pid()
            assert crashed and argv0(crashed) == old_python
    assert main_pid() == crashed  # installing the new release did not touch the server
    try:
        fleet.ssh(host, 'kill -KILL %d' % crashed)
        deadline = time.monotonic() + 60  # RestartSec=10, then the simulator's start
        while main_pid() in (0, crashed):
            assert time.monotonic() < deadline, fleet.ssh(host, 'systemctl status %s || true' % unit).stdout
            time.sleep(0.5)
        restarted = main_pid()
        assert argv0(restarted) == old_python
        assert fleet.ssh(host, 'systemctl show -p NRestarts --value %s' % unit).stdout.strip() == '1'
    finally:
        run_playbook('playbooks/stop.yml', limit=host, extra_vars=server_vars(OLD), expect_rc=0)
