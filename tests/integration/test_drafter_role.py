# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role drafter (module drafter_checkpoint) over SSH on the namespace hosts of the fleet.

The hosts see this machine's /tmp, so each host gets its own real (small) drafter under
the test's temporary directory, written with the safetensors library.
"""

from __future__ import annotations

import hashlib
import os
import re

import numpy as np
import pytest

from ansible_collections.llmops.serving.tests.unit._drafter_factory import read_all, write_drafter

HOSTS = ('ns1', 'ns2', 'ns3')
pytestmark = pytest.mark.fleet


def digest(directory):
    h = hashlib.sha256()
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), 'rb') as f:
            h.update(name.encode() + f.read())
    return h.hexdigest()


@pytest.fixture
def drafters(tmp_path):
    """One drafter with ``layers.0.`` names and a training-time architecture per host."""
    os.chmod(str(tmp_path), 0o755)
    written = {}
    for host in HOSTS:
        written[host] = write_drafter(str(tmp_path / host), architectures=['LlamaForCausalLM'])
    return str(tmp_path), written


def play(run_playbook, base, check=False, diff=False, expect_rc=None, **extra):
    extra_vars = dict({'drafter_path': base + '/{{ inventory_hostname }}',
                       'drafter_engine_version': '0.5.11'}, **extra)
    return run_playbook('drafter_role.yml', check=check, diff=diff, extra_vars=extra_vars, expect_rc=expect_rc)


def test_role_fixes_then_reports_no_change(clean_fleet, run_playbook, drafters):
    base, written = drafters
    before = {h: digest(os.path.join(base, h)) for h in HOSTS}

    check = play(run_playbook, base, check=True, diff=True, expect_rc=0)
    assert all(check.changed(h) == 1 for h in HOSTS), check.stdout
    # the diff of the key lists (YAML or JSON rendering, depending on the callback)
    assert re.search(r'^\+\s+-?\s*"?midlayer\.mlp\.up_proj\.weight', check.stdout, re.M), check.stdout
    assert re.search(r'^-\s+-?\s*"?layers\.0\.mlp\.up_proj\.weight', check.stdout, re.M), check.stdout
    assert {h: digest(os.path.join(base, h)) for h in HOSTS} == before

    first = play(run_playbook, base, expect_rc=0)
    assert all(first.changed(h) == 1 and first.recap[h]['failed'] == 0 for h in HOSTS), first.stdout
    assert 'layout layers -> midlayer, 10 renamed (header_in_place), config fixed' in first.stdout
    for host in HOSTS:
        after = read_all(os.path.join(base, host))
        for name, array in written[host].items():
            np.testing.assert_array_equal(after[name.replace('layers.0.', 'midlayer.')], array)

    second = play(run_playbook, base, expect_rc=0)
    assert all(second.changed(h) == 0 for h in HOSTS), second.stdout


def test_role_validate_only_fails_naming_the_cause(clean_fleet, run_playbook, drafters):
    base = drafters[0]
    before = digest(os.path.join(base, 'ns1'))
    result = play(run_playbook, base, drafter_fix=False)
    assert result.rc != 0 and all(result.recap[h]['failed'] == 1 for h in HOSTS)
    assert 'silently dropped by SGLang 0.5.11' in result.stdout
    assert "KeyError: 'midlayer.self_attn.qkv_proj.weight'" in result.stdout
    assert digest(os.path.join(base, 'ns1')) == before
    # vLLM loads layers.0 names and builds the EAGLE-3 class whatever config.json says.
    vllm = play(run_playbook, base, drafter_fix=False, drafter_engine='vllm', drafter_engine_version=None,
                expect_rc=0)
    assert all(vllm.changed(h) == 0 for h in HOSTS)
    assert digest(os.path.join(base, 'ns1')) == before
