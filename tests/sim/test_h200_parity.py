# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SGLang simulator against the H200 proof run (real SGLang 0.5.15.post1 driven by the collection).

The recordings (tests/fixtures/sglang-0.5.15.post1-h200-proof/, trimmed from
tests/gpu/results/2026-12-02-h200/phase-a) were made with the flags the sglang_server role
passes (``--cuda-graph-max-bs-decode``, ``--enable-metrics``, ``--served-model-name``, TP 1).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import time

import pytest

from sim_helpers import FIXTURES, make_drafter, wait_for
from test_simulator import READY, apps, health_timeline, startup_lines

PROOF = os.path.join(FIXTURES, 'sglang-0.5.15.post1-h200-proof')
# The role's flags in the proof run (h200-proof/summary.md), TP 1, depth 5.
ROLE_FLAGS = ('--served-model-name', 'tiny-llama', '--tp-size', '1', '--host', '127.0.0.1', '--mem-fraction-static', '0.3',
              '--cuda-graph-max-bs-decode', '8', '--enable-metrics', '--speculative-algorithm', 'EAGLE3')
DEPTH = {5: ('--speculative-num-steps', '4', '--speculative-eagle-topk', '1', '--speculative-num-draft-tokens', '5'),
         3: ('--speculative-num-steps', '2', '--speculative-eagle-topk', '1', '--speculative-num-draft-tokens', '3')}
BACKENDS = ('--attention-backend', 'triton', '--sampling-backend', 'pytorch')
REAL_TARGET = '/tmp/llmops-gpu/proof/models/target'
REAL_DRAFTER = '/tmp/llmops-gpu/proof/models/drafters/good-layers0'
PROOF_0511 = os.path.join(FIXTURES, 'sglang-0.5.11-h200-proof')
# The role writes --cuda-graph-max-bs for SGLang before 0.5.15.
ROLE_FLAGS_0511 = tuple('--cuda-graph-max-bs' if flag == '--cuda-graph-max-bs-decode' else flag for flag in ROLE_FLAGS)
# transformers 5.6's tokenizer fallback for the tiny tokenizer, and 0.5.11's own ServerArgs fields.
NOT_SIMULATED_0511 = ('TokenizersBackend', 'server_args=')


def proof_text(name):
    with open(os.path.join(PROOF, name), encoding='utf-8') as f:
        return f.read()


def proof_json(name):
    return json.loads(proof_text(name))


@pytest.fixture
def proof_models(tmp_path):
    """The proof's tiny target (its config.json; a tokenizer without 'yes') and a perfect layers.0 drafter."""
    target = tmp_path / 'target'
    target.mkdir()
    shutil.copy(os.path.join(PROOF, 'target-config.json'), str(target / 'config.json'))
    (target / 'tokenizer.json').write_text(json.dumps({'model': {'type': 'BPE', 'vocab': {'no': 1, 'ye': 2}}}))
    drafter = make_drafter(str(tmp_path / 'good-layers0'), style='layers0', quality='perfect')
    return str(target), drafter


def start_proof_sim(start_sim, models, depth=5, extra=(), **kwargs):
    target, drafter = models
    return start_sim(*(ROLE_FLAGS + ('--speculative-draft-model-path', drafter) + DEPTH[depth] + BACKENDS + tuple(extra)),
                     model=target, **kwargs)


def test_startup_log_is_the_recorded_one(start_sim, proof_models):
    sim = start_proof_sim(start_sim, proof_models)
    paths = {proof_models[0]: REAL_TARGET, proof_models[1]: REAL_DRAFTER, str(sim.port): '30000'}
    assert startup_lines(sim.log(), paths) == startup_lines(proof_text('deploy-depth5.server.log'), {})


def test_0511_startup_log_is_the_recorded_one(start_sim, proof_models):
    """0.5.11 gives the target its KV cache and CUDA graphs before it loads the drafter, in other words."""
    target, drafter = proof_models
    sim = start_sim(*(ROLE_FLAGS_0511 + ('--speculative-draft-model-path', drafter) + DEPTH[5] + BACKENDS), model=target,
                    env={'SGLANG_SIM_VERSION': '0.5.11'})
    with open(os.path.join(PROOF_0511, 'unfixed-layers0.server.log'), encoding='utf-8') as f:
        recorded = f.read()

    def lines(log, paths):
        return [line for line in startup_lines(log, paths) if not any(skip in line for skip in NOT_SIMULATED_0511)]

    paths = {target: REAL_TARGET, drafter: REAL_DRAFTER + '-0.5.11', str(sim.port): '30000'}
    assert lines(sim.log(), paths) == lines(recorded, {})


def test_kv_cache_size_follows_the_model_config(start_sim, proof_models):
    sim = start_proof_sim(start_sim, proof_models)
    recorded = int(re.search(r'max_total_num_tokens=(\d+)', proof_text('deploy-depth5.server.log')).group(1))
    simulated = int(re.search(r'max_total_num_tokens=(\d+)', sim.log()).group(1))
    assert abs(simulated - recorded) / recorded < 0.01, (simulated, recorded)  # 17469560 on the H200
    assert sim.json('/get_server_info')['max_total_num_tokens'] == simulated


def test_startup_events_come_in_the_recorded_order(start_sim, proof_models):
    """wait_for_llm_health's phases (recorded: launching ... http_server, warmup, ready) and the warm-up requests."""
    sim = start_proof_sim(start_sim, proof_models, wait=False)
    assert health_timeline(sim) == [0, 503, 200]  # port closed, warm-up (503), ready: the warmup phase is observable
    sim.wait_ready()
    log = sim.log()
    phases = proof_json('deploy-depth5.wait_for_llm_health.json')['phases']
    markers = [re.sub(r'^\[[^]]*\] ', '', p['line'])[:20] for p in phases if p.get('line')]
    assert [p['phase'] for p in phases if not p.get('line')] == ['launching', 'warmup']
    positions = [log.index(marker) for marker in markers]
    assert positions == sorted(positions), markers
    # SGLang's warm-up thread: /model_info first, then one /generate, then the ready line.
    order = ['Uvicorn running on', '"GET /model_info HTTP/1.1" 200 OK', '"POST /generate HTTP/1.1" 200 OK', READY]
    for text in (proof_text('deploy-depth5.server.log'), log):
        positions = [text.index(item) for item in order]
        assert positions == sorted(positions)


@pytest.mark.parametrize('depth', [5, 3])
def test_smoke_and_server_info_give_the_recorded_figures(start_sim, proof_models, depth):
    """The fields the smoke test and status.yml read, with the recorded values (perfect drafter, 32 tokens)."""
    sim = start_proof_sim(start_sim, proof_models, depth=depth)
    recorded = proof_json('deploy-depth5.wait_for_llm_health.json' if depth == 5 else 'restart-depth3.wait_for_llm_health.json')
    meta = sim.json('/generate', {'text': 'Say something.', 'sampling_params': {'max_new_tokens': 32, 'temperature': 0}})['meta_info']
    assert meta['completion_tokens'] == recorded['smoke']['tokens']
    assert round(meta['completion_tokens'] / meta['spec_verify_ct'], 3) == recorded['smoke']['accept_length']
    info = sim.json('/get_server_info')
    want = recorded['server_info']
    assert (info['version'], info['speculative_algorithm'], info['speculative_num_steps'], info['speculative_eagle_topk'],
            info['speculative_num_draft_tokens'], info['tp_size'], info['served_model_name']) == (
        want['version'], want['speculative_algorithm'], want['speculative_num_steps'], want['speculative_eagle_topk'],
        want['speculative_depth'], want['tp_size'], want['served_model_name'])
    if depth == 3:
        fields = proof_json('status.http.json')['get_server_info']['json_fields']
        assert dict((k, info.get(k)) for k in fields) == fields


def _raw_get(port, path, headers):
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
    began = time.monotonic()
    conn.request('GET', path, headers=headers)
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response, body, time.monotonic() - began


def test_http_answers_carry_the_recorded_headers(start_sim, proof_models):
    """As ansible.builtin.uri saw them in status.yml (it sends ``Connection: close``)."""
    sim = start_proof_sim(start_sim, proof_models)
    recorded = proof_json('status.http.json')
    response, body, seconds = _raw_get(sim.port, '/health', {'Connection': 'close'})
    health = recorded['health']
    assert (response.status, body, response.getheader('server'), response.getheader('vary'),
            response.getheader('connection'), response.getheader('content-length'), response.getheader('content-type')) == (
        health['status'], b'', health['server'], health['vary'], health['connection'], health['content_length'], None)
    assert response.version == 11
    # SGLang checks the health generation once a second (recorded: 1 s); the simulator scales that by its speed.
    assert seconds >= 1.0 * float(os.environ.get('SGLANG_SIM_SPEED', '0.02')) * 0.9
    response, body, seconds = _raw_get(sim.port, '/get_server_info', {'Connection': 'close'})
    info = recorded['get_server_info']
    assert (response.status, response.getheader('server'), response.getheader('vary'), response.getheader('connection'),
            response.getheader('content-type')) == (info['status'], info['server'], info['vary'], info['connection'],
                                                    info['content_type'])


def test_health_takes_one_check_interval_at_the_configured_speed(start_sim, proof_models):
    sim = start_proof_sim(start_sim, proof_models, env={'SGLANG_SIM_SPEED': '0.2'})
    seconds = _raw_get(sim.port, '/health', {})[2]
    assert 0.18 <= seconds < 1.0


def test_stop_finds_every_child_alive_and_the_gpu_empty(start_sim, proof_models):
    """stop.yml signals the launcher and then each process of its session; the recording shows all of them
    still alive when signalled (outcome ``exited`` after TERM), and nvidia-smi empty right after."""
    recorded = proof_json('stop.json')['stopped']
    assert {r['outcome'] for r in recorded} == {'exited'} and all(r['signals'] == ['TERM'] for r in recorded)
    sim = start_proof_sim(start_sim, proof_models)
    children = []
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                with open('/proc/%s/stat' % entry, encoding='utf-8') as f:
                    ppid = int(f.read().rsplit(')', 1)[1].split()[1])
                with open('/proc/%s/cmdline' % entry, 'rb') as f:
                    title = f.read().split(b'\0')[0].decode()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == sim.proc.pid:
                children.append((int(entry), title))
    assert sorted(title for dummy, title in children) == ['sglang::detokenizer', 'sglang::scheduler']
    sim.proc.send_signal(signal.SIGTERM)
    for pid, dummy in children:
        os.kill(pid, signal.SIGTERM)  # raises ProcessLookupError if the launcher had already ended it
    assert sim.proc.wait(10) == 0
    assert apps() == []
    recorded_after = proof_text('stop.nvidia-smi.txt')
    assert '0, NVIDIA H200, 0, 143771' in recorded_after  # used 0 MiB right after the stop, as simulated
    wait_for(lambda: all(_gone(pid) for pid, dummy in children), 5, what='children to exit')


def _gone(pid):
    try:
        with open('/proc/%d/stat' % pid, encoding='utf-8') as f:
            return f.read().rsplit(')', 1)[1].split()[0] == 'Z'
    except OSError:
        return True


def test_scheduler_holds_the_recorded_memory(start_sim, proof_models):
    after = proof_text('restart-depth3.nvidia-smi.txt').split('after:')[1]
    recorded = re.search(r'(\d+), sglang::scheduler, (\d+) MiB', after)
    start_proof_sim(start_sim, proof_models, depth=3)
    held = [row for row in apps() if row[1] == 'sglang::scheduler']
    assert [int(row[2]) for row in held] == [int(recorded.group(2))]  # 45248 MiB at --mem-fraction-static 0.3


def test_max_total_tokens_caps_the_pool_and_the_memory_held(start_sim, proof_models):
    # SGLang's ModelRunner takes the smaller of the profiled count and --max-total-tokens and allocates
    # only that pool; phase g of the H200 proof shares the GPU this way.
    sim = start_proof_sim(start_sim, proof_models, extra=('--max-total-tokens', '131072'))
    assert re.search(r'max_total_num_tokens=131072,', sim.log())
    held = [int(row[2]) for row in apps() if row[1] == 'sglang::scheduler']
    assert len(held) == 1 and held[0] < 4096, held  # 45248 MiB uncapped at --mem-fraction-static 0.3


def _decode_lines(log, after):
    """``Decode batch`` lines after the ``after`` line, with the access line each preceded."""
    lines = log[log.index(after):].splitlines()
    found = []
    for number, line in enumerate(lines):
        if 'Decode batch' in line:
            following = next(text for text in lines[number + 1:] if 'INFO:     127.0.0.1' in text)
            found.append((re.search(r'#running-req: \d+, .*accept len: [\d.]+, accept rate: [\d.]+', line).group(0),
                          re.search(r'"(\w+ /\S+)', following).group(1)))
    return found


@pytest.mark.parametrize('quality, log_name', [('random', 'random-drafter.server.log'), ('perfect', 'deploy-depth5.server.log')])
def test_decode_log_interval_counts_like_sglang(start_sim, tmp_path, quality, log_name):
    """Warm-up, the health checks, then the 32-token smoke request: the random drafter reaches SGLang's
    40th decode forward inside the smoke request (one ``Decode batch`` line, accept len 1.00), the good one never."""
    target = tmp_path / 'target'
    target.mkdir()
    shutil.copy(os.path.join(PROOF, 'target-config.json'), str(target / 'config.json'))
    drafter = make_drafter(str(tmp_path / 'drafter'), style='layers0', quality=quality)
    sim = start_proof_sim(start_sim, (str(target), drafter))
    for dummy in range(2):  # the recorded run's two health generations before the smoke request
        assert sim.get('/health')[0] == 200
    sim.json('/generate', {'text': 'Say something.', 'sampling_params': {'max_new_tokens': 32, 'temperature': 0}})
    recorded = [(re.sub(r'#token: \d+', '#token: #', line), after) for line, after in _decode_lines(proof_text(log_name), READY)]
    if quality == 'random':
        assert recorded == [('#running-req: 1, #token: #, token usage: 0.00, accept len: 1.00, accept rate: 0.00', 'POST /generate')]
    else:
        assert recorded == []
    simulated = [(re.sub(r'#token: \d+', '#token: #', line), after) for line, after in _decode_lines(sim.log(), READY)]
    assert simulated == recorded


def test_kept_alive_connection_survives_refused_posts(start_sim, proof_models):
    """HTTP/1.1 as uvicorn: one connection carries several requests, also after a 404 to a POST with a body."""
    sim = start_proof_sim(start_sim, proof_models)
    conn = http.client.HTTPConnection('127.0.0.1', sim.port, timeout=10)
    body = json.dumps({'text': 'x', 'sampling_params': {'max_new_tokens': 2}})
    statuses = []
    for path in ('/no_such_path', '/generate', '/health'):
        conn.request('POST' if path != '/health' else 'GET', path, body=body if path != '/health' else None,
                     headers={'content-type': 'application/json'})
        response = conn.getresponse()
        response.read()
        statuses.append((response.status, response.getheader('connection')))
    conn.close()
    assert statuses == [(404, None), (200, None), (200, None)]
