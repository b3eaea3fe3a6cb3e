# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rulebooks and event sources agree with the alert rules they act on: one alert name, one rule."""

from __future__ import annotations

import os
import re

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EDA = os.path.join(ROOT, 'extensions', 'eda')
RULES = os.path.join(ROOT, 'roles', 'serving_monitoring', 'templates', 'llmops-sglang.rules.yml.j2')


def rulebook(name):
    with open(os.path.join(EDA, 'rulebooks', name)) as f:
        return yaml.safe_load(f)


def test_the_collapse_alert_is_the_one_the_monitoring_rules_define():
    with open(RULES) as f:
        alerts = re.findall(r'- alert: (\S+)', f.read())
    assert 'LlmopsSpecAcceptLengthBelowFloor' in alerts
    with open(os.path.join(EDA, 'plugins', 'event_source', 'acceptance_poller.py')) as f:
        assert "ALERT = 'LlmopsSpecAcceptLengthBelowFloor'" in f.read()
    for name in ('speculation_guard.yml', 'speculation_guard_poll.yml'):
        (ruleset,) = rulebook(name)
        (rule,) = ruleset['rules']
        assert 'event.alert.name == "LlmopsSpecAcceptLengthBelowFloor"' in rule['condition']
        assert 'event.alert.status == "firing"' in rule['condition']


def test_both_rulebooks_run_the_same_rule_one_at_a_time():
    (webhook,) = rulebook('speculation_guard.yml')
    (poll,) = rulebook('speculation_guard_poll.yml')
    assert webhook['rules'] == poll['rules']
    assert webhook['execution_strategy'] == poll['execution_strategy'] == 'sequential'
    action = webhook['rules'][0]['action']['run_playbook']
    assert set(action['extra_vars']) == {'llmops_remediate_host', 'llmops_collapsed_hosts', 'llmops_remediate_trigger'}
    assert list(webhook['sources'][0])[1] == 'llmops.serving.alertmanager_webhook'
    assert list(poll['sources'][0])[1] == 'llmops.serving.acceptance_poller'


def test_the_guard_role_writes_every_variable_the_rulebooks_read():
    # A variable the rulebook reads and the role does not write falls back to its default silently (the
    # poller once ran without the fleet CA and the inference key this way).
    read = set()
    for name in ('speculation_guard.yml', 'speculation_guard_poll.yml'):
        with open(os.path.join(EDA, 'rulebooks', name)) as f:
            read.update(re.findall(r'\{\{ *((?:webhook|poll)_[a-z_]+)', f.read()))
    with open(os.path.join(ROOT, 'roles', 'speculation_guard', 'templates', 'vars.yml.j2')) as f:
        written = set(re.findall(r"'((?:webhook|poll)_[a-z_]+)':", f.read()))
    assert {'poll_api_key', 'poll_ca_path', 'webhook_token'} <= read
    assert read - {'poll_floor'} == written  # poll_floor: the role's targets each carry their floor
