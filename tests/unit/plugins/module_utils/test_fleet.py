"""The fleet-wide checks of a rollout (plugins/module_utils/_fleet.py) and the server host
pattern (plugins/filter/fleet.py)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.serving.plugins.filter.fleet import server_hosts
from ansible_collections.llmops.serving.plugins.module_utils import _fleet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


@pytest.mark.parametrize('serial, count, sizes', [
    (1, 5, [1, 1, 1, 1, 1]),
    (2, 5, [2, 2, 1]),
    ('2', 3, [2, 1]),
    ('100%', 4, [4]),
    ('10%', 5, [1, 1, 1, 1, 1]),  # ansible-core's pct_to_int: at least 1
    ('50%', 5, [2, 2, 1]),
    ([1, '50%'], 6, [1, 3, 2]),  # the last step repeats
    (0, 3, [3]),
    (None, 3, [3]),
])
def test_batches_are_cut_as_ansible_cuts_them(serial, count, sizes):
    assert _fleet.batch_sizes(serial, count) == sizes
    assert [len(b) for b in _fleet.batches(['h%d' % i for i in range(count)], serial)] == sizes


def test_a_batch_that_takes_more_servers_out_of_a_router_than_allowed_is_named():
    batch_list = _fleet.batches(['a', 'b', 'c'], 2)
    problems = _fleet.router_overload(batch_list, {'a', 'b'}, {'r1': {'a', 'b', 'c'}}, {'r1': 1})
    assert len(problems) == 1
    assert 'batch 1 would take 2 servers (a, b) out of router r1' in problems[0]
    assert 'sglang_router_max_unavailable is 1' in problems[0] and '-e llmops_serial=1' in problems[0]
    # only servers that stop count: b stays up
    assert _fleet.router_overload(batch_list, {'a'}, {'r1': {'a', 'b', 'c'}}, {'r1': 1}) == []
    assert _fleet.router_overload(batch_list, {'a', 'b'}, {'r1': {'a', 'b', 'c'}}, {'r1': 2}) == []


def test_keys_that_differ_between_a_router_and_its_servers_are_named_without_the_key():
    assert _fleet.key_mismatches('r', 'sk-1', {'a': 'sk-1'}) == []
    assert _fleet.key_mismatches('r', '', {'a': ''}) == []
    open_door = _fleet.key_mismatches('r', '', {'a': 'sk-1'})
    assert len(open_door) == 1 and 'router r has no API key (sglang_router_api_key' in open_door[0]
    other = _fleet.key_mismatches('r', 'sk-2', {'a': 'sk-1', 'b': 'sk-2'})
    assert len(other) == 1 and 'differs from the one server a requires (sglang_server_api_key)' in other[0]
    extra = _fleet.key_mismatches('r', 'sk-2', {'a': ''})
    assert len(extra) == 1 and 'does not require' in extra[0]
    assert not any('sk-' in p for p in open_door + other + extra)


@pytest.mark.parametrize('tp, heads, kv_heads, field', [
    (3, 16, 8, 'num_attention_heads'),
    (8, 32, 2, None),  # TP a multiple of the key/value heads: replicated, as SGLang allows
    (4, 32, 6, 'num_key_value_heads'),
    (8, 64, 8, None),
    (1, 7, 7, None),
])
def test_tp_against_the_models_heads(tp, heads, kv_heads, field):
    config = {'num_attention_heads': heads, 'num_key_value_heads': kv_heads}
    problems = _fleet.tp_problems('h1', tp, config, '/m/config.json')
    if field is None:
        assert problems == []
    else:
        assert len(problems) == 1 and field in problems[0] and 'h1: sglang_server_tp_size %d' % tp in problems[0]
        assert '/m/config.json' in problems[0]


def test_tp_of_a_multimodal_model_is_checked_against_its_text_config():
    config = {'architectures': ['KimiK25ForConditionalGeneration'],
              'text_config': {'num_attention_heads': 64, 'num_key_value_heads': 64}}
    assert _fleet.tp_problems('h', 8, config, 'c') == []
    assert 'num_attention_heads' in _fleet.tp_problems('h', 6, config, 'c')[0]
    assert _fleet.tp_problems('h', 3, {}, 'c') == []  # a hub id: no config to check against


def test_a_multi_node_group_cut_by_the_limit_or_the_batches_is_named():
    group = ['n1', 'n2']
    group_of = {'n1': group, 'n2': group, 's': []}
    left_out = _fleet.group_problems(group_of, ['n1', 's'], _fleet.batches(['n1', 's'], 2))
    assert len(left_out) == 1 and 'n2 is not in this run' in left_out[0] and 'sglang_server_group_hosts' in left_out[0]
    split = _fleet.group_problems(group_of, ['s', 'n1', 'n2'], _fleet.batches(['s', 'n1', 'n2'], 2))
    assert len(split) == 1 and 'different batches' in split[0]
    assert _fleet.group_problems(group_of, ['n1', 'n2', 's'], _fleet.batches(['n1', 'n2', 's'], 2)) == []


def test_undeclared_names_are_found_with_the_closest_declared_one():
    declared = _fleet.declared_names(ROOT)
    assert {'sglang_server_speculative_draft_model_path', 'sglang_router_max_unavailable', 'llmops_serial',
            'sglang_server_plan'} <= declared
    found = _fleet.unknown_names(['sglang_server_draft_model_path', 'sglang_server_tp_size', 'llmops_seriall',
                                  'ansible_host', 'llmops_something_else_entirely'], declared)
    assert dict(found)['sglang_server_draft_model_path'] == 'sglang_server_speculative_draft_model_path'
    assert dict(found)['llmops_seriall'] == 'llmops_serial'
    assert dict(found)['llmops_something_else_entirely'] is None
    assert 'sglang_server_tp_size' not in dict(found) and 'ansible_host' not in dict(found)


def test_the_suggestion_is_the_declared_name_that_holds_every_word_typed():
    # the typo that turns speculation off: difflib alone prefers sglang_server_model_path
    declared = {'sglang_server_model_path', 'sglang_server_speculative_draft_model_path',
                'sglang_server_speculative_algorithm'}
    assert _fleet.suggestion('sglang_server_draft_model_path', declared) == 'sglang_server_speculative_draft_model_path'
    assert _fleet.unknown_names(['sglang_server_draft_model_path'], declared) == [
        ('sglang_server_draft_model_path', 'sglang_server_speculative_draft_model_path')]
    # the words must come in the order typed
    assert _fleet._holds_words('sglang_server_speculative_draft_model_path', ['sglang', 'server', 'draft', 'model'])
    assert not _fleet._holds_words('sglang_server_speculative_draft_model_path', ['sglang', 'server', 'model', 'draft'])
    # of several names that hold every word, the one with the fewest words added
    assert _fleet.suggestion('sglang_server_model', declared) == 'sglang_server_model_path'


def test_without_a_declared_name_holding_every_word_the_closest_spelled_one_is_named():
    declared = {'llmops_serial', 'sglang_server_model_path', 'sglang_server_speculative_draft_model_path'}
    # 'seriall' is in no declared name: closeness decides
    assert _fleet.suggestion('llmops_seriall', declared) == 'llmops_serial'
    assert _fleet.suggestion('sglang_server_model_pth', declared) == 'sglang_server_model_path'
    assert _fleet.suggestion('llmops_something_else_entirely', declared) is None


def test_hosts_of_a_group_serving_without_its_drafter_are_flagged():
    notes = _fleet.speculation_mixed({'kimi': ['a', 'b', 'c']}, {'a': '/d', 'b': '', 'c': '/d'})
    assert notes == ['group kimi: b runs without speculative decoding (no sglang_server_speculative_draft_model_path) '
                     'while a, c run a drafter']
    assert _fleet.speculation_mixed({'kimi': ['a', 'b']}, {'a': '', 'b': ''}) == []


@pytest.mark.parametrize('groups, pattern', [
    ({'all': [], 'sglang_servers': ['a'], 'sglang_routers': ['r']}, 'sglang_servers'),
    ({'all': [], 'sglang_routers': ['r']}, 'all:!sglang_routers'),
    ({'all': [], 'ungrouped': ['localhost']}, 'all'),
])
def test_server_hosts_pattern(groups, pattern):
    assert server_hosts(groups) == pattern
