"""An SGLang release upgrade as a rolling change that can roll back (issue 31): each release in its
own virtualenv (roles/sglang_install, plugins/module_utils/_releases.py), the servers' python following
``sglang_install_version``, the deploy moving them, and ``playbooks/rollback.yml -e
llmops_rollback_to=previous`` bringing launch files and engine back together.

The "releases" are wheels built here (``sglang==V`` from the test's wheelhouse, real pip and venv):
each holds only a ``.pth`` file that puts the simulator (tests/sim, a TEST DOUBLE) on the path and
makes it simulate release V (``SGLANG_SIM_VERSION``), so the virtualenv decides the version a server
runs, as with real releases. Two namespace hosts, one at a time; a server of its own name and port. On the
systemd host, a server of the old release that crashes after the new one was installed, before the rollout
reaches it, is restarted by its unit on the old release. The same upgrade behind the real router under streaming
load: tests/integration/test_router.py.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from ansible_collections.llmops.serving.plugins.module_utils._releases import venv_path
from test_deploy import SIM, deploy_vars, summary_rows
from test_sglang_install import install_vars
from tiny_wheels import build_wheel

HOSTS = ['ns1', 'ns2']
OLD, NEW = '0.5.15.post1', '0.5.23'
BAD = '0.5.22'  # a release the servers crash on while loading (the simulator's fault, set by its wheel)
PORT = 31200


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
    base = deploy_vars(sglang_server_name='ru', sglang_server_port=PORT, llmops_serial=1, sglang_server_api_key='',
                       sglang_install_version=version)
    del base['sglang_server_python']
    base.update(overrides)
    return base


def running(fleet):
    """host -> (PID, the python its command line starts with) of the server."""
    out = {}
    for host in HOSTS:
        pid = json.loads(fleet.ssh(host, 'cat /run/llmops/sglang-ru.pid').stdout)['pid']
        argv0 = fleet.ssh(host, "tr '\\0' '\\n' < /proc/%d/cmdline | head -1" % pid).stdout.strip()
        out[host] = (pid, argv0)
    return out


def test_a_release_upgrade_is_a_rolling_change_and_rolls_back(clean_fleet, prepare_simulator, run_playbook,
                                                              releases):
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
    before = running(fleet)
    assert {argv0 for dummy, argv0 in before.values()} == {old_python}

    # The new release installs beside the old one; nothing that serves is touched.
    install(NEW)
    assert running(fleet) == before
    for host in HOSTS:
        fleet.ssh(host, 'test -x %s && test -x %s' % (old_python, new_python))

    dry = run_playbook('playbooks/deploy.yml', limit=limit, extra_vars=server_vars(NEW), check=True, expect_rc=0)
    assert {h: summary_rows(dry)[h][4] for h in HOSTS} == {h: 'sglang %s -> %s SIMULATOR' % (OLD, NEW) for h in HOSTS}
    assert running(fleet) == before

    upgrade = run_playbook('playbooks/deploy.yml', limit=limit, extra_vars=server_vars(NEW), expect_rc=0, timeout=600)
    rows = summary_rows(upgrade)
    assert {h: rows[h][1:3] + [rows[h][4]] for h in HOSTS} == \
        {h: ['ready', 'restart', 'sglang %s -> %s SIMULATOR' % (OLD, NEW)] for h in HOSTS}
    upgraded = running(fleet)
    assert all(upgraded[h][0] != before[h][0] and upgraded[h][1] == new_python for h in HOSTS), upgraded

    # Back one good configuration: the old launch files, so the old release, through the same checks.
    back = run_playbook('playbooks/rollback.yml', limit=limit, expect_rc=0, timeout=600,
                        extra_vars=server_vars(NEW, llmops_rollback_to='previous'))
    flat = ' '.join(back.stdout.split())
    assert flat.count('(1 back, passed') == 2, back.stdout[-3000:]
    after = running(fleet)
    assert all(after[h][0] != upgraded[h][0] and after[h][1] == old_python for h in HOSTS), after
    assert all('%s: rolled_back to record' % h in flat and 'sglang %s' % OLD in flat for h in HOSTS)

    # The restored configuration is the newest record again; the upgrade is one back.
    status = run_playbook('playbooks/status.yml', limit=limit, expect_rc=0,
                          extra_vars=server_vars(NEW, llmops_status_history=True))
    listed = ' '.join(status.stdout.split())
    assert listed.index('%s 16 %s' % (OLD, old_python)) < listed.index('%s 16 %s' % (NEW, new_python)), \
        status.stdout[-3000:]

    # Two steps back: after another good change (the old release at depth 3) the history is that change,
    # the restored old release at depth 16, the upgrade at depth 16; llmops_rollback_to=2 is the upgrade,
    # engine and argv together.
    run_playbook('playbooks/deploy.yml', limit=limit, expect_rc=0, timeout=600,
                 extra_vars=server_vars(OLD, sglang_server_speculative_depth=3))
    changed = running(fleet)
    assert all(changed[h][1] == old_python for h in HOSTS), changed
    two_back = run_playbook('playbooks/rollback.yml', limit=limit, expect_rc=0, timeout=600,
                            extra_vars=server_vars(OLD, llmops_rollback_to='2'))
    assert ' '.join(two_back.stdout.split()).count('(2 back, passed') == 2, two_back.stdout[-3000:]
    restored = running(fleet)
    for host in HOSTS:
        argv = fleet.ssh(host, "tr '\\0' ' ' < /proc/%d/cmdline" % restored[host][0]).stdout
        assert restored[host][0] != changed[host][0] and restored[host][1] == new_python, restored
        assert '--speculative-num-draft-tokens 16' in argv and '--speculative-num-draft-tokens 3 ' not in argv, argv

    # A release the servers fail on: the first host of the rollout is put back on the release it ran
    # (its virtualenv, through its last good launch files) and the rollout stops before the second.
    install(BAD)
    failed = run_playbook('playbooks/deploy.yml', limit=limit, expect_rc=2, timeout=600, extra_vars=server_vars(BAD))
    flat = ' '.join(failed.stdout.split())
    assert 'simulated crash during load' in flat, failed.stdout[-3000:]
    back_again = running(fleet)
    first, second = HOSTS
    assert back_again[first][0] != restored[first][0] and back_again[first][1] == new_python, back_again
    assert back_again[second] == restored[second], (back_again, restored)


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
