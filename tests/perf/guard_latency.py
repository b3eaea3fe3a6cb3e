# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Time from a drafter's collapse to its remediation by the speculation guard, split into its parts.

On this machine (simulator, not GPU figures): one SGLang simulator deployed by playbooks/deploy.yml at
depth 16 under steady /generate traffic, real ansible-rulebook running rulebook
llmops.serving.speculation_guard_poll (the /metrics poller: interval and ``for`` below), then the
drafter's quality dropped (SGLANG_SIM_QUALITY_FILE). Parts: detection (collapse -> the poller fires,
at least ``for``), launch (-> the remediation's first journal line: ansible-rulebook starts
ansible-playbook, the guard decides), drain, reconfigure (fallback deploy: stop, start, health, smoke),
back (routers, journal). With Prometheus and Alertmanager instead of the poller, detection is the rule's
``for`` + scrape and evaluation intervals + Alertmanager's group_wait.

    python tests/perf/guard_latency.py [--interval 1] [--for 3]

Needs ``make collection`` and ansible-rulebook in ${LLMOPS_RULEBOOK_VENV:-.cache/rulebook-venv} with Java.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_playbook import ROOT, free_port, playbook  # noqa: E402  pylint: disable=wrong-import-position

RULEBOOK = os.path.join(os.environ.get('LLMOPS_RULEBOOK_VENV', os.path.join(ROOT, '.cache', 'rulebook-venv')),
                        'bin', 'ansible-rulebook')


def inventory(work, port):
    box = os.path.join(work, 'box')
    hostvars = {
        'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
        'llmops_simulator': True, 'llmops_simulated_gpus': 8, 'llmops_simulator_dir': os.path.join(ROOT, 'tests', 'sim'),
        'llmops_simulator_checkpoints': os.path.join(box, 'checkpoints'),
        'llmops_known_variables': ['llmops_simulator', 'llmops_simulated_gpus', 'llmops_simulator_dir',
                                   'llmops_simulator_checkpoints'],
        'sglang_server_python': sys.executable, 'sglang_server_launcher': 'process', 'sglang_server_user': '',
        'sglang_server_name': 'guard', 'sglang_server_port': port,
        'sglang_server_model_path': os.path.join(box, 'checkpoints', 'target'),
        'sglang_server_served_model_name': 'tiny-llama', 'sglang_server_tp_size': 8,
        'sglang_server_speculative_draft_model_path': os.path.join(box, 'checkpoints', 'drafter'),
        'sglang_server_speculative_depth': 16, 'sglang_server_min_accept_length': 1.5,
        'sglang_server_env': {'PYTHONPATH': os.path.join(ROOT, 'tests', 'sim'), 'NVSIM_STATE_DIR': os.path.join(box, 'nvsim'),
                              'SGLANG_SIM_SPEED': '0.1', 'SGLANG_SIM_QUALITY_FILE': os.path.join(box, 'quality')},
        'sglang_server_config_dir': os.path.join(box, 'etc'), 'sglang_server_run_dir': os.path.join(box, 'run'),
        'sglang_server_log_path': os.path.join(box, 'log', 'sglang-guard.log'),
        'sglang_server_state_dir': os.path.join(box, 'last-good'),
        'sglang_server_help_cache_dir': os.path.join(box, 'help-cache'), 'sglang_server_health_interval': 1,
        'gpu_preflight_nvidia_smi_path': os.path.join(ROOT, 'tests', 'sim', 'nvidia-smi'),
        'gpu_preflight_environment': {'NVSIM_STATE_DIR': os.path.join(box, 'nvsim')},
        'llmops_remediate_journal': os.path.join(box, 'remediations.jsonl'),
        'llmops_remediate_state_file': os.path.join(work, 'guard', 'state.json'),
    }
    path = os.path.join(work, 'inventory.json')
    with open(path, 'w') as f:
        json.dump({'all': {'children': {'sglang_servers': {'hosts': {'guardbox': hostvars}}}}}, f)
    return path, box


def traffic(url, stop):
    body = json.dumps({'text': 'The quick brown fox', 'sampling_params': {'max_new_tokens': 32, 'temperature': 0}}).encode()
    while not stop.is_set():
        try:
            req = urllib.request.Request(url + '/generate', data=body, headers={'Content-Type': 'application/json'})
            urllib.request.urlopen(req, timeout=30).read()
        except OSError:
            time.sleep(0.2)


def rulebook_time(line):
    match = re.match(r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})', line)
    if not match:
        return None
    stamp = datetime.datetime.strptime(match.group(1), '%Y-%m-%d %H:%M:%S').replace(tzinfo=datetime.timezone.utc)
    return stamp.timestamp() + int(match.group(2)) / 1000.0


def journal_times(path):
    out = {}
    with open(path) as f:
        for line in f:
            entry = json.loads(line)
            stamp = datetime.datetime.strptime(entry['at'], '%Y-%m-%dT%H:%M:%S.%fZ').replace(tzinfo=datetime.timezone.utc)
            out[entry['step']] = stamp.timestamp()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--interval', type=float, default=1.0, help='poller interval, s')
    parser.add_argument('--for', dest='for_s', type=float, default=3.0, help='seconds below the floor before firing')
    parser.add_argument('--timeout', type=float, default=240.0)
    args = parser.parse_args()
    if not os.path.exists(RULEBOOK) or not shutil.which('java'):
        sys.exit('needs %s and java' % RULEBOOK)
    work = tempfile.mkdtemp(prefix='llmops-guard-latency-')
    port = free_port()
    inv, box = inventory(work, port)
    url = 'http://127.0.0.1:%d' % port
    for name in ('tests/sim/prepare_host.yml', 'playbooks/deploy.yml'):
        proc = playbook(name, inv, {})
        if proc.returncode != 0:
            sys.exit('%s failed:\n%s' % (name, proc.stdout[-3000:]))
    stop = threading.Event()
    workers = [threading.Thread(target=traffic, args=(url, stop), daemon=True) for dummy in range(2)]
    for w in workers:
        w.start()
    with open(os.path.join(work, 'vars.json'), 'w') as f:
        json.dump({'poll_targets': [{'host': 'guardbox', 'url': url, 'floor': 1.5}], 'poll_interval': args.interval,
                   'poll_for': args.for_s}, f)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, '.collections'),
               ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               PATH=os.pathsep.join([os.path.dirname(RULEBOOK), os.path.dirname(sys.executable), os.environ.get('PATH', '')]))
    log_path = os.path.join(work, 'rulebook.log')
    log = open(log_path, 'w')
    rb = subprocess.Popen([RULEBOOK, '-r', 'llmops.serving.speculation_guard_poll', '-i', inv,
                           '--vars', os.path.join(work, 'vars.json'), '-v'], stdout=log, stderr=subprocess.STDOUT, env=env)
    journal = os.path.join(box, 'remediations.jsonl')
    try:
        deadline = time.time() + 120
        while 'Waiting for events' not in open(log_path).read():
            if time.time() > deadline or rb.poll() is not None:
                sys.exit('ansible-rulebook did not start:\n' + open(log_path).read()[-3000:])
            time.sleep(0.5)
        time.sleep(args.interval * 3 + 1)  # a few rounds with a good drafter first
        with open(os.path.join(box, 'quality'), 'w') as f:
            f.write('random')
        collapse = time.time()
        deadline = collapse + args.timeout
        while time.time() < deadline:
            steps = journal_times(journal) if os.path.exists(journal) else {}
            if 'remediated' in steps or 'failed' in steps:
                break
            time.sleep(0.5)
        else:
            sys.exit('no remediation within %.0f s:\n%s' % (args.timeout, open(log_path).read()[-3000:]))
        fired = [rulebook_time(line) for line in open(log_path) if 'firing' in line and 'acceptance_poller' in line]
        fired = [t for t in fired if t]
    finally:
        stop.set()
        rb.terminate()
        rb.wait(30)
        log.close()
        playbook('playbooks/stop.yml', inv, {})
    end = steps.get('remediated', steps.get('failed'))
    parts = [('detection (collapse -> poller fires; for=%gs, interval=%gs)' % (args.for_s, args.interval), collapse, fired[0]),
             ('launch (-> ansible-playbook, guard, first journal line)', fired[0], steps['started']),
             ('drain (no router here: the router tasks only)', steps['started'], steps['drained']),
             ('reconfigure (fallback deploy: stop, start, health, smoke)', steps['drained'], steps.get('fallback', end)),
             ('back (routers, journal)', steps.get('fallback', end), end)]
    print('guard latency on the SGLang simulator (this machine, not GPU figures); outcome: %s'
          % ('remediated' if 'remediated' in steps else 'failed'))
    for label, start, stop_at in parts:
        print('  %-62s %6.1f s' % (label, stop_at - start))
    print('  %-62s %6.1f s' % ('total: collapse -> remediated', end - collapse))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
