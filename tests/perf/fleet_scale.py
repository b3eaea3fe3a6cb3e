# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What does a deploy cost per host as the fleet grows? SSH commands, tasks, wall and CPU time.

For each fleet size N: N network-namespace hosts (tests/integration/fleet.py) with the SGLang
simulator (a test double: its start times are not GPU figures), one batch of N hosts, then
``playbooks/deploy.yml`` (first deploy), the same again (a no-op: it must change nothing and
keep every PID) and ``playbooks/stop.yml``. Printed per N and run:

- SSH commands per host: every ``ssh`` the controller starts, counted through a wrapper set as
  ``ansible_ssh_executable`` (a count, so it does not depend on how busy the machine is);
- tasks per host that ran (ok + changed + failed) and were skipped, from the play recap;
- wall seconds, and the controller's CPU seconds per host (its children's user + system time);
- the host's CPU seconds per host: user + system time of every process of the namespace host, those it has
  reaped included (sshd is PID 1 there, so every module run, and a stopped server, ends up in its count), the
  running servers' own included.

With ``--baseline-rev REV`` the same runs follow on a fresh fleet with the collection and playbooks of git
revision REV (exported with ``git archive``, built and installed into a temporary directory), and the ratio
of the no-op redeploy's wall time (this checkout / REV) is printed per N: one invocation, the same machine
load. ``--tasks`` adds, for the no-op redeploy, the SSH commands per host of each task that opened any
(from ``-vvv`` output, which costs some controller time: the wall figures of such a run are not comparable).

    .venv/bin/python tests/perf/fleet_scale.py [--sizes 4 16] [--forks 50] [--baseline-rev cc137c6] [--tasks]

Needs root (the fleet) and the installed collection (``make collection``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'integration'))

import fleet as fleet_lib  # noqa: E402  (tests/integration/fleet.py)
from test_deploy import deploy_vars  # noqa: E402  (the fleet's deploy settings, as the integration tests use them)

BIN = os.path.dirname(sys.executable)
TASK = re.compile(r'^TASK \[(.*)\]')
SSH_EXEC = re.compile(r'^<([^>]+)> SSH: EXEC ')
RECAP = re.compile(r'^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)', re.M)
SSH_WRAPPER = '#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\nexec ssh "$@"\n'


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def host_cpu(fleet):
    """CPU seconds so far of every namespace host, its processes' and their reaped children's together."""
    hosts = {os.stat('/run/netns/' + host['netns']).st_ino: name for name, host in fleet.hosts.items()}
    total = dict.fromkeys(fleet.hosts, 0)
    for entry in os.listdir('/proc'):
        try:
            name = hosts.get(os.stat('/proc/%s/ns/net' % entry).st_ino) if entry.isdigit() else None
            if name:
                with open('/proc/%s/stat' % entry, encoding='utf-8') as handle:
                    fields = handle.read().rsplit(')', 1)[1].split()
                total[name] += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
        except OSError:
            continue
    return {name: ticks / os.sysconf('SC_CLK_TCK') for name, ticks in total.items()}


def playbook(fleet, tree, name, extra, forks, ssh_log, verbose=False):
    """Run one playbook of ``tree`` on the fleet, with the collection installed for ``tree``.

    Returns (wall s, controller CPU s, host CPU s per host, recap, SSH commands per host,
    {task: SSH commands per host} when verbose)."""
    open(ssh_log, 'w').close()
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(tree, 'ansible.cfg'), ANSIBLE_FORKS=str(forks),
               ANSIBLE_NOCOLOR='1', ANSIBLE_COLLECTIONS_PATH=collections_path(tree))
    with tempfile.NamedTemporaryFile('w', suffix='.json') as handle:
        json.dump(extra, handle)
        handle.flush()
        cpu, hosts_cpu, start = children_cpu(), host_cpu(fleet), time.monotonic()
        proc = subprocess.run([os.path.join(BIN, 'ansible-playbook'), '-i', fleet.inventory, os.path.join(tree, name),
                               '-e', '@' + handle.name] + (['-vvv'] if verbose else []),
                              env=env, capture_output=True, text=True, check=False)
        wall, cpu = time.monotonic() - start, children_cpu() - cpu
        hosts_cpu = sum(host_cpu(fleet).values()) - sum(hosts_cpu.values())
    if proc.returncode != 0:
        raise SystemExit('%s failed (rc %d):\n%s' % (name, proc.returncode, proc.stdout[-12000:]))
    recap = {m.group(1): tuple(int(g) for g in m.groups()[1:]) for m in RECAP.finditer(proc.stdout)}
    by_address = {host['address']: host_name for host_name, host in fleet.hosts.items()}
    commands = collections.Counter()
    with open(ssh_log, encoding='utf-8') as handle:
        for line in handle:
            for token in line.split():
                host_name = by_address.get(token.rpartition('@')[2])
                if host_name:
                    commands[host_name] += 1
                    break
    per_task = collections.OrderedDict()
    if verbose:
        task = None
        for line in proc.stdout.splitlines():
            match = TASK.match(line)
            if match:
                task = match.group(1)
                continue
            match = SSH_EXEC.match(line)
            if match and task is not None:
                per_task[task] = per_task.get(task, 0) + 1
        per_task = collections.OrderedDict((task, count / len(fleet.hosts)) for task, count in per_task.items())
    return wall, cpu, hosts_cpu / len(fleet.hosts), recap, commands, per_task


def collections_path(tree):
    if tree == ROOT:
        return os.environ.get('ANSIBLE_COLLECTIONS_PATH', os.path.join(ROOT, '.collections'))
    return os.path.join(tree, '.collections')


def export_revision(rev, directory):
    """The tree of git revision ``rev`` under ``directory``, its collection built and installed there."""
    tree = os.path.join(directory, 'baseline')
    os.makedirs(tree)
    archive = subprocess.run(['git', '-C', ROOT, 'archive', rev], capture_output=True, check=True).stdout
    subprocess.run(['tar', '-x', '-C', tree], input=archive, check=True)
    galaxy = os.path.join(BIN, 'ansible-galaxy')
    subprocess.run([galaxy, 'collection', 'build', '--force', '--output-path', os.path.join(tree, 'build'), tree],
                   check=True, capture_output=True)
    tarball = [name for name in os.listdir(os.path.join(tree, 'build')) if name.endswith('.tar.gz')][0]
    subprocess.run([galaxy, 'collection', 'install', '--force', '-p', collections_path(tree),
                    os.path.join(tree, 'build', tarball)], check=True, capture_output=True)
    return tree


def server_pids(fleet):
    return {name: fleet.ssh(name, 'cat /run/llmops/sglang-main.pid 2>/dev/null || echo null').stdout.strip()
            for name in fleet.hosts}


def measure(size, forks, speed, tree=ROOT, per_task=False):
    directory = tempfile.mkdtemp(prefix='llf-scale-', dir='/tmp')
    fleet = fleet_lib.Fleet(directory)
    ssh_log = os.path.join(directory, 'ssh-commands.log')
    wrapper = os.path.join(directory, 'ssh')
    with open(wrapper, 'w', encoding='utf-8') as handle:
        handle.write(SSH_WRAPPER.format(log=ssh_log))
    os.chmod(wrapper, 0o755)
    rows, tasks = [], {}
    try:
        fleet.up(ns_hosts=size, die_with_parent=True)
        extra = deploy_vars(llmops_serial=size, ansible_ssh_executable=wrapper)
        extra['sglang_server_env'] = dict(extra['sglang_server_env'], SGLANG_SIM_SPEED=speed)
        playbook(fleet, ROOT, 'tests/sim/prepare_host.yml', extra, forks, ssh_log)
        for label, name in (('first deploy', 'playbooks/deploy.yml'), ('no-op redeploy', 'playbooks/deploy.yml'),
                            ('stop', 'playbooks/stop.yml')):
            before = server_pids(fleet) if label == 'no-op redeploy' else None
            wall, cpu, cpu_host, recap, commands, by_task = playbook(
                fleet, tree, name, extra, forks, ssh_log, verbose=per_task and before is not None)
            tasks.update(by_task)
            hosts = sorted(fleet.hosts)
            if before is not None:
                changed = {h: recap[h][1] for h in hosts if recap[h][1]}
                if changed or server_pids(fleet) != before:
                    raise SystemExit('the no-op redeploy of %d hosts changed something: %s' % (size, changed))
            ran = [recap[h][0] + recap[h][3] for h in hosts]
            skipped = [recap[h][4] for h in hosts]
            ssh = [commands[h] for h in hosts]
            rows.append((size, label, wall, cpu / size, cpu_host, max(ran), max(skipped), min(ssh), max(ssh)))
    finally:
        fleet.down()
        shutil.rmtree(directory, ignore_errors=True)
    return rows, tasks


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sizes', type=int, nargs='+', default=[4, 16])
    parser.add_argument('--forks', type=int, default=50)
    parser.add_argument('--speed', default='0.05', help='SGLANG_SIM_SPEED of the simulated servers')
    parser.add_argument('--baseline-rev', help='git revision whose collection and playbooks run too, for the ratio')
    parser.add_argument('--tasks', action='store_true', help='SSH commands per host of each task of the no-op')
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix='llf-scale-rev-', dir='/tmp')
    try:
        trees = [('this checkout', ROOT)]
        if args.baseline_rev:
            trees.append((args.baseline_rev, export_revision(args.baseline_rev, work)))
        print('fleet_scale: namespace hosts with the SGLang SIMULATOR (test-bed figures, not GPU figures), '
              'one batch, forks %d' % args.forks)
        header = ('N', 'tree', 'run', 'wall s', 'ctl CPU s/host', 'host CPU s/host', 'tasks/host', 'skipped',
                  'ssh cmds/host')
        print('%4s  %-14s %-15s %8s %14s %15s %10s %8s %14s' % header)
        for size in args.sizes:
            noop = {}
            for label, tree in trees:
                rows, tasks = measure(size, args.forks, args.speed, tree, args.tasks)
                for n, run, wall, cpu, cpu_host, ran, skipped, ssh_min, ssh_max in rows:
                    ssh = str(ssh_max) if ssh_min == ssh_max else '%d-%d' % (ssh_min, ssh_max)
                    print('%4d  %-14s %-15s %8.1f %14.2f %15.2f %10d %8d %14s'
                          % (n, label, run, wall, cpu, cpu_host, ran, skipped, ssh), flush=True)
                    if run == 'no-op redeploy':
                        noop[label] = wall
                for task, count in tasks.items():
                    print('      no-op, %s: %5.1f SSH commands/host  %s' % (label, count, task), flush=True)
            if len(noop) == 2:
                print('%4d  no-op redeploy wall time, this checkout / %s: %.2f' % (size, args.baseline_rev,
                      noop['this checkout'] / noop[args.baseline_rev]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
