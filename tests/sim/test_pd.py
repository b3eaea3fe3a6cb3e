# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prefill/decode disaggregation of the SGLang simulator (a TEST DOUBLE; tests/sim/sglang/_pd.py): the flags per
release, the prefill's bootstrap port, a request sent to both sides as sglang-router 0.3.2 sends it, the queue
gauges, acceptance on the decode only, the decode's heartbeat of its prefill."""

from __future__ import annotations

import json
import re
import threading

import pytest

from sim_helpers import free_port, http, make_drafter, wait_for
from sglang import _flags

SPEC = ('--speculative-algorithm', 'EAGLE3', '--speculative-num-steps', '3', '--speculative-eagle-topk', '1',
        '--speculative-num-draft-tokens', '4', '--enable-metrics')
PD_GAUGES = ('sglang:num_prefill_bootstrap_queue_reqs', 'sglang:num_prefill_inflight_queue_reqs',
             'sglang:num_decode_prealloc_queue_reqs', 'sglang:num_decode_transfer_queue_reqs')


@pytest.mark.parametrize('version, argv, error', [
    ('0.5.11', ['--disaggregation-mode', 'prefill', '--disaggregation-bootstrap-port', '9000'], None),
    ('0.5.11', ['--disaggregation-transfer-backend', 'mooncake_tcp'],
     "argument --disaggregation-transfer-backend: invalid choice: 'mooncake_tcp'"),
    ('0.5.13.post1', ['--disaggregation-transfer-backend', 'mooncake_tcp'], None),
    ('0.5.15.post1', ['--disaggregation-mode', 'decode', '--disaggregation-transfer-backend', 'fake'], None),
    ('0.5.15.post1', ['--disaggregation-enable-kv-checksum'], 'unrecognized arguments: --disaggregation-enable-kv-checksum'),
    ('0.5.21', ['--disaggregation-enable-kv-checksum'], None),
    ('0.5.23', ['--disaggregation-mode', 'both'], "argument --disaggregation-mode: invalid choice: 'both'"),
])
def test_disaggregation_flags_per_release(version, argv, error, capsys):
    parser = _flags.build_parser(version)
    if error is None:
        parser.parse_args(['--model-path', 'M'] + argv)
        return
    with pytest.raises(SystemExit):
        parser.parse_args(['--model-path', 'M'] + argv)
    assert error in capsys.readouterr().err


def gauge(sim, name):
    text = sim.get('/metrics')[1].decode()
    match = re.search(r'^%s\{[^}]*\} (\S+)$' % re.escape(name), text, re.M)
    return float(match.group(1)) if match else None


@pytest.fixture
def pair(start_sim, tmp_path):
    drafter = make_drafter(str(tmp_path / 'd'))
    env = {'SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL': '2', 'SGLANG_SIM_SPEED': '0.2'}
    bootstrap = free_port()
    prefill = start_sim('--disaggregation-mode', 'prefill', '--disaggregation-bootstrap-port', str(bootstrap),
                        '--speculative-draft-model-path', drafter, *SPEC, env=env)
    decode = start_sim('--disaggregation-mode', 'decode', '--speculative-draft-model-path', drafter, *SPEC, env=env)
    return prefill, decode, bootstrap


def routed(prefill, decode, bootstrap, body, room=7):
    """Sends ``body`` to both sides at once with the fields sglang-router 0.3.2 adds; returns both answers."""
    body = dict(body, bootstrap_host='127.0.0.1', bootstrap_port=bootstrap, bootstrap_room=room)
    answers = {}

    def send(name, sim):
        answers[name] = http('POST', sim.url + '/generate', body, timeout=30)

    threads = [threading.Thread(target=send, args=item) for item in (('prefill', prefill), ('decode', decode))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers['prefill'], answers['decode']


def test_a_routed_request_completes_on_the_decode_with_acceptance_there_only(pair):
    prefill, decode, bootstrap = pair
    assert http('GET', 'http://127.0.0.1:%d/health' % bootstrap) == (200, b'OK')
    assert json.loads(http('GET', 'http://127.0.0.1:%d/route' % bootstrap)[1])['prefill_page_size'] == 1
    assert prefill.json('/server_info')['disaggregation_mode'] == 'prefill'
    for room in range(1, 5):
        (p_status, p_raw), (d_status, d_raw) = routed(prefill, decode, bootstrap,
                                                      {'text': 'hello', 'sampling_params': {'max_new_tokens': 48}}, room)
        assert (p_status, d_status) == (200, 200), (p_raw[:200], d_raw[:200])
        assert json.loads(p_raw)['meta_info']['completion_tokens'] == 1
        meta = json.loads(d_raw)['meta_info']
        assert meta['completion_tokens'] == 48 and meta['spec_verify_ct'] > 0
    wait_for(lambda: gauge(decode, 'sglang:spec_accept_length') > 1.0, timeout=60, what='decode acceptance')
    assert gauge(prefill, 'sglang:spec_accept_length') == 0.0
    for name in PD_GAUGES:
        assert gauge(decode, name) == 0.0
    # A prefill's last batch is still in its inflight gauge (SGLang writes the gauges after it queued the batch
    # there), until the scheduler's idle refresh 30 s later.
    assert gauge(prefill, 'sglang:num_prefill_inflight_queue_reqs') >= 1.0
    assert gauge(prefill, 'sglang:num_prefill_bootstrap_queue_reqs') == 0.0
    assert gauge(prefill, 'sglang:num_requests_total') == 5.0  # and the warm-up


def test_queue_gauges_show_a_request_waiting_for_its_pair(pair):
    prefill, decode, bootstrap = pair
    body = {'text': 'x', 'sampling_params': {'max_new_tokens': 4}, 'bootstrap_host': '127.0.0.1',
            'bootstrap_port': bootstrap, 'bootstrap_room': 99}
    answer = {}
    thread = threading.Thread(target=lambda: answer.update(p=http('POST', prefill.url + '/generate', body, timeout=60)))
    thread.start()
    # The decode has not come: the request is in the prefill's bootstrap queue (the gauge refreshes with a batch).
    wait_for(lambda: http('GET', prefill.url + '/health')[0] == 200 and
             gauge(prefill, 'sglang:num_prefill_bootstrap_queue_reqs') == 1.0, timeout=20, what='bootstrap gauge')
    assert http('POST', decode.url + '/generate', body, timeout=30)[0] == 200
    thread.join(30)
    assert answer['p'][0] == 200
    http('GET', prefill.url + '/health')
    assert gauge(prefill, 'sglang:num_prefill_bootstrap_queue_reqs') == 0.0
    # The health generation's own batch reads as inflight: a drain gate that probes /health before each read of a
    # prefill never sees it idle (seen on an H100 with SGLang 0.5.15.post1).
    assert gauge(prefill, 'sglang:num_prefill_inflight_queue_reqs') == 1.0


def test_decode_loses_its_prefill_after_two_missed_heartbeats(pair):
    prefill, decode, bootstrap = pair
    assert routed(prefill, decode, bootstrap, {'text': 'a', 'sampling_params': {'max_new_tokens': 2}})[1][0] == 200
    prefill.stop()
    # A request whose prefill never answers waits in the decode's prealloc queue until the heartbeat gives up.
    body = {'text': 'b', 'sampling_params': {'max_new_tokens': 2}, 'bootstrap_host': '127.0.0.1',
            'bootstrap_port': bootstrap, 'bootstrap_room': 8}
    status, raw = http('POST', decode.url + '/generate', body, timeout=30)
    assert status == 500 and b'Lost connection with prefill instance' in raw
    assert re.search(r'Lost connection with prefill instance \(bootstrap_addr: 127\.0\.0\.1:%d\), \d+ transfers affected'
                     % bootstrap, decode.log())
    assert http('GET', decode.url + '/health')[0] == 200


NO_ROOM = b'Invalid request: Disaggregated request received without bootstrap room id.'


def test_a_request_without_a_bootstrap_room_is_refused_as_0_5_15_post1_does(pair):
    prefill, decode, dummy = pair
    for sim in (prefill, decode):
        status, raw = http('POST', sim.url + '/generate', {'text': 'x', 'sampling_params': {'max_new_tokens': 4}},
                           timeout=30)
        assert status == 400 and json.loads(raw) == {'error': {'message': NO_ROOM.decode()}}
        status, raw = http('POST', sim.url + '/v1/completions', {'model': 'm', 'prompt': 'x', 'max_tokens': 4}, timeout=30)
        assert status == 400 and json.loads(raw)['message'] == NO_ROOM.decode()
        assert json.loads(raw)['type'] == 'BadRequestError'
        assert NO_ROOM.decode() in sim.log()


def test_the_fake_bootstrap_host_runs_a_request_on_one_side_alone(pair):
    """SGLang's own /health_generate body: bootstrap_host 2.2.2.2 and a room; no peer is contacted, no KV waited for."""
    prefill, decode, bootstrap = pair
    prefill.stop()  # the decode must not need it
    fake = {'bootstrap_host': '2.2.2.2', 'bootstrap_room': 123456789012345}
    meta = decode.json('/generate', dict(fake, text='x', sampling_params={'max_new_tokens': 16}))['meta_info']
    assert meta['completion_tokens'] == 16 and meta['spec_verify_ct'] > 0
    completion = decode.json('/v1/completions', dict(fake, model='m', prompt='x', max_tokens=8))
    assert completion['usage']['completion_tokens'] == 8
    for name in PD_GAUGES:
        assert gauge(decode, name) == 0.0


def test_the_fake_bootstrap_host_on_a_prefill_needs_no_decode(start_sim):
    prefill = start_sim('--disaggregation-mode', 'prefill', '--disaggregation-bootstrap-port', str(free_port()),
                        env={'SGLANG_SIM_SPEED': '0.2'})
    status, raw = http('POST', prefill.url + '/generate', {'text': 'x', 'sampling_params': {'max_new_tokens': 8},
                                                           'bootstrap_host': '2.2.2.2', 'bootstrap_room': 5}, timeout=10)
    assert status == 200 and json.loads(raw)['meta_info']['completion_tokens'] == 1


def test_the_fake_transfer_backend_takes_a_request_without_a_room(start_sim):
    decode = start_sim('--disaggregation-mode', 'decode', '--disaggregation-transfer-backend', 'fake',
                       env={'SGLANG_SIM_SPEED': '0.2'})
    meta = decode.json('/generate', {'text': 'x', 'sampling_params': {'max_new_tokens': 4}})['meta_info']
    assert meta['completion_tokens'] == 4
