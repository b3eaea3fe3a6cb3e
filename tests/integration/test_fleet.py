"""The test fleet itself: real SSH, isolation, strict host keys, systemd, clean teardown."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import fleet as fleet_lib

NS = ['ns1', 'ns2', 'ns3']
HERE = os.path.dirname(os.path.abspath(__file__))
FLEET_PY = os.path.join(HERE, 'fleet.py')
NVSIM = os.path.join(os.path.dirname(HERE), 'sim', 'nvsim.py')


def test_adhoc_ping_and_copy_over_ssh(clean_fleet, run_adhoc):
    ping = run_adhoc('fleet_ns', 'ansible.builtin.ping', expect_rc=0)
    assert ping.hosts == {h: 'SUCCESS' for h in NS}

    copy_args = {'dest': '/srv/x', 'content': 'written on {{ inventory_hostname }}\n', 'mode': '0644'}
    first = run_adhoc('fleet_ns', 'ansible.builtin.copy', copy_args, expect_rc=0)
    assert first.hosts == {h: 'CHANGED' for h in NS}
    second = run_adhoc('fleet_ns', 'ansible.builtin.copy', copy_args, expect_rc=0)
    assert second.hosts == {h: 'SUCCESS' for h in NS}

    for host in NS:
        # Each host has its own /srv: a shared one would hold the last writer's name everywhere.
        assert clean_fleet.ssh(host, 'cat /srv/x').stdout == 'written on %s\n' % host


def test_hosts_are_isolated(clean_fleet):
    marker = 'isolation-%d' % os.getpid()
    clean_fleet.ssh('ns1', 'for d in /srv /opt /var/log /root /run /etc; do echo x > $d/%s; done' % marker)
    for host in NS:
        out = clean_fleet.ssh(host, 'hostname; cat /etc/hostname; cat /proc/1/comm; ip route; '
                                    'ls /srv /opt /var/log /root /run /etc').stdout
        name, etc_name, pid1, routes = out.splitlines()[:4]
        assert (name, etc_name) == (host, host)
        assert pid1 == 'sshd'  # own PID namespace: sshd is PID 1
        assert 'default' not in routes and routes.startswith(clean_fleet.state['subnet'])
        assert (marker in out) == (host == 'ns1')
    assert not any(os.path.exists(os.path.join(d, marker)) for d in ('/srv', '/opt', '/var/log', '/root', '/run', '/etc'))
    # Different hosts, different host keys.
    assert len({clean_fleet.hosts[h]['host_key'] for h in clean_fleet.hosts}) == len(clean_fleet.hosts)


def _gpu_status(fleet, host):
    return json.loads(fleet.ssh(host, '/usr/bin/python3 %s status' % NVSIM).stdout)


def test_simulated_gpus_are_per_host(clean_fleet):
    """The repository's test doubles run on the hosts; /run (simulated GPUs) is per host."""
    clean_fleet.ssh('ns1', '/usr/bin/python3 %s init --count 2' % NVSIM)
    clean_fleet.ssh('ns2', '/usr/bin/python3 %s init --count 8' % NVSIM)
    clean_fleet.ssh('ns1', 'setsid /usr/bin/python3 %s hold --gpus 1 --mib 40000 --name trainer '
                           '</dev/null >/dev/null 2>&1 &' % NVSIM)
    deadline = time.monotonic() + 20
    while not _gpu_status(clean_fleet, 'ns1')['holders'] and time.monotonic() < deadline:
        time.sleep(0.1)
    ns1, ns2 = _gpu_status(clean_fleet, 'ns1'), _gpu_status(clean_fleet, 'ns2')
    assert (ns1['gpus']['count'], ns2['gpus']['count']) == (2, 8)
    assert [h['name'] for h in ns1['holders']] == ['trainer'] and ns2['holders'] == []
    assert clean_fleet.ssh('ns3', 'test -e /run/llmops-nvsim', check=False).returncode == 1


def test_clean_fleet_wipes_state(fleet, clean_fleet):
    assert clean_fleet.ssh('ns2', 'ls -A /srv /opt').stdout.split() == ['/opt:', '/srv:']
    procs = clean_fleet.ssh('ns2', 'ps -e -o comm=').stdout.split()
    assert set(procs) <= {'sshd', 'bash', 'sh', 'ps'}


def test_strict_host_keys(fleet, run_adhoc, tmp_path):
    """A wrong key (ns1) or no entry (ns2) in known_hosts makes Ansible fail: no auto-accept."""
    wrong_key = fleet_lib._keygen(str(tmp_path / 'other_host_key'), 'not-ns1')
    known_hosts = tmp_path / 'known_hosts'
    known_hosts.write_text('%s %s\n' % (fleet.hosts['ns1']['address'], ' '.join(wrong_key.split()[:2])))
    # A fresh ControlPath: an existing master would skip the host key check.
    ssh_args = ' '.join(fleet.ssh_options()).replace(fleet.known_hosts, str(known_hosts))
    ssh_args = ssh_args.replace(fleet.control_dir + '/%h-%r', fleet.control_dir + '/strict-%h')
    result = run_adhoc('ns1,ns2', 'ansible.builtin.ping', extra_vars={'ansible_ssh_args': ssh_args})
    assert result.rc != 0 and result.hosts == {'ns1': 'UNREACHABLE', 'ns2': 'UNREACHABLE'}
    output = result.stdout + result.stderr
    assert 'REMOTE HOST IDENTIFICATION HAS CHANGED' in output and 'No ED25519 host key is known' in output
    assert 'Host key verification failed' in output


def test_systemd_unit_on_nspawn_host(fleet, run_playbook):
    started = run_playbook('fleet_systemd_unit.yml', expect_rc=0)
    assert list(started.recap) == ['sd1']
    assert started.changed('sd1') == 2 and started.recap['sd1']['failed'] == 0
    again = run_playbook('fleet_systemd_unit.yml', expect_rc=0)
    assert again.changed('sd1') == 0
    # The playbook checked ActiveState through ansible.builtin.systemd_service; confirm directly.
    assert fleet.ssh('sd1', 'systemctl is-active llmops-fleet-test').stdout.strip() == 'active'
    assert fleet.ssh('sd1', 'cat /proc/1/comm').stdout.strip() == 'systemd'

    removed = run_playbook('fleet_systemd_unit.yml', extra_vars={'fleet_unit_state': 'absent'}, expect_rc=0)
    assert removed.changed('sd1') == 2
    assert fleet.ssh('sd1', 'systemctl is-active llmops-fleet-test', check=False).stdout.strip() == 'inactive'


@pytest.fixture
def fleet_dir():
    """A fleet's --dir short enough for its SSH control sockets under it (a Unix socket's path has at
    most 107 bytes; pytest-xdist's tmp_path is too long)."""
    directory = tempfile.mkdtemp(prefix='llf-', dir='/tmp')
    yield pathlib.Path(directory)
    shutil.rmtree(directory, ignore_errors=True)


def _fleet_cli(directory, *extra):
    return [sys.executable, FLEET_PY, 'up', '--hosts', '1', '--dir', str(directory)] + list(extra)


def test_second_fleet_up_down_leaves_nothing(fleet, fleet_dir):
    """A second fleet beside the session's: own subnet, works, and `down` removes all of it."""
    up = subprocess.run(_fleet_cli(fleet_dir), capture_output=True, text=True, timeout=120, check=False)
    assert up.returncode == 0, up.stderr
    second = fleet_lib.Fleet(fleet_dir)
    assert second.id != fleet.id and second.state['subnet'] != fleet.state['subnet']
    assert second.ssh('ns1', 'hostname').stdout.strip() == 'ns1'
    down = subprocess.run([sys.executable, FLEET_PY, 'down', '--dir', str(fleet_dir)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert down.returncode == 0, down.stderr
    assert fleet_lib.leftovers(second.id, fleet_dir) == []
    assert not (fleet_dir / 'fleet.json').exists()
    # The session's fleet is untouched.
    assert fleet.ssh('ns1', 'hostname').stdout.strip() == 'ns1'


def test_foreground_fleet_tears_down_on_sigterm(fleet_dir):
    proc = subprocess.Popen(_fleet_cli(fleet_dir, '--foreground'), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if 'Ctrl-C' in line:
                break
        match = re.search(r'fleet (\w+) up', ''.join(lines))
        assert match, ''.join(lines) + proc.stderr.read()
        assert fleet_lib.leftovers(match.group(1))  # it is running
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert fleet_lib.leftovers(match.group(1), fleet_dir) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_killed_owner_leaves_no_processes(fleet_dir):
    """die_with_parent: when the process that started a fleet is SIGKILLed, its hosts die too
    (namespace hosts at once, the systemd host by an orderly poweroff); ``down`` removes the rest."""
    code = ('import sys; sys.path.insert(0, %r); import fleet; '
            'fleet.Fleet(%r).up(ns_hosts=1, nspawn=True, die_with_parent=True); '
            'print("up", flush=True); sys.stdin.read()' % (os.path.dirname(FLEET_PY), str(fleet_dir)))
    owner = subprocess.Popen([sys.executable, '-c', code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline() == 'up\n'
        orphaned = fleet_lib.Fleet(fleet_dir)
        assert orphaned.processes()
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 30
    while orphaned.processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert orphaned.processes() == []
    fleet_id = orphaned.id
    assert fleet_lib.leftovers(fleet_id)  # namespaces and mounts wait for down
    orphaned.down()
    assert fleet_lib.leftovers(fleet_id, fleet_dir) == []


def test_failed_up_tears_down(fleet_dir, monkeypatch):
    """A host that cannot start makes ``up`` fail with its log, after removing everything."""
    monkeypatch.setattr(fleet_lib, 'SSHD', '/bin/false')
    monkeypatch.setattr(fleet_lib.secrets, 'token_hex', lambda n: 'fa11')
    broken = fleet_lib.Fleet(fleet_dir)
    with pytest.raises(fleet_lib.FleetError, match='host ns1 exited during start-up'):
        broken.up(ns_hosts=1)
    assert fleet_lib.leftovers('fa11', fleet_dir) == []
    assert broken.id is None and not (fleet_dir / 'fleet.json').exists()


def test_checkout_visible_on_every_host(fleet):
    """The test doubles run from the checkout on every host, the nspawn host included, even
    when the checkout lives under /tmp (systemd-nspawn gives its container a private /tmp)."""
    for host in NS + ['sd1']:
        assert fleet.ssh(host, 'test -f %s' % NVSIM, check=False).returncode == 0, host
