# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""llmops.serving.fleet_tls: the fleet CA and a certificate per host, idempotent, keys 0600 and never output."""

from __future__ import annotations

import json
import os
import stat

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmops.serving.plugins.module_utils import _tls
from ansible_collections.llmops.serving.plugins.modules import fleet_tls


def run(capsys, **args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            fleet_tls.main()
    return json.loads(capsys.readouterr().out)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_makes_the_ca_and_the_host_certificates_once(capsys, tmp_path):
    path = str(tmp_path / 'tls')
    hosts = {'gpu-01': ['10.0.0.11'], 'router': '10.0.0.5'}
    first = run(capsys, path=path, hosts=hosts)
    assert first['changed'] and first['made'] == {'ca': 'missing', 'gpu-01': 'missing', 'router': 'missing'}
    for name in ('ca.key', 'gpu-01.key', 'router.key'):
        assert mode(os.path.join(path, name)) == 0o600
    with open(os.path.join(path, 'ca.crt')) as handle:
        ca = handle.read()
    with open(first['certificates']['gpu-01']['cert']) as handle:
        cert = handle.read()
    assert _tls.signed_by(cert, ca)
    assert set(_tls.cert_info(cert)['names']) >= {'gpu-01', '10.0.0.11', '127.0.0.1', 'localhost'}
    out = json.dumps(first)
    for name in ('ca.key', 'gpu-01.key'):
        with open(os.path.join(path, name)) as handle:
            assert handle.read().split('\n')[1] not in out  # no key material in the result
    assert 'PRIVATE KEY' not in out
    second = run(capsys, path=path, hosts=hosts)
    assert not second['changed'] and second['made'] == {}


def test_a_new_name_remakes_that_host_only_and_check_mode_writes_nothing(capsys, tmp_path):
    path = str(tmp_path / 'tls')
    run(capsys, path=path, hosts={'a': ['10.0.0.1'], 'b': ['10.0.0.2']})
    before = os.stat(os.path.join(path, 'a.crt')).st_mtime_ns
    planned = run(capsys, path=path, hosts={'a': ['10.0.0.1', '10.0.0.9'], 'b': ['10.0.0.2']}, _ansible_check_mode=True)
    assert planned['changed'] and planned['made'] == {'a': 'names missing: 10.0.0.9'}
    assert os.stat(os.path.join(path, 'a.crt')).st_mtime_ns == before
    done = run(capsys, path=path, hosts={'a': ['10.0.0.1', '10.0.0.9'], 'b': ['10.0.0.2']})
    assert done['made'] == {'a': 'names missing: 10.0.0.9'}
