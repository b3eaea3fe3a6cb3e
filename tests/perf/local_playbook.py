# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the perf scripts that run playbooks on this machine share: a free port and one
``ansible-playbook`` run with the project's config and installed collection."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def playbook(name, inventory, extra):
    """Run ``name`` (relative to the repository) with ``extra`` passed as a vars file (never
    on the command line); returns the CompletedProcess (output captured)."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, '.collections'), ANSIBLE_NOCOLOR='1')
    with tempfile.NamedTemporaryFile('w', suffix='.json') as handle:
        json.dump(extra, handle)
        handle.flush()
        return subprocess.run([os.path.join(BIN, 'ansible-playbook'), '-i', inventory, os.path.join(ROOT, name),
                               '-e', '@' + handle.name], env=env, capture_output=True, text=True, check=False)
