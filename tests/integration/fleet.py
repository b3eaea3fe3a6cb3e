"""Test fleet for llmops.serving: SSH hosts in network namespaces plus one systemd host.

Each namespace host ("ns1", "ns2", ...) is a network namespace with a veth to a bridge on a
private subnet (10.211.N.0/24) and a process tree started as
``ip netns exec NS unshare --mount --uts --pid --fork --mount-proc --kill-child`` with private
tmpfs on /run, /opt, /srv, /var/log, /var/lib/llmops, /root, an overlay on /etc (own hostname,
own SSH host key) with an empty /etc/llmops, and its own sshd (key auth only). The systemd host
("sd1") is ``systemd-nspawn -b`` on an overlay of / (empty /etc/llmops and /var/lib/llmops) in
its own network namespace, with sshd enabled. The host filesystem (the repository, its
virtualenv, /usr/bin/python3) stays visible everywhere.

Command line::

    python3 tests/integration/fleet.py up --dir DIR [--hosts 3] [--nspawn] [--foreground]
    python3 tests/integration/fleet.py down --dir DIR
    python3 tests/integration/fleet.py ssh --dir DIR HOST [COMMAND...]

``up`` writes DIR/inventory.yml, DIR/id_ed25519 (client key), DIR/known_hosts and DIR/fleet.json
(the state ``down`` reads). Without ``--foreground`` the hosts keep running after ``up`` returns;
with it, ``up`` waits for Ctrl-C/SIGTERM and then tears down. A failed ``up`` always tears down
what it created. As a module: ``Fleet(DIR).up(ns_hosts=3, nspawn=True)`` / ``.down()``.

Resources are named after a short fleet id (netns ``llf<id>-ns1``, bridge ``llf<id>br``, veths
``llf<id>v1``...) and each fleet gets its own /24, so several fleets can run side by side and
``down`` removes only its own. Needs root, iproute2, util-linux, openssh-server and (for
``--nspawn``) systemd-container: see install-system-packages.sh.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

SUBNET_PREFIX = '10.211'
# /var/lib/llmops too: the hosts must not share the last-good records of sglang_server_state_dir.
NS_DIRS = ('/run', '/opt', '/srv', '/var/log', '/var/lib/llmops', '/root')
SSHD = '/usr/sbin/sshd'
LOCK_FILE = '/tmp/llmops-fleet.lock'
STATE_FILE = 'fleet.json'
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Units of this machine that are enabled but useless (and slow) in the booted test host.
NSPAWN_MASKED_UNITS = ('postgresql.service', 'e2scrub_reap.service', 'systemd-networkd-wait-online.service',
                       'getty@.service', 'console-getty.service', 'apt-daily.timer', 'apt-daily-upgrade.timer',
                       'man-db.timer', 'fstrim.timer', 'e2scrub_all.timer')

SSHD_CONFIG = """\
# Written by tests/integration/fleet.py: key authentication only, this host's own key.
Port 22
ListenAddress {address}
HostKey /etc/ssh/ssh_host_ed25519_key
PidFile /run/sshd.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PrintMotd no
MaxStartups 200
MaxSessions 100
AcceptEnv LANG LC_*
Subsystem sftp /usr/lib/openssh/sftp-server
"""

# Runs as PID 1 of the namespace host's PID namespace, then becomes sshd.
NS_START = """\
set -eu
for d in {ns_dirs}; do mkdir -p "$d"; mount -t tmpfs -o mode=0755 "llf{fid}-{name}" "$d"; done
chmod 0700 /root
mount -t overlay "llf{fid}-{name}-etc" -o lowerdir=/etc,upperdir={hdir}/etc-upper,workdir={hdir}/etc-work /etc
mkdir -p /etc/llmops; mount -t tmpfs -o mode=0755 "llf{fid}-{name}-etc-llmops" /etc/llmops
hostname {name}
mkdir -p /run/sshd /run/lock /root/.ssh
chmod 1777 /run/lock
cp {hdir}/authorized_keys /root/.ssh/authorized_keys
chmod 0600 /root/.ssh/authorized_keys
exec {sshd} -D -e -f /etc/ssh/sshd_config >>{hdir}/sshd.log 2>&1
"""


class FleetError(RuntimeError):
    """The fleet could not be started or torn down."""


def _run(cmd, *, check=True, input=None, timeout=60):
    proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise FleetError('command failed (rc=%d): %s\n%s' % (proc.returncode, shlex.join(cmd), proc.stderr.strip()))
    return proc


def _write(path, content, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, 'w') as f:
        f.write(content)
    os.chmod(path, mode)


def _keygen(path, comment):
    _run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-C', comment, '-f', path])
    with open(path + '.pub') as f:
        return f.read().strip()


def _pid_alive(pid, marker):
    """True while ``pid`` runs and its command line still contains ``marker`` (no PID reuse)."""
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            cmdline = f.read()
    except OSError:
        return False
    try:
        with open('/proc/%d/stat' % pid) as f:
            if f.read().rsplit(')', 1)[1].split()[0] == 'Z':
                return False
    except OSError:
        return False
    return marker.encode() in cmdline


def _wait_gone(pid, marker, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not _pid_alive(pid, marker):
            return True
        time.sleep(0.02)
    return False


def _mounted(path):
    path = os.path.realpath(path)
    with open('/proc/self/mountinfo') as f:
        return any(line.split()[4] == path for line in f)


def _netns_pids(netns_ids):
    """PIDs (not zombies) whose network namespace is one of ``netns_ids`` (inode numbers)."""
    pids = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            ino = os.stat('/proc/%s/ns/net' % entry).st_ino
            with open('/proc/%s/stat' % entry) as f:
                zombie = f.read().rsplit(')', 1)[1].split()[0] == 'Z'
        except OSError:
            continue
        if ino in netns_ids and not zombie:
            pids.append(int(entry))
    return pids


def _tcp_open(address, port=22):
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((address, port)) == 0


class Fleet:
    """A test fleet rooted at ``directory`` (state in ``directory/fleet.json``)."""

    def __init__(self, directory):
        self.dir = os.path.abspath(directory)
        self.state = {'id': None, 'hosts': {}, 'netns': [], 'links': [], 'mounts': [], 'procs': []}
        self._children = {}
        self._t0 = None
        state_path = os.path.join(self.dir, STATE_FILE)
        if os.path.exists(state_path):
            with open(state_path) as f:
                self.state = json.load(f)

    # ---- paths and views -------------------------------------------------------------------
    @property
    def id(self):
        return self.state['id']

    @property
    def hosts(self):
        """``{name: {"address", "kind" ("ns" or "systemd"), ...}}`` for every host."""
        return self.state['hosts']

    @property
    def inventory(self):
        return os.path.join(self.dir, 'inventory.yml')

    @property
    def key(self):
        return os.path.join(self.dir, 'id_ed25519')

    @property
    def known_hosts(self):
        return os.path.join(self.dir, 'known_hosts')

    @property
    def control_dir(self):
        return os.path.join(self.dir, 'cp')

    def ssh_options(self):
        """OpenSSH options every client of this fleet uses (Ansible gets the same)."""
        return [
            '-F', '/dev/null',
            '-o', 'IdentityFile=%s' % self.key, '-o', 'IdentitiesOnly=yes',
            '-o', 'UserKnownHostsFile=%s' % self.known_hosts, '-o', 'GlobalKnownHostsFile=/dev/null',
            '-o', 'StrictHostKeyChecking=yes', '-o', 'BatchMode=yes', '-o', 'ConnectTimeout=10',
            '-o', 'ControlMaster=auto', '-o', 'ControlPersist=60s',
            '-o', 'ControlPath=%s/%%h-%%r' % self.control_dir,
        ]

    def ssh_command(self, host, command):
        """argv that runs ``command`` (a shell string) as root on ``host``."""
        return ['ssh'] + self.ssh_options() + ['root@' + self.hosts[host]['address'], command]

    def ssh(self, host, command, *, check=True, timeout=60, input=None):
        """Run ``command`` (shell string) on ``host`` over SSH; returns CompletedProcess (text)."""
        proc = subprocess.run(self.ssh_command(host, command), input=input, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if check and proc.returncode != 0:
            detail = proc.stderr.strip() or proc.stdout.strip()
            raise FleetError('ssh %s %r failed (rc=%d): %s' % (host, command, proc.returncode, detail))
        return proc

    # ---- state -----------------------------------------------------------------------------
    def _save(self):
        _write(os.path.join(self.dir, STATE_FILE), json.dumps(self.state, indent=1) + '\n', 0o600)

    def _record(self, kind, item):
        self.state[kind].append(item)
        self._save()

    # ---- up --------------------------------------------------------------------------------
    def up(self, ns_hosts=3, nspawn=False, python='/usr/bin/python3', die_with_parent=False):
        """Start the fleet and return self; on any failure tear down what was created and raise.

        ``die_with_parent``: the hosts get SIGKILL (nspawn: an orderly poweroff) when the calling
        thread dies, so even a SIGKILLed test run leaves no processes (namespaces and mounts are
        then removed by the next ``down``). Only for callers that stay alive, like pytest.
        """
        if self.id:
            raise FleetError('%s already holds fleet %s: run "fleet.py down --dir %s" first'
                             % (self.dir, self.id, self.dir))
        if not 1 <= ns_hosts <= 99:
            raise FleetError('--hosts must be between 1 and 99, got %d' % ns_hosts)
        if os.geteuid() != 0:
            raise FleetError('the test fleet needs root (network namespaces, mounts)')
        for tool in ('ip', 'unshare', 'ssh', 'ssh-keygen', SSHD) + (('systemd-nspawn',) if nspawn else ()):
            if not shutil.which(tool):
                raise FleetError('%s not found: run tests/integration/install-system-packages.sh' % tool)
        os.makedirs(self.dir, exist_ok=True)
        # Unix socket paths are limited to 108 bytes: ControlPath is DIR/cp/<ip>-root.
        if len(self.control_dir) > 80:
            raise FleetError('--dir %s is too long for SSH control sockets; use a shorter path' % self.dir)
        os.makedirs(self.control_dir, exist_ok=True)
        self.state['python'] = python
        self.state['started'] = time.time()
        self._t0 = time.monotonic()
        try:
            names = ['ns%d' % i for i in range(1, ns_hosts + 1)] + (['sd1'] if nspawn else [])
            self._claim()
            # The hosts' upper layers live on a tmpfs: overlayfs accepts it as upper layer
            # wherever DIR is (even on an overlay root), and it is not inside the lower /.
            hosts_dir = os.path.join(self.dir, 'hosts')
            os.makedirs(hosts_dir, exist_ok=True)
            self._record('mounts', hosts_dir)
            _run(['mount', '-t', 'tmpfs', '-o', 'mode=0755', 'llf%s-hosts' % self.id, hosts_dir])
            self._network(names)
            client_pub = _keygen(self.key, 'llmops-fleet-%s' % self.id)
            for name in names:
                self._prepare_host(name, client_pub)
            for name in names:
                if self.hosts[name]['kind'] == 'ns':
                    self._start_ns(name, die_with_parent)
                else:
                    self._start_nspawn(name, die_with_parent)
            self._write_client_files()
            self._wait_ready(names)
            self.state['startup_s'] = round(time.monotonic() - self._t0, 3)
            self._save()
        except BaseException:
            self.down()
            raise
        return self

    def _claim(self):
        """Pick an id no other fleet uses and a free /24, and create the bridge, atomically
        with respect to other fleets (a lock file), so ``down`` never removes another's."""
        with open(LOCK_FILE, 'a') as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            fleet_id = secrets.token_hex(2)
            while leftovers(fleet_id):
                fleet_id = secrets.token_hex(2)
            used = _run(['ip', '-4', '-o', 'addr', 'show']).stdout
            for n in range(256):
                if ' %s.%d.' % (SUBNET_PREFIX, n) not in used:
                    break
            else:
                raise FleetError('no free %s.N.0/24 subnet for the fleet bridge' % SUBNET_PREFIX)
            self.state['id'] = fleet_id
            self.state['subnet'] = '%s.%d.0/24' % (SUBNET_PREFIX, n)
            bridge = 'llf%sbr' % fleet_id
            self._record('links', bridge)
            _run(['ip', 'link', 'add', bridge, 'type', 'bridge'])
            _run(['ip', 'addr', 'add', '%s.%d.1/24' % (SUBNET_PREFIX, n), 'dev', bridge])
            _run(['ip', 'link', 'set', bridge, 'up'])

    def _network(self, names):
        fid = self.id
        bridge = 'llf%sbr' % fid
        subnet = self.state['subnet'].rsplit('.', 1)[0]
        batch = []
        counts = {'ns': 10, 'systemd': 200}
        for i, name in enumerate(names, 1):
            ns = 'llf%s-%s' % (fid, name)
            veth = 'llf%sv%d' % (fid, i)
            kind = 'ns' if name.startswith('ns') else 'systemd'
            counts[kind] += 1
            address = '%s.%d' % (subnet, counts[kind])
            self.hosts[name] = {'kind': kind, 'address': address, 'netns': ns,
                                'dir': os.path.join(self.dir, 'hosts', name)}
            self._record('netns', ns)
            self._record('links', veth)
            batch += ['netns add %s' % ns,
                      'link add %s type veth peer name eth0 netns %s' % (veth, ns),
                      'link set %s master %s up' % (veth, bridge)]
        _run(['ip', '-batch', '-'], input='\n'.join(batch) + '\n')
        for host in self.hosts.values():
            # No default route: traffic can only reach this subnet and loopback.
            _run(['ip', '-n', host['netns'], '-batch', '-'],
                 input='link set lo up\naddr add %s/24 dev eth0\nlink set eth0 up\n' % host['address'])

    def _etc_files(self, name, etc):
        """Populate the upper layer of the host's /etc: hostname, hosts, own SSH host key."""
        host = self.hosts[name]
        _write(os.path.join(etc, 'hostname'), name + '\n')
        with open('/etc/hosts') as f:
            _write(os.path.join(etc, 'hosts'), f.read() + '%s %s\n' % (host['address'], name))
        ssh_dir = os.path.join(etc, 'ssh')
        os.makedirs(ssh_dir, exist_ok=True)
        # Whiteouts hide this machine's own host keys: each test host has only its own.
        for entry in os.listdir('/etc/ssh'):
            if entry.startswith('ssh_host_'):
                os.mknod(os.path.join(ssh_dir, entry), stat.S_IFCHR | 0o600, os.makedev(0, 0))
        for suffix in ('', '.pub'):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(ssh_dir, 'ssh_host_ed25519_key' + suffix))
        host['host_key'] = _keygen(os.path.join(ssh_dir, 'ssh_host_ed25519_key'), 'root@' + name)
        address = host['address'] if host['kind'] == 'ns' else '0.0.0.0'
        _write(os.path.join(ssh_dir, 'sshd_config'), SSHD_CONFIG.format(address=address))

    def _prepare_host(self, name, client_pub):
        hdir = self.hosts[name]['dir']
        if self.hosts[name]['kind'] == 'ns':
            for sub in ('etc-upper', 'etc-work'):
                os.makedirs(os.path.join(hdir, sub), exist_ok=True)
            self._etc_files(name, os.path.join(hdir, 'etc-upper'))
            _write(os.path.join(hdir, 'authorized_keys'), client_pub + '\n', 0o600)
            _write(os.path.join(hdir, 'start.sh'), NS_START.format(
                ns_dirs=' '.join(NS_DIRS), fid=self.id, name=name, hdir=shlex.quote(hdir), sshd=SSHD))
            return
        # systemd host: an overlay of /.
        fs = os.path.join(hdir, 'fs')
        for sub in ('upper', 'work', 'root'):
            os.makedirs(os.path.join(fs, sub))
        upper = os.path.join(fs, 'upper')
        etc = os.path.join(upper, 'etc')
        self._etc_files(name, etc)
        _write(os.path.join(upper, 'root', '.ssh', 'authorized_keys'), client_pub + '\n', 0o600)
        os.chmod(os.path.join(upper, 'root', '.ssh'), 0o700)
        os.chmod(os.path.join(upper, 'root'), 0o700)
        units = os.path.join(etc, 'systemd', 'system')
        os.makedirs(units, exist_ok=True)
        for unit in NSPAWN_MASKED_UNITS:
            os.symlink('/dev/null', os.path.join(units, unit))
        wants = os.path.join(units, 'multi-user.target.wants')
        os.makedirs(wants, exist_ok=True)
        if not os.path.exists(os.path.join('/etc/systemd/system/multi-user.target.wants/ssh.service')):
            os.symlink('/lib/systemd/system/ssh.service', os.path.join(wants, 'ssh.service'))
        root = os.path.join(fs, 'root')
        self._record('mounts', root)
        _run(['mount', '-t', 'overlay', 'llf%s-%s-root' % (self.id, name),
              '-o', 'lowerdir=/,upperdir=%s,workdir=%s' % (upper, os.path.join(fs, 'work')), root])

    def _spawn(self, name, argv, die_with_parent, log):
        if die_with_parent:
            argv = ['setpriv', '--pdeathsig', 'KILL' if self.hosts[name]['kind'] == 'ns' else 'TERM'] + argv
        with open(log, 'ab') as out:
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self._children[child.pid] = child
        self.hosts[name]['pid'] = child.pid
        self._record('procs', {'host': name, 'pid': child.pid, 'marker': self.hosts[name]['netns']})

    def _start_ns(self, name, die_with_parent):
        host = self.hosts[name]
        start = os.path.join(host['dir'], 'start.sh')
        # The netns name as an (unused) argument puts the fleet id into the command line.
        self._spawn(name, ['ip', 'netns', 'exec', host['netns'],
                           'unshare', '--mount', '--uts', '--pid', '--fork', '--mount-proc', '--kill-child',
                           'sh', start, host['netns']], die_with_parent, os.path.join(host['dir'], 'host.log'))

    def _start_nspawn(self, name, die_with_parent):
        host = self.hosts[name]
        self._spawn(name, ['systemd-nspawn', '--quiet', '--register=no', '--keep-unit', '--console=read-only',
                           '--machine=' + host['netns'], '--hostname=' + name,
                           '--network-namespace-path=/run/netns/' + host['netns'],
                           # nspawn gives the container its own /tmp: a checkout under /tmp (as
                           # CI's clone may be) must be bound in to stay visible there.
                           '--bind=' + REPO_ROOT,
                           # what the collection writes on a host starts empty, as on a fresh host
                           # (the overlay of / would show this machine's: a demo's server, its
                           # last good record)
                           '--tmpfs=/etc/llmops', '--tmpfs=/var/lib/llmops',
                           '-D', os.path.join(host['dir'], 'fs', 'root'), '--boot'],
                    die_with_parent, os.path.join(host['dir'], 'console.log'))

    def _write_client_files(self):
        lines = []
        for name, host in self.hosts.items():
            lines.append('%s,%s %s' % (host['address'], name, ' '.join(host['host_key'].split()[:2])))
        _write(self.known_hosts, '\n'.join(lines) + '\n')
        ssh_args = ' '.join(shlex.quote(o) for o in self.ssh_options())
        groups = {'fleet_ns': [], 'fleet_systemd': []}
        for name, host in self.hosts.items():
            groups['fleet_ns' if host['kind'] == 'ns' else 'fleet_systemd'].append(name)
        out = ['# Written by tests/integration/fleet.py for fleet %s; removed by "fleet.py down".' % self.id,
               'fleet:', '  vars:',
               '    ansible_user: root',
               '    ansible_ssh_private_key_file: %s' % json.dumps(self.key),
               '    ansible_python_interpreter: %s' % json.dumps(self.state['python']),
               '    ansible_ssh_args: %s' % json.dumps(ssh_args),
               '  children:']
        for group, members in groups.items():
            out.append('    %s:' % group)
            out.append('      hosts:' + ('' if members else ' {}'))
            for name in members:
                out.append('        %s:' % name)
                out.append('          ansible_host: %s' % self.hosts[name]['address'])
        _write(self.inventory, '\n'.join(out) + '\n')

    def _wait_ready(self, names, timeout=60):
        pending = set(names)
        deadline = time.monotonic() + timeout
        while pending:
            for name in sorted(pending):
                host = self.hosts[name]
                if self._children[host['pid']].poll() is not None:
                    log = os.path.join(host['dir'], 'host.log' if host['kind'] == 'ns' else 'console.log')
                    with open(log, errors='replace') as f:
                        tail = f.read()[-2000:]
                    raise FleetError('host %s exited during start-up; %s ends with:\n%s' % (name, log, tail))
                if _tcp_open(host['address']):
                    pending.discard(name)
            if pending and time.monotonic() > deadline:
                raise FleetError('hosts %s did not open SSH within %d s' % (', '.join(sorted(pending)), timeout))
            if pending:
                time.sleep(0.02)
        self.state['listening_s'] = round(time.monotonic() - self._t0, 3)
        # One real login per host proves keys, known_hosts and the control master.
        procs = {name: subprocess.Popen(self.ssh_command(name, 'hostname'), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True) for name in names}
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=timeout)
            if proc.returncode != 0 or out.strip() != name:
                raise FleetError('SSH login to %s failed (rc=%d): %s%s' % (name, proc.returncode, out, err))

    def processes(self):
        """PIDs of the processes running in this fleet's network namespaces."""
        inodes = set()
        for ns in self.state.get('netns', []):
            with contextlib.suppress(OSError):
                inodes.add(os.stat('/run/netns/' + ns).st_ino)
        return _netns_pids(inodes)

    # ---- down ------------------------------------------------------------------------------
    def close_masters(self):
        """Stop the SSH ControlPersist masters of this fleet (before hosts go away)."""
        if not os.path.isdir(self.control_dir):
            return
        for sock in os.listdir(self.control_dir):
            path = os.path.join(self.control_dir, sock)
            _run(['ssh', '-F', '/dev/null', '-o', 'ControlPath=' + path, '-O', 'exit', 'fleet'], check=False,
                 timeout=10)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def down(self):
        """Tear down everything this fleet created; idempotent, keeps going past errors."""
        errors = []
        self.close_masters()
        procs = self.state.get('procs', [])
        systemd = [p for p in procs if self.hosts.get(p['host'], {}).get('kind') == 'systemd']
        for p in systemd:  # orderly poweroff first (nspawn forwards SIGTERM as SIGRTMIN+3)
            if _pid_alive(p['pid'], p['marker']):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p['pid'], signal.SIGTERM)
        for p in procs:
            if p in systemd and _wait_gone(p['pid'], p['marker'], 15):
                continue
            if _pid_alive(p['pid'], p['marker']):
                # SIGKILL to unshare (--kill-child) takes the whole PID namespace with it.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p['pid'], signal.SIGKILL)
            if not _wait_gone(p['pid'], p['marker'], 10):
                errors.append('process %d (%s) did not exit' % (p['pid'], p['host']))
            child = self._children.pop(p['pid'], None)
            if child is not None:
                child.wait(timeout=10)
        # Anything still running in the fleet's network namespaces is ours to kill.
        stray = self.processes()
        for pid in stray:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while stray and time.monotonic() < deadline:
            time.sleep(0.05)
            stray = self.processes()
        if stray:
            errors.append('processes %s still run in the fleet network namespaces' % stray)
        for path in reversed(self.state.get('mounts', [])):
            if _mounted(path):
                if _run(['umount', path], check=False).returncode != 0:
                    _run(['umount', '--lazy', path], check=False)
            if _mounted(path):
                errors.append('could not unmount %s' % path)
        for ns in self.state.get('netns', []):
            if os.path.exists('/run/netns/' + ns):
                proc = _run(['ip', 'netns', 'delete', ns], check=False)
                if proc.returncode != 0:
                    errors.append('ip netns delete %s: %s' % (ns, proc.stderr.strip()))
        existing = _run(['ip', '-o', 'link', 'show'], check=False).stdout
        for link in self.state.get('links', []):
            if ' %s:' % link in existing or ' %s@' % link in existing:
                proc = _run(['ip', 'link', 'delete', link], check=False)
                if proc.returncode != 0 and 'Cannot find device' not in proc.stderr:
                    errors.append('ip link delete %s: %s' % (link, proc.stderr.strip()))
        if errors:
            self._save()
            raise FleetError('teardown of fleet %s incomplete:\n  %s' % (self.id, '\n  '.join(errors)))
        for name in ('hosts', 'cp'):
            shutil.rmtree(os.path.join(self.dir, name), ignore_errors=True)
        for name in (STATE_FILE, 'inventory.yml', 'known_hosts', 'id_ed25519', 'id_ed25519.pub'):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.dir, name))
        self.state = {'id': None, 'hosts': {}, 'netns': [], 'links': [], 'mounts': [], 'procs': []}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.down()


def leftovers(fleet_id, directory=None):
    """Names of netns, links, mounts and processes of fleet ``fleet_id`` still present;
    with ``directory`` (the fleet's DIR) also its SSH control masters."""
    if not fleet_id:
        raise ValueError('leftovers() needs the id of a fleet, got %r' % (fleet_id,))
    tag = 'llf%s' % fleet_id
    found = []
    if os.path.isdir('/run/netns'):
        found += ['netns ' + n for n in os.listdir('/run/netns') if n.startswith(tag)]
    found += ['link ' + line.split(':')[1].strip().split('@')[0]
              for line in _run(['ip', '-o', 'link', 'show']).stdout.splitlines() if tag in line]
    with open('/proc/self/mountinfo') as f:
        found += ['mount ' + line.split()[4] for line in f if tag in line]
    markers = [tag.encode()] + ([os.path.join(os.path.abspath(directory), 'cp', '').encode()] if directory else [])
    for pid in os.listdir('/proc'):
        if pid.isdigit():
            with contextlib.suppress(OSError), open('/proc/%s/cmdline' % pid, 'rb') as f:
                cmdline = f.read()
                if any(m in cmdline for m in markers):
                    found.append('process %s (%s)' % (pid, cmdline.replace(b'\0', b' ').decode(errors='replace')))
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    sub = parser.add_subparsers(dest='cmd', required=True)
    up = sub.add_parser('up', help='start a fleet and write DIR/inventory.yml')
    up.add_argument('--dir', required=True, help='state directory (short path: SSH control sockets live in it)')
    up.add_argument('--hosts', type=int, default=3, help='number of namespace hosts (default 3)')
    up.add_argument('--nspawn', action='store_true', help='also boot one systemd host (sd1) with systemd-nspawn')
    up.add_argument('--python', default='/usr/bin/python3', help='ansible_python_interpreter for the hosts')
    up.add_argument('--foreground', action='store_true', help='stay in the foreground; tear down on Ctrl-C/SIGTERM')
    down = sub.add_parser('down', help='tear down the fleet in DIR')
    down.add_argument('--dir', required=True)
    ssh = sub.add_parser('ssh', help='run a command (or a shell) on a host of the fleet in DIR')
    ssh.add_argument('--dir', required=True)
    ssh.add_argument('host')
    ssh.add_argument('command', nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)

    fleet = Fleet(args.dir)
    if args.cmd == 'down':
        fleet_id = fleet.id
        fleet.down()
        print('fleet %s in %s is down' % (fleet_id, fleet.dir) if fleet_id else 'no fleet in %s' % fleet.dir)
        return 0
    if args.cmd == 'ssh':
        if args.host not in fleet.hosts:
            parser.error('no host %r in fleet %s (hosts: %s)' % (args.host, fleet.dir, ', '.join(fleet.hosts)))
        argv = fleet.ssh_command(args.host, ' '.join(args.command))
        if not args.command:
            argv = argv[:-1]
            argv.insert(1, '-t')
        os.execvp(argv[0], argv)

    def _terminate(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    try:
        fleet.up(ns_hosts=args.hosts, nspawn=args.nspawn, python=args.python, die_with_parent=args.foreground)
    except FleetError as exc:
        print('fleet up failed: %s' % exc, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    for name, host in fleet.hosts.items():
        print('%-4s %-14s %s' % (name, host['address'], host['kind']))
    print('fleet %s up in %.2f s (sshd listening on all hosts after %.2f s); inventory: %s'
          % (fleet.id, fleet.state['startup_s'], fleet.state['listening_s'], fleet.inventory))
    if not args.foreground:
        print('tear down with: python3 %s down --dir %s' % (os.path.abspath(__file__), fleet.dir))
        return 0
    print('Ctrl-C tears it down')
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        fleet.down()
    print('fleet down')
    return 0


if __name__ == '__main__':
    sys.exit(main())
