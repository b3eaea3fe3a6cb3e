"""playbooks/templates/status.j2 (the table of playbooks/status.yml) rendered by ansible-playbook on
local hosts with made-up server states: alignment, and multi-node groups judged as one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'integration'))

from status_output import TASK, status_table  # noqa: E402  (tests/integration/status_output.py)

UP = {'running': True, 'healthy': True, 'unauthorized': False, 'version': None, 'depth': None, 'accept_length': None,
      'msg': ''}
RANK0 = dict(UP, version='0.5.15.post1', depth=4, accept_length=3.1)
DOWN = dict(UP, running=False, pid=None, healthy=False, msg='no answer from http://127.0.0.1:30000/health')
# host -> (multi-node group or None, server status)
HOSTS = {
    'single': (None, dict(RANK0, pid=11, depth=16, accept_length=2.61)),
    'keyless': (None, dict(UP, pid=12, unauthorized=True,
                           msg='the server refused /server_info with HTTP 401: set sglang_server_api_key')),
    'ok0': (['ok0', 'ok1'], dict(RANK0, pid=21)),
    'ok1': (['ok0', 'ok1'], dict(UP, pid=22)),
    # rank 1 died: rank 0 stays up, its /health answers 503
    'r1dead0': (['r1dead0', 'r1dead1'], dict(RANK0, pid=31, healthy=False, msg='HTTP 503 from /health')),
    'r1dead1': (['r1dead0', 'r1dead1'], DOWN),
    # rank 0 died: rank 1's dummy /health still answers 200
    'r0dead0': (['r0dead0', 'r0dead1'], DOWN),
    'r0dead1': (['r0dead0', 'r0dead1'], dict(UP, pid=42)),
    'stopped0': (['stopped0', 'stopped1'], DOWN),
    'stopped1': (['stopped0', 'stopped1'], DOWN),
    'limited0': (['limited0', 'limited1'], dict(RANK0, pid=51)),
    'limited1': (['limited0', 'limited1'], dict(UP, pid=52)),
}
PLAYBOOK = '''
- hosts: all:!limited1
  gather_facts: false
  tasks:
    - name: Made-up state
      ansible.builtin.set_fact:
        sglang_server_status: "{{ states[inventory_hostname] }}"
        status_gpus: "{{ {'msg': 'nvidia-smi: command not found'} if inventory_hostname == 'keyless'
                         else {'gpus': [{'used_mib': 45248}, {'used_mib': 45000}]} }}"
    - name: Show one table of every host
      ansible.builtin.debug:
        msg: "{{ lookup('ansible.builtin.template', '%s/playbooks/templates/status.j2') }}"
      run_once: true
''' % ROOT


@pytest.fixture(scope='module')
def table(tmp_path_factory):
    where = tmp_path_factory.mktemp('status-table')
    inventory = {'all': {'vars': {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
                                  'states': {h: s for h, (dummy, s) in HOSTS.items()}},
                         'hosts': {h: ({'sglang_server_group_hosts': g} if g else {}) for h, (g, dummy) in HOSTS.items()}}}
    (where / 'inventory.json').write_text(json.dumps(inventory))
    (where / 'status.yml').write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get('PATH', ''))
    proc = subprocess.run(['ansible-playbook', '-i', str(where / 'inventory.json'), str(where / 'status.yml')],
                          capture_output=True, text=True, env=env, cwd=str(where), check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert TASK in proc.stdout
    return status_table(proc.stdout)


def test_one_aligned_row_per_host_with_every_column(table):
    assert sorted(table) == sorted(h for h in HOSTS if h != 'limited1')
    assert table['single'] == {'host': 'single', 'running': 'yes', 'pid': '11', 'healthy': 'yes',
                               'version': '0.5.15.post1', 'depth': '16', 'accept length': '2.61',
                               'GPU used': '90248 MiB on 2 GPUs', 'refused/why': '-'}


def test_a_refused_key_and_a_gpu_read_failure_say_why(table):
    row = table['keyless']
    assert row['GPU used'] == '-'
    assert row['refused/why'] == ('the server refused /server_info with HTTP 401: set sglang_server_api_key; '
                                  'GPUs: nvidia-smi: command not found')


def test_a_group_with_every_rank_up_is_healthy_on_every_rank(table):
    assert [table[h]['healthy'] for h in ('ok0', 'ok1')] == ['yes', 'yes']
    assert table['ok1']['version'] == '-' and table['ok1']['refused/why'] == '-'


@pytest.mark.parametrize('group, dead', [('r1dead', 'r1dead1'), ('r0dead', 'r0dead0')])
def test_a_group_with_a_dead_rank_is_broken_on_every_rank(table, group, dead):
    for rank in (group + '0', group + '1'):
        assert table[rank]['healthy'] == 'broken', table[rank]
        assert table[rank]['refused/why'].startswith(
            'group %s0, %s1: %s not running; a deploy restarts the whole group' % (group, group, dead))
    assert table[dead]['running'] == 'no' and table[dead]['pid'] == '-'


def test_a_stopped_group_is_not_healthy_and_not_broken(table):
    assert [table[h]['healthy'] for h in ('stopped0', 'stopped1')] == ['no', 'no']


def test_a_rank_outside_the_run_is_named(table):
    assert table['limited0']['healthy'] == 'yes'
    assert table['limited0']['refused/why'] == 'group limited0, limited1: limited1 not read in this run'
