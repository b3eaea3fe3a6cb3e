# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/monitoring.yml rendered on this machine from tests/integration/monitoring/inventory.yml,
then checked with Debian's promtool (``make system`` installs the prometheus package).

Shows: the targets carry the inventory's labels and skip hosts without a server; the rules file
passes ``promtool check rules`` and the unit tests in monitoring/rules_test.yml (``promtool test
rules``: acceptance below the floor while serving, down, no ready server, TTFT/TPOT p95, growing
queue, GPU memory); a rerun changes nothing and --check --diff shows a threshold change without
writing it; every PromQL expression of the Grafana dashboard parses; every SGLang metric the rules
and the dashboard use is one SGLang exports (recorded /metrics); a server listening on loopback of
another host is refused with a message naming it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
INVENTORY = os.path.join(HERE, 'monitoring', 'inventory.yml')
RULES_TEST = os.path.join(HERE, 'monitoring', 'rules_test.yml')
ROLE = os.path.join(ROOT, 'roles', 'serving_monitoring')
DASHBOARD = os.path.join(ROLE, 'files', 'llmops-sglang-dashboard.json')
RECORDED = os.path.join(ROOT, 'tests', 'fixtures', 'sglang-0.5.15.post1-h200')
# Registered by SGLang 0.5.15.post1 (sglang/srt/observability/metrics_collector.py, histogram with the
# labels of sglang:time_to_first_token_seconds) but absent from the recording: SGLang observes it only
# between two streamed chunks of a request, and the recorded traffic was not streamed.
NOT_RECORDED = {'sglang:inter_token_latency_seconds': 'histogram'}
# Grafana's variables, replaced by values Prometheus accepts.
GRAFANA_VARS = {'$__rate_interval': '1m', '$__interval': '1m', '$group': '.*', '$host': '.*'}


def promtool(*args, cwd=None):
    return subprocess.run(['promtool'] + list(args), capture_output=True, text=True, cwd=cwd, check=False)


def monitoring_vars(directory, **overrides):
    base = {'serving_monitoring_dir': directory, 'serving_monitoring_read_versions': False,
            'serving_monitoring_validate': True}
    base.update(overrides)
    return base


def test_role_renders_targets_and_tested_rules(run_playbook, tmp_path):
    out = str(tmp_path / 'prometheus')
    first = run_playbook('playbooks/monitoring.yml', inventory=INVENTORY, extra_vars=monitoring_vars(out), expect_rc=0)
    assert first.changed('localhost') == 4  # directory, targets, rules, dashboard
    check_targets(out)
    check_rules_pass_promtool(out, tmp_path)

    again = run_playbook('playbooks/monitoring.yml', inventory=INVENTORY, extra_vars=monitoring_vars(out), expect_rc=0)
    assert again.changed('localhost') == 0

    before = open(os.path.join(out, 'llmops-sglang.rules.yml'), encoding='utf-8').read()
    dry = run_playbook('playbooks/monitoring.yml', inventory=INVENTORY, check=True, diff=True, expect_rc=0,
                       extra_vars=monitoring_vars(out, serving_monitoring_ttft_p95_seconds=3.5))
    assert dry.changed('localhost') == 1
    assert '-          > 2.0\n+          > 3.5' in dry.stdout
    assert open(os.path.join(out, 'llmops-sglang.rules.yml'), encoding='utf-8').read() == before


def check_targets(out):
    with open(os.path.join(out, 'llmops-sglang-targets.json'), encoding='utf-8') as f:
        targets = json.load(f)
    by_host = {t['labels']['host']: t for t in targets}
    assert sorted(by_host) == ['a01', 'a02', 'b01', 'c01']  # mon01 runs no server, c02 is rank 1 of c01's group
    assert by_host['a01'] == {'targets': ['10.0.0.1:30000'], 'labels': {
        'llmops': 'sglang_server', 'host': 'a01', 'server': 'main', 'model': '/models/llama',
        'served_model_name': 'llama', 'engine': 'sglang', 'version': '', 'depth': '5', 'replica_group': 'llama',
        'min_accept_length': '2.0'}}
    # listening on one address: that address; no served name: the model path is the group; no floor
    assert by_host['b01']['targets'] == ['10.0.1.1:30001']
    assert by_host['b01']['labels']['replica_group'] == '/models/qwen'
    assert (by_host['b01']['labels']['min_accept_length'], by_host['b01']['labels']['depth']) == ('', '')


def check_rules_pass_promtool(out, tmp_path):
    checked = promtool('check', 'rules', os.path.join(out, 'llmops-sglang.rules.yml'))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert 'SUCCESS: 10 rules found' in checked.stdout  # 1 + 2 floors recorded, 7 alerts
    shutil.copy(RULES_TEST, out)
    tested = promtool('test', 'rules', 'rules_test.yml', cwd=out)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert 'SUCCESS' in tested.stdout
    # the unit tests can fail: the same tests against a rules file with another TTFT threshold
    broken = tmp_path / 'broken'
    broken.mkdir()
    text = open(os.path.join(out, 'llmops-sglang.rules.yml'), encoding='utf-8').read()
    (broken / 'llmops-sglang.rules.yml').write_text(text.replace('          > 2.0\n', '          > 5.0\n'))
    shutil.copy(RULES_TEST, str(broken))
    failed = promtool('test', 'rules', 'rules_test.yml', cwd=str(broken))
    assert failed.returncode != 0 and 'LlmopsSGLangTTFTHigh' in failed.stdout + failed.stderr


def dashboard_expressions():
    """Every PromQL expression of the dashboard: panel targets, annotations, variable queries."""
    with open(DASHBOARD, encoding='utf-8') as f:
        dash = json.load(f)
    exprs = [t['expr'] for p in dash['panels'] for t in p.get('targets', [])]
    exprs += [a['expr'] for a in dash['annotations']['list'] if 'expr' in a]
    for var in dash['templating']['list']:
        if var['type'] == 'query':
            match = re.fullmatch(r'label_values\((.*), *\w+\)', var['query']['query'])
            assert match, var['query']
            exprs.append(match.group(1))
    return exprs


def test_every_dashboard_query_parses(tmp_path):
    exprs = dashboard_expressions()
    assert len(exprs) >= 15
    rules = []
    for i, expr in enumerate(exprs):
        for name, value in GRAFANA_VARS.items():
            expr = expr.replace(name, value)
        assert '$' not in expr, expr
        rules.append({'record': 'dashboard:query_%d' % i, 'expr': expr})
    path = tmp_path / 'dashboard.rules.yml'
    path.write_text(yaml.safe_dump({'groups': [{'name': 'dashboard', 'rules': rules}]}))
    checked = promtool('check', 'rules', str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert 'SUCCESS: %d rules found' % len(exprs) in checked.stdout
    # the check would see a broken query
    path.write_text(yaml.safe_dump({'groups': [{'name': 'dashboard', 'rules': rules + [
        {'record': 'dashboard:broken', 'expr': 'sum by (host) (rate(sglang:num_requests_total[1m])'}]}]}))
    assert promtool('check', 'rules', str(path)).returncode != 0


def recorded_families():
    families = dict(NOT_RECORDED)
    for run in os.listdir(RECORDED):
        path = os.path.join(RECORDED, run, 'ep.metrics.txt')
        if os.path.exists(path):
            for line in open(path, encoding='utf-8'):
                if line.startswith('# TYPE '):
                    name, kind = line.split()[2:4]
                    families[name] = kind
    return families


def test_rules_and_dashboard_use_metrics_sglang_exports():
    families = recorded_families()
    text = open(os.path.join(ROLE, 'templates', 'llmops-sglang.rules.yml.j2'), encoding='utf-8').read()
    text += open(DASHBOARD, encoding='utf-8').read()
    used = set(re.findall(r'sglang:[a-z0-9_]+', text))
    assert {'sglang:spec_verify_calls_total', 'sglang:generation_tokens_total', 'sglang:num_queue_reqs',
            'sglang:time_to_first_token_seconds_bucket'} <= used
    for name in sorted(used):
        base = re.sub(r'_(bucket|sum|count)$', '', name)
        assert name in families or families.get(base) == 'histogram', name
        if name.endswith('_total'):
            assert families[name] == 'counter', name


def test_loopback_server_of_another_host_is_refused(run_playbook, tmp_path):
    inventory = tmp_path / 'hosts.yml'
    inventory.write_text(yaml.safe_dump({'all': {'hosts': {
        'gpu-z09': {'ansible_host': '10.0.0.9', 'sglang_server_model_path': '/models/m'}}}}))
    out = str(tmp_path / 'prometheus')
    result = run_playbook('playbooks/monitoring.yml', inventory=str(inventory), extra_vars=monitoring_vars(out),
                          expect_rc=2)
    assert 'gpu-z09: the server listens on 127.0.0.1:30000' in result.stdout
    assert not os.path.exists(out)
