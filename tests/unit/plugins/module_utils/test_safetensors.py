# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

import errno
import json
import os
import re
import struct

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from ansible_collections.llmops.serving.plugins.module_utils import _safetensors as st


def write_raw(path, header, data=b'', pad=0):
    blob = json.dumps(header).encode() + b' ' * pad
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(blob)) + blob + data)
    return path


@pytest.fixture
def sample(tmp_path):
    tensors = {'layers.0.a': np.arange(12, dtype=np.float32).reshape(3, 4),
               'fc.weight': np.ones((2, 2), dtype=np.float16), 'd2t': np.arange(5, dtype=np.int64)}
    path = str(tmp_path / 'model.safetensors')
    save_file(tensors, path, metadata={'format': 'pt'})
    return path, tensors


def test_read_header_of_a_real_file(sample):
    path, tensors = sample
    header = st.read_header(path)
    assert set(header.tensors) == set(tensors)
    assert header.metadata == {'format': 'pt'}
    assert header.parameters() == 12 + 4 + 5
    assert header.data_start + header.data_len == os.path.getsize(path)


GOOD = {'a': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]}}


@pytest.mark.parametrize('content, message', [
    (b'\x01\x02', 'truncated: 2 bytes'),
    (struct.pack('<Q', 1000) + b'{}', 'header length 1000 is larger than the 2 bytes'),
    (struct.pack('<Q', 2 ** 40) + b'{}', 'absurdly large'),
    (b'hello world, this is not a safetensors file at all', 'absurdly large'),
    (struct.pack('<Q', 5) + b'{"a":', 'not valid UTF-8 JSON'),
    (struct.pack('<Q', 2) + b'\xff\xfe', 'not valid UTF-8 JSON'),
    (struct.pack('<Q', 2) + b'[]', 'header is JSON list, not an object'),
])
def test_read_header_rejects_broken_files(tmp_path, content, message):
    path = tmp_path / 'bad.safetensors'
    path.write_bytes(content)
    with pytest.raises(st.SafetensorsError, match=r'bad\.safetensors: .*' + re.escape(message)):
        st.read_header(str(path))


def test_read_header_of_a_missing_file(tmp_path):
    with pytest.raises(st.SafetensorsError, match='cannot read'):
        st.read_header(str(tmp_path / 'nope.safetensors'))


@pytest.mark.parametrize('header, data, message', [
    ({'a': 3}, b'', 'entry is not an object'),
    ({'a': {'dtype': 'F99', 'shape': [2], 'data_offsets': [0, 8]}}, b'x' * 8, "unknown dtype 'F99'"),
    ({'a': {'dtype': 'F32', 'shape': [-1], 'data_offsets': [0, 8]}}, b'x' * 8, 'not a list of non-negative'),
    ({'a': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0]}}, b'x' * 8, 'are not [begin, end]'),
    ({'a': {'dtype': 'F32', 'shape': [2], 'data_offsets': [8, 0]}}, b'x' * 8, 'are not [begin, end]'),
    ({'a': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]}}, b'x' * 4, 'out of range'),
    ({'a': {'dtype': 'F32', 'shape': [3], 'data_offsets': [0, 8]}}, b'x' * 8, 'size mismatch'),
    ({'a': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]},
      'b': {'dtype': 'F32', 'shape': [2], 'data_offsets': [4, 12]}}, b'x' * 12, 'overlapping'),
    ({'a': {'dtype': 'F32', 'shape': [2], 'data_offsets': [4, 12]}}, b'x' * 12, 'gap'),
    (GOOD, b'x' * 12, 'trailing bytes'),
    ({'__metadata__': 'x', **GOOD}, b'x' * 8, '__metadata__ is not an object'),
])
def test_read_header_rejects_bad_entries(tmp_path, header, data, message):
    path = write_raw(str(tmp_path / 'bad.safetensors'), header, data)
    with pytest.raises(st.SafetensorsError, match=r'bad\.safetensors.*' + re.escape(message)):
        st.read_header(path)


def test_header_padding_is_allowed(tmp_path):
    path = write_raw(str(tmp_path / 'p.safetensors'), GOOD, b'x' * 8, pad=13)
    assert st.read_header(path).header_len == len(json.dumps(GOOD)) + 13


def test_encode_header_pads_or_refuses():
    region = st.encode_header(GOOD, None, 100)
    assert len(region) == 100 and region.rstrip(b' ') == json.dumps(GOOD, separators=(',', ':')).encode()
    assert st.encode_header(GOOD, None, 10) is None
    assert len(st.encode_header(GOOD, {'format': 'pt'})) % 8 == 0


@pytest.mark.parametrize('old, new, span', [
    (b'abcdef', b'abcdef', None), (b'abcdef', b'abXdef', (2, 3)), (b'abcdef', b'Xbcdez', (0, 6)),
])
def test_changed_span(old, new, span):
    assert st.changed_span(old, new) == span


def test_in_place_is_atomic_only_within_one_page():
    page = st.PAGE_SIZE
    old = b'a' * (2 * page)
    assert st.in_place_is_atomic(old, b'b' * 10 + old[10:])
    assert not st.in_place_is_atomic(old, b'b' + old[1:-1] + b'b')
    near = page - 8  # file offset 8 + near is the first byte of page 2
    assert not st.in_place_is_atomic(old, old[:near - 1] + b'bb' + old[near + 1:])


def renamed(header, old_prefix, new_prefix):
    return {(new_prefix + n[len(old_prefix):] if n.startswith(old_prefix) else n): v
            for n, v in header.tensors.items()}


def test_write_header_in_place_keeps_data(sample):
    path, tensors = sample
    header = st.read_header(path)
    region = st.encode_header(renamed(header, 'layers.0.', 'midlayer.'), header.metadata, header.header_len)
    size = os.path.getsize(path)
    written, saved = st.write_header_in_place(header, region, backup=True)
    assert 0 < written <= header.header_len and os.path.getsize(path) == size
    loaded = load_file(path)
    np.testing.assert_array_equal(loaded['midlayer.a'], tensors['layers.0.a'])
    assert 'layers.0.a' not in loaded
    assert not os.path.exists(st.journal_path(path))
    with open(saved, 'rb') as f:
        assert f.read() == struct.pack('<Q', header.header_len) + header.raw


def test_write_header_in_place_refuses_a_header_changed_meanwhile(sample):
    path = sample[0]
    header = st.read_header(path)
    region = st.encode_header(renamed(header, 'layers.0.', 'midlayer.'), header.metadata, header.header_len)
    with open(path, 'r+b') as f:
        f.seek(9)
        f.write(b' ')
    with pytest.raises(st.SafetensorsError, match='changed while'):
        st.write_header_in_place(header, region)
    assert not os.path.exists(st.journal_path(path))


@pytest.mark.parametrize('kernel_copy', ['copy_file_range', 'sendfile', 'read'])
def test_rewrite_with_header_streams_data(sample, monkeypatch, kernel_copy):
    path, tensors = sample
    if kernel_copy != 'copy_file_range':
        monkeypatch.setattr(os, 'copy_file_range', _fails(errno.EXDEV), raising=False)
    if kernel_copy == 'read':
        monkeypatch.setattr(os, 'sendfile', _fails(errno.EINVAL))
    os.chmod(path, 0o640)
    header = st.read_header(path)
    new = renamed(header, 'layers.0.', 'a.much.longer.prefix.layers.0.')
    region = st.encode_header(new, header.metadata)
    assert st.encode_header(new, header.metadata, header.header_len) is None
    written, saved = st.rewrite_with_header(header, region, backup=True)
    assert written == os.path.getsize(path)
    assert oct(os.stat(path).st_mode & 0o777) == oct(0o640)
    loaded = load_file(path)
    np.testing.assert_array_equal(loaded['a.much.longer.prefix.layers.0.a'], tensors['layers.0.a'])
    np.testing.assert_array_equal(loaded['d2t'], tensors['d2t'])
    assert set(load_file(saved)) == set(tensors)  # the original, kept as a hard link
    assert not st.pending_recovery(os.path.dirname(path))


def test_rewrite_with_header_refuses_a_header_changed_meanwhile(sample):
    """A stale header (another run rewrote the file since) would copy data from the wrong
    offset: the source header is verified first, and nothing is written."""
    path, tensors = sample
    stale = st.read_header(path)
    other = st.read_header(path)
    longer = st.encode_header(renamed(other, 'layers.0.', 'another.longer.prefix.layers.0.'), other.metadata)
    st.rewrite_with_header(other, longer)
    current = open(path, 'rb').read()
    region = st.encode_header(renamed(stale, 'layers.0.', 'a.much.longer.prefix.layers.0.'), stale.metadata)
    with pytest.raises(st.SafetensorsError, match=r'model\.safetensors: header changed while'):
        st.rewrite_with_header(stale, region)
    assert open(path, 'rb').read() == current
    assert not st.pending_recovery(os.path.dirname(path))
    np.testing.assert_array_equal(load_file(path)['another.longer.prefix.layers.0.a'], tensors['layers.0.a'])


@pytest.mark.parametrize('value, kind', [
    (9, 'integer `9`'), (1.5, 'floating point `1.5`'), (True, 'boolean `true`'), (None, 'null'),
    ([1], 'sequence'), ({'a': 'b'}, 'map'),
])
def test_metadata_values_must_be_strings_as_safetensors_requires(tmp_path, value, kind):
    path = write_raw(str(tmp_path / 'bad.safetensors'), {'__metadata__': {'format': 'pt', 'epoch': value},
                                                         **GOOD}, b'x' * 8)
    reason = 'invalid type: %s, expected a string' % kind
    with pytest.raises(Exception, match=re.escape(reason)):  # the library's own wording
        load_file(path)
    with pytest.raises(st.SafetensorsError, match=re.escape("bad.safetensors: __metadata__ 'epoch': ")
                       + '.*' + re.escape(reason)):
        st.read_header(path)


def _fails(code):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))
    return fail


def test_rewrite_to_a_symlink_replaces_the_link_only(tmp_path, sample):
    path, tensors = sample
    link = str(tmp_path / 'snap.safetensors')
    os.symlink(path, link)
    before = open(path, 'rb').read()
    header = st.read_header(link)
    region = st.encode_header(renamed(header, 'layers.0.', 'midlayer.'), header.metadata)
    st.rewrite_with_header(header, region, dest=link)
    assert not os.path.islink(link) and open(path, 'rb').read() == before
    assert 'midlayer.a' in load_file(link)


def test_atomic_write_replaces_a_symlink_not_its_target(tmp_path):
    target = tmp_path / 'blob'
    target.write_text('shared')
    link = tmp_path / 'config.json'
    os.symlink(str(target), str(link))
    st.atomic_write(str(link), b'{}\n')
    assert target.read_text() == 'shared' and link.read_text() == '{}\n' and not link.is_symlink()


def _journal_for(path):
    header = st.read_header(path)
    region = st.encode_header(renamed(header, 'layers.0.', 'midlayer.'), header.metadata, header.header_len)
    begin, end = st.changed_span(header.raw, region)
    st.atomic_write(st.journal_path(path), st._encode_journal(8 + begin, header.raw[begin:end],
                                                              region[begin:end]), 0o600)
    return header, region, begin, end


@pytest.mark.parametrize('state', ['untouched', 'torn', 'complete'])
def test_recover_after_an_interrupted_in_place_write(sample, state):
    path, tensors = sample
    original = open(path, 'rb').read()
    header, region, begin, end = _journal_for(path)
    with open(path, 'r+b') as f:
        if state == 'torn':
            f.seek(8 + begin)
            f.write(region[begin:(begin + end) // 2])
        elif state == 'complete':
            f.seek(8 + begin)
            f.write(region[begin:end])
    done = st.recover(os.path.dirname(path))
    assert any('removed journal' in d for d in done)
    assert not st.pending_recovery(os.path.dirname(path))
    if state == 'complete':
        assert 'midlayer.a' in load_file(path)
    else:
        assert open(path, 'rb').read() == original
        assert (state == 'torn') == any('restored the original header' in d for d in done)


def test_recover_drops_a_torn_journal_and_leftover_temporaries(sample):
    path = sample[0]
    original = open(path, 'rb').read()
    directory = os.path.dirname(path)
    with open(st.journal_path(path), 'wb') as f:
        f.write(st.JOURNAL_MAGIC + b'\x00' * 40)
    leftover = os.path.join(directory, '.model.safetensors.drafter-tmp-4242')
    open(leftover, 'wb').close()
    assert st.pending_recovery(directory)
    done = st.recover(directory)
    assert len(done) == 2 and open(path, 'rb').read() == original
    assert sorted(os.listdir(directory)) == ['model.safetensors']
    assert st.recover(directory) == []


def test_backup_names_never_collide(tmp_path):
    path = str(tmp_path / 'f.safetensors')
    first = st.backup_path(path, 'orig')
    open(first, 'w').close()
    assert st.backup_path(path, 'orig') != first
