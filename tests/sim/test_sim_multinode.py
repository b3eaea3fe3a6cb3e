# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulator's multi-node group: rendezvous at --dist-init-addr, dummy API on ranks >= 1, a dead peer."""

from __future__ import annotations

import signal

from sim_helpers import free_port, wait_for

READY = 'The server is fired up and ready to roll!'


def _group(start_sim, *flags, ranks=(0, 1), nnodes=2, addr=None):
    addr = addr or '127.0.0.1:%d' % free_port()
    return [start_sim('--nnodes', str(nnodes), '--node-rank', str(rank), '--dist-init-addr', addr, '--tp-size', str(nnodes),
                      '--base-gpu-id', str(rank), *flags, wait=False) for rank in ranks]


def test_rank0_serves_after_every_rank_joined(start_sim):
    rank0, rank1 = _group(start_sim)
    rank0.wait_ready()
    assert rank0.get('/v1/models')[0] == 200
    wait_for(lambda: rank1.get('/health')[0] == 200, what='dummy health of rank 1')
    for path in ('/health', '/health_generate', '/ping', '/metrics'):
        assert rank1.get(path)[0] == 200, path
    assert rank1.get('/v1/models')[0] == 404
    assert READY not in rank1.log()
    # One scheduler per local GPU: --tp-size counts both nodes.
    assert rank0.log().count('Init torch distributed ends') == 1


def test_rank0_waits_for_the_others_and_fails_after_the_timeout(start_sim):
    rank0, = _group(start_sim, '--dist-timeout', '1', ranks=(0,))
    assert rank0.proc.wait(30) == -signal.SIGKILL
    log = rank0.log()
    assert 'torch.distributed.DistStoreError: Timed out after 2 seconds waiting for clients. 1/2 clients joined.' in log
    assert READY not in log and 'Uvicorn running' not in log


def test_a_rank_without_rank0_fails_after_the_timeout(start_sim):
    addr = '127.0.0.1:%d' % free_port()
    rank1, = _group(start_sim, '--dist-timeout', '1', ranks=(1,), addr=addr)
    assert rank1.proc.wait(30) == -signal.SIGKILL
    assert ('torch.distributed.DistNetworkError: The client socket has timed out after 1000ms while trying to connect '
            'to (127.0.0.1, %s).' % addr.split(':')[1]) in rank1.log()


def test_a_dead_rank_leaves_rank0_up_but_unhealthy(start_sim):
    rank0, rank1 = _group(start_sim)
    rank0.wait_ready()
    assert rank0.get('/health')[0] == 200
    rank1.proc.send_signal(signal.SIGKILL)
    rank1.proc.wait(10)
    wait_for(lambda: rank0.get('/health')[0] == 503, what='rank 0 unhealthy')
    assert rank0.proc.poll() is None


def test_a_dead_rank0_leaves_the_dummy_health_of_rank1_up(start_sim):
    rank0, rank1 = _group(start_sim)
    rank0.wait_ready()
    wait_for(lambda: rank1.get('/health')[0] == 200, what='dummy health of rank 1')
    rank0.proc.send_signal(signal.SIGKILL)
    rank0.proc.wait(10)
    assert rank1.get('/health')[0] == 200
    assert rank1.proc.poll() is None
