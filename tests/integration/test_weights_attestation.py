"""Weights attestation (issue 49, item 4) on the shared test fleet: two servers of one model group (ns1, ns2 of
group fleet_ns) with the SGLang simulator (a test double: its /weights_checker hashes the bytes of the weights it
loaded, sglang/_weights.py), ns2's copy of the weights with one tensor changed. The rolling deploy starts ns1 (no
other replica serves yet: not checked), then ns2, whose checksum differs from ns1's: ns2 fails like a failed smoke
request (no last good configuration: left stopped, out of service), is named in the summary, and ns1 serves.

A server of its own name and port ('wa', 31300) beside the other files' servers; the hosts are wiped first.
"""

from __future__ import annotations

import re

from test_deploy import SIM, deploy_vars, summary_rows

HOSTS = ['ns1', 'ns2']
PORT = 31300
ADMIN_KEY = 'adm-llmops-attest-5e6f7a8b'
TARGET = '/srv/llmops/checkpoints/target/model.safetensors'
TENSOR = 'model.layers.0.mlp.up_proj.weight'


def wa_vars(**overrides):
    base = deploy_vars(sglang_server_name='wa', sglang_server_port=PORT, llmops_serial=1, sglang_server_host='0.0.0.0',
                       sglang_server_admin_api_key=ADMIN_KEY, sglang_server_weights_group='fleet_ns')
    base.update(overrides)
    return base


def listening(fleet, host):
    return fleet.ssh(host, 'pgrep -f "[-]-port %d" || true' % PORT).stdout.strip() != ''


def test_the_replica_on_changed_weights_fails_and_the_other_serves(clean_fleet, run_playbook, prepare_simulator):
    fleet = clean_fleet
    prepare_simulator(limit=','.join(HOSTS), extra_vars=wa_vars())
    fleet.ssh('ns2', '/usr/bin/python3 %s/make_tiny_checkpoint.py %s --alter-tensor %s' % (SIM, TARGET, TENSOR))
    result = run_playbook('playbooks/deploy.yml', limit=','.join(HOSTS), extra_vars=wa_vars(), timeout=600)
    text = ' '.join(result.stdout.split())
    assert result.rc != 0 and result.recap['ns2']['failed'] == 1 and result.recap['ns1']['failed'] == 0, \
        result.stdout[-5000:]
    found = re.search(r'ns2 loaded weights whose checksum ([0-9a-f]{16}) differs from ([0-9a-f]{16}) of ns1 '
                      r'\(model group fleet_ns\)', text)
    assert found and found.group(1) != found.group(2), result.stdout[-5000:]
    # ns1 came first, with no other replica serving: not checked, not failed
    assert 'no other serving replica (model group fleet_ns) to compare ns1 with' in text
    # the deploy's failure path: no last good configuration on ns2, so it is left stopped (out of service)
    assert 'failed: ' + found.group(0) in text
    assert 'no last good configuration was recorded, the server is left stopped' in text
    rows = summary_rows(result)
    assert rows['ns2'][1] == 'failed' and found.group(0) in rows['ns2'][7], rows
    assert rows['ns1'][1] != 'failed' and listening(fleet, 'ns1') and not listening(fleet, 'ns2'), rows
    # ns1 was asked with the admin key: the key is in no output
    assert ADMIN_KEY not in result.stdout + result.stderr

    # Turned off, the same weights start and serve (the operator's decision).
    off = run_playbook('playbooks/deploy.yml', limit='ns2', expect_rc=0, timeout=600,
                       extra_vars=wa_vars(sglang_server_weights_attestation=False))
    assert 'loaded weights whose checksum' not in off.stdout and listening(fleet, 'ns2')
    run_playbook('playbooks/stop.yml', limit=','.join(HOSTS), expect_rc=0, extra_vars=wa_vars())
