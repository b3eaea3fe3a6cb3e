"""inventories/example deployed on the test fleet, as a user would after filling in host names.

The example is copied as it is (group_vars, the vault-encrypted group_vars/all/vault.yml,
host_vars), only its hosts.yml gets fleet host names (gpu-a01 -> ns1, gpu-a04 -> ns2,
gpu-b01 -> ns3; the other hosts left out) and the fleet's connection inventory is added beside
it. Extra vars override only the connection (root, no become) and what makes the fleet a
simulated GPU host (the SGLang simulator as the server's python and environment, the
nvidia-smi stand-in). The models and drafters are copied to the example's model paths on every
host, as the README tells users to.

Shows: the vault decrypts with the test password file (and the inventory is refused without
it); deploy.yml brings every host up with its group's model and depth (the host_vars override
included); each server takes exactly the vault's key as "Authorization: Bearer" and refuses
requests without it; the key is in no output.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, 'inventories', 'example')
SIM = os.path.join(ROOT, 'tests', 'sim')
# Test-only password of inventories/example/group_vars/all/vault.yml (documented there).
VAULT_PASS = os.path.join(ROOT, 'tests', 'integration', 'example-vault-pass.txt')
NAMES = {'gpu-a01.example.com': 'ns1', 'gpu-a04.example.com': 'ns2', 'gpu-b01.example.com': 'ns3'}
# host -> (served model name, depth) from the example's group_vars and host_vars
EXPECTED = {'ns1': ('llama-3.3-70b', 10), 'ns2': ('llama-3.3-70b', 16), 'ns3': ('qwen2.5-32b', 5)}
MODELS = {
    '/srv/models/Llama-3.3-70B-Instruct': 'target', '/srv/models/EAGLE3-Llama-3.3-70B': 'drafter',
    '/srv/models/Qwen2.5-32B-Instruct': 'target', '/srv/models/EAGLE3-Qwen2.5-32B': 'drafter',
}
SIM_VARS = {
    'llmops_simulator': True,
    'llmops_simulated_gpus': 8,
    'llmops_simulator_dir': SIM,
    'llmops_simulator_checkpoints': '/srv/llmops/checkpoints',
    'ansible_user': 'root',
    'ansible_become': False,
    'sglang_server_python': '/usr/bin/python3',
    'sglang_server_env': {'PYTHONPATH': SIM, 'NVSIM_STATE_DIR': '/run/llmops-nvsim', 'SGLANG_SIM_SPEED': '0.05'},
    'sglang_server_health_interval': 1,
    'gpu_preflight_nvidia_smi_path': os.path.join(SIM, 'nvidia-smi'),
    'gpu_preflight_environment': {'NVSIM_STATE_DIR': '/run/llmops-nvsim'},
}
VAULT_ENV = {'ANSIBLE_VAULT_PASSWORD_FILE': VAULT_PASS}


def vault_key():
    """The key in the example vault, decrypted with ansible-vault itself."""
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), 'ansible-vault'), 'view',
                          '--vault-password-file', VAULT_PASS, os.path.join(EXAMPLE, 'group_vars', 'all', 'vault.yml')],
                         capture_output=True, text=True, check=True).stdout
    return yaml.safe_load(out)['vault_sglang_server_api_key']


@pytest.fixture
def example_inventory(clean_fleet, tmp_path):
    """The example inventory with fleet host names, plus the fleet's connection inventory."""
    inventory = tmp_path / 'example'
    shutil.copytree(EXAMPLE, inventory)
    hosts = yaml.safe_load((inventory / 'hosts.yml').read_text())
    for group in hosts['all']['children'].values():
        # groups of groups (sglang_servers) have no hosts of their own; the router host is left out
        group['hosts'] = {NAMES[name]: None for name in group.get('hosts') or {} if name in NAMES}
    (inventory / 'hosts.yml').write_text(yaml.safe_dump(hosts))
    for name, host in NAMES.items():
        if (inventory / 'host_vars' / (name + '.yml')).exists():
            (inventory / 'host_vars' / (name + '.yml')).rename(inventory / 'host_vars' / (host + '.yml'))
    shutil.copy(clean_fleet.inventory, inventory / 'fleet.yml')
    return str(inventory)


def server_get(fleet, host, path, key):
    """(HTTP status, body) of GET path on host's server, the key (if any) sent through stdin."""
    code = ('import sys, urllib.request, urllib.error; key = sys.stdin.read().strip(); '
            'req = urllib.request.Request("http://127.0.0.1:30000%s", '
            'headers={"Authorization": "Bearer " + key} if key else {}); '
            '\ntry:\n r = urllib.request.urlopen(req, timeout=10); print(r.status); print(r.read().decode())'
            '\nexcept urllib.error.HTTPError as e:\n print(e.code)' % path)
    out = fleet.ssh(host, '/usr/bin/python3 -c %s' % shlex.quote(code), input=key or '').stdout
    status, body = (out.split('\n', 1) + [''])[:2]
    return int(status), body


def test_example_inventory_deploys_with_the_vault_key(example_inventory, clean_fleet, run_playbook, run_adhoc,
                                                      prepare_simulator):
    fleet = clean_fleet
    key = vault_key()
    assert key and key != '{{'

    refused = run_adhoc('ns1', 'ansible.builtin.debug', 'var=sglang_server_api_key', inventory=example_inventory)
    assert refused.rc != 0 and 'no vault secrets' in (refused.stdout + refused.stderr), refused.stdout

    prepare_simulator(limit='ns1,ns2,ns3', extra_vars=SIM_VARS)
    for host in NAMES.values():
        fleet.ssh(host, 'mkdir -p /srv/models && ' + ' && '.join(
            'cp -r /srv/llmops/checkpoints/%s %s' % (kind, path) for path, kind in MODELS.items()))

    result = run_playbook('playbooks/deploy.yml', inventory=example_inventory, limit='llama70b:qwen32b',
                          extra_vars=SIM_VARS, env=VAULT_ENV, expect_rc=0, timeout=600)
    assert set(result.recap) == set(EXPECTED), result.recap
    assert all(result.recap[host]['failed'] == 0 for host in EXPECTED)
    assert key not in result.stdout and key not in result.stderr

    for host, (model, depth) in EXPECTED.items():
        status, body = server_get(fleet, host, '/server_info', key)
        assert status == 200, (host, body)
        info = json.loads(body)
        assert info['served_model_name'] == model, (host, info['served_model_name'])
        assert info['model_path'].startswith('/srv/models/'), info['model_path']
        assert info['speculative_num_draft_tokens'] == depth, (host, info['speculative_num_draft_tokens'])
        assert server_get(fleet, host, '/v1/models', None)[0] == 401
        assert server_get(fleet, host, '/v1/models', key + 'x')[0] == 401
        assert server_get(fleet, host, '/v1/models', key)[0] == 200
