# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The speculation guard's rulebook run by real ansible-rulebook (with its Java rule engine) on this
machine: canned Alertmanager notifications posted to the collection's webhook source, then

- the rulebook launches the remediate playbook (a stub, through the rulebook variable
  remediate_playbook) once, for the one collapsed host, with the host and its group as extra vars
  and ansible-rulebook's --limit all; resolved alerts and other alerts launch nothing;
- the real playbooks/remediate.yml decides through its guard: a notification where the whole fleet
  collapsed remediates nothing and raises one fleet-wide alert; an alert for a host the inventory
  does not know is logged and ignored. No server is reached (the inventory's hosts do not exist).

Needs ansible-rulebook in ${LLMOPS_RULEBOOK_VENV:-<repo>/.cache/rulebook-venv} and Java 17, which
tests/integration/install_rulebook.sh and install-system-packages.sh install (the integration stage
runs both first). Uses the
collection installed by ``make collection``. About 40 s."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
COLLECTIONS = os.path.join(ROOT, '.collections')
RULEBOOK_VENV = os.environ.get('LLMOPS_RULEBOOK_VENV', os.path.join(ROOT, '.cache', 'rulebook-venv'))
RULEBOOK = os.path.join(RULEBOOK_VENV, 'bin', 'ansible-rulebook')

ALERT = 'LlmopsSpecAcceptLengthBelowFloor'


def notification(*alerts):
    """An Alertmanager webhook notification (version 4); each alert (host, status, alertname)."""
    return {'version': '4', 'status': 'firing', 'receiver': 'speculation-guard', 'groupKey': '{}:{alertname="%s"}' % ALERT,
            'groupLabels': {'alertname': ALERT}, 'commonLabels': {}, 'commonAnnotations': {},
            'externalURL': 'http://monitor:9093', 'truncatedAlerts': 0,
            'alerts': [{'status': status, 'labels': {'alertname': name, 'host': host, 'instance': '%s:30000' % host,
                                                     'severity': 'warning', 'job': 'llmops-sglang'},
                        'annotations': {'summary': 'acceptance 1.01'}, 'startsAt': '2026-12-04T05:00:00Z',
                        'endsAt': '0001-01-01T00:00:00Z', 'generatorURL': '', 'fingerprint': host}
                       for host, status, name in alerts]}


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def post(port, payload):
    req = urllib.request.Request('http://127.0.0.1:%d/' % port, data=json.dumps(payload).encode(),
                                 headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError('timed out waiting for ' + what)


@pytest.fixture
def rulebook(tmp_path):
    """Yield ``start(rulebook_vars, inventory, port=None)``, which starts ansible-rulebook on
    llmops.serving.speculation_guard (its webhook on ``port``, default a free one) and returns (port, log path);
    stop them all."""
    procs = []

    def start(rulebook_vars, inventory, port=None):
        if not os.path.isdir(os.path.join(COLLECTIONS, 'ansible_collections', 'llmops', 'serving')):
            raise RuntimeError('run "make collection" first')
        port = port or free_port()
        (tmp_path / 'vars.yml').write_text(json.dumps(dict({'webhook_host': '127.0.0.1', 'webhook_port': port},
                                                           **rulebook_vars)))
        (tmp_path / 'inventory.yml').write_text(json.dumps(inventory))
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'),
                   ANSIBLE_NOCOLOR='1', ANSIBLE_HOST_KEY_CHECKING='False',
                   PATH=os.pathsep.join([os.path.dirname(RULEBOOK), os.path.dirname(sys.executable),
                                         os.environ.get('PATH', '')]))
        log = open(str(tmp_path / 'rulebook.log'), 'w')
        proc = subprocess.Popen([RULEBOOK, '-r', 'llmops.serving.speculation_guard', '-i', str(tmp_path / 'inventory.yml'),
                                 '--vars', str(tmp_path / 'vars.yml'), '-v'],
                                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path))
        procs.append((proc, log))

        def listening():
            assert proc.poll() is None, (tmp_path / 'rulebook.log').read_text()[-3000:]
            with socket.socket() as s:
                return s.connect_ex(('127.0.0.1', port)) == 0
        wait_for(listening, 90, 'the webhook source to listen')
        return port, tmp_path / 'rulebook.log'

    yield start
    for proc, log in procs:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


FLEET = {'all': {'children': {'sglang_servers': {'hosts': dict(
    (h, {'ansible_host': '192.0.2.%d' % i, 'ansible_port': 1}) for i, h in enumerate(['s1', 's2', 's3'], 1))}}}}


def test_rulebook_launches_the_remediation_of_the_collapsed_host(rulebook, tmp_path):
    runs = tmp_path / 'runs.jsonl'
    stub = tmp_path / 'stub.yml'
    stub.write_text(json.dumps([{
        'hosts': 'all', 'gather_facts': False, 'tasks': [{
            'ansible.builtin.lineinfile': {
                'path': str(runs), 'create': True, 'mode': '0600',
                'line': "{{ {'host': llmops_remediate_host, 'collapsed': llmops_collapsed_hosts, "
                        "'limit': ansible_limit | default(none), 'trigger': llmops_remediate_trigger} | to_json }}"},
            'delegate_to': 'localhost', 'run_once': True}]}]))
    port, log = rulebook({'remediate_playbook': str(stub)}, FLEET)
    assert post(port, notification(('s2', 'firing', ALERT), ('s1', 'resolved', ALERT),
                                   ('s3', 'firing', 'LlmopsSGLangTTFTHigh'))) == 202
    lines = wait_for(lambda: runs.exists() and runs.read_text().splitlines(), 60, 'the stub playbook to run')
    time.sleep(5)  # nothing else is launched
    assert [json.loads(x) for x in runs.read_text().splitlines()] == [
        {'host': 's2', 'collapsed': ['s2'], 'limit': 'all', 'trigger': 'speculation-guard'}], lines


def test_fleet_wide_collapse_and_unknown_host_remediate_nothing(rulebook, tmp_path):
    state = tmp_path / 'guard' / 'state.json'
    inventory = json.loads(json.dumps(FLEET))
    inventory['all']['vars'] = {'llmops_remediate_state_file': str(state)}
    port, log = rulebook({}, inventory)
    assert post(port, notification(('s1', 'firing', ALERT), ('s2', 'firing', ALERT), ('s3', 'firing', ALERT))) == 202
    assert post(port, notification(('intruder', 'firing', ALERT))) == 202
    journal = state.parent / 'decisions.jsonl'
    decisions = wait_for(lambda: journal.exists() and len(journal.read_text().splitlines()) >= 4
                         and [json.loads(x) for x in journal.read_text().splitlines()], 150, 'four guard decisions')
    assert [(d['host'], d['reason'], d['fleet_alert']) for d in decisions] == [
        ('s1', 'fleet_wide', True), ('s2', 'fleet_wide', False), ('s3', 'fleet_wide', False),
        ('intruder', 'unknown_host', False)]
    assert decisions[0]['collapsed'] == ['s1', 's2', 's3']
    text = log.read_text()
    assert 'a fleet-wide shift, not a bad host' in text and 'which the inventory does not know' in text
    assert 'Remediate the server' not in text or 'skipping: no hosts matched' in text
    assert json.loads(state.read_text())['remediations'] == []
