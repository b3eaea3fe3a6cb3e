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


def _listener(port, new_session):
    code = ('import socket, sys; s = socket.socket(); s.bind(("127.0.0.1", %d)); s.listen(); '
            'print("up", flush=True); sys.stdin.read()' % port)
    proc = subprocess.Popen([sys.executable, '-c', code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=new_session)
    assert proc.stdout.readline() == 'up\n'
    return proc


def test_a_listener_of_another_session_is_foreign_and_ours_is_not():
    """A deploy whose server could not bind its port: the server it watches leads its own
    session; the one answering on the port belongs to another session."""
    port = free_port()
    foreign = _listener(port, new_session=True)
    ours = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'], stdin=subprocess.PIPE,
                            start_new_session=True)
    try:
        found = _ports.foreign_listeners(port, ours.pid)
        assert [info.pid for info in found] == [foreign.pid]
        assert _ports.foreign_listeners(port, foreign.pid) == []
        assert _ports.local_port('http://127.0.0.1:%d' % port) == port
        assert _ports.local_port('http://10.1.2.3:%d' % port) is None
        assert _ports.local_port('https://localhost/') == 443
    finally:
        for proc in (foreign, ours):
            proc.stdin.close()
            proc.wait(timeout=10)
    # Nothing listens: no evidence, no verdict.
    assert _ports.foreign_listeners(port, os.getpid()) == []
