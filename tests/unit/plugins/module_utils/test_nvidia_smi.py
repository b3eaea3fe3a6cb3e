"""Parsing and GPU rules of plugins/module_utils/_nvidia_smi.py.

Parsing is checked against the genuine H200 recordings in tests/fixtures/nvidia-smi/ and
multi-GPU variants built from their lines (nvidia-smi prints one such line per GPU).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _nvidia_smi as smi

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures', 'nvidia-smi', 'h200-1gpu')
# The recordings asked for more fields than the module does (see the fixtures README).
RECORDED_GPU_FIELDS = smi.GPU_FIELDS + ('utilization.gpu', 'pci.bus_id', 'driver_version')
RECORDED_APP_FIELDS = smi.APP_FIELDS + ('gpu_bus_id',)
UUID = 'GPU-16b0d5eb-b6eb-afd8-95b9-178a9196b640'


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


def module_gpu_line(recorded_line, index=None, uuid=None, used=None, free=None):
    """One line of the module's own --query-gpu output, derived from a recorded line."""
    fields = recorded_line.strip().split(', ')[:len(smi.GPU_FIELDS)]
    for pos, value in ((0, index), (1, uuid), (4, used), (5, free)):
        if value is not None:
            fields[pos] = str(value)
    return ', '.join(fields)


def eight_gpus(busy=()):
    """8 GPUs built from the idle recording; GPUs in ``busy`` carry the busy recording's memory."""
    idle = fixture('idle-query-gpu-noheader-nounits.csv')
    lines = []
    for i in range(8):
        uuid = UUID[:-2] + '%02d' % i
        if i in busy:
            lines.append(module_gpu_line(idle, i, uuid, used=41579, free=101578))
        else:
            lines.append(module_gpu_line(idle, i, uuid))
    return '\n'.join(lines) + '\n'


@pytest.mark.parametrize('name, used, free', [
    ('idle-query-gpu-noheader-nounits.csv', 0, 143156),
    ('busy-query-gpu-noheader-nounits.csv', 41579, 101578),
])
def test_parse_recorded_gpu_query(name, used, free):
    gpus = smi.parse_gpus(fixture(name), RECORDED_GPU_FIELDS)
    assert gpus == [{'index': 0, 'uuid': UUID, 'name': 'NVIDIA H200', 'total_mib': 143771,
                     'used_mib': used, 'free_mib': free}]


def test_parse_recorded_compute_apps():
    apps = smi.parse_apps(fixture('busy-query-compute-apps-noheader-nounits.csv'), RECORDED_APP_FIELDS)
    assert apps == [{'pid': 444, 'name': 'python3', 'used_mib': 41570, 'gpu_uuid': UUID}]
    assert smi.parse_apps(fixture('idle-query-compute-apps.csv')) == []


def test_parse_recorded_leftover_orphan():
    """sglang run: 3 s after the launcher was killed, a child held 45 GB under the name [No data]."""
    path = os.path.join(FIXTURES, '..', '..', 'sglang-0.5.15.post1-h200', 'eagle3-good-mid', 'leftover.txt')
    with open(path) as f:
        apps = smi.parse_apps(f.read(), ('pid', 'process_name', 'used_memory'))
    assert apps and all(a['name'] is None and a['used_mib'] == 45242 for a in apps)


def test_parse_eight_gpus_mixed():
    gpus = smi.parse_gpus(eight_gpus(busy=(2, 5)))
    assert [g['index'] for g in gpus] == list(range(8))
    assert [g['used_mib'] for g in gpus] == [0, 0, 41579, 0, 0, 41579, 0, 0]
    assert len(set(g['uuid'] for g in gpus)) == 8


@pytest.mark.parametrize('odd', ['[N/A]', '[No data]', '[Not Supported]', '[Unknown Error]'])
def test_unavailable_fields_parse_as_none(odd):
    gpus = smi.parse_gpus('0, %s, NVIDIA H200, 143771, %s, %s\n' % (UUID, odd, odd))
    assert gpus[0]['used_mib'] is None and gpus[0]['free_mib'] is None
    apps = smi.parse_apps('4711, %s, %s, %s\n' % (odd, odd, UUID))
    assert apps == [{'pid': 4711, 'name': None, 'used_mib': None, 'gpu_uuid': UUID}]


def test_process_name_with_comma_separator():
    apps = smi.parse_apps('12, /opt/a, b/python3, 500, %s\n' % UUID)
    assert apps[0]['name'] == '/opt/a, b/python3' and apps[0]['used_mib'] == 500


@pytest.mark.parametrize('text', [
    '0, %s, NVIDIA H200, lots, 0, 143156\n' % UUID,
    '0, %s\n' % UUID,
    'Some unexpected banner text\n',
])
def test_unparsable_output(text):
    with pytest.raises(smi.NvidiaSmiError) as err:
        smi.parse_gpus(text)
    assert err.value.kind == 'unparsable'


@pytest.mark.parametrize('rc, stdout, stderr, kind, words', [
    (6, 'No devices were found\n', '', 'no_devices', 'No devices were found'),
    (0, 'No devices were found\n', '', 'no_devices', 'No devices were found'),
    (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
        'latest NVIDIA driver is installed and running.\n', '', 'driver', "couldn't communicate"),
    (18, 'Failed to initialize NVML: Driver/library version mismatch\n', '', 'driver', 'version mismatch'),
    (15, '', 'Unable to determine the device handle for GPU0000:00:06.0: GPU is lost.\n', 'driver', 'GPU is lost'),
    (127, '', 'sh: nvidia-smi: command not found\n', 'missing', 'not found'),
    (2, '', 'Invalid combination of input arguments.\n', 'failed', 'Invalid combination'),
])
def test_failure_classification(rc, stdout, stderr, kind, words):
    with pytest.raises(smi.NvidiaSmiError) as err:
        smi.run_query(['nvidia-smi', '--query-gpu=index'], lambda argv: (rc, stdout, stderr))
    assert err.value.kind == kind
    assert words in err.value.message and 'nvidia-smi --query-gpu=index' in err.value.message


def test_missing_binary_and_timeout():
    with pytest.raises(smi.NvidiaSmiError) as err:
        smi.run_query(['/nonexistent/nvidia-smi', '-L'])
    assert err.value.kind == 'missing' and 'nvidia_smi_path' in err.value.message

    def hung(argv):
        raise subprocess.TimeoutExpired(argv, smi.QUERY_TIMEOUT)
    with pytest.raises(smi.NvidiaSmiError) as err:
        smi.run_query(['nvidia-smi', '-L'], hung)
    assert err.value.kind == 'timeout'


def fake_runner(gpu_text, apps_text):
    calls = []

    def runner(argv):
        calls.append(argv)
        assert argv[-1] == '--format=csv,noheader,nounits'
        if argv[1].startswith('--query-gpu='):
            assert argv[1] == '--query-gpu=index,uuid,name,memory.total,memory.used,memory.free'
            return 0, gpu_text, ''
        assert argv[1] == '--query-compute-apps=pid,process_name,used_memory,gpu_uuid'
        return 0, apps_text, ''
    runner.calls = calls
    return runner


def test_snapshot_maps_processes_to_gpu_index():
    gpu_text = eight_gpus(busy=(3,))
    uuid3 = smi.parse_gpus(gpu_text)[3]['uuid']
    runner = fake_runner(gpu_text, '444, python3, 41570, %s\n555, [No data], 100, GPU-unknown\n' % uuid3)
    gpus, apps = smi.snapshot('/usr/bin/nvidia-smi', runner)
    assert len(gpus) == 8 and runner.calls[0][0] == '/usr/bin/nvidia-smi'
    assert [(a['pid'], a['gpu']) for a in apps] == [(444, 3), (555, None)]


def test_snapshot_empty_gpu_list_is_no_devices():
    with pytest.raises(smi.NvidiaSmiError) as err:
        smi.snapshot('nvidia-smi', fake_runner('', ''))
    assert err.value.kind == 'no_devices'


@pytest.mark.parametrize('wanted, indices, unknown', [
    (['all'], list(range(8)), []),
    ([], list(range(8)), []),
    (['3', '1', '3'], [1, 3], []),
    ([UUID[:-2] + '05'], [5], []),
    ([UUID[:-2].upper() + '05', '0'], [0, 5], []),
    (['9', 'GPU-nope'], [], ['9', 'GPU-nope']),
])
def test_select_gpus(wanted, indices, unknown):
    selected, missing = smi.select_gpus(smi.parse_gpus(eight_gpus()), wanted)
    assert [g['index'] for g in selected] == indices and missing == unknown


@pytest.mark.parametrize('busy, max_used, min_free, balance, failing', [
    ((), 1024, None, 0.9, []),
    ((2, 5), 1024, None, 0.9, [2, 5]),
    ((2,), None, None, 0.9, [2]),          # 101578 < 0.9 x 143156: SGLang's "unbalanced"
    ((2,), None, None, 0.7, []),           # 101578 >= 0.7 x 143156
    ((2,), 50000, None, None, []),
    ((2,), None, 120000, None, [2]),
    ((0, 1, 2, 3, 4, 5, 6, 7), None, None, 0.9, []),  # all equally busy: balanced
    ((0, 1, 2, 3, 4, 5, 6, 7), 1024, None, 0.9, list(range(8))),
])
def test_evaluate_thresholds(busy, max_used, min_free, balance, failing):
    problems = smi.evaluate(smi.parse_gpus(eight_gpus(busy)), max_used, min_free, balance)
    assert sorted(i for i, p in problems.items() if p) == failing
    assert all(len(p) >= 1 for i, p in problems.items() if i in failing)


def test_evaluate_unavailable_memory_is_a_problem():
    gpus = smi.parse_gpus('0, %s, NVIDIA H200, 143771, [N/A], [N/A]\n' % UUID)
    assert smi.evaluate(gpus, 1024, None, 0.9)[0] == ['memory figures unavailable (nvidia-smi printed [N/A])']


# listing_check: the GPUs a server needs against those nvidia-smi lists (gpu_memory's required_gpus).
LISTED = [{'index': index, 'uuid': 'GPU-%d' % index} for index in range(4)]


def _listing(wanted, listed=LISTED):
    return smi.listing_check(listed, wanted, 'the server', 'ns1')


def test_listing_check_every_gpu_listed_by_index_or_uuid():
    assert _listing(['0', 1, 'GPU-3']) == {'ok': True, 'missing': [], 'count': 4, 'msg': '3 GPU(s) 0, 1, GPU-3 of 4 on ns1'}


def test_listing_check_names_what_is_missing():
    assert _listing([8, 9]) == {'ok': False, 'missing': ['8', '9'], 'count': 4, 'msg': (
        'the server needs GPUs 8, 9 on ns1, but nvidia-smi lists 4 GPUs (indices 0, 1, 2, 3; missing: 8, 9); '
        'nothing was stopped or changed')}
    assert _listing(['GPU-7'], LISTED[:1])['msg'] == (
        'the server needs GPU GPU-7 on ns1, but nvidia-smi lists 1 GPU (indices 0; missing: GPU-7); '
        'nothing was stopped or changed')
