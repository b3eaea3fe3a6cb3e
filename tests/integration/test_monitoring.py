# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/monitoring.yml against the test fleet, with Debian's real Prometheus started by the
test on this machine (free port, temporary data directory) reading the targets and rules the role
wrote, scraping the SGLang simulators that playbooks/deploy.yml started on ns1-ns3.

Shows: every target is up with the inventory's labels and the version read from the server; the
simulator's SGLANG_SIM_QUALITY_FILE dropping ns1's acceptance length below its floor makes
LlmopsSpecAcceptLengthBelowFloor fire (times measured and printed), removing it resolves the alert;
a stopped server (ns3) fires LlmopsSGLangServerDown while its group still has ready servers; with
serving_monitoring_install_prometheus the role installs and runs Debian's Prometheus under systemd on
sd1 (--check first changes nothing), which then scrapes the same servers and loads the rules; a rerun
changes nothing. The speculation guard's whole loop, behind the real sglang-router (on sd1) under streaming
load: Prometheus sends the collapse alert to Debian's Alertmanager (started by the test on the
alertmanager.yml the role wrote), which posts it to the rulebook in the real ansible-rulebook, whose
playbooks/remediate.yml drains the host, puts it on its fallback and registers it again; a second collapse
within the cooldown is not acted on; a collapse of most of the fleet remediates nothing and raises the
fleet-wide alert in Alertmanager; no request fails.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest

from router_bed import Load, router_vars, systemd_router  # noqa: F401  pylint: disable=unused-import
# The rulebook fixture (ansible-rulebook on the collection's speculation guard), used by a test here.
from test_speculation_guard_rulebook import rulebook  # noqa: F401  pylint: disable=unused-import

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(ROOT, 'tests', 'sim')
NS = ['ns1', 'ns2', 'ns3']
API_KEY = 'sk-llmops-monitoring-5e4d3c2b'
QUALITY_FILE = '/run/llmops-sim-quality'  # /run is private to each fleet host
FLOOR = 1.5
# Short windows so that the test takes seconds; the defaults are minutes.
INTERVAL = 1        # scrape and evaluation interval (s)
WINDOW = 10         # serving_monitoring_accept_length_window (s)
FOR = 8             # serving_monitoring_accept_length_for and serving_monitoring_down_for (s)
ROUTER = router_vars('guard', 30081)  # the guard test's real sglang-router, on sd1 in front of ns1-ns3


def fleet_vars():
    return {
        'llmops_hosts': 'fleet_ns',
        'llmops_simulator': True,
        'llmops_simulated_gpus': 8,
        'llmops_simulator_dir': SIM,
        'llmops_simulator_checkpoints': '/srv/llmops/checkpoints',
        'sglang_server_python': '/usr/bin/python3',
        'sglang_server_host': '0.0.0.0',
        'sglang_server_model_path': '/srv/llmops/checkpoints/target',
        'sglang_server_speculative_draft_model_path': '/srv/llmops/checkpoints/drafter',
        'sglang_server_speculative_depth': 5,
        'sglang_server_min_accept_length': FLOOR,
        'sglang_server_served_model_name': 'tiny-llama',
        'sglang_server_api_key': API_KEY,
        'sglang_server_health_interval': 1,
        'sglang_server_health_timeout': 120,
        'sglang_server_env': {'PYTHONPATH': SIM, 'NVSIM_STATE_DIR': '/run/llmops-nvsim', 'SGLANG_SIM_SPEED': '0.05',
                              'SGLANG_SIM_QUALITY_FILE': QUALITY_FILE},
        'gpu_preflight_nvidia_smi_path': os.path.join(SIM, 'nvidia-smi'),
        'gpu_preflight_environment': {'NVSIM_STATE_DIR': '/run/llmops-nvsim'},
        'gpu_preflight_wait_timeout': 20,
    }


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def get_json(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def poll(predicate, timeout, what, interval=0.2):
    """Poll ``predicate`` until it returns a true value; return (value, wall-clock time it was seen)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value, time.time()
        if time.monotonic() > deadline:
            raise AssertionError('timed out after %.0f s waiting for %s' % (timeout, what))
        time.sleep(interval)


class Prometheus:
    """Debian's prometheus binary on a free port with a temporary data directory."""

    def __init__(self, directory, targets, rules, alertmanager):
        self.port = free_port()
        self.url = 'http://127.0.0.1:%d' % self.port
        config = os.path.join(directory, 'prometheus.yml')
        with open(config, 'w', encoding='utf-8') as f:
            json.dump({'global': {'scrape_interval': '%ds' % INTERVAL, 'evaluation_interval': '%ds' % INTERVAL,
                                  'scrape_timeout': '%ds' % INTERVAL},
                       'rule_files': [rules],
                       'alerting': {'alertmanagers': [{'static_configs': [{'targets': [alertmanager]}]}]},
                       'scrape_configs': [{'job_name': 'llmops-sglang', 'file_sd_configs': [{'files': [targets]}]}]}, f)
        self.log = open(os.path.join(directory, 'prometheus.log'), 'w', encoding='utf-8')
        self.proc = subprocess.Popen(
            ['prometheus', '--config.file=' + config, '--storage.tsdb.path=' + os.path.join(directory, 'data'),
             '--web.listen-address=127.0.0.1:%d' % self.port, '--storage.tsdb.retention.time=1h'],
            stdout=self.log, stderr=subprocess.STDOUT)
        poll(self.ready, 60, 'Prometheus to be ready')

    def ready(self):
        assert self.proc.poll() is None, 'prometheus exited: see %s' % self.log.name
        try:
            with urllib.request.urlopen(self.url + '/-/ready', timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def api(self, path, **params):
        url = self.url + '/api/v1/' + path + ('?' + urllib.parse.urlencode(params) if params else '')
        body = get_json(url)
        assert body['status'] == 'success', body
        return body['data']

    def alerts(self, name, state='firing'):
        return {a['labels'].get('host', ''): a for a in self.api('alerts')['alerts']
                if a['labels']['alertname'] == name and a['state'] == state}

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Alertmanager:
    """Debian's prometheus-alertmanager on a free port, with the configuration the role wrote (no clustering)."""

    def __init__(self, directory, config):
        self.address = '127.0.0.1:%d' % free_port()
        self.log = open(os.path.join(directory, 'alertmanager.log'), 'w', encoding='utf-8')
        self.proc = subprocess.Popen(
            ['prometheus-alertmanager', '--config.file=' + config, '--storage.path=' + os.path.join(directory, 'am-data'),
             '--web.listen-address=' + self.address, '--cluster.listen-address='],
            stdout=self.log, stderr=subprocess.STDOUT)
        poll(self.ready, 60, 'Alertmanager to be ready')

    def ready(self):
        assert self.proc.poll() is None, 'alertmanager exited: see %s' % self.log.name
        try:
            with urllib.request.urlopen('http://%s/-/ready' % self.address, timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def alerts(self, name):
        """The alerts named ``name`` that Alertmanager holds, silenced ones included."""
        url = 'http://%s/api/v2/alerts?%s' % (self.address, urllib.parse.urlencode({'filter': 'alertname="%s"' % name}))
        return get_json(url)

    def silence(self, name):
        """Silence the alerts named ``name`` for an hour; returns the silence's ID."""
        now = datetime.datetime.now(datetime.timezone.utc)
        body = {'matchers': [{'name': 'alertname', 'value': name, 'isRegex': False, 'isEqual': True}],
                'startsAt': now.isoformat(), 'endsAt': (now + datetime.timedelta(hours=1)).isoformat(),
                'createdBy': 'llmops tests', 'comment': 'held back until all collapsed hosts fire'}
        req = urllib.request.Request('http://%s/api/v2/silences' % self.address, data=json.dumps(body).encode(),
                                     headers={'Content-Type': 'application/json'})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())['silenceID']

    def expire(self, silence_id):
        req = urllib.request.Request('http://%s/api/v2/silence/%s' % (self.address, silence_id), method='DELETE')
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(20)
        self.log.close()


class Traffic(threading.Thread):
    """Keeps every server busy with small /generate requests (about ten a second each) until stopped."""

    def __init__(self, addresses):
        super().__init__(daemon=True)
        self.addresses, self.halt = addresses, threading.Event()

    def run(self):
        body = json.dumps({'text': 'monitoring test', 'sampling_params': {'max_new_tokens': 32}}).encode()
        while not self.halt.is_set():
            for address in self.addresses:
                req = urllib.request.Request('http://%s:30000/generate' % address, data=body, headers={
                    'Content-Type': 'application/json', 'Authorization': 'Bearer ' + API_KEY})
                try:
                    with urllib.request.urlopen(req, timeout=10) as resp:
                        resp.read()
                except OSError:
                    continue  # a stopped server refuses: keep the others busy
            self.halt.wait(0.1)

    def stop(self):
        self.halt.set()
        self.join(30)


@pytest.fixture
def monitored(clean_fleet, run_playbook, prepare_simulator, tmp_path):
    """ns1-ns3 serving (simulator), the role's files in tmp_path/llmops, a Prometheus reading them and sending its
    alerts to an Alertmanager configured by the role (the collapse alert to a speculation guard's webhook on the
    port ``guard_port``, where a test may start the rulebook), traffic: ``(fleet, prometheus, run_playbook,
    guard_port)``."""
    fleet = clean_fleet
    prepare_simulator(extra_vars=fleet_vars())
    run_playbook('playbooks/deploy.yml', extra_vars=fleet_vars(), expect_rc=0, timeout=600)
    out, guard_port = str(tmp_path / 'llmops'), free_port()
    monitoring = dict(fleet_vars(), serving_monitoring_dir=out, serving_monitoring_group='fleet_ns',
                      serving_monitoring_validate=True, serving_monitoring_accept_length_window='%ds' % WINDOW,
                      serving_monitoring_accept_length_for='%ds' % FOR, serving_monitoring_down_for='%ds' % FOR,
                      serving_monitoring_no_ready_for='%ds' % FOR,
                      serving_monitoring_guard_webhook_url='http://127.0.0.1:%d/' % guard_port,
                      serving_monitoring_guard_group_wait='1s')
    del monitoring['llmops_hosts']  # the monitoring play runs on localhost
    result = run_playbook('playbooks/monitoring.yml', extra_vars=monitoring, expect_rc=0)
    assert API_KEY not in result.stdout + result.stderr
    alertmanager = Alertmanager(str(tmp_path), os.path.join(out, 'alertmanager.yml'))
    prometheus = Prometheus(str(tmp_path), os.path.join(out, 'llmops-sglang-targets.json'),
                            os.path.join(out, 'llmops-sglang.rules.yml'), alertmanager.address)
    traffic = Traffic([fleet.hosts[h]['address'] for h in NS])
    traffic.start()
    try:
        yield fleet, prometheus, run_playbook, guard_port, alertmanager
    finally:
        traffic.stop()
        prometheus.stop()
        alertmanager.stop()


def active_at(alert):
    """Wall-clock time at which Prometheus first saw the alert's condition (it then was pending)."""
    stamp = re.sub(r'(\.\d{6})\d*', r'\1', alert['activeAt']).replace('Z', '+00:00')
    return datetime.datetime.fromisoformat(stamp).timestamp()


def accept_length(prometheus, host):
    result = prometheus.api('query', query='llmops:sglang_spec_accept_length:ratio_rate{host="%s"}' % host)['result']
    return float(result[0]['value'][1]) if result else None


def targets_up(prometheus):
    """The three targets, once all are up."""
    targets = prometheus.api('targets')['activeTargets']
    return targets if len(targets) == 3 and all(t['health'] == 'up' for t in targets) else None


def test_prometheus_alerts_on_the_fleet(monitored):
    fleet, prometheus, run_playbook = monitored[:3]
    targets = poll(lambda: targets_up(prometheus), 60, 'three targets up')[0]
    by_host = {t['labels']['host']: t for t in targets}
    assert sorted(by_host) == NS
    for host in NS:
        labels = by_host[host]['labels']
        assert labels['instance'] == '%s:30000' % fleet.hosts[host]['address']
        assert {k: labels[k] for k in ('llmops', 'server', 'model', 'served_model_name', 'engine', 'version', 'depth',
                                       'replica_group', 'min_accept_length')} == {
            'llmops': 'sglang_server', 'server': 'main', 'model': '/srv/llmops/checkpoints/target',
            'served_model_name': 'tiny-llama', 'engine': 'sglang', 'version': '0.5.15.post1', 'depth': '5',
            'replica_group': 'tiny-llama', 'min_accept_length': str(FLOOR)}

    # ns1 serves above its floor before the knob turns
    healthy = poll(lambda: (accept_length(prometheus, 'ns1') or 0) > FLOOR + 1 and accept_length(prometheus, 'ns1'),
                   60, 'ns1 acceptance measured')[0]
    assert not prometheus.alerts('LlmopsSpecAcceptLengthBelowFloor', 'pending')

    fleet.ssh('ns1', 'echo random > %s' % QUALITY_FILE)
    turned = time.time()
    alert, fired = poll(lambda: prometheus.alerts('LlmopsSpecAcceptLengthBelowFloor').get('ns1'),
                        WINDOW + FOR + 30, 'the acceptance alert to fire')
    pending = active_at(alert)
    print('\nns1 acceptance %.2f (floor %.1f); knob turned: below the floor (alert pending) after %.1f s (window %d s), '
          'firing seen %.1f s after pending (for: %d s, scrape and evaluation interval %d s), %.1f s after the knob'
          % (healthy, FLOOR, pending - turned, WINDOW, fired - pending, FOR, INTERVAL, fired - turned))
    # for: plus one scrape interval, plus one evaluation and this test's polling (0.2 s) on a loaded machine
    assert FOR <= fired - pending <= FOR + 2 * INTERVAL + 2
    assert alert['labels']['severity'] == 'warning' and alert['labels']['min_accept_length'] == str(FLOOR)
    assert float(alert['value']) < FLOOR
    assert set(prometheus.alerts('LlmopsSpecAcceptLengthBelowFloor')) == {'ns1'}

    fleet.ssh('ns1', 'rm %s' % QUALITY_FILE)
    restored = time.time()
    resolved = poll(lambda: 'ns1' not in prometheus.alerts('LlmopsSpecAcceptLengthBelowFloor', 'firing'),
                    WINDOW + 30, 'the acceptance alert to resolve')[1]
    print('restored: alert resolved %.1f s after the knob was removed' % (resolved - restored))
    assert (accept_length(prometheus, 'ns1') or 0) >= FLOOR

    run_playbook('playbooks/stop.yml', extra_vars=dict(fleet_vars(), llmops_hosts='ns3'), expect_rc=0)
    alert, down = poll(lambda: prometheus.alerts('LlmopsSGLangServerDown').get('ns3'), FOR + 30, 'ns3 down')
    print('ns3 stopped: LlmopsSGLangServerDown firing seen %.1f s after its first failed scrape (for: %d s)'
          % (down - active_at(alert), FOR))
    assert FOR <= down - active_at(alert) <= FOR + 2 * INTERVAL + 2
    assert alert['labels']['severity'] == 'critical'
    assert set(prometheus.alerts('LlmopsSGLangServerDown')) == {'ns3'}
    assert not prometheus.alerts('LlmopsSGLangNoReadyServer', 'pending')
    assert not prometheus.alerts('LlmopsSGLangNoReadyServer')

    check_prometheus_installed_on_sd1(fleet, run_playbook)


def check_prometheus_installed_on_sd1(fleet, run_playbook):
    extra = dict(fleet_vars(), llmops_monitoring_hosts='sd1', serving_monitoring_group='fleet_ns',
                 serving_monitoring_install_prometheus=True, serving_monitoring_scrape_interval='%ds' % INTERVAL)
    del extra['llmops_hosts']
    unit = 'systemctl is-active prometheus; systemctl is-enabled prometheus; true'
    dry = run_playbook('playbooks/monitoring.yml', extra_vars=extra, check=True, expect_rc=0)
    assert dry.changed('sd1') > 0
    assert fleet.ssh('sd1', unit).stdout.split() == ['inactive', 'disabled']
    try:
        run_playbook('playbooks/monitoring.yml', extra_vars=extra, expect_rc=0)
        assert fleet.ssh('sd1', unit).stdout.split() == ['active', 'enabled']
        url = 'http://%s:9090/api/v1/' % fleet.hosts['sd1']['address']  # sd1's own network namespace

        def scraped():
            targets = [t for t in get_json(url + 'targets')['data']['activeTargets']
                       if t['labels'].get('llmops') == 'sglang_server']
            health = {t['labels']['host']: t['health'] for t in targets}
            return health if health == {'ns1': 'up', 'ns2': 'up', 'ns3': 'down'} else None

        poll(scraped, 60, "sd1's Prometheus scraping ns1-ns3")
        groups = {g['name']: len(g['rules']) for g in get_json(url + 'rules')['data']['groups']}
        assert groups == {'llmops-sglang-records': 4, 'llmops-sglang-alerts': 7}  # 3 floors
        again = run_playbook('playbooks/monitoring.yml', extra_vars=extra, expect_rc=0)
        assert again.changed('sd1') == 0
    finally:  # sd1 is not reset between tests
        fleet.ssh('sd1', 'systemctl disable --now prometheus')


def server_pid(fleet, host):
    data = fleet.ssh(host, 'cat /run/llmops/sglang-main.pid 2>/dev/null || echo null').stdout.strip()
    return json.loads(data)['pid'] if data.startswith('{') else None


def journal(fleet, host):
    """The steps of the host's remediation journal (playbooks/tasks/remediation_record.yml)."""
    out = fleet.ssh(host, 'cat /var/lib/llmops/remediations.jsonl 2>/dev/null || true').stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_speculation_guard_remediates_the_collapsed_host(monitored, rulebook, systemd_router, tmp_path):  # noqa: F811
    """The loop with real parts, behind the real sglang-router (on sd1, in front of ns1-ns3) under streaming load:
    ns1's drafter quality drops; Prometheus fires the acceptance alert and sends it to Debian's Alertmanager,
    configured by the role (group_wait 1 s), which posts it to the collection's webhook source in ansible-rulebook
    running rulebook llmops.serving.speculation_guard; that runs playbooks/remediate.yml for ns1, which drains ns1
    from the router, puts it on the fallback depth 3 (it has no other good configuration) and registers it again;
    the collapse was passing (the knob is turned back once the alert fired), so the fallback passes its floor.
    ns2 and ns3 keep their servers; each step is in ns1's journal; the time from the collapse to each part is
    printed and bounded. A second collapse of ns1 inside the guard's cooldown is not acted on. Then ns2 and ns3
    collapse too: a fleet-wide shift, so nothing is remediated and the guard raises LlmopsSpecFleetWideCollapse
    in Alertmanager. No streaming request fails or is cut short throughout.
    ns1's collapse comes while an operator's rollout holds the fleet's rollout lock (on sd1; the playbook
    tests/integration/playbooks/hold_rollout_lock.yml): the remediation waits, saying who holds the lock, and
    touches nothing (ns1's journal is empty, its server the same) until the operator's run gives the lock back;
    then it runs."""
    fleet, prometheus, run_playbook, guard_port, alertmanager = monitored
    guard = tmp_path / 'guard'
    served = dict(fleet_vars(), **ROUTER)
    inventory, groups, router = systemd_router(NS, served)
    guard_vars = dict(served, llmops_remediate_state_file=str(guard / 'state.json'), llmops_remediate_fallback=3,
                      llmops_remediate_alertmanager_url='http://' + alertmanager.address)
    rulebook_log = rulebook({}, {'all': {'vars': guard_vars, 'children': groups}}, port=guard_port)[1]

    def decisions():
        path = guard / 'decisions.jsonl'
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def collapse(host):
        """Turn the host's knob once its acceptance is measured above the floor; (when, the alert, firing seen)."""
        poll(lambda: (accept_length(prometheus, host) or 0) > FLOOR + 0.5, 90, host + ' acceptance above the floor')
        fleet.ssh(host, 'echo random > %s' % QUALITY_FILE)
        turned = time.time()
        alert, fired = poll(lambda: prometheus.alerts('LlmopsSpecAcceptLengthBelowFloor').get(host),
                            WINDOW + FOR + 30, "%s's acceptance alert to fire" % host)
        return turned, alert, fired

    poll(lambda: targets_up(prometheus), 60, 'three targets up')
    before = {host: server_pid(fleet, host) for host in NS}
    held = tmp_path / 'operator-holds-the-lock'
    held.write_text('')
    with open(str(tmp_path / 'operator.log'), 'w') as operator_log:
        operator = subprocess.Popen(
            [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', inventory,
             os.path.join(ROOT, 'tests', 'integration', 'playbooks', 'hold_rollout_lock.yml'),
             '-e', 'hold_rollout_lock_file=%s' % held],
            stdout=operator_log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
            env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, '.collections'), ANSIBLE_NOCOLOR='1',
                     ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'),
                     PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get('PATH', '')))
    try:
        with Load(router, key=API_KEY, model='tiny-llama', clients=4, pause=0.1) as load:
            poll(lambda: load.sent >= 20, 60, 'streaming requests through the router')
            poll(lambda: 'TASK [Hold it until the test removes the file]' in (tmp_path / 'operator.log').read_text()
                 and '"deploy.yml"' in fleet.ssh('sd1', 'cat /var/lib/llmops/locks/fleet.json || true').stdout,
                 90, "the operator's rollout to hold the lock")
            turned, alert, fired = collapse('ns1')
            fleet.ssh('ns1', 'rm %s' % QUALITY_FILE)
            # The guard decided, and remediate.yml waits for the lock the operator's deploy.yml holds.
            waiting = poll(lambda: re.search(r'\[ns1\] rollout_lock: waiting \d+ of 3600 s for the rollout lock held by '
                                             r'\S+ .*deploy\.yml', rulebook_log.read_text()), 180,
                           'the remediation to wait for the lock')[0].group(0)
            time.sleep(5)
            assert journal(fleet, 'ns1') == [] and server_pid(fleet, 'ns1') == before['ns1']
            held.unlink()
            assert operator.wait(60) == 0, (tmp_path / 'operator.log').read_text()[-3000:]
            released = time.time()
            steps, done = poll(lambda: [e['step'] for e in journal(fleet, 'ns1')] if any(
                e['step'] == 'remediated' for e in journal(fleet, 'ns1')) else None, 240, "ns1's remediation")
            after = {host: server_pid(fleet, host) for host in NS}
            argv = fleet.ssh('ns1', "tr '\\0' ' ' < /proc/%d/cmdline" % after['ns1']).stdout
            print('\nspeculation guard (Prometheus, Alertmanager, ansible-rulebook, remediate.yml, behind the router): '
                  'collapse -> alert pending %.1f s, firing %.1f s; the remediation waited %.1f s for the operator\'s '
                  'rollout lock ("%s"), remediated %.1f s after the lock was free (journal: %s)'
                  % (active_at(alert) - turned, fired - turned, released - fired, waiting, done - released,
                     ', '.join(steps)))
            assert steps == ['started', 'drained', 'fallback', 'remediated'], steps
            assert after['ns1'] not in (None, before['ns1']) and '--speculative-num-draft-tokens 3 ' in argv, argv
            assert {host: after[host] for host in ('ns2', 'ns3')} == {host: before[host] for host in ('ns2', 'ns3')}
            # the lock's wait interval (10 s) + drain, fallback deploy, register
            assert done - released < 180

            # remediate.yml journals "remediated" on the host before it tells the guard the remediation finished:
            # the decisions before the next collapse end with that record.
            poll(lambda: any(d['host'] == 'ns1' and d['reason'] == 'finished' for d in decisions()), 60,
                 "the guard's record that ns1's remediation finished")
            seen = len(decisions())
            collapse('ns1')
            decision = poll(lambda: next((d for d in decisions()[seen:] if d['host'] == 'ns1'), None), 120,
                            "the guard's decision on ns1's second collapse")[0]
            assert decision['reason'] == 'cooldown', decision

            # ns2 and ns3 follow: two of three at once (ns1, acted on within its cooldown, no longer counts),
            # a shift of the whole fleet, not a bad host. "At once" for the guard is one Alertmanager notification;
            # a site's group_wait (30 s by default) gathers alerts that fire seconds apart, this test's is 1 s, so
            # a silence holds the alerts back until both fire, and its end sends them together.
            muted = alertmanager.silence('LlmopsSpecAcceptLengthBelowFloor')
            for host in ('ns2', 'ns3'):
                fleet.ssh(host, 'echo random > %s' % QUALITY_FILE)
            poll(lambda: {'ns2', 'ns3'} <= {a['labels']['host'] for a in alertmanager.alerts('LlmopsSpecAcceptLengthBelowFloor')},
                 WINDOW + FOR + 30, 'the acceptance alerts of ns2 and ns3 in Alertmanager')
            alertmanager.expire(muted)
            fleet_alert = poll(lambda: alertmanager.alerts('LlmopsSpecFleetWideCollapse'), WINDOW + FOR + 120,
                               'the fleet-wide alert in Alertmanager')[0]
            shifted = [d for d in decisions()[seen:] if d['reason'] == 'fleet_wide']
            assert shifted and shifted[0]['fleet_alert'], decisions()[seen:]
            assert not [d for d in decisions()[seen:] if d['reason'] not in ('cooldown', 'fleet_wide')], decisions()[seen:]
            assert fleet_alert[0]['annotations']['hosts'] == 'ns2,ns3', fleet_alert
            assert {host: server_pid(fleet, host) for host in NS} == after
            assert len(journal(fleet, 'ns1')) == len(steps)
            assert not journal(fleet, 'ns2') and not journal(fleet, 'ns3')
    finally:
        if operator.poll() is None:
            os.killpg(operator.pid, signal.SIGKILL)
            operator.wait()
    print('streaming through the router: %d requests, %d failed, %d truncated' % (load.sent, load.failed, load.truncated))
    assert load.sent > 100 and (load.failed, load.truncated) == (0, 0)
