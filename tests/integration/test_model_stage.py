# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role model_stage (playbooks/stage.yml) on the three namespace hosts at once: one source directory
that every host sees (this machine's /tmp, like a shared mount), copies into each host's private /srv.

Check mode writes nothing; the first run stages target and drafter on all three hosts (at most two
reading the source at once, a rate cap), each file verified; the rerun copies nothing (changed=0); a copy
on ns1 killed with SIGKILL half-way leaves no directory with the staged name and the next run finishes it;
a separate run finds the copies (paths), warms them around a stand-in drain (warm_begin, warm_end) and
creates the JIT cache directory; a byte changed at the source after the manifest is refused by name and
nothing is staged. A copy slowed down by the rate limit (model_stage_bwlimit) prints its progress every
model_stage_progress_interval seconds; a rerun, which copies nothing, prints none.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import time

import pytest

HOSTS = ('ns1', 'ns2', 'ns3')
DEST = '/srv/llmops-models'
pytestmark = pytest.mark.fleet


@pytest.fixture
def sources(tmp_path):
    os.chmod(str(tmp_path), 0o755)
    target = tmp_path / 'target'
    (target / 'tokenizer').mkdir(parents=True)
    for i in range(2):
        (target / ('model-%05d-of-00002.safetensors' % (i + 1))).write_bytes(os.urandom(2 * 1024 * 1024))
    (target / 'config.json').write_text(json.dumps({'architectures': ['LlamaForCausalLM'], 'hidden_size': 64}))
    (target / 'tokenizer' / 'tokenizer.json').write_text('{}')
    drafter = tmp_path / 'drafter'
    drafter.mkdir()
    (drafter / 'model.safetensors').write_bytes(os.urandom(512 * 1024))
    (drafter / 'config.json').write_text(json.dumps({'architectures': ['LlamaForCausalLMEagle3']}))
    return target, drafter


def stage(run_playbook, target, drafter, dest=DEST, limit=None, check=False, diff=False, expect_rc=0, **extra):
    extra_vars = dict({
        'llmops_hosts': 'fleet_ns',
        'model_stage_models': [{'name': 'target', 'source': str(target)}, {'name': 'drafter', 'source': str(drafter)}],
        'model_stage_dest_root': dest,
        'model_stage_max_parallel_reads': 2,
        'model_stage_bwlimit': 50 * 1024 * 1024,
        'model_stage_reserve_bytes': 0,
    }, **extra)
    return run_playbook('playbooks/stage.yml', limit=limit, check=check, diff=diff, extra_vars=extra_vars,
                        expect_rc=expect_rc)


# A staging run started on a host by hand, slowed down so that it can be killed half-way.
SLOW_STAGE = (
    "import json, sys; sys.path.insert(0, %r); "
    "from ansible_collections.llmops.serving.plugins.module_utils import _stage; "
    "m = json.load(open(sys.argv[1])); "
    "_stage.stage(sys.argv[2], sys.argv[3], 'target', m, bwlimit=1024 * 1024, chunk=64 * 1024)"
) % os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), '.collections')


def sha256(path):
    with open(path, 'rb') as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def test_stage_three_hosts_rerun_and_corruption(clean_fleet, run_playbook, sources):
    target, drafter = sources
    fleet = clean_fleet

    check = stage(run_playbook, target, drafter, check=True, diff=True)
    assert all(check.changed(h) >= 1 for h in HOSTS), check.stdout
    for host in HOSTS:
        assert fleet.ssh(host, 'test -e %s' % DEST, check=False).returncode != 0

    first = stage(run_playbook, target, drafter)
    assert all(first.changed(h) >= 1 and first.recap[h]['failed'] == 0 for h in HOSTS), first.stdout
    manifest = json.loads((target / '.llmops-manifest.json').read_text())
    staged = '%s/target-%s' % (DEST, manifest['fingerprint'])
    listing = {}
    for host in HOSTS:
        out = fleet.ssh(host, 'cd %s && sha256sum $(find . -type f ! -name .llmops-manifest.json | sort) && ls -A %s'
                        % (staged, DEST)).stdout
        listing[host] = out
        for entry in manifest['files']:
            assert '%s  ./%s' % (entry['sha256'], entry['path']) in out, (host, out)
        assert '.partial-' not in out, out
    assert 'target -> %s: 4 of 4 files copied' % staged in first.stdout, first.stdout

    again = stage(run_playbook, target, drafter)
    assert all(again.changed(h) == 0 and again.recap[h]['failed'] == 0 for h in HOSTS), again.stdout
    assert '0 of 4 files copied' in again.stdout

    # kill -9 half-way through a copy on ns1: no directory with the staged name; the next run finishes it.
    killed_root = '/srv/llmops-models-killed'
    started = fleet.ssh('ns1', "nohup /usr/bin/python3 -c %s %s %s %s >/dev/null 2>&1 & echo $!" % (
        shlex.quote(SLOW_STAGE), target / '.llmops-manifest.json', target, killed_root)).stdout.split()[-1]
    partial = '%s/.partial-target-%s' % (killed_root, manifest['fingerprint'])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        names = fleet.ssh('ns1', 'ls -A %s 2>/dev/null || true' % partial).stdout.split()
        if any(n.endswith('.safetensors') for n in names) and any(n.endswith('.part') for n in names):
            break
        time.sleep(0.2)
    else:
        raise AssertionError('the slowed copy on ns1 never got half-way: %s' % names)
    fleet.ssh('ns1', 'kill -9 %d' % int(started))
    left = fleet.ssh('ns1', 'ls -A %s' % killed_root).stdout.split()
    assert 'target-%s' % manifest['fingerprint'] not in left and '.partial-target-%s' % manifest['fingerprint'] in left
    resumed = stage(run_playbook, target, drafter, dest=killed_root, limit='ns1')
    assert resumed.changed('ns1') >= 1, resumed.stdout
    assert fleet.ssh('ns1', 'ls -A %s' % killed_root).stdout.split().count('target-%s' % manifest['fingerprint']) == 1
    assert fleet.ssh('ns1', 'test -e %s' % partial, check=False).returncode != 0
    out = fleet.ssh('ns1', 'cd %s/target-%s && sha256sum $(find . -type f ! -name .llmops-manifest.json | sort)'
                    % (killed_root, manifest['fingerprint'])).stdout
    for entry in manifest['files']:
        assert '%s  ./%s' % (entry['sha256'], entry['path']) in out, out

    # A separate run finds the copies, warms them and creates the JIT cache directory.
    drafter_manifest = json.loads((drafter / '.llmops-manifest.json').read_text())
    warm = run_playbook('model_stage_warm.yml', expect_rc=0, extra_vars={
        'model_stage_models': [{'name': 'target', 'source': str(target)}, {'name': 'drafter', 'source': str(drafter)}],
        'model_stage_dest_root': DEST, 'model_stage_jit_cache_dir': '/srv/llmops-jit', 'model_stage_jit_cache_owner': 'root'})
    total = manifest['bytes'] + drafter_manifest['bytes']
    for host in HOSTS:
        report = json.loads(fleet.ssh(host, 'cat /srv/llmops-stage-report.json').stdout)
        assert report['paths'] == {'target': staged, 'drafter': '%s/drafter-%s' % (DEST, drafter_manifest['fingerprint'])}
        assert report['warm_bytes'] == total, (host, report, warm.stdout)
        assert report['jit']['TRITON_CACHE_DIR'] == '/srv/llmops-jit/triton'
        assert fleet.ssh(host, 'test -d /srv/llmops-jit/torchinductor', check=False).returncode == 0

    # One byte changed at the source after the manifest was made, size kept: refused by name.
    shard = target / 'model-00002-of-00002.safetensors'
    data = bytearray(shard.read_bytes())
    data[12345] ^= 0x01
    shard.write_bytes(bytes(data))
    bad = stage(run_playbook, target, drafter, dest='/srv/llmops-models-2', limit='ns1', expect_rc=2)
    assert bad.recap['ns1']['failed'] == 1, bad.stdout
    assert 'model-00002-of-00002.safetensors does not match its manifest' in bad.stdout, bad.stdout
    left = fleet.ssh('ns1', 'ls -A /srv/llmops-models-2 2>/dev/null || true').stdout.split()
    assert not [name for name in left if name.startswith('target-')], left


# One progress line of ns1's copy: "ns1: staged 1.0 MiB of 4.2 MiB (23 %), 1.0 MiB/s, 3 s left".
PROGRESS = re.compile(r'^ns1: staged [0-9.]+ (?:B|KiB|MiB|GiB) of [0-9.]+ (?:B|KiB|MiB|GiB) [(][0-9]+ %[)], .*$', re.M)


def test_a_slow_copy_shows_its_progress(fleet, run_playbook, sources):
    target, drafter = sources
    dest = '/srv/llmops-models-progress'
    fleet.ssh('ns1', 'rm -rf %s' % dest)
    # About 4.7 MiB at 1 MiB/s (the copy's real rate limit): about 4 s, longer than two intervals of 1 s.
    slow = stage(run_playbook, target, drafter, dest=dest, limit='ns1', model_stage_bwlimit=1024 * 1024,
                 model_stage_progress_interval=1)
    lines = PROGRESS.findall(slow.stdout)
    assert len(lines) >= 2, slow.stdout
    assert slow.recap['ns1']['failed'] == 0 and slow.changed('ns1') >= 1, slow.stdout
    again = stage(run_playbook, target, drafter, dest=dest, limit='ns1', model_stage_bwlimit=1024 * 1024,
                  model_stage_progress_interval=1)
    assert again.changed('ns1') == 0 and not PROGRESS.findall(again.stdout), again.stdout
    fleet.ssh('ns1', 'rm -rf %s' % dest)
