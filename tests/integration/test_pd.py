"""Prefill/decode disaggregation on the test fleet: the real sglang-router 0.3.2 in PD mode in front of simulated
(SGLang simulator, a TEST DOUBLE: tests/sim/sglang/_pd.py) prefill and decode servers.

Two prefills and two decodes, a prefill and a decode on each of ns1 and ns2 (two inventory hosts per address, with
their own name, port and GPU), the router on ns3. One bed for every test, set up once (the tests build on it in
order): a deploy (the router pairs them: a request through it completes on a decode; /workers lists each with its
type and the prefills' bootstrap port; status.yml shows the pairs), a rerun that changes nothing, and a rolling change
of both kinds (batches of one prefill and one decode) under streaming load with no request failed or cut, each server
drained on its PD queues before it stops. Then the PD slips, each refused by the deploy's preflight before anything
stops, as preflight-only runs against that fleet (check mode, --tags plan: the plans and the fleet checks; no server
restarts even if one slipped through): a prefill and a decode that differ in model, drafter, speculative settings,
page size, KV dtype and release (one run, a sentence per field), a router in PD mode without a decode or without a
prefill, and a PD server as a canary host; and a depth sweep of a PD server, refused as well.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time

import pytest

from router_bed import Load
from test_deploy import API_KEY
from test_router import CONTROL_PLANE_KEY, ROOT, pid_of, request, router_vars, wait_for

ROUTER = 'ns3'
PORT = 30080
ROUTER_PIDFILE = '/run/llmops/sglang-router-main.pid'
# 4 paced clients: enough to keep requests in flight on every server, light enough for a 2-core machine.
LOAD_CLIENTS, LOAD_PAUSE = 4, 0.25
# inventory host -> (fleet host whose address it shares, mode, server port, simulated GPU), in the order of the
# batches (llmops_serial 2): a prefill and a decode of different addresses in each (the test bed runs the servers as
# root; two servers of one address in one batch creating their user is a unit test of the sglang_server action).
SERVERS = {'p1': ('ns1', 'prefill', 30000, 0), 'd2': ('ns2', 'decode', 30001, 1),
           'p2': ('ns2', 'prefill', 30000, 0), 'd1': ('ns1', 'decode', 30001, 1)}
PREFILLS, DECODES = ['p1', 'p2'], ['d1', 'd2']
_STATE = {}


def pd_vars(**overrides):
    """The router's and servers' variables: one server and GPU each, batches of a prefill and a decode. The simulated
    scheduler refreshes its idle gauges after 3 s, not SGLang's 30: a prefill's drain waits for that refresh."""
    base = router_vars(sglang_server_tp_size=1, sglang_router_max_unavailable=2, llmops_serial=2)
    base['sglang_server_env'] = dict(base['sglang_server_env'], SGLANG_SIM_IDLE_REFRESH_S='3')
    base.update(overrides)
    return base


def url_of(fleet, host):
    home, dummy, port, dummy = SERVERS[host]
    return 'http://%s:%d' % (fleet.hosts[home]['address'], port)


def server_pid(fleet, host):
    return pid_of(fleet, SERVERS[host][0], '/run/llmops/sglang-%s.pid' % SERVERS[host][1])


def listed(router):
    """url -> (worker_type, bootstrap_port, is_healthy) as the router lists them."""
    status, text = request(router + '/workers', key=CONTROL_PLANE_KEY)
    assert status == 200, text
    return dict((w['url'], (w.get('worker_type'), w.get('bootstrap_port'), w['is_healthy']))
                for w in json.loads(text)['workers'])


def expected(fleet):
    return dict((url_of(fleet, h), ('prefill', 8998, True) if h in PREFILLS else ('decode', None, True))
                for h in SERVERS)


@pytest.fixture
def bed(fleet, run_playbook, request, tmp_path_factory):
    """``(fleet, inventory, router URL, first deploy, first router.yml)``, set up once."""
    if 'bed' not in _STATE:
        subprocess.run([os.path.join(ROOT, 'tests', 'integration', 'install_router.sh')], check=True, timeout=900)
        request.getfixturevalue('clean_fleet')
        inventory = tmp_path_factory.mktemp('pd-inventory')
        with open(fleet.inventory) as f:
            (inventory / 'fleet.yml').write_text(f.read())
        hosts = ''.join(
            '        %s:\n          ansible_host: %s\n          sglang_server_name: %s\n          sglang_server_port: %d\n'
            '          sglang_server_gpus: [%d]\n          sglang_server_disaggregation_mode: %s\n'
            % (name, fleet.hosts[home]['address'], mode, port, gpu, mode)
            for name, (home, mode, port, gpu) in SERVERS.items())
        (inventory / 'groups.yml').write_text(
            'fleet:\n  children:\n    fleet_pd:\n      hosts:\n%s'
            'sglang_servers:\n  hosts:\n%s\nsglang_routers:\n  hosts:\n    %s:\n'
            % (hosts, ''.join('    %s:\n' % h for h in SERVERS), ROUTER))
        run_playbook('tests/sim/prepare_host.yml', inventory=str(inventory), limit='p1,p2', extra_vars=pd_vars(),
                     expect_rc=0)
        deploy = run_playbook('playbooks/deploy.yml', inventory=str(inventory), limit=','.join(SERVERS),
                              extra_vars=pd_vars(), expect_rc=0, timeout=600)
        first = run_playbook('playbooks/router.yml', inventory=str(inventory), extra_vars=pd_vars(), expect_rc=0,
                             timeout=600)
        _STATE['bed'] = (fleet, str(inventory), 'http://%s:%d' % (fleet.hosts[ROUTER]['address'], PORT), deploy, first)
    return _STATE['bed']


def test_deploy_pairs_prefills_and_decodes_behind_the_router(bed, run_playbook):
    fleet, inventory, router, deploy, first = bed
    assert first.changed(ROUTER) > 0
    script = fleet.ssh(ROUTER, 'cat /etc/llmops/sglang-router-main.sh').stdout
    assert '--pd-disaggregation --prefill %s 8998 --prefill %s 8998 --decode %s --decode %s' % (
        url_of(fleet, 'p1'), url_of(fleet, 'p2'), url_of(fleet, 'd2'), url_of(fleet, 'd1')) in script, script
    for host, (home, mode, port, dummy) in SERVERS.items():
        argv = fleet.ssh(home, 'tr "\\0" " " </proc/%d/cmdline' % server_pid(fleet, host)).stdout
        assert '--disaggregation-mode %s' % mode in argv, (host, argv[-2000:])
    status, text = request(router + '/readiness', key=None)
    assert status == 200, text
    assert listed(router) == expected(fleet)
    # The router sends each request to a prefill and a decode; the decode's answer (every token) is the client's.
    for _round in range(4):
        status, text = request(router + '/v1/completions', body={'model': 'tiny-llama', 'prompt': 'hi', 'max_tokens': 8})
        assert status == 200 and json.loads(text)['usage']['completion_tokens'] == 8, text
    for home in ('ns1', 'ns2'):
        # The prefill listens on its bootstrap port, where the decodes' heartbeat reads /health.
        assert fleet.ssh(home, "/usr/bin/python3 -c 'import urllib.request; print(urllib.request.urlopen("
                               "\"http://%s:8998/health\").read().decode())'" % fleet.hosts[home]['address']
                         ).stdout.strip() == 'OK'
    shown = run_playbook('playbooks/status.yml', inventory=inventory, extra_vars=pd_vars(), limit=ROUTER, expect_rc=0)
    text = ' '.join(shown.stdout.split())
    assert 'worker %s prefill bootstrap_port=8998 healthy=True' % url_of(fleet, 'p1') in text, text[-3000:]
    assert 'worker %s decode healthy=True' % url_of(fleet, 'd2') in text
    assert re.search(r'ns3: pairs prefill=\[[^]]*%s[^]]*\] x decode=\[[^]]*%s' % (
        re.escape(url_of(fleet, 'p2')), re.escape(url_of(fleet, 'd1'))), text), text[-3000:]


def test_rerun_changes_nothing(bed, run_playbook):
    fleet, inventory = bed[:2]
    pids = dict((h, server_pid(fleet, h)) for h in SERVERS)
    router_pid = pid_of(fleet, ROUTER, ROUTER_PIDFILE)
    again = run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS), extra_vars=pd_vars(),
                         expect_rc=0, timeout=600)
    assert all(again.changed(h) == 0 for h in SERVERS), again.recap
    router = run_playbook('playbooks/router.yml', inventory=inventory, extra_vars=pd_vars(), expect_rc=0, timeout=600)
    assert router.changed(ROUTER) == 0
    assert dict((h, server_pid(fleet, h)) for h in SERVERS) == pids
    assert pid_of(fleet, ROUTER, ROUTER_PIDFILE) == router_pid


def test_rolling_change_of_both_kinds_under_load_loses_nothing(bed, run_playbook):
    """A change every server takes (not one that would pair old and new servers: that is refused, see the fleet
    preflight), in batches of one prefill and one decode, while 8 clients stream through the router: each server
    is drained (its PD queues read) before its stop and registered with its type after its health check."""
    fleet, inventory, router = bed[:3]
    before = dict((h, server_pid(fleet, h)) for h in SERVERS)
    outcome = {}
    with Load(router, key=API_KEY, model='tiny-llama', clients=LOAD_CLIENTS, pause=LOAD_PAUSE) as load:
        wait_for(lambda: load.sent >= 20, 60)
        started = time.monotonic()
        rollout = threading.Thread(target=lambda: outcome.update(result=run_playbook(
            'playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS), timeout=900,
            extra_vars=pd_vars(sglang_server_max_running_requests=40))))
        rollout.start()
        rollout.join()
        took = time.monotonic() - started
    result = outcome['result']
    assert result.rc == 0, result.stdout[-4000:]
    text = ' '.join(result.stdout.split())
    drains = dict((host, float(s)) for host, s in re.findall(r'(\w+): idle ([0-9.]+) s after it left the router \(metrics',
                                                             text))
    print('\nrolling change behind the PD router (2 prefills, 2 decodes, a prefill and a decode per batch): %.0f s, '
          '%d requests, %d failed, %d truncated; drain waits %s s' % (took, load.sent, load.failed, load.truncated, drains))
    assert sorted(drains) == sorted(SERVERS), text[-4000:]
    assert all(server_pid(fleet, h) != before[h] for h in SERVERS)
    assert load.failed == 0 and load.truncated == 0
    assert listed(router) == expected(fleet)


def on(hosts, value, other):
    """An extra var that is ``value`` on the inventory hosts ``hosts``, ``other`` elsewhere (templated per host)."""
    return "{{ %r if inventory_hostname in %r else %r }}" % (value, list(hosts), other)


def refused(bed, run_playbook, limit, playbook='playbooks/deploy.yml', tags='plan', **overrides):
    """The output of a preflight-only run (check mode, ``tags``) of ``playbook`` on ``limit`` that must fail, after
    checking that no server stopped or restarted."""
    fleet, inventory = bed[:2]
    pids = dict((h, server_pid(fleet, h)) for h in SERVERS)
    started = time.monotonic()
    result = run_playbook(playbook, inventory=inventory, limit=limit, extra_vars=pd_vars(**overrides), check=True,
                          tags=tags, timeout=300)
    print('\npreflight-only run of %s on %s: %.1f s' % (playbook, limit, time.monotonic() - started))
    assert result.rc != 0, result.stdout[-3000:]
    assert dict((h, server_pid(fleet, h)) for h in SERVERS) == pids
    return ' '.join(result.stdout.split())


def test_a_prefill_and_a_decode_that_differ_are_refused_naming_hosts_and_fields(bed, run_playbook):
    """d1 differs from p1 in every field a pair must share: one preflight run names each, with its hosts and variable
    (the other checkpoint paths are links to the same files on ns1)."""
    fleet = bed[0]
    fleet.ssh('ns1', 'cd /srv/llmops/checkpoints && ln -sfn target target-b && ln -sfn drafter drafter-b')
    env = dict(pd_vars()['sglang_server_env'], SGLANG_SIM_VERSION=on(['d1'], '0.5.13', '0.5.15.post1'))
    text = refused(bed, run_playbook, 'p1,d1', sglang_server_env=env,
                   sglang_server_model_path=on(['d1'], '/srv/llmops/checkpoints/target-b', '/srv/llmops/checkpoints/target'),
                   sglang_server_speculative_draft_model_path=on(['d1'], '/srv/llmops/checkpoints/drafter-b',
                                                                 '/srv/llmops/checkpoints/drafter'),
                   sglang_server_speculative_depth=on(['d1'], 10, 16),
                   sglang_server_extra_args="{{ ['--page-size', '32', '--kv-cache-dtype', 'fp8_e5m2'] "
                                            "if inventory_hostname == 'd1' else [] }}")
    for name, variable, d1, p1 in (
            ('model', 'sglang_server_model_path', '/srv/llmops/checkpoints/target-b', '/srv/llmops/checkpoints/target'),
            ('drafter', 'sglang_server_speculative_draft_model_path', '/srv/llmops/checkpoints/drafter-b',
             '/srv/llmops/checkpoints/drafter'),
            ('speculative settings', 'sglang_server_speculative_depth and the other speculative variables', None, None),
            ('page size', '--page-size in sglang_server_extra_args', '32', '(unset)'),
            ('KV dtype', '--kv-cache-dtype in sglang_server_extra_args', 'fp8_e5m2', '(unset)'),
            ('engine release', 'sglang_server_python / sglang_install_version', '0.5.13', '0.5.15.post1')):
        sentence = 'the prefill and decode servers of router %s differ in their %s (%s): ' % (ROUTER, name, variable)
        assert sentence in text, (name, text[-4000:])
        if d1 is not None:
            assert '%s%s on d1 (decode); %s on p1 (prefill)' % (sentence, d1, p1) in text or \
                '%s%s on p1 (prefill); %s on d1 (decode)' % (sentence, p1, d1) in text, (name, text[-4000:])


@pytest.mark.parametrize('missing, limit', [('decode', 'p1'), ('prefill', 'd1')])
def test_a_pd_router_without_a_prefill_or_a_decode_is_refused(bed, run_playbook, missing, limit):
    others = PREFILLS if missing == 'decode' else DECODES
    text = refused(bed, run_playbook, limit,
                   sglang_server_disaggregation_mode=on(others, 'prefill' if missing == 'decode' else 'decode', ''))
    assert ('router %s runs in prefill/decode mode (%s have sglang_server_disaggregation_mode %s) but has no %s server: '
            'set sglang_server_disaggregation_mode: %s on at least one of its servers'
            % (ROUTER, ', '.join(others), 'prefill' if missing == 'decode' else 'decode', missing, missing)) in text, \
        text[-4000:]


def test_a_pd_server_is_no_canary_and_is_not_swept(bed, run_playbook):
    """The canary benchmarks one server alone, which a decode or prefill cannot be (SGLang answers it only requests
    paired through the router: the simulator's 400 below); the depth sweep of one side is refused too."""
    fleet = bed[0]
    status, text = request(url_of(fleet, 'd1') + '/generate', body={'text': 'hi', 'sampling_params': {'max_new_tokens': 4}})
    assert status == 400 and 'Disaggregated request received without bootstrap room id.' in text, (status, text)
    text = refused(bed, run_playbook, 'd1', llmops_canary_hosts=['d1'])
    assert ('d1 is a canary host (llmops_canary_hosts, deploy_canary) but a decode server of a prefill/decode pair '
            '(sglang_server_disaggregation_mode)') in text, text[-3000:]
    text = refused(bed, run_playbook, 'p1', playbook='playbooks/benchmark.yml', tags=None)
    assert ('spec_sweep on p1: it is a prefill server of a prefill/decode pair (sglang_server_disaggregation_mode), '
            'which the sweep cannot measure alone') in text, text[-3000:]


@pytest.mark.parametrize('slip', ['fake backend on a prefill', 'a backend the release lacks'])
def test_a_transfer_backend_the_server_cannot_run_is_refused(bed, run_playbook, slip):
    if slip == 'fake backend on a prefill':
        text = refused(bed, run_playbook, 'p1,d1', sglang_server_disaggregation_transfer_backend=on(['p1'], 'fake', None))
        expected = ('sglang_server_disaggregation_transfer_backend fake is for a decode server only (it moves no KV; '
                    'SGLang asserts "Prefill server does not support \'fake\'")')
    else:
        env = dict(pd_vars()['sglang_server_env'], SGLANG_SIM_VERSION='0.5.11')
        text = refused(bed, run_playbook, 'p1,d1', sglang_server_env=env,
                       sglang_server_disaggregation_transfer_backend='mooncake_tcp')
        expected = 'sglang_server_disaggregation_transfer_backend mooncake_tcp needs SGLang 0.5.13 or newer (this is 0.5.11)'
    assert expected in text, text[-4000:]
