# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/gpus.py: gpu_listing_check, the GPUs a server needs against those nvidia-smi lists."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.filter import gpus

LISTED = [{'index': index, 'uuid': 'GPU-%d' % index} for index in range(4)]


def check(wanted, listed=LISTED):
    return gpus.FilterModule().filters()['gpu_listing_check'](listed, wanted, 'the server', 'ns1')


def test_every_gpu_listed_by_index_or_uuid():
    assert check(['0', 1, 'GPU-3']) == {'ok': True, 'missing': [], 'count': 4, 'msg': '3 GPU(s) 0, 1, GPU-3 of 4 on ns1'}


def test_the_refusal_names_what_is_missing():
    assert check([8, 9]) == {'ok': False, 'missing': ['8', '9'], 'count': 4, 'msg': (
        'the server needs GPUs 8, 9 on ns1, but nvidia-smi lists 4 GPUs (indices 0, 1, 2, 3; missing: 8, 9); '
        'nothing was stopped or changed')}
    assert check(['GPU-7'], LISTED[:1])['msg'] == (
        'the server needs GPU GPU-7 on ns1, but nvidia-smi lists 1 GPU (indices 0; missing: GPU-7); '
        'nothing was stopped or changed')
