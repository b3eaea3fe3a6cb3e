"""Pytest fixtures for integration tests on the test fleet (see README.md here).

Fixtures (the stable API other integration tests build on):

``fleet`` (session)
    A running ``fleet.Fleet``: namespace hosts ``ns1``-``ns3`` (group ``fleet_ns``) and the
    systemd-nspawn host ``sd1`` (group ``fleet_systemd``), all in group ``fleet`` of
    ``fleet.inventory``. Started once per session, always torn down. Use ``fleet.ssh(host, cmd)``
    for assertions and ``fleet.hosts[name]['address']`` for a host's IP.
``clean_fleet`` (function)
    The same fleet after wiping the namespace hosts' state left by earlier tests.
``run_playbook`` (function)
    Callable running ``ansible-playbook`` against the fleet (or any inventory); returns an
    ``AnsibleResult`` with ``rc``, ``stdout``, ``stderr`` and the parsed ``recap``.
``run_adhoc`` (function)
    Callable running the ``ansible`` ad-hoc command; returns an ``AnsibleResult`` whose
    ``hosts`` maps each host to its status (``SUCCESS``, ``CHANGED``, ``FAILED``, ``UNREACHABLE``).

Ansible runs use the collection installed by ``make collection`` in ``.collections/`` (not
the working tree), the repository's ansible.cfg, and SSH pipelining.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PLAYBOOKS = os.path.join(HERE, 'playbooks')
COLLECTIONS = os.path.join(ROOT, '.collections')
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import fleet as fleet_lib  # noqa: E402  (tests/integration/fleet.py)

NS_HOSTS = 3
_RECAP_LINE = re.compile(r'^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$')
_ADHOC_LINE = re.compile(r'^(\S+) \| (SUCCESS|CHANGED|FAILED|UNREACHABLE)!?(?: |$)')
# Wipes what tests leave on a namespace host: every process but sshd's listener and this
# session's chain, and the contents of the private directories (not /etc: an overlay
# whose upper layer cannot be changed while mounted).
_RESET_SCRIPT = r'''
import os, shutil, signal
keep, pid = {1}, os.getpid()
while pid > 1:
    keep.add(pid)
    with open('/proc/%d/stat' % pid) as f:
        pid = int(f.read().rsplit(')', 1)[1].split()[1])
for entry in os.listdir('/proc'):
    if entry.isdigit() and int(entry) not in keep:
        try:
            os.kill(int(entry), signal.SIGKILL)
        except ProcessLookupError:
            pass
keep_paths = {'/root/.ssh', '/run/sshd', '/run/sshd.pid', '/run/lock'}
for top in ('/srv', '/opt', '/var/log', '/root', '/run'):
    for name in os.listdir(top):
        path = os.path.join(top, name)
        if path in keep_paths:
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
'''


@dataclasses.dataclass
class AnsibleResult:
    """Outcome of one ``ansible-playbook`` or ``ansible`` run.

    ``recap``: ``{host: {"ok", "changed", "unreachable", "failed", "skipped", "rescued",
    "ignored": int}}`` from PLAY RECAP (playbooks only). ``hosts``: ``{host: status}`` from
    ad-hoc output (ad-hoc only). ``cmd``: the argv that ran (extra vars are in a file).
    """

    rc: int
    stdout: str
    stderr: str
    cmd: list
    recap: dict = dataclasses.field(default_factory=dict)
    hosts: dict = dataclasses.field(default_factory=dict)

    def changed(self, host):
        """Number of changed tasks of ``host`` in the recap."""
        return self.recap[host]['changed']


def parse_recap(stdout):
    """``{host: {counter: int}}`` from the PLAY RECAP section of ansible-playbook output."""
    recap = {}
    tail = stdout.rpartition('PLAY RECAP')[2]
    for line in tail.splitlines():
        match = _RECAP_LINE.match(line.strip())
        if match:
            recap[match.group(1)] = {k: int(v) for k, v in (p.split('=') for p in match.group(2).split())}
    return recap


def ansible_env(extra=None):
    """Environment for ansible commands: installed collection, repo ansible.cfg, pipelining."""
    if not os.path.isdir(os.path.join(COLLECTIONS, 'ansible_collections', 'llmops', 'serving')):
        raise RuntimeError('llmops.serving is not installed in %s: run "make collection" first' % COLLECTIONS)
    env = dict(os.environ)
    env.update({
        'PATH': os.path.dirname(sys.executable) + os.pathsep + env.get('PATH', ''),
        'ANSIBLE_CONFIG': os.path.join(ROOT, 'ansible.cfg'),
        'ANSIBLE_COLLECTIONS_PATH': COLLECTIONS,
        'ANSIBLE_PIPELINING': 'True',
        'ANSIBLE_HOST_KEY_CHECKING': 'True',
        'ANSIBLE_FORKS': '50',
        'ANSIBLE_NOCOLOR': '1',
        'ANSIBLE_FORCE_COLOR': '0',
        'ANSIBLE_RETRY_FILES_ENABLED': 'False',
        'PYTHONDONTWRITEBYTECODE': '1',
    })
    env.update(extra or {})
    return env


def _run_ansible(argv, *, extra_vars, env, expect_rc, timeout):
    with tempfile.NamedTemporaryFile('w', suffix='.json', prefix='llmops-extra-vars-') as ev:
        if extra_vars:
            json.dump(extra_vars, ev)
            ev.flush()
            argv = argv + ['-e', '@' + ev.name]
        # A session of its own: a test may SIGKILL the playbook's whole process group (callback_plugins/kill_at.py).
        proc = subprocess.run(argv, capture_output=True, text=True, env=ansible_env(env), cwd=ROOT,
                              timeout=timeout, check=False, start_new_session=True)
    result = AnsibleResult(rc=proc.returncode, stdout=proc.stdout, stderr=proc.stderr, cmd=argv)
    if expect_rc is not None and proc.returncode != expect_rc:
        raise AssertionError('%s: rc=%d, expected %d\n--- stdout (tail) ---\n%s\n--- stderr (tail) ---\n%s'
                             % (' '.join(argv), proc.returncode, expect_rc, proc.stdout[-6000:],
                                proc.stderr[-3000:]))
    return result


def _tool(name):
    return os.path.join(os.path.dirname(sys.executable), name)


def _resolve_playbook(playbook):
    for candidate in (playbook, os.path.join(ROOT, playbook), os.path.join(PLAYBOOKS, playbook)):
        if os.path.isabs(candidate) and os.path.exists(candidate):
            return candidate
    raise FileNotFoundError('playbook %s not found (absolute, relative to %s, or in %s)' % (playbook, ROOT, PLAYBOOKS))


@pytest.fixture(scope='session')
def fleet():
    """The session's test fleet (``fleet.Fleet``): ns1-ns3 and sd1, torn down at the end.

    With ``LLMOPS_FLEET_DIR`` set to the ``--dir`` of a fleet started by hand
    (``fleet.py up --nspawn --dir DIR``), tests use that one and leave it running.
    """
    existing = os.environ.get('LLMOPS_FLEET_DIR')
    if existing:
        running = fleet_lib.Fleet(existing)
        if not running.id:
            raise RuntimeError('LLMOPS_FLEET_DIR=%s holds no running fleet' % existing)
        yield running
        return
    directory = tempfile.mkdtemp(prefix='llf-', dir='/tmp')
    running = fleet_lib.Fleet(directory)

    def _teardown():
        fleet_id = running.id
        running.down()
        left = fleet_lib.leftovers(fleet_id, directory) if fleet_id else []
        if left:
            raise RuntimeError('fleet %s left behind: %s' % (fleet_id, ', '.join(left)))
        shutil.rmtree(directory, ignore_errors=True)

    # Tear down even when the session ends abnormally: atexit covers exceptions and
    # SIGTERM/SIGHUP (turned into KeyboardInterrupt); die_with_parent covers SIGKILL.
    atexit.register(_teardown)
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            previous[sig] = signal.signal(sig, _interrupt)
    try:
        running.up(ns_hosts=NS_HOSTS, nspawn=True, die_with_parent=True)
        yield running
    finally:
        _teardown()
        atexit.unregister(_teardown)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt(signum, frame):
    raise KeyboardInterrupt('signal %d' % signum)


@pytest.fixture
def clean_fleet(fleet):
    """The session fleet with the namespace hosts wiped before the test: all processes but sshd
    killed, /srv, /opt, /var/log, /root (except .ssh) and /run (except sshd's files, so also the
    simulated GPUs in /run/llmops-nvsim) emptied. /etc and the systemd host are not reset."""
    for name, host in fleet.hosts.items():
        if host['kind'] == 'ns':
            fleet.ssh(name, '/usr/bin/python3 -', input=_RESET_SCRIPT)
    return fleet


@pytest.fixture
def run_playbook(request):
    """Return ``run(playbook, *, inventory=None, limit=None, extra_vars=None, check=False,
    diff=False, verbosity=0, env=None, expect_rc=None, timeout=900, tags=None) -> AnsibleResult``
    (``tags``: the value of ``--tags``).

    ``playbook``: absolute, relative to the repository root (``playbooks/deploy.yml``) or a
    file in tests/integration/playbooks. ``inventory`` defaults to the fleet's (the fleet then
    starts on first use). ``extra_vars`` (dict) is passed through a temporary file, so values
    never appear on command lines. ``env`` adds environment variables. ``expect_rc``: when
    not None, an rc other than it raises AssertionError showing the output's tail.
    """
    def run(playbook, *, inventory=None, limit=None, extra_vars=None, check=False, diff=False, verbosity=0,
            env=None, expect_rc=None, timeout=900, tags=None):
        if inventory is None:
            inventory = request.getfixturevalue('fleet').inventory
        argv = [_tool('ansible-playbook'), '-i', inventory, _resolve_playbook(playbook)]
        if limit:
            argv += ['--limit', limit]
        if tags:
            argv += ['--tags', tags]
        if check:
            argv.append('--check')
        if diff:
            argv.append('--diff')
        if verbosity:
            argv.append('-' + 'v' * verbosity)
        result = _run_ansible(argv, extra_vars=extra_vars, env=env, expect_rc=expect_rc, timeout=timeout)
        result.recap = parse_recap(result.stdout)
        return result
    return run


@pytest.fixture
def prepare_simulator(run_playbook):
    """Return ``prepare(*, inventory=None, limit=None, extra_vars=None)``: runs the test bed's
    ``tests/sim/prepare_host.yml`` (simulated GPUs, tiny target and drafter on the hosts that set
    ``llmops_simulator``), which the shipped playbooks do not include. Call it with the inventory,
    limit and extra vars of the deploy or benchmark run it prepares."""
    def prepare(*, inventory=None, limit=None, extra_vars=None):
        return run_playbook('tests/sim/prepare_host.yml', inventory=inventory, limit=limit, extra_vars=extra_vars,
                            expect_rc=0)
    return prepare


@pytest.fixture
def run_adhoc(request):
    """Return ``run(pattern, module, args=None, *, inventory=None, extra_vars=None, check=False,
    env=None, expect_rc=None, timeout=300) -> AnsibleResult`` for ``ansible PATTERN -m MODULE -a ARGS``
    (``args``: a string, or a dict passed as JSON). ``result.hosts`` maps host to status."""
    def run(pattern, module, args=None, *, inventory=None, extra_vars=None, check=False, env=None, expect_rc=None,
            timeout=300):
        if inventory is None:
            inventory = request.getfixturevalue('fleet').inventory
        argv = [_tool('ansible'), '-i', inventory, pattern, '-m', module]
        if args is not None:
            argv += ['-a', args if isinstance(args, str) else json.dumps(args)]
        if check:
            argv.append('--check')
        result = _run_ansible(argv, extra_vars=extra_vars, env=env, expect_rc=expect_rc, timeout=timeout)
        for line in result.stdout.splitlines():
            match = _ADHOC_LINE.match(line)
            if match:
                result.hosts[match.group(1)] = match.group(2)
        return result
    return run


def pytest_collection_modifyitems(items):
    """Mark every test that uses the fleet with ``fleet`` (``-m 'not fleet'`` skips them)."""
    for item in items:
        if 'fleet' in getattr(item, 'fixturenames', ()):
            item.add_marker(pytest.mark.fleet)
