"""llmops.serving.wait_for_llm_health over SSH on the test fleet, against the SGLang simulator.

Each playbook run gives every host its own scenario (tests/integration/playbooks/
health_scenarios.yml): the namespace hosts start the simulator as a process with a pidfile
and a log file, ``sd1`` as a systemd unit (journal followed, exit code from systemd); a
host with ``launch: none`` waits from the controller (``delegate_to: localhost``) on another
host's URL. Results come back as JSON files; heartbeats are read from the playbook output.
"""

from __future__ import annotations

import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
API_KEY = 'sk-integration-d2f1c0ffee-not-real'


@pytest.fixture
def scenarios(clean_fleet, run_playbook, tmp_path):
    """Run health_scenarios.yml with ``{host: scenario}``; return (results by host, AnsibleResult)."""
    def run(per_host, verbosity=0, **extra):
        extra_vars = {'health_repo': ROOT, 'health_results_dir': str(tmp_path), 'health_scenarios': per_host}
        extra_vars.update(extra)
        result = run_playbook('health_scenarios.yml', limit=','.join(per_host), extra_vars=extra_vars,
                              verbosity=verbosity, timeout=300)
        assert not any(counts['unreachable'] for counts in result.recap.values()), result.stdout[-3000:]
        results = {}
        for host in per_host:
            path = tmp_path / ('%s.json' % host)
            assert path.exists(), 'no result for %s:\n%s' % (host, result.stdout[-4000:])
            results[host] = json.loads(path.read_text())
        return results, result
    return run


def heartbeats(stdout, host):
    return [line for line in stdout.splitlines() if line.startswith('[%s] wait_for_llm_health: ' % host)]


def test_ready_crash_oom_and_systemd_unit_with_heartbeats_and_no_secret_in_vvv_output(scenarios):
    results, run = scenarios({
        'ns1': {'speed': 1, 'wait': {'smoke': 'generate', 'min_accept_length': 1.5}},  # about 8 s: heartbeats
        'ns2': {'fault': 'crash:graphs'},
        'ns3': {'fault': 'oom'},
        # A heartbeat comes after each slice (heartbeat_interval 1 s) the server is not ready yet.
        # The simulator's phases are wall-clock seconds but Ansible's steps before the wait are
        # not: on a loaded machine (load ~10 on 2 cores) sd1's 2 s start was over before the
        # first slice and no heartbeat was due. At most 2 probes fall into one slice (interval
        # 1 s), so 3 unhealthy probes make the wait outlast the first slice however loaded.
        'sd1': {'launch': 'systemd', 'unhealthy_probes': 3, 'wait': {'smoke': 'completions'}},
    }, verbosity=3, health_api_key=API_KEY)
    ready, crash, oom, unit = results['ns1'], results['ns2'], results['ns3'], results['sd1']

    assert ready['status'] == 'ready' and not ready.get('failed'), ready.get('msg')
    assert ready['smoke']['ok'] and ready['smoke']['accept_length'] > 1.5
    assert ready['server_info']['speculative_algorithm'] == 'EAGLE3'
    assert [p['phase'] for p in ready['phases']][-1] == 'ready'
    assert 'cuda_graphs' in [p['phase'] for p in ready['phases']]

    assert crash['failed'] and crash['status'] == 'crashed' and crash['phase'] == 'cuda_graphs'
    assert 'RuntimeError: simulated crash during graphs' in crash['msg']
    assert oom['failed'] and oom['status'] == 'crashed'
    assert 'torch.OutOfMemoryError: CUDA out of memory' in oom['msg']

    assert unit['status'] == 'ready' and not unit.get('failed'), unit.get('msg')
    assert unit['smoke']['ok'] and unit['smoke']['tokens'] > 0
    assert 'load_weights' in [p['phase'] for p in unit['phases']]  # from the journal

    beats = heartbeats(run.stdout, 'ns1')
    assert beats, [line for line in run.stdout.splitlines() if 'wait_for_llm_health' in line]
    assert re.search(r'phase \w+, health: .+; (\d+ new log lines?|no new log lines)', beats[0])
    assert '    | ' in run.stdout  # log lines under a heartbeat
    assert heartbeats(run.stdout, 'sd1')
    assert API_KEY not in run.stdout + run.stderr


def test_hang_warmup_failure_flapping_health_and_systemd_exit_code(scenarios):
    results, run = scenarios({
        'ns1': {'fault': 'hang:graphs', 'wait': {'stall_timeout': 3}},
        'ns2': {'fault': 'warmup_fail'},
        'ns3': {'fault': 'health_flap', 'wait': {'success_threshold': 3, 'interval': 0.5, 'timeout': 8}},
        'sd1': {'launch': 'systemd', 'fault': 'crash:imports'},
    })
    stalled, warmup, flap, unit = results['ns1'], results['ns2'], results['ns3'], results['sd1']
    assert stalled['status'] == 'stalled' and stalled['phase'] == 'cuda_graphs'
    assert 'no progress for 3 s' in stalled['msg']
    assert warmup['status'] == 'crashed'
    # The root cause leads the message; the log lines are in log_tail, not repeated in it.
    assert warmup['msg'].startswith('root cause: AssertionError: res=<Response [500]>'), warmup['msg']
    assert any('Initialization failed. warmup error' in line for line in warmup['log_tail']), warmup['log_tail']
    assert flap['status'] == 'timeout' and flap['last_http_status'] in (200, 503)
    assert unit['status'] == 'crashed' and unit['exit_code'] == 1
    assert 'ImportError: simulated crash during imports' in unit['msg']


def test_slow_health_fatal_pattern_drafter_floor_and_remote_url_from_the_controller(scenarios, fleet):
    results, run = scenarios({
        'ns1': {'fault': 'slow_health', 'wait': {'request_timeout': 0.5, 'timeout': 6}},
        'ns2': {'quality': 'random', 'keep': True, 'wait': {'smoke': 'generate', 'min_accept_length': 1.5}},
        'ns3': {'launch': 'none', 'wait': {'url': 'http://%s:30000' % fleet.hosts['ns2']['address']}},
        # 0.5.23 has /ready (from 0.5.20 on), which answers without the slow health generation
        'sd1': {'version': '0.5.23', 'fault': 'slow_health', 'wait': {'request_timeout': 0.5, 'timeout': 30}},
    })
    slow, random_drafter, remote, ready = results['ns1'], results['ns2'], results['ns3'], results['sd1']
    assert slow['status'] == 'timeout' and 'no answer within request_timeout' in slow['msg']
    # 0.5.15.post1 has no /ready: one 404, then /health decides
    assert slow['health_path'] == '/health' and any(note.startswith('/ready answered HTTP 404') for note in slow['notes'])
    assert ready['status'] == 'ready' and ready['health_path'] == '/ready' and not ready.get('failed'), ready.get('msg')
    assert random_drafter['failed'] and random_drafter['status'] == 'ready'
    assert random_drafter['msg'].startswith('the drafter is not being accepted: accept length 1.')
    assert remote['status'] == 'ready' and not remote.get('failed')
    assert heartbeats(run.stdout, 'ns3 -> localhost')


def test_extra_fatal_pattern_while_the_process_runs(scenarios):
    results, dummy = scenarios({'ns1': {'wait': {'extra_fatal_patterns': ['KV Cache is allocated']}}})
    assert results['ns1']['status'] == 'fatal_log'
    assert 'still runs' in results['ns1']['msg'] and 'KV Cache is allocated' in results['ns1']['msg']
