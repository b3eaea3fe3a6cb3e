# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_last_good.py: the history of good configurations (newest first, the last N kept,
ids, the old single-record format) and which record a rollback takes (llmops_rollback_to)."""

from __future__ import annotations

import base64
import json

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _last_good
from ansible_collections.llmops.serving.plugins.module_utils._last_good import Record, record_id, select


def files(depth):
    return {'/etc/llmops/sglang-main.sh': (b'exec python -m sglang.launch_server --depth %d\n' % depth, 0o755)}


def saved(store, *depths, keep=3):
    for depth in depths:
        store.save(files(depth), {'depth': depth, 'version': '0.5.%d' % depth}, {}, keep=keep)
    return store.history()


def test_the_last_n_are_kept_newest_first(tmp_path):
    store = Record(str(tmp_path), 'main')
    assert store.history() == [] and store.load() is None
    history = saved(store, 1, 2, 3, 4)
    assert [item['metadata']['depth'] for item in history] == [4, 3, 2]
    assert store.load()['metadata']['depth'] == 4
    assert history[0]['files'][0]['content'] == files(4)['/etc/llmops/sglang-main.sh'][0]
    assert [item['metadata']['depth'] for item in saved(store, 5, keep=1)] == [5]


def test_a_configuration_recorded_again_moves_to_the_front_once(tmp_path):
    store = Record(str(tmp_path), 'main')
    history = saved(store, 1, 2, 3, 1)
    assert [item['metadata']['depth'] for item in history] == [1, 3, 2]
    assert len(set(item['id'] for item in history)) == 3


def test_the_id_depends_on_content_not_time_or_order():
    one = record_id({'/a': (b'x', 0o644), '/b': (b'y', 0o600)}, {'v': 1}, {'/d': {'size': 1, 'sha256': 'h', 'mtime_ns': 1}})
    same = record_id({'/b': (b'y', 0o600), '/a': (b'x', 0o644)}, {'v': 1}, {'/d': {'size': 1, 'sha256': 'h', 'mtime_ns': 9}})
    assert one == same and len(one) == 12
    assert one != record_id({'/a': (b'x', 0o755), '/b': (b'y', 0o600)}, {'v': 1}, {})


def test_a_record_of_the_single_record_format_reads_as_a_history_of_one_and_migrates(tmp_path):
    old = dict(recorded_at='2026-12-01T00:00:00Z', metadata={'depth': 16, 'version': '0.5.15.post1'}, fingerprints={},
               files=[dict(path='/etc/llmops/sglang-main.sh', mode=0o755,
                           content=base64.b64encode(b'exec old\n').decode())])
    (tmp_path / 'main.json').write_text(json.dumps(old))
    store = Record(str(tmp_path), 'main')
    [item] = store.history()
    assert item['metadata']['depth'] == 16 and item['files'][0]['content'] == b'exec old\n' and len(item['id']) == 12
    history = saved(store, 5)
    assert [entry['metadata']['depth'] for entry in history] == [5, 16]
    assert history[1]['id'] == item['id']
    assert json.loads((tmp_path / 'main.json').read_text())['format'] == 2


@pytest.mark.parametrize('text', ['[]', '{"records": 3}', '{"records": [{"metadata": {}}]}', 'not json'])
def test_an_invalid_file_is_a_value_error(tmp_path, text):
    (tmp_path / 'main.json').write_text(text)
    with pytest.raises(ValueError, match='is not a valid record'):
        Record(str(tmp_path), 'main').history()


HISTORY = [dict(id='aaaa11112222', recorded_at='t3', metadata={'version': '0.5.23'}),
           dict(id='bbbb11112222', recorded_at='t2', metadata={'version': '0.5.23'}),
           dict(id='bbbc33334444', recorded_at='t1', metadata={'version': '0.5.15.post1'})]


@pytest.mark.parametrize('which, index', [
    (None, 0), ('', 0), ('last', 0), ('0', 0), ('previous', 1), ('1', 1), ('2', 2), (' 2 ', 2),
    ('aaaa11112222', 0), ('aaaa', 0), ('bbbc3', 2), ('BBBB1111', 1),
])
def test_which_record_a_rollback_takes(which, index):
    assert select(HISTORY, which) == (HISTORY[index], index)


@pytest.mark.parametrize('which, message', [
    ('3', r'3 \(3 back\) is not kept'),
    ('bbb', 'no record has the id bbb'),          # too short to be an id
    ('bbb1', 'no record has the id bbb1'),
    ('bbbb1111x', 'no record has the id'),
    ('bbb', r'the 3 records kept, newest first: 0: aaaa11112222 t3 \(version 0.5.23\); 1: '),
])
def test_a_record_that_is_not_kept_is_refused_listing_those_that_are(which, message):
    with pytest.raises(LookupError, match=message):
        select(HISTORY, which)


def test_an_ambiguous_id_prefix_is_refused():
    with pytest.raises(LookupError, match='the id bbbb is ambiguous'):
        select(HISTORY + [dict(id='bbbb99990000', recorded_at='t0', metadata={})], 'bbbb')


def test_an_id_prefix_of_digits_only_is_an_id_not_a_count():
    # One id in about 17 starts with 6 decimal digits: a prefix of 4 or more is never "n back".
    history = HISTORY + [dict(id='123456abcdef', recorded_at='t0', metadata={})]
    assert select(history, '123456') == (history[3], 3) and select(history, '1234') == (history[3], 3)
    assert select(history, '3') == (history[3], 3)


def test_previous_without_a_previous_record_is_refused():
    with pytest.raises(LookupError, match=r'previous \(1 back\) is not kept; the 1 records kept'):
        select(HISTORY[:1], 'previous')


def test_restore_summary_names_the_record_its_files_and_the_backups():
    selected = {'id': 'abc123', 'index': 1, 'recorded_at': '2026-01-01T00:00:00Z'}
    assert _last_good.restore_summary(selected, {'version': '0.5.15', 'depth': 3}, ['argv.json', 'env'],
                                      ['drafter/config.json'], []) == (
        'record abc123 (1 back, passed 2026-01-01T00:00:00Z): sglang 0.5.15, depth 3; files to restore: argv.json, env; '
        'drafter files put back from their backups: drafter/config.json')
    assert _last_good.restore_summary(selected, {'engine': 'vllm', 'version': '0.9', 'depth': None}, [], None,
                                      ['drafter/model.safetensors']).endswith(
        'vllm 0.9, depth None; files to restore: none; changed since it was recorded, no backup holds it, not restored: '
        'drafter/model.safetensors')
