# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Multi-node rendezvous of the simulator (TEST DOUBLE): ``--nnodes N --node-rank R --dist-init-addr H:P``.

A real TCP rendezvous stands in for torch.distributed's TCPStore: rank 0 listens on
``--dist-init-addr`` and waits for the other N-1 node ranks, each of which connects and
says its rank. The connections stay open: a peer whose connection ends has died, and the
survivor is left running but useless, as NCCL leaves it (sgl-project/sglang#3099). The
timeout is ``--dist-timeout`` or torch's default for NCCL process groups (600 s); the
timeout texts are torch's (c10d TCPStore), not recorded by us on hardware.
"""

from __future__ import annotations

import socket
import threading
import time

# torch.distributed's default process-group timeout for NCCL (--dist-timeout unset).
DEFAULT_TIMEOUT = 600.0
RETRY_SECONDS = 0.1


class RendezvousError(Exception):
    """Rendezvous failed; the text is the exception line torch prints."""


def address(dist_init_addr):
    host, sep, port = str(dist_init_addr).rpartition(':')
    if not sep or not port.isdigit():
        raise RendezvousError('ValueError: --dist-init-addr must be host:port, got %r' % dist_init_addr)
    return host.strip('[]'), int(port)


class Group:
    """This node's part of the group; ``join()`` returns once every node rank is there."""

    def __init__(self, nnodes, node_rank, dist_init_addr, timeout, ranks_per_node, on_peer_lost):
        self.nnodes = nnodes
        self.rank = node_rank
        self.host, self.port = address(dist_init_addr)
        self.timeout = float(timeout) if timeout else DEFAULT_TIMEOUT
        self.ranks_per_node = max(1, ranks_per_node)
        self.on_peer_lost = on_peer_lost
        self.peers = {}

    def join(self):
        if self.rank == 0:
            self._serve()
        else:
            self._connect()
        for rank, conn in self.peers.items():
            threading.Thread(target=self._watch, args=(rank, conn), name='dist-peer-%d' % rank, daemon=True).start()

    def _serve(self):
        listener = socket.socket(socket.AF_INET6 if ':' in self.host else socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((self.host, self.port))
        except OSError as exc:
            raise RendezvousError('torch.distributed.DistNetworkError: The server socket has failed to listen on any '
                                  'local network address. port: %d, useIpv6: 0, code: -%d, name: %s, message: %s'
                                  % (self.port, exc.errno or 0, exc.__class__.__name__, exc.strerror or exc))
        listener.listen(self.nnodes)
        started = time.monotonic()
        try:
            while len(self.peers) < self.nnodes - 1:
                left = started + self.timeout - time.monotonic()
                if left <= 0:
                    joined = (1 + len(self.peers)) * self.ranks_per_node
                    raise RendezvousError('torch.distributed.DistStoreError: Timed out after %d seconds waiting for '
                                          'clients. %d/%d clients joined.'
                                          % (int(self.timeout) + 1, joined, self.nnodes * self.ranks_per_node))
                listener.settimeout(left)
                try:
                    conn, dummy = listener.accept()
                except socket.timeout:
                    continue
                rank = _read_rank(conn)
                if rank is None or rank in self.peers or not 0 < rank < self.nnodes:
                    conn.close()
                    continue
                conn.settimeout(None)
                self.peers[rank] = conn
            for conn in self.peers.values():
                conn.sendall(b'ready\n')
        finally:
            listener.close()

    def _connect(self):
        started = time.monotonic()
        while True:
            try:
                conn = socket.create_connection((self.host, self.port), timeout=RETRY_SECONDS * 10)
                conn.sendall(b'rank %d\n' % self.rank)
                conn.settimeout(max(0.1, started + self.timeout - time.monotonic()))
                if conn.recv(16).startswith(b'ready'):
                    conn.settimeout(None)
                    self.peers[0] = conn
                    return
                conn.close()
            except OSError:
                pass
            if time.monotonic() - started >= self.timeout:
                raise RendezvousError('torch.distributed.DistNetworkError: The client socket has timed out after %dms '
                                      'while trying to connect to (%s, %d).'
                                      % (int(self.timeout * 1000), self.host, self.port))
            time.sleep(RETRY_SECONDS)

    def _watch(self, rank, conn):
        try:
            while conn.recv(64):
                pass
        except OSError:
            pass
        self.on_peer_lost(rank)


def _read_rank(conn):
    conn.settimeout(5.0)
    try:
        line = conn.recv(64).decode('ascii', 'replace').split()
    except OSError:
        return None
    if len(line) == 2 and line[0] == 'rank' and line[1].isdigit():
        return int(line[1])
    return None
