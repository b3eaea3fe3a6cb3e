"""llmops.serving.sglang_weights_checksum (weights attestation) and plugins/module_utils/_weights.py: the rule that
names the outlier of a model group, the skips that never fail, the keys sent, against fake servers answering as
SGLang 0.5.15.post1's /weights_checker."""

from __future__ import annotations

import hashlib

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _weights
from ansible_collections.llmops.serving.plugins.modules import sglang_weights_checksum as module
from ansible_collections.llmops.serving.tests.releases import releases
from ansible_collections.llmops.serving.tests.unit._fake_llm_server import FakeLLMServer
from ansible_collections.llmops.serving.tests.unit.plugins.modules._module_runner import record_warnings, run_main

ADMIN = 'adm1n-k3y'
INFER = 'inf3r-k3y'
GOOD = hashlib.sha256(b'good').hexdigest()
BAD = hashlib.sha256(b'bad').hexdigest()
OTHER = hashlib.sha256(b'other').hexdigest()


def answer(checksum, tp=2, pp=1, dp=1):
    ranks = [{'checksums': {'lm_head.weight': '%016x' % rank}, 'per_gpu_checksum': checksum,
              'parallelism_info': {'tp_rank': rank % tp, 'tp_size': tp, 'dp_rank': 0, 'dp_size': dp, 'pp_rank': 0,
                                   'pp_size': pp, 'rank': rank, 'size': tp * pp * dp}} for rank in range(tp * pp * dp)]
    return {'success': True, 'message': '', 'ranks': ranks, 'per_engine_checksum': checksum}


def checker(checksum=None, status=None, **layout):
    """A /weights_checker handler: ``status`` (404, 401...) or the checksum answer."""
    def handle(method, body):
        return (status, {'success': False, 'message': 'no'}) if status else (200, answer(checksum, **layout))
    return handle


@pytest.fixture
def serve():
    servers = []

    def start(checksum=None, status=None, version=None, **layout):
        routes = {'/weights_checker': checker(checksum, status, **layout)}
        if version:
            routes['/server_info'] = lambda method, body: (200, {'version': version, 'tp_size': 2})
        server = FakeLLMServer(routes)
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.close()


@pytest.fixture(autouse=True)
def warnings(monkeypatch):
    return record_warnings(monkeypatch)


def run(capsys, **args):
    return run_main(module.main, capsys, **args)


# ------------------------------------------------------------------ the rule (module_utils)

def read(checksum, layout='tp2 pp1 dp1', version=None):
    return {'checksum': checksum, 'layout': layout, 'ranks': 2, 'status': 200, 'note': None, 'version': version}


@pytest.mark.parametrize('others, outlier, agreeing', [
    ({'ns1': GOOD}, True, ['ns1']),                                # one other replica: differs from it
    ({'ns1': BAD}, False, ['ns1']),
    ({'ns1': GOOD, 'ns3': GOOD}, True, ['ns1', 'ns3']),
    ({'ns1': GOOD, 'ns3': GOOD, 'ns4': BAD}, True, ['ns1', 'ns3']),  # with the minority: still the outlier
    ({'ns1': BAD, 'ns3': BAD, 'ns4': GOOD}, False, ['ns1', 'ns3']),
    ({'ns1': GOOD, 'ns3': OTHER}, False, []),                      # no majority: not decided
    ({}, False, []),
])
def test_the_outlier_differs_from_the_majority_of_the_others(others, outlier, agreeing):
    verdict = _weights.judge('ns2', read(BAD), dict((name, read(value)) for name, value in others.items()), 'tiny')
    assert (verdict['outlier'], verdict['agreeing']) == (outlier, agreeing)


def test_the_failure_message_names_the_host_both_checksums_the_majority_and_the_group():
    verdict = _weights.judge('ns2', read(BAD), {'ns1': read(GOOD), 'ns3': read(GOOD)}, 'fleet_ns')
    assert verdict['msg'] == ('ns2 loaded weights whose checksum %s differs from %s of ns1, ns3 (model group fleet_ns)'
                              % (BAD[:16], GOOD[:16]))


def test_only_replicas_of_the_same_layout_are_compared():
    verdict = _weights.judge('ns2', read(BAD), {'ns1': read(GOOD, 'tp4 pp1 dp1'), 'ns3': read(None)})
    assert not verdict['outlier'] and verdict['compared'] == [] and 'no other serving replica' in verdict['msg']


def test_only_replicas_of_the_same_release_are_compared_where_both_are_known():
    own = read(BAD, version='0.5.16')
    verdict = _weights.judge('ns2', own, {'ns1': read(GOOD, version='0.5.15.post1'), 'ns3': read(GOOD, version='0.5.15.post1')})
    assert not verdict['outlier'] and verdict['compared'] == []
    assert _weights.difference(own, read(GOOD, version='0.5.15.post1')) == (
        'another release (SGLang 0.5.15.post1, this server 0.5.16): not compared')
    # an unknown version on either side: compared by layout alone
    assert _weights.judge('ns2', own, {'ns1': read(GOOD)})['outlier'] is True


@pytest.mark.parametrize('version', releases.versions())
def test_every_checked_release_that_routes_the_checker_is_asked(version):
    routed = '/weights_checker' in releases.load(version)['http']['routes']
    assert (_weights.route_problem('sglang', version) is None) == routed


@pytest.mark.parametrize('engine, version, problem', [
    ('sglang', '0.5.10', 'SGLang 0.5.10 has no /weights_checker (0.5.11 and later route it)'),
    ('sglang', '0.4.6.post1', 'SGLang 0.4.6.post1 has no /weights_checker (0.5.11 and later route it)'),
    ('vllm', '0.11.0', 'vllm has no /weights_checker (SGLang has, from 0.5.11)'),
    ('sglang', None, None), ('sglang', 'not a version', None), ('sglang', '0.5.11', None),
])
def test_releases_without_the_route(engine, version, problem):
    assert _weights.route_problem(engine, version) == problem


def test_layout_from_parallelism_info():
    assert _weights.layout(answer(GOOD, tp=8)) == 'tp8 pp1 dp1'
    assert _weights.layout(answer(GOOD, tp=4, pp=2)) == 'tp4 pp2 dp1'
    assert _weights.layout({'ranks': []}) is None
    assert _weights.replica_url({'url': 'http://10.0.0.2:30000/', 'worker_type': 'prefill'}) == 'http://10.0.0.2:30000'


# ------------------------------------------------------------------ the module against fake servers

def test_an_outlier_fails_with_the_message(serve, capsys):
    own, one, two = serve(BAD), serve(GOOD), serve(GOOD)
    result, out = run(capsys, url=own.url, admin_api_key=ADMIN, api_key=INFER, host='ns2', group='fleet_ns',
                      version='0.5.15.post1', replicas={'ns1': one.url, 'ns2': own.url, 'ns3': two.url})
    assert result['failed'] is True and result['outlier'] is True and result['changed'] is False
    assert result['msg'] == ('ns2 loaded weights whose checksum %s differs from %s of ns1, ns3 (model group fleet_ns)'
                             % (BAD[:16], GOOD[:16]))
    assert (result['checksum'], result['majority'], result['agreeing']) == (BAD, GOOD, ['ns1', 'ns3'])
    assert sorted(result['replicas']) == ['ns1', 'ns3'] and result['layout'] == 'tp2 pp1 dp1'
    # the admin key went to every server, in a POST of the checksum action; no key in the output
    for server in (own, one, two):
        method, path, headers, body = server.requests[0]
        assert (method, path, body, headers['Authorization']) == ('POST', '/weights_checker', {'action': 'checksum'},
                                                                  'Bearer ' + ADMIN)
    assert ADMIN not in out and INFER not in out


def test_no_failure_with_fail_on_outlier_false(serve, capsys):
    own, one = serve(BAD), serve(GOOD)
    result, dummy = run(capsys, url=own.url, host='ns2', replicas={'ns1': one.url}, fail_on_outlier=False)
    assert not result.get('failed') and result['outlier'] is True and result['checked'] is True


def test_matching_replicas_pass(serve, capsys):
    own, one = serve(GOOD), serve(GOOD)
    result, dummy = run(capsys, url=own.url, api_key=INFER, host='ns2', group='g', replicas={'ns1': {'url': one.url}},
                        admin_api_key=None, timeout=None, engine=None, version=None)
    assert not result.get('failed') and result['checked'] is True and result['outlier'] is False
    assert result['note'] == 'ns2 loaded the weights of ns1: checksum %s (model group g)' % GOOD[:16]
    assert own.requests[0][2]['Authorization'] == 'Bearer ' + INFER  # no admin key: the API key


@pytest.mark.parametrize('own_status, note', [
    (404, 'ns2 answers 404 on /weights_checker: its release does not route it; weights not checked'),
    (401, 'ns2 refused the key on /weights_checker (HTTP 401): it is an admin endpoint; set sglang_server_admin_api_key'),
    (400, 'ns2 could not compute its checksum (HTTP 400'),
])
def test_a_server_that_cannot_answer_is_not_checked_and_never_fails(serve, capsys, own_status, note):
    own, one = serve(status=own_status), serve(GOOD)
    result, dummy = run(capsys, url=own.url, host='ns2', replicas={'ns1': one.url})
    assert not result.get('failed') and result['checked'] is False and result['note'].startswith(note)


def test_replicas_that_do_not_answer_or_differ_in_layout_are_left_out(serve, capsys):
    own, other_layout, gone = serve(BAD), serve(GOOD, tp=4), serve(status=404)
    gone_url = gone.url
    result, dummy = run(capsys, url=own.url, host='ns2',
                        replicas={'ns1': other_layout.url, 'ns3': gone_url, 'ns4': 'http://127.0.0.1:9'})
    assert not result.get('failed') and result['checked'] is False
    assert result['replicas']['ns1']['note'] == 'another layout (tp4 pp1 dp1, this server tp2 pp1 dp1): not compared'
    assert result['replicas']['ns3']['note'].startswith('answers 404')
    assert result['replicas']['ns4']['note'].startswith('no answer from /weights_checker')
    assert not any(replica['compared'] for replica in result['replicas'].values())


def test_skips_without_a_request(serve, capsys, warnings):
    own = serve(GOOD)
    result, dummy = run(capsys, url=own.url, host='ns2', engine='vllm', replicas={'ns1': 'http://127.0.0.1:9'})
    assert result['note'] == 'ns2: vllm has no /weights_checker (SGLang has, from 0.5.11); weights not checked'
    result, dummy = run(capsys, url=own.url, host='ns2', version='0.5.10', replicas={'ns1': 'http://127.0.0.1:9'})
    assert 'SGLang 0.5.10 has no /weights_checker' in result['note']
    result, dummy = run(capsys, url=own.url, host='ns2', group='g', replicas={'ns2': 'http://10.0.0.2:30000', 'x': own.url})
    assert result['note'] == 'no other replica in model group g to compare ns2 with: weights not checked'
    assert own.requests == [] and not warnings


def test_replicas_that_disagree_with_no_majority_warn(serve, capsys, warnings):
    own, one, two = serve(BAD), serve(GOOD), serve(OTHER)
    result, dummy = run(capsys, url=own.url, host='ns2', replicas={'ns1': one.url, 'ns3': two.url})
    assert not result.get('failed') and result['checked'] is False and result['outlier'] is False
    assert len(warnings) == 1 and 'disagree among themselves' in warnings[0]


def test_check_mode_reads_the_same(serve, capsys):
    own, one = serve(BAD), serve(GOOD)
    result, dummy = run(capsys, url=own.url, host='ns2', replicas={'ns1': one.url}, _ansible_check_mode=True)
    assert result['failed'] is True and result['changed'] is False


def test_versions_come_from_server_info_with_the_api_key_and_an_upgrade_is_not_an_outlier(serve, capsys):
    own, old, new = serve(BAD, version='0.5.16'), serve(GOOD, version='0.5.15.post1'), serve(BAD, version='0.5.16')
    result, dummy = run(capsys, url=own.url, host='ns1', admin_api_key=ADMIN, api_key=INFER,
                        replicas={'ns2': old.url, 'ns3': new.url})
    assert not result.get('failed') and result['checked'] is True and result['version'] == '0.5.16'
    assert result['agreeing'] == ['ns3'] and result['replicas']['ns2']['compared'] is False
    assert result['replicas']['ns2']['note'] == 'another release (SGLang 0.5.15.post1, this server 0.5.16): not compared'
    asked = dict((path, headers['Authorization']) for dummy, path, headers, body in old.requests)
    assert asked == {'/weights_checker': 'Bearer ' + ADMIN, '/server_info': 'Bearer ' + INFER}


def test_engine_checksum_from_the_ranks_where_the_answer_has_none():
    full = answer(GOOD)
    assert _weights.engine_checksum(full) == GOOD
    del full['per_engine_checksum']
    assert _weights.engine_checksum(full) == hashlib.sha256((GOOD + GOOD).encode()).hexdigest()
    full['ranks'][1]['per_gpu_checksum'] = None
    assert _weights.engine_checksum(full) is None and _weights.engine_checksum({'ranks': []}) is None
