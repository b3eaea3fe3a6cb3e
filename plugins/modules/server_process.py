#!/usr/bin/python
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: server_process
short_description: Run a long-lived server as a detached process with a pidfile (hosts without systemd)
version_added: 1.0.0
author: llmops.serving maintainers (@llmops)
description:
  - Starts a command in a session of its own (C(setsid)), detached from Ansible, with its output appended to a
    log file and its identity (PID, start time) in a pidfile.
  - Stops it by its session, not by its PID alone; an inference server's worker processes (for example SGLang's
    C(sglang::scheduler)) can outlive the launcher and keep GPU memory. Every process of the session gets
    C(SIGTERM), survivors get C(SIGKILL) after O(stop_timeout), and the module returns only when the whole
    session is gone.
  - The process launcher of the P(llmops.serving.sglang_server#role) role; where systemd runs, the role uses a
    unit instead.
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: Reports what would be started or stopped and does nothing.
  diff_mode:
    support: none
    details: Nothing to compare; the launch script the role writes carries the diff.
  idempotent:
    support: partial
    details: V(started) leaves a running process alone and V(stopped) a stopped one; V(restarted) always restarts.
options:
  name:
    description: Name of the instance, used in messages.
    type: str
    required: true
  state:
    description:
      - V(started) starts the command unless the process of the pidfile is running.
      - V(stopped) stops the whole session of that process and waits until it is gone.
      - V(restarted) stops (if running), then starts.
      - V(status) only reports.
    type: str
    choices: [started, stopped, restarted, status]
    default: started
  command:
    description: The command, one list item per argument (no shell). Required to start.
    type: list
    elements: str
  pidfile:
    description: File that records the PID and start time of the process (JSON).
    type: path
    required: true
  log_path:
    description:
      - File that gets the process's standard output and error. Required to start.
      - Each start begins a new file; the previous one is kept with the suffix C(.1).
    type: path
  chdir:
    description: Working directory of the process; C(/) where not set or null.
    type: path
  stop_timeout:
    description: Seconds between C(SIGTERM) and C(SIGKILL) when stopping; 60 where not set or null.
    type: float
  kill_timeout:
    description: Seconds to wait after C(SIGKILL) before failing; 30 where not set or null.
    type: float
  startup_check:
    description:
      - Seconds to watch a new process; if it exits within them, the task fails with the end of its log.
      - 1 where not set or null.
    type: float
'''

EXAMPLES = r'''
- name: Start the server detached
  llmops.serving.server_process:
    name: main
    command: [/opt/llmops/sglang-main.sh]
    pidfile: /run/llmops/sglang-main.pid
    log_path: /var/log/llmops/sglang-main.log

- name: Stop it with every child and wait until they are gone
  llmops.serving.server_process:
    name: main
    state: stopped
    pidfile: /run/llmops/sglang-main.pid
    stop_timeout: 30
'''

RETURN = r'''
running:
  description: Whether the process runs when the module returns (in check mode, whether it would).
  type: bool
  returned: always
pid:
  description: PID of the process (its session ID too); null when not running.
  type: int
  returned: always
stopped:
  description: Per stopped process, C(pid), C(signals) sent and C(outcome) (C(exited), C(survived KILL), ...).
  type: list
  elements: dict
  returned: when something was stopped
'''

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils import _procs
from ansible_collections.llmops.serving.plugins.module_utils._startup_log import TracebackTracker, fold_line, redact


ARGUMENT_SPEC = dict(
    name=dict(type='str', required=True),
    state=dict(type='str', default='started', choices=['started', 'stopped', 'restarted', 'status']),
    command=dict(type='list', elements='str'),
    pidfile=dict(type='path', required=True),
    log_path=dict(type='path'),
    chdir=dict(type='path'),
    stop_timeout=dict(type='float'),
    kill_timeout=dict(type='float'),
    startup_check=dict(type='float'),
)
# The defaults of the options above: a task may pass null for any of them (a role passes its variable as it
# is), and AnsibleModule applies no spec default to a null, so the module fills them in (unset_nulls).
DEFAULTS = dict(chdir='/', stop_timeout=60.0, kill_timeout=30.0, startup_check=1.0)


def unset_nulls(params, defaults):
    """``params`` with each option of ``defaults`` that is null (unset, or null in the task) set to its default."""
    for name, value in defaults.items():
        if params.get(name) is None:
            params[name] = value
    return params


def read_pidfile(path):
    """``(pid, starttime)`` of a pidfile this module wrote; ``(None, None)`` for any other (no start time)."""
    pid, starttime = _procs.read_pidfile(path)
    return (pid, starttime) if starttime is not None else (None, None)


def leader(path):
    """The ProcessInfo of the pidfile's process while that very process runs, else None."""
    pid, starttime = read_pidfile(path)
    if pid is None:
        return None
    info = _procs.read_process(pid)
    if info is None or info.starttime != starttime or info.exited:
        return None
    return info


def stop(module, path):
    """Stop the pidfile's session; return the per-process outcomes."""
    pid, starttime = read_pidfile(path)
    if pid is None:
        return []
    current = _procs.read_process(pid)
    if current is not None and current.starttime != starttime:
        # The PID now belongs to another process. Linux reuses no PID that still names a
        # session, so no process of our session is left: the pidfile is just stale.
        return []
    deadline = time.monotonic() + module.params['stop_timeout'] + module.params['kill_timeout']
    outcomes = []
    while True:
        members = _procs.session_members(pid)
        if not members:
            break
        if time.monotonic() > deadline:
            module.fail_json(msg='server %s: processes of session %d survived SIGKILL: %s' % (
                module.params['name'], pid, ', '.join('%d (%s)' % (m.pid, m.command[:80]) for m in members)),
                stopped=outcomes)
        outcomes.extend(_procs.stop_processes(members, 'TERM', grace_period=module.params['stop_timeout'],
                                              kill_timeout=module.params['kill_timeout']))
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return outcomes


def tail(path, lines=20):
    """The last lines of the log, API keys masked (SGLang prints its server_args with the key)
    and long lines folded."""
    try:
        with open(path, 'rb') as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(handle.tell() - 65536, 0))
            text = handle.read().decode('utf-8', 'replace')
    except (IOError, OSError):
        return ''
    return '\n'.join(fold_line(redact(line)) for line in text.splitlines()[-lines:])


def root_cause(path):
    """The exception line that ended the first traceback of the log's end, or None."""
    tracker = TracebackTracker()
    for line in tail(path, lines=400).splitlines():
        tracker.feed(line)
    return tracker.exceptions[0] if tracker.exceptions else None


def exited_message(name, status, log_path):
    cause = root_cause(log_path)
    return '%sserver %s exited with status %d right after start; end of %s:\n%s' % (
        'root cause: %s\n' % cause if cause else '', name, status, log_path, tail(log_path))


def spawn(command, log_path, chdir):
    """Fork a child that becomes a session leader, with stdin from /dev/null and stdout and
    stderr to ``log_path``, and execs ``command``; return its PID (exit status 127 if the
    exec failed, with the reason in the log)."""
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, os.sysconf('SC_OPEN_MAX'))
        os.chdir(chdir)
        os.execvp(command[0], command)
    except BaseException as exc:  # pylint: disable=broad-except
        os.write(2, ('cannot run %s: %s\n' % (command[0], exc)).encode())
    os._exit(127)


def start(module):
    params = module.params
    for key in ('command', 'log_path'):
        if not params[key]:
            module.fail_json(msg='server %s: %s is required to start it' % (params['name'], key))
    for path in (params['pidfile'], params['log_path']):
        os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    if os.path.exists(params['log_path']):
        os.replace(params['log_path'], params['log_path'] + '.1')
    pid = spawn(params['command'], params['log_path'], params['chdir'])
    info = None
    deadline = time.monotonic() + 5
    while info is None and time.monotonic() < deadline:
        info = _procs.read_process(pid)
    if info is None:
        module.fail_json(msg='server %s: process %d vanished at once' % (params['name'], pid))
    tmp = params['pidfile'] + '.tmp'
    with open(tmp, 'w') as handle:
        json.dump({'pid': info.pid, 'starttime': info.starttime, 'command': params['command']}, handle)
    os.replace(tmp, params['pidfile'])
    deadline = time.monotonic() + params['startup_check']
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            os.unlink(params['pidfile'])
            module.fail_json(msg=exited_message(params['name'], os.waitstatus_to_exitcode(status), params['log_path']))
        time.sleep(0.05)
    return info.pid


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[('state', 'started', ('command', 'log_path')), ('state', 'restarted', ('command', 'log_path'))],
        supports_check_mode=True,
    )
    unset_nulls(module.params, DEFAULTS)
    state = module.params['state']
    running = leader(module.params['pidfile'])
    result = dict(changed=False, running=running is not None, pid=running.pid if running else None)
    if state == 'status' or (state == 'started' and running):
        module.exit_json(**result)
    pid, starttime = read_pidfile(module.params['pidfile'])
    current = _procs.read_process(pid) if pid is not None else None
    stale = current is not None and current.starttime != starttime
    leftovers = _procs.session_members(pid) if pid is not None and not stale else []
    if state == 'stopped' and not running and not leftovers:
        if os.path.exists(module.params['pidfile']) and not module.check_mode:
            os.unlink(module.params['pidfile'])
        module.exit_json(**result)

    result['changed'] = True
    if module.check_mode:
        result['running'] = state != 'stopped'
        module.exit_json(**result)
    if running or leftovers:
        result['stopped'] = stop(module, module.params['pidfile'])
    result.update(running=False, pid=None)
    if state in ('started', 'restarted'):
        result.update(running=True, pid=start(module))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
