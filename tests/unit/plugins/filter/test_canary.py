"""The canary gate's verdict (plugins/filter/canary.py)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.canary import canary_verdict


def rounds(*tok_s, accept=None):
    return [{'runs': [{'concurrency': 4, 'output_throughput': value, 'failed': 0, 'accept_length': accept}]}
            for value in tok_s]


def test_a_neutral_change_with_noise_passes():
    verdict = canary_verdict(rounds(1000, 1100, 900, accept=4.5), rounds(880, 1010, 950, accept=4.4))
    assert verdict['passed'] and verdict['reasons'] == []
    assert verdict['figures']['output_throughput']['before'] == {'min': 900, 'median': 1000, 'max': 1100}
    assert verdict['report'] == [
        'canary gate: passed',
        'figure         before (min / median / max)  after (min / median / max)',
        'output tok/s   900.0 / 1000.0 / 1100.0      880.0 / 950.0 / 1010.0',
        'accept length  4.50 / 4.50 / 4.50           4.40 / 4.40 / 4.40']


def test_one_slow_round_is_not_a_regression():
    # Median after is 850 (15 % below), but the best round after reaches the median before.
    assert canary_verdict(rounds(1000, 1000, 1000), rounds(850, 700, 1000))['passed']


def test_a_thirty_percent_slower_server_fails_with_the_figures():
    verdict = canary_verdict(rounds(1000, 1050, 950, accept=4.5), rounds(700, 720, 690, accept=4.5))
    assert not verdict['passed'] and verdict['report'][0] == 'canary gate: FAILED'
    assert verdict['reasons'] == ['output throughput fell from 1000.0 to 700.0 tok/s (median of 3 rounds; best round '
                                  'after: 720.0; allowed: 10 % below, 900.0)']


def test_a_drafter_accepted_less_fails_on_acceptance_length():
    verdict = canary_verdict(rounds(1000, 1000, 1000, accept=4.5), rounds(1000, 1000, 1000, accept=4.1))
    assert not verdict['passed']
    assert verdict['reasons'] == ['acceptance length fell from 4.50 to 4.10 (allowed drop: 0.30)']
    assert canary_verdict(rounds(1000, accept=4.5), rounds(1000, accept=4.25))['passed']
    lost = canary_verdict(rounds(1000, accept=4.5), rounds(1000))
    assert lost['reasons'] == ['the acceptance length was 4.50 before the change and is not reported after it']


def test_incomplete_rounds_are_an_error():
    with pytest.raises(AnsibleFilterError, match='round 2 of the after benchmark did not complete'):
        canary_verdict(rounds(1000), rounds(1000) + [{'runs': [{'failed': 3, 'errors': ['HTTP 500']}]}])
    with pytest.raises(AnsibleFilterError, match='needs benchmark rounds before and after'):
        canary_verdict([], rounds(1000))
