"""The real sglang-router (roles/sglang_router, playbooks/router.yml) on the test fleet.

Servers (SGLang simulator, test doubles) on ns1 and ns2, listening on their fleet address; the
real router 0.3.2 on ns3, installed from the wheelhouse of tests/integration/install_router.sh
(the hosts have no network). Shows: the router is ready and routes to both workers; a rerun
changes nothing and keeps its PID; clients without the API key get 401 and the key is in no
output, log, command line or environment; a drain under streaming load loses no request and
register puts the server back; a rolling deploy.yml (onto copies staged by stage.yml while the servers
served, and a depth change, one host per batch) under load drains and registers each server and loses no
request; a SIGKILLed worker is taken out within the configured health
interval and is back, with traffic, once healthy (both measured and printed); a server whose restart fails
(rollback off) stays out of the router, the rollout stops and the other server serves every request. A release
upgrade behind a router: test_release_upgrade.py (three servers, the router on sd1).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import ansible_env
from router_bed import Load
from test_deploy import API_KEY, deploy_vars

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Each load client waits this long after each request: unpaced, 8 clients against the simulator
# keep both cores of the test machine busy and slow the playbooks under test.
LOAD_PAUSE = 0.1

SERVERS = ['ns1', 'ns2']
ROUTER = 'ns3'
PORT = 30080
ROUTER_PIDFILE = '/run/llmops/sglang-router-main.pid'
STAGED = '/srv/llmops-staged'
ROUTER_LOG = '/var/log/llmops/sglang-router-main.log'
SERVER_PIDFILE = '/run/llmops/sglang-main.pid'
LOCK_FILE = '/var/lib/llmops/locks/fleet.json'
INTERVAL, THRESHOLD = 2, 2
_STATE = {}


# The router's worker management answers this key only (sglang_router_control_plane_api_key); the inference key
# (API_KEY) serves completions only.
CONTROL_PLANE_KEY = 'cp-llmops-itest-3c4d5e6f'
# The servers' admin endpoints (/flush_cache, /pause_generation, weight updates, ...) answer this key only
# (sglang_server_admin_api_key); the canary benchmark flushes with it.
ADMIN_KEY = 'adm-llmops-itest-7a8b9c0d'


def router_vars(**overrides):
    base = deploy_vars(sglang_server_host='0.0.0.0', sglang_router_policy='round_robin',
                       sglang_router_control_plane_api_key=CONTROL_PLANE_KEY, sglang_server_admin_api_key=ADMIN_KEY,
                       sglang_router_port=PORT, sglang_router_wheelhouse=os.path.join(ROOT, '.cache', 'router-wheels'),
                       sglang_router_health_check_interval_secs=INTERVAL,
                       sglang_router_health_failure_threshold=THRESHOLD)
    base.update(overrides)
    return base


def request(url, *, key=API_KEY, body=None, method=None, timeout=10):
    """(status, text) of an HTTP request; HTTP errors are returned, not raised."""
    headers = {'Content-Type': 'application/json'}
    if key:
        headers['Authorization'] = 'Bearer ' + key
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_for(predicate, timeout, step=0.1):
    """Seconds until predicate() is true; AssertionError after timeout."""
    start = time.monotonic()
    while True:
        if predicate():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError('not true within %s s: %s' % (timeout, predicate.__doc__ or predicate))
        time.sleep(step)


def pid_of(fleet, host, pidfile):
    data = fleet.ssh(host, 'cat %s 2>/dev/null || echo null' % pidfile).stdout.strip()
    return json.loads(data)['pid'] if data.startswith('{') else (int(data) if data.isdigit() else None)


def completions_served(fleet, host):
    """Completions the server on host has answered (its /metrics)."""
    code = ('import re, urllib.request; t = urllib.request.urlopen("http://127.0.0.1:30000/metrics").read().decode(); '
            'print(sum(float(v) for v in re.findall(r"^sglang:http_requests_total\\{endpoint=\\"/v1/completions\\"'
            '[^}]*\\} (\\S+)$", t, re.M)))')
    return float(fleet.ssh(host, "/usr/bin/python3 -c '%s'" % code).stdout)


@pytest.fixture
def bed(fleet, run_playbook, request, tmp_path_factory):
    """Servers on ns1/ns2 and the router on ns3, set up once (the tests build on it in order):
    ``(fleet, inventory, router URL, first router.yml result)``."""
    if 'bed' not in _STATE:
        subprocess.run([os.path.join(ROOT, 'tests', 'integration', 'install_router.sh')], check=True, timeout=900)
        request.getfixturevalue('clean_fleet')
        inventory = tmp_path_factory.mktemp('router-inventory')
        with open(fleet.inventory) as f:
            (inventory / 'fleet.yml').write_text(f.read())
        (inventory / 'groups.yml').write_text(
            'sglang_servers:\n  hosts:\n%s\nsglang_routers:\n  hosts:\n    %s:\n'
            % (''.join('    %s:\n' % h for h in SERVERS), ROUTER))
        limit = ','.join(SERVERS)
        run_playbook('tests/sim/prepare_host.yml', inventory=str(inventory), limit=limit, extra_vars=router_vars(),
                     expect_rc=0)
        run_playbook('playbooks/deploy.yml', inventory=str(inventory), limit=limit, extra_vars=router_vars(),
                     expect_rc=0, timeout=600)
        first = run_playbook('playbooks/router.yml', inventory=str(inventory), extra_vars=router_vars(), expect_rc=0,
                             timeout=600)
        _STATE['bed'] = (fleet, str(inventory), 'http://%s:%d' % (fleet.hosts[ROUTER]['address'], PORT), first)
    return _STATE['bed']


def workers(router):
    """url -> is_healthy as the router lists them."""
    status, text = request(router + '/workers', key=CONTROL_PLANE_KEY)
    assert status == 200, text
    return {w['url']: w['is_healthy'] for w in json.loads(text)['workers']}


def url_of(fleet, host):
    return 'http://%s:30000' % fleet.hosts[host]['address']


def test_router_ready_and_routes_to_both_workers(bed):
    fleet, router, first = bed[0], bed[2], bed[3]
    assert first.changed(ROUTER) > 0
    status, text = request(router + '/readiness', key=None)
    assert status == 200 and json.loads(text)['healthy_workers'] == 2, text
    assert workers(router) == {url_of(fleet, h): True for h in SERVERS}
    before = {h: completions_served(fleet, h) for h in SERVERS}
    for _round in range(6):
        status, text = request(router + '/v1/completions', body={'model': 'tiny-llama', 'prompt': 'hi', 'max_tokens': 4})
        assert status == 200 and json.loads(text)['choices'][0]['text'], text
    after = {h: completions_served(fleet, h) for h in SERVERS}
    assert all(after[h] > before[h] for h in SERVERS), (before, after)  # round_robin: both get traffic


def test_rerun_changes_nothing_and_keeps_the_router(bed, run_playbook):
    fleet, inventory = bed[0], bed[1]
    pid = pid_of(fleet, ROUTER, ROUTER_PIDFILE)
    result = run_playbook('playbooks/router.yml', inventory=inventory, extra_vars=router_vars(), expect_rc=0)
    assert result.changed(ROUTER) == 0
    assert pid and pid_of(fleet, ROUTER, ROUTER_PIDFILE) == pid


def test_check_diff_shows_a_router_change_and_changes_nothing(bed, run_playbook):
    fleet, inventory = bed[0], bed[1]
    pid = pid_of(fleet, ROUTER, ROUTER_PIDFILE)
    result = run_playbook('playbooks/router.yml', inventory=inventory, check=True, diff=True, expect_rc=0,
                          extra_vars=router_vars(sglang_router_retry_max_retries=4))
    assert any(line.startswith('+exec ') and '--retry-max-retries 4' in line for line in result.stdout.splitlines())
    assert pid_of(fleet, ROUTER, ROUTER_PIDFILE) == pid
    assert '--retry-max-retries 3' in fleet.ssh(ROUTER, 'cat /etc/llmops/sglang-router-main.sh').stdout


def test_api_key_required_and_never_shown(bed, run_playbook):
    fleet, inventory, router = bed[:3]
    body = {'model': 'tiny-llama', 'prompt': 'hi', 'max_tokens': 4}
    assert request(router + '/v1/completions', key=None, body=body)[0] == 401
    assert request(router + '/v1/completions', key='sk-wrong', body=body)[0] == 401
    assert request(router + '/workers', key=None)[0] == 401
    assert request(router + '/v1/completions', body=body)[0] == 200
    # The inference key every client holds can neither list, add nor remove a worker; the control-plane key can
    # list them, and cannot serve.
    listed = json.loads(request(router + '/workers', key=CONTROL_PLANE_KEY)[1])['workers']
    assert len(listed) == 2
    assert request(router + '/workers', key=API_KEY)[0] == 401
    assert request(router + '/workers', body={'url': 'http://10.255.0.1:30000'}, key=API_KEY)[0] == 401
    assert request(router + '/workers/%s' % listed[0]['id'], method='DELETE', key=API_KEY)[0] == 401
    assert request(router + '/v1/completions', body=body, key=CONTROL_PLANE_KEY)[0] == 401
    assert workers(router) == {url_of(fleet, h): True for h in SERVERS}
    result = run_playbook('playbooks/router.yml', inventory=inventory, extra_vars=router_vars(), verbosity=3,
                          expect_rc=0)
    assert API_KEY not in result.stdout and API_KEY not in result.stderr
    assert CONTROL_PLANE_KEY not in result.stdout and CONTROL_PLANE_KEY not in result.stderr
    status = run_playbook('playbooks/status.yml', inventory=inventory, extra_vars=router_vars(), verbosity=3,
                          limit=ROUTER, expect_rc=0)
    assert API_KEY not in status.stdout and 'healthy=True breaker=closed' in ' '.join(status.stdout.split())
    assert CONTROL_PLANE_KEY not in status.stdout
    pid = pid_of(fleet, ROUTER, ROUTER_PIDFILE)
    for key_file in ('/etc/llmops/sglang-router-main.key', '/etc/llmops/sglang-router-main.control-plane.key'):
        assert fleet.ssh(ROUTER, 'stat -c %%a %s' % key_file).stdout.strip() == '600'
        # The keys may appear only in their 0600 files: not in the log, the script, any command line or environment.
        leaks = fleet.ssh(ROUTER, 'grep -l -F -f %s %s /etc/llmops/*.sh /proc/%d/cmdline /proc/%d/environ '
                                  '/proc/[0-9]*/cmdline 2>/dev/null; true' % (key_file, ROUTER_LOG, pid, pid)).stdout.split()
        assert leaks == [], key_file
    assert fleet.ssh(ROUTER, 'tr "\\0" " " </proc/%d/cmdline' % pid).stdout.startswith('sglang::router')
    # On the servers, with the inference key a client serves but cannot call an admin endpoint; the admin key can
    # (and cannot serve). Neither key is anywhere but in its 0600 file.
    for host in SERVERS:
        server = url_of(fleet, host)
        assert request(server + '/v1/completions', body=body)[0] == 200
        assert request(server + '/flush_cache', body={}, method='POST') == (401, '{"error":"Unauthorized"}')
        assert request(server + '/flush_cache', body={}, method='POST', key=None)[0] == 401
        assert request(server + '/pause_generation', body={}, method='POST')[0] == 401
        assert request(server + '/flush_cache', body={}, method='POST', key=ADMIN_KEY)[0] == 200
        assert request(server + '/v1/completions', body=body, key=ADMIN_KEY)[0] == 401
        server_pid = pid_of(fleet, host, SERVER_PIDFILE)
        for key_file in ('/etc/llmops/sglang-main.key', '/etc/llmops/sglang-main.admin.key'):
            assert fleet.ssh(host, 'stat -c %%a %s' % key_file).stdout.strip() == '600'
            leaks = fleet.ssh(host, 'grep -l -F -f %s /var/log/llmops/sglang-main.log /etc/llmops/*.sh /etc/llmops/*.env '
                                    '/etc/llmops/*.py /proc/%d/environ /proc/[0-9]*/cmdline 2>/dev/null; true'
                              % (key_file, server_pid)).stdout.split()
            assert leaks == [], (host, key_file)
    assert ADMIN_KEY not in result.stdout and ADMIN_KEY not in status.stdout


def test_drain_under_load_loses_nothing_and_register_puts_it_back(bed, run_playbook):
    fleet, inventory, router = bed[:3]
    with Load(router, key=API_KEY, model='tiny-llama', pause=LOAD_PAUSE) as load:
        wait_for(lambda: load.sent >= 20, 60)
        drained = run_playbook('tests/integration/playbooks/router_worker.yml', inventory=inventory, limit='ns1',
                               extra_vars=router_vars(router_worker_steps=['drain']), expect_rc=0)
        assert workers(router) == {url_of(fleet, 'ns2'): True}
        idle = completions_served(fleet, 'ns1')
        sent = load.sent
        wait_for(lambda: load.sent >= sent + 20, 60)
        assert completions_served(fleet, 'ns1') == idle  # nothing new reaches the drained server
        # Two out of one router is more than sglang_router_max_unavailable (1): refused, nothing removed.
        refused = run_playbook('tests/integration/playbooks/router_worker.yml', inventory=inventory, limit='ns2',
                               extra_vars=router_vars(router_worker_steps=['drain']))
        assert refused.rc != 0 and 'sglang_router_max_unavailable is 1' in refused.stdout
        assert workers(router) == {url_of(fleet, 'ns2'): True}
        registered = run_playbook('tests/integration/playbooks/router_worker.yml', inventory=inventory, limit='ns1',
                                  extra_vars=router_vars(router_worker_steps=['register']), expect_rc=0)
        assert workers(router) == {url_of(fleet, h): True for h in SERVERS}
        back = completions_served(fleet, 'ns1')
        wait_for(lambda: completions_served(fleet, 'ns1') > back, 30)
    print('\ndrain under load: %d requests, %d failed, %d truncated' % (load.sent, load.failed, load.truncated))
    assert drained.changed('ns1') > 0 and registered.changed('ns1') > 0
    assert load.failed == 0 and load.truncated == 0
    again = run_playbook('tests/integration/playbooks/router_worker.yml', inventory=inventory, limit='ns1',
                         extra_vars=router_vars(router_worker_steps=['register']), expect_rc=0)
    assert again.changed('ns1') == 0


def test_rolling_deploy_under_load_drains_each_server(bed, run_playbook):
    """stage.yml copies the target and the drafter to each server's local disk while they serve; then
    deploy.yml, one host per batch, restarts both servers onto the staged copies (and a depth change)
    while 8 clients stream through the router: each server is drained before its stop and registered
    after its health check, so no request fails and no stream is cut. A second deploy.yml started while
    the first holds the fleet's rollout lock is refused before anything stops, naming the holder."""
    fleet, inventory, router = bed[:3]
    before = {h: pid_of(fleet, h, SERVER_PIDFILE) for h in SERVERS}
    staging = run_playbook('playbooks/stage.yml', inventory=inventory, limit=','.join(SERVERS), expect_rc=0, extra_vars={
        'model_stage_models': [{'name': name, 'source': '/srv/llmops/checkpoints/' + name} for name in ('target', 'drafter')],
        'model_stage_dest_root': STAGED, 'model_stage_reserve_bytes': 0})
    staged = dict(re.findall(r'(target|drafter) -> (%s/\S+):' % STAGED, staging.stdout))
    assert sorted(staged) == ['drafter', 'target'], staging.stdout[-2000:]
    extra = router_vars(sglang_server_speculative_depth=10, llmops_serial=1, sglang_server_model_path=staged['target'],
                        sglang_server_speculative_draft_model_path=staged['drafter'])
    outcome = {}
    with Load(router, key=API_KEY, model='tiny-llama', pause=LOAD_PAUSE) as load:
        wait_for(lambda: load.sent >= 20, 60)
        started = time.monotonic()
        rollout = threading.Thread(target=lambda: outcome.update(result=run_playbook(
            'playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS), timeout=900, extra_vars=extra)))
        rollout.start()
        # A second operator's deploy while the first holds the fleet's lock (on the router's host): refused
        # before anything stops, naming the holder.
        wait_for(lambda: fleet.ssh(ROUTER, 'test -s %s' % LOCK_FILE, check=False).returncode == 0, 120)
        second = run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS), timeout=300,
                              extra_vars=extra)
        rollout.join()
        took = time.monotonic() - started
    result = outcome['result']
    assert result.rc == 0, result.stdout[-4000:]
    holder = 'another rollout holds the lock: %s@%s (ansible-playbook PID ' % ('root', socket.gethostname())
    refusal = ' '.join(second.stdout.split())
    assert second.rc != 0 and holder in refusal and 'deploy.yml) since ' in refusal, second.stdout[-3000:]
    assert all(second.recap.get(h, {}).get('changed', 0) == 0 for h in SERVERS), second.recap
    after = {h: pid_of(fleet, h, SERVER_PIDFILE) for h in SERVERS}
    for host in SERVERS:
        argv = fleet.ssh(host, 'cat /proc/$(pgrep -f -o "[l]lmops_launch.py")/cmdline | tr "\\0" " "').stdout
        assert '--model-path %s' % staged['target'] in argv and staged['drafter'] in argv, argv
    # The drain gate reads the live load (/get_load on the simulated 0.5.15.post1), not the gauges, which the
    # simulator keeps stale for 30 s as SGLang does: each server is idle within seconds of leaving the router.
    drains = [float(s) for s in re.findall(r'idle ([0-9.]+) s after it left the router \(get_load',
                                           ' '.join(result.stdout.split()))]
    print('\nrolling deploy behind the router (2 servers, serial 1): %.0f s, %d requests, %d failed, %d truncated; '
          'drain waits %s s' % (took, load.sent, load.failed, load.truncated, drains))
    assert len(drains) == 2 and max(drains) < 10, drains
    assert all(after[h] != before[h] for h in SERVERS)
    assert result.stdout.count('Drain the server - take it out of the routers in front of it') == 2
    assert load.failed == 0 and load.truncated == 0
    assert workers(router) == {url_of(fleet, h): True for h in SERVERS}


def on(host, there, elsewhere):
    """A value that is ``there`` on host and ``elsewhere`` on the other hosts (templated per host)."""
    return "{{ %r if inventory_hostname == %r else %r }}" % (there, host, elsewhere)


# (what the operator got wrong, playbook, extra vars over router_vars(), --limit, what the refusal must say)
SLIPS = [
    ('serial 2 with max_unavailable 1', 'deploy', {'llmops_serial': 2, 'sglang_server_speculative_depth': 12}, None,
     'batch 1 would take 2 servers (ns1, ns2) out of router ns3 at once, but sglang_router_max_unavailable is 1'),
    ('a batch of the whole fleet', 'deploy', {'llmops_serial': '100%', 'sglang_server_speculative_depth': 12}, None,
     'batch 1 would take 2 servers (ns1, ns2) out of router ns3 at once'),
    ('the drafter missing on the last host', 'deploy',
     {'sglang_server_speculative_depth': 12, 'llmops_serial': 1,
      'sglang_server_speculative_draft_model_path': on('ns2', '/srv/llmops/nowhere', '/srv/llmops/checkpoints/drafter')},
     None, 'sglang_server_speculative_draft_model_path is /srv/llmops/nowhere, which does not exist on ns2'),
    ('the model missing on one host', 'deploy',
     {'llmops_serial': 1, 'sglang_server_model_path': on('ns1', '/srv/llmops/gone', '/srv/llmops/checkpoints/target')},
     None, 'sglang_server_model_path is /srv/llmops/gone, which does not exist on ns1'),
    ('a router key other than the servers\'', 'deploy', {'llmops_serial': 1, 'sglang_router_api_key': 'sk-another-key'},
     None, 'the API key of router ns3 (sglang_router_api_key) differs from the one server ns1 requires'),
    ('the key only in the model group\'s vars', 'deploy',
     {'llmops_serial': 1, 'sglang_server_api_key': "{{ %r if inventory_hostname in groups.sglang_servers else '' }}" % API_KEY},
     None, 'router ns3 has no API key (sglang_router_api_key is empty there), but server ns1 requires one'),
    ('servers beyond loopback without a key', 'deploy', {'llmops_serial': 1, 'sglang_server_api_key': ''}, None,
     'server ns1 listens on 0.0.0.0 (sglang_server_host) without an API key (sglang_server_api_key is empty there)'),
    ('a typo, with llmops_strict', 'deploy',
     {'llmops_serial': 1, 'llmops_strict': True, 'sglang_server_draft_model_path': '/srv/llmops/checkpoints/drafter'},
     None, 'sglang_server_draft_model_path (on ns1, ns2, ns3) is not a variable of llmops.serving: did you mean'),
    ('TP larger than the host\'s GPUs', 'deploy', {'llmops_serial': 1, 'sglang_server_tp_size': 16}, None,
     'sglang_server_tp_size 16 needs GPUs 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 on ns1'),
    ('TP that the model\'s heads do not divide', 'deploy', {'llmops_serial': 1, 'sglang_server_tp_size': 3}, None,
     'ns1: sglang_server_tp_size 3 does not divide the 16 attention heads of the model (num_attention_heads in '
     '/srv/llmops/checkpoints/target/config.json)'),
    ('a multi-node group host left out of --limit', 'deploy',
     {'llmops_serial': 1, 'sglang_server_group_hosts': ['ns1', 'ns2'], 'sglang_server_dist_init_port': 29555}, 'ns1',
     'ns1: its multi-node group (sglang_server_group_hosts: ns1, ns2) starts and stops as one, but ns2 is not in this run'),
]


def test_operator_slips_are_refused_before_anything_stops(bed, run_playbook, fleet):
    """Each slip of the fleet plan issue, run behind the router under streaming load: every one is
    refused with a message naming the host and the variable, no server restarts (PIDs unchanged), both
    stay in the router, and no request fails or is cut. Then an inventory llmops_serial, router.yml
    without a router group, and a typo without llmops_strict (a warning with the closest name)."""
    inventory, router = bed[1], bed[2]
    # The servers at depth 10 on the shared checkpoints (the rolling deploy above left them on staged copies):
    # the runs that change nothing use these settings.
    run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS), expect_rc=0, timeout=600,
                 extra_vars=router_vars(sglang_server_speculative_depth=10, llmops_serial=1))
    before = {h: pid_of(fleet, h, SERVER_PIDFILE) for h in SERVERS}
    refused = {}
    with Load(router, key=API_KEY, model='tiny-llama', pause=LOAD_PAUSE) as load:
        wait_for(lambda: load.sent >= 20, 60)
        for slip, playbook, overrides, limit, expected in SLIPS:
            result = run_playbook('playbooks/%s.yml' % playbook, inventory=inventory, limit=limit or ','.join(SERVERS),
                                  extra_vars=router_vars(**overrides), timeout=300)
            refused[slip] = (result.rc, expected in ' '.join(result.stdout.split()), result.stdout[-3000:])
            assert {h: pid_of(fleet, h, SERVER_PIDFILE) for h in SERVERS} == before, slip
            assert workers(router) == {url_of(fleet, h): True for h in SERVERS}, slip
        # An inventory llmops_serial: Ansible would batch by the default; refused in the first batch's pre_tasks.
        vars_dir = os.path.join(inventory, 'group_vars')
        os.makedirs(vars_dir, exist_ok=True)
        with open(os.path.join(vars_dir, 'all.yml'), 'w') as f:
            f.write('llmops_serial: 2\n')
        try:
            extra = router_vars(sglang_server_speculative_depth=10)
            del extra['llmops_serial']
            result = run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS), extra_vars=extra)
        finally:
            os.unlink(os.path.join(vars_dir, 'all.yml'))
        refused['an inventory llmops_serial'] = (result.rc, '-e llmops_serial=2' in result.stdout, result.stdout[-3000:])
        assert {h: pid_of(fleet, h, SERVER_PIDFILE) for h in SERVERS} == before
        sent = load.sent
        wait_for(lambda: load.sent >= sent + 10, 60)
    print('\noperator slips behind the router: %d refused; %d requests, %d failed, %d truncated'
          % (len(refused), load.sent, load.failed, load.truncated))
    for slip, (rc, named, tail) in refused.items():
        assert rc != 0 and named, '%s: rc %d, message not found in:\n%s' % (slip, rc, tail)
    assert load.failed == 0 and load.truncated == 0
    # router.yml on an inventory without routers: refused with the fix, not a green run that does nothing.
    no_router = run_playbook('playbooks/router.yml', inventory=fleet.inventory, extra_vars=router_vars())
    assert no_router.rc != 0 and 'the inventory has no host in group sglang_routers' in ' '.join(no_router.stdout.split())
    # A typo without llmops_strict: a warning with the closest declared name; nothing changes.
    typo = run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS), expect_rc=0,
                        extra_vars=router_vars(llmops_serial=1, sglang_server_speculative_depth=10,
                                               sglang_server_speculative_dept=12))
    assert 'sglang_server_speculative_dept (on ns1, ns2, ns3) is not a variable of llmops.serving: did you mean ' \
           'sglang_server_speculative_depth?' in ' '.join(typo.stdout.split() + typo.stderr.split())
    assert {h: pid_of(fleet, h, SERVER_PIDFILE) for h in SERVERS} == before


def test_killed_worker_out_within_interval_and_back_when_healthy(bed, run_playbook):
    fleet, inventory, router = bed[:3]
    url = url_of(fleet, 'ns2')
    with Load(router, key=API_KEY, model='tiny-llama', pause=LOAD_PAUSE) as load:
        wait_for(lambda: load.sent >= 20, 60)
        pid = pid_of(fleet, 'ns2', SERVER_PIDFILE)
        fleet.ssh('ns2', 'kill -KILL -- -%d' % pid)  # the server's whole session
        out_s = wait_for(lambda: not workers(router)[url], 30)
        counts = (load.sent, load.failed, load.truncated)
    run_playbook('playbooks/deploy.yml', inventory=inventory, limit='ns2', extra_vars=router_vars(), expect_rc=0)
    back_s = wait_for(lambda: workers(router)[url], 30)  # the server answers /health since deploy returned
    run_playbook('tests/integration/playbooks/router_worker.yml', inventory=inventory, limit='ns2',
                 extra_vars=router_vars(router_worker_steps=['register']), expect_rc=0)
    served = completions_served(fleet, 'ns2')
    for _round in range(4):
        assert request(router + '/v1/completions', body={'model': 'tiny-llama', 'prompt': 'x', 'max_tokens': 2})[0] == 200
    print('\nSIGKILLed worker: out of the router after %.1f s (interval %d s, failure threshold %d); '
          'under load %d requests, %d failed, %d truncated; healthy in the router %.1f s after its '
          'deploy returned' % (out_s, INTERVAL, THRESHOLD, counts[0], counts[1], counts[2], back_s))
    assert out_s <= INTERVAL * (THRESHOLD + 1) + 2
    assert counts[1] == 0  # failed attempts were retried on ns1
    assert completions_served(fleet, 'ns2') > served  # round_robin sends it traffic again


def test_a_host_whose_restart_fails_stays_out_and_the_rollout_stops(bed, run_playbook):
    """deploy.yml, one host per batch, without rollback: ns1's new server crashes while it loads.
    ns1 was drained before its stop and is never registered again: it stays out of the router,
    the rollout stops before ns2, and ns2 serves every request meanwhile. A good deploy of ns1
    then puts it back."""
    fleet, inventory, router = bed[:3]
    before = pid_of(fleet, 'ns2', SERVER_PIDFILE)
    env = dict(router_vars()['sglang_server_env'], SGLANG_SIM_FAULT='crash:load')
    with Load(router, key=API_KEY, model='tiny-llama', pause=LOAD_PAUSE) as load:
        wait_for(lambda: load.sent >= 20, 60)
        result = run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS), timeout=600,
                              extra_vars=router_vars(sglang_server_env=env, llmops_serial=1, llmops_rollback=False))
        assert workers(router) == {url_of(fleet, 'ns2'): True}
        sent = load.sent
        wait_for(lambda: load.sent >= sent + 20, 60)  # served by ns2 alone
    print('\nfailed restart behind the router: %d requests, %d failed, %d truncated'
          % (load.sent, load.failed, load.truncated))
    assert result.rc != 0 and result.recap['ns1']['failed'] == 1, result.stdout[-4000:]
    assert 'the host is left as it failed (deploy_rollback is false)' in ' '.join(result.stdout.split())
    assert result.recap.get('ns2', {}).get('changed', 0) == 0 and pid_of(fleet, 'ns2', SERVER_PIDFILE) == before
    assert load.failed == 0 and load.truncated == 0
    assert workers(router) == {url_of(fleet, 'ns2'): True}
    run_playbook('playbooks/deploy.yml', inventory=inventory, limit='ns1', extra_vars=router_vars(), expect_rc=0)
    assert workers(router) == {url_of(fleet, h): True for h in SERVERS}


CALLBACKS = os.path.join(ROOT, 'tests', 'integration', 'callback_plugins')
# Where a rolling update is SIGKILLed (tests/integration/callback_plugins/kill_at.py): the host, the point, and
# the task there. ns2 is the second host of the batch order: killed there, ns1 has changed already.
KILL_POINTS = [
    ('ns2', 'after its drain', 'ok:router_worker:ns2:state=absent'),
    ('ns2', 'after its stop', 'ok:server_process|sglang_server:ns2:state=stopped'),
    ('ns1', 'after its new start, before its register', 'ok:wait_for_llm_health:ns1'),
    ('ns1', 'during its last-good record', 'start:last_good_config:ns1:state=recorded'),
]


def draft_tokens(fleet, host):
    argv = fleet.ssh(host, 'cat /proc/$(pgrep -f -o "[l]lmops_launch.py")/cmdline | tr "\\0" " "').stdout
    found = re.search(r'--speculative-num-draft-tokens (\d+)', argv)
    return int(found.group(1)) if found else None


def test_a_rollout_killed_anywhere_is_finished_by_its_rerun(bed, run_playbook, fleet):
    """A rolling depth change (serial 1) under streaming load, its whole ansible-playbook process group SIGKILLed at
    each of four points (a laptop that dies, kill -9): after a server's drain, after its stop, after its new start
    but before it is back in the router, during its last-good record. The same command run again exits 0 (it takes
    over the lock of the dead run), every server is in the router, healthy, on the new depth, and no request
    failed or was cut. Where the killed run left a server that changed nothing out of the router, the rerun puts it
    back and its summary says so."""
    inventory, router = bed[1], bed[2]
    env = {'LLMOPS_KILL_AT': '', 'ANSIBLE_CALLBACK_PLUGINS': CALLBACKS, 'ANSIBLE_CALLBACKS_ENABLED': 'kill_at'}
    seen = []
    with Load(router, key=API_KEY, model='tiny-llama', pause=LOAD_PAUSE) as load:
        wait_for(lambda: load.sent >= 20, 60)
        for index, (host, point, spec) in enumerate(KILL_POINTS):
            depth = 6 + index  # a change on every server at each point
            extra = router_vars(sglang_server_speculative_depth=depth, llmops_serial=1)
            killed = run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS),
                                  extra_vars=extra, env=dict(env, LLMOPS_KILL_AT=spec), timeout=600)
            assert killed.rc == -9, '%s: not killed there (rc %d)\n%s' % (point, killed.rc, killed.stdout[-3000:])
            assert 'Show state, ready time' not in killed.stdout, point
            rerun = run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS),
                                 extra_vars=extra, expect_rc=0, timeout=600)
            text = ' '.join(rerun.stdout.split() + rerun.stderr.split())
            assert 'took over the rollout lock of' in text and 'that ansible-playbook process is gone' in text, point
            assert workers(router) == {url_of(fleet, h): True for h in SERVERS}, point
            assert {h: draft_tokens(fleet, h) for h in SERVERS} == {h: depth for h in SERVERS}, point
            seen.append((point, 're-registered: was out of router %s' % ROUTER in text))
        sent = load.sent
        wait_for(lambda: load.sent >= sent + 10, 60)
    print('\nrolling update SIGKILLed at 4 points, each finished by its rerun: %d requests, %d failed, %d truncated; '
          're-registered by the rerun: %s' % (load.sent, load.failed, load.truncated, seen))
    assert load.failed == 0 and load.truncated == 0
    # Killed after its start and before its register, ns1 changed nothing in the rerun: it was put back.
    assert dict(seen)['after its new start, before its register']


def host_link(fleet, host):
    """The host-side end of a namespace host's veth (the peer of its eth0)."""
    shown = subprocess.run(['ip', '-n', fleet.hosts[host]['netns'], '-o', 'link', 'show', 'eth0'],
                           capture_output=True, text=True, check=True).stdout
    peer = re.search(r'eth0@if(\d+)', shown).group(1)
    links = subprocess.run(['ip', '-o', 'link', 'show'], capture_output=True, text=True, check=True).stdout
    return re.search(r'^%s: ([^:@]+)' % peer, links, re.M).group(1)


def test_a_host_unreachable_after_its_drain_stops_the_rollout_and_the_rerun_finishes_it(bed, run_playbook, fleet):
    """A rolling depth change (serial 1) under streaming load; right after ns1's drain (its idle wait) its link is
    taken down (tests/integration/callback_plugins/kill_at.py, LLMOPS_LINK_DOWN), so its SSH stops answering. The
    run fails ns1 naming it and the phase it was in (its stop), shows the summary, stops before ns2, and ns1 stays
    out of the router while ns2 serves every request. With the link back up, the same command finishes the rollout:
    both servers in the router, healthy, on the new depth, and no request failed or was cut.
    SSH notices a silent link through ServerAliveInterval (Ansible's default SSH settings have none: without it an
    SSH command on a link gone silent waits for TCP to give up)."""
    inventory, router = bed[1], bed[2]
    link = host_link(fleet, 'ns1')
    depth = 5 if draft_tokens(fleet, 'ns1') != 5 else 4
    # A ControlPath of this test's own: the masters the other runs left have no ServerAliveInterval.
    options = [o.replace('/%h-%r', '/alive-%h-%r') for o in fleet.ssh_options()]
    ssh_args = ' '.join(shlex.quote(o) for o in options + ['-o', 'ServerAliveInterval=1', '-o', 'ServerAliveCountMax=3'])
    extra = router_vars(sglang_server_speculative_depth=depth, llmops_serial=1, ansible_ssh_args=ssh_args)
    env = {'ANSIBLE_CALLBACK_PLUGINS': CALLBACKS, 'ANSIBLE_CALLBACKS_ENABLED': 'kill_at',
           'LLMOPS_KILL_AT': 'ok:router_worker:ns1:state=idle', 'LLMOPS_LINK_DOWN': link}
    ns2_pid = pid_of(fleet, 'ns2', SERVER_PIDFILE)
    try:
        with Load(router, key=API_KEY, model='tiny-llama', pause=LOAD_PAUSE) as load:
            wait_for(lambda: load.sent >= 20, 60)
            started = time.monotonic()
            stopped = run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS),
                                   extra_vars=extra, env=env, timeout=600)
            stopped_s = time.monotonic() - started
            assert workers(router) == {url_of(fleet, 'ns2'): True}
            sent = load.sent
            wait_for(lambda: load.sent >= sent + 20, 60)  # served by ns2 alone
    finally:
        subprocess.run(['ip', 'link', 'set', link, 'up'], check=True)
    text = ' '.join(stopped.stdout.split())
    assert stopped.rc == 2 and stopped.recap['ns1']['failed'] == 1, stopped.stdout[-4000:]
    assert ('ns1 stopped answering over SSH during its stop phase, after its drain: it stays out of the routers and '
            'the rollout stops here; once it answers again, run the same command again to finish it') in text, text[-4000:]
    assert 'Show state, ready time' in text  # the summary, with ns1's row
    assert stopped.recap['ns2'].get('changed', 0) == 0 and pid_of(fleet, 'ns2', SERVER_PIDFILE) == ns2_pid
    rerun = run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS),
                         extra_vars=router_vars(sglang_server_speculative_depth=depth, llmops_serial=1), expect_rc=0,
                         timeout=600)
    assert workers(router) == {url_of(fleet, h): True for h in SERVERS}
    assert {h: draft_tokens(fleet, h) for h in SERVERS} == {h: depth for h in SERVERS}
    summary = stopped.stdout.rpartition('Show state, ready time')[2].split('\n\n')[0]
    print('\nns1 unreachable after its drain: the run stopped after %.0f s naming it; the rerun finished the rollout '
          '(%d requests, %d failed, %d truncated); the stopped run\'s summary:%s'
          % (stopped_s, load.sent, load.failed, load.truncated, summary))
    assert load.failed == 0 and load.truncated == 0
    assert 'took over the rollout lock of' in ' '.join(rerun.stdout.split() + rerun.stderr.split())


# Where a rolling update gets an operator's Ctrl-C (SIGINT to ansible-playbook's process group, sent by a process
# outside it): the host, the point, and the task there.
INTERRUPT_POINTS = [
    ('ns1', 'during its health wait after its new start', 'start:wait_for_llm_health:ns1'),
    ('ns2', 'after its drain', 'ok:router_worker:ns2:state=idle'),
]


def interrupted_deploy(inventory, extra_vars, env, timeout=600):
    """``(rc, output)`` of deploy.yml on the servers, run to its end. Where it is still running after ``timeout``
    seconds, AssertionError with the Python stacks of its controller (faulthandler, SIGABRT), its processes and its
    output (its process group is then SIGKILLed)."""
    with tempfile.NamedTemporaryFile('w', suffix='.json', prefix='llmops-extra-vars-') as handle:
        json.dump(extra_vars, handle)
        handle.flush()
        argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', inventory,
                os.path.join(ROOT, 'playbooks', 'deploy.yml'), '--limit', ','.join(SERVERS), '-e', '@' + handle.name]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                                env=ansible_env(dict(env, PYTHONFAULTHANDLER='1')), start_new_session=True)
        try:
            output = proc.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:
            processes = subprocess.run(['ps', '-o', 'pid,ppid,stat,wchan:24,etime,args', '-s', str(proc.pid)],
                                       capture_output=True, text=True, check=False).stdout
            os.kill(proc.pid, signal.SIGABRT)
            time.sleep(2)
            os.killpg(proc.pid, signal.SIGKILL)
            output = proc.communicate()[0]
            raise AssertionError('still running after %d s:\n%s\n%s' % (timeout, processes, output[-12000:]))
    return proc.returncode, output


def test_a_rollout_interrupted_by_ctrl_c_is_finished_by_its_rerun(bed, run_playbook, fleet):
    """A rolling depth change (serial 1) under streaming load, interrupted as an operator's Ctrl-C would (SIGINT to
    the whole ansible-playbook process group) during ns1's health wait after its new start, and after ns2's drain.
    The interrupted run ends (exit 99, "User interrupted execution"); the same command run again exits 0, every
    server is in the router, healthy, on the new depth, and no request failed or was cut."""
    inventory, router = bed[1], bed[2]
    # 2 s after the point: a SIGINT that reaches the controller while it handles that point's result can be lost
    # (ansible-core 2.19 raises KeyboardInterrupt in whatever its main thread runs then).
    env = {'ANSIBLE_CALLBACK_PLUGINS': CALLBACKS, 'ANSIBLE_CALLBACKS_ENABLED': 'kill_at', 'LLMOPS_KILL_SIGNAL': 'INT',
           'LLMOPS_KILL_DELAY': '2'}
    seen = []
    start = draft_tokens(fleet, 'ns1')
    with Load(router, key=API_KEY, model='tiny-llama', pause=LOAD_PAUSE) as load:
        wait_for(lambda: load.sent >= 20, 60)
        for index, (host, point, spec) in enumerate(INTERRUPT_POINTS):
            depth = 3 + index if start not in (3, 4) else 6 + index  # a change on every server at each point
            extra = router_vars(sglang_server_speculative_depth=depth, llmops_serial=1)
            began = time.monotonic()
            rc, output = interrupted_deploy(inventory, extra, dict(env, LLMOPS_KILL_AT=spec))
            ended = time.monotonic() - began
            assert rc == 99 and 'User interrupted execution' in output, '%s: not interrupted there (rc %d)\n%s' % (
                point, rc, output[-3000:])
            rerun = run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS),
                                 extra_vars=extra, expect_rc=0, timeout=600)
            assert workers(router) == {url_of(fleet, h): True for h in SERVERS}, point
            assert {h: draft_tokens(fleet, h) for h in SERVERS} == {h: depth for h in SERVERS}, point
            text = ' '.join(rerun.stdout.split())
            seen.append('%s: rc %d after %.0f s, rerun re-registered: %s'
                        % (point, rc, ended, 're-registered: was out of router %s' % ROUTER in text))
        sent = load.sent
        wait_for(lambda: load.sent >= sent + 10, 60)
    print('\nrolling update interrupted (SIGINT) at 2 points, each finished by its rerun: %d requests, %d failed, '
          '%d truncated; %s' % (load.sent, load.failed, load.truncated, '; '.join(seen)))
    assert load.failed == 0 and load.truncated == 0
