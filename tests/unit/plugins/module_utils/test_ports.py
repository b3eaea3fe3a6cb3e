"""Who listens on a port (plugins/module_utils/_ports.py), with real sockets and processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from ansible_collections.llmops.serving.plugins.module_utils import _ports


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def test_a_listening_socket_of_this_process_is_found():
    with socket.socket(socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET) as sock:
        sock.bind(('::1' if socket.has_ipv6 else '127.0.0.1', 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert [info.pid for info in _ports.listeners(port)] == [os.getpid()]


def test_another_process_is_named_and_a_free_port_has_no_listener():
    port = free_port()
    assert _ports.listeners(port) == []
    code = ('import socket, sys; s = socket.socket(); s.bind(("127.0.0.1", %d)); s.listen(); '
            'print("up", flush=True); sys.stdin.read()' % port)
    proc = subprocess.Popen([sys.executable, '-c', code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == 'up\n'
        found = _ports.listeners(port)
        assert [info.pid for info in found] == [proc.pid]
        assert _ports.describe(found).startswith('PID %d (%s -c import socket' % (proc.pid, sys.executable))
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
    assert _ports.listeners(port) == []


def test_a_connected_socket_is_not_a_listener():
    with socket.socket() as server:
        server.bind(('127.0.0.1', 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(('127.0.0.1', port)) as client:
            client_port = client.getsockname()[1]
            assert _ports.listeners(client_port) == []
    assert _ports.describe([]) == 'an unknown process'
