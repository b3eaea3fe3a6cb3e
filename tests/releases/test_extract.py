# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The committed fixtures are what extract.py makes of the wheels on PyPI (needs the
package index: CI reaches it). Regenerates the smallest release and compares."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys

from ansible_collections.llmops.serving.tests.releases import releases

HERE = os.path.dirname(os.path.abspath(__file__))
VERSION = '0.5.11'  # the smallest wheel (7 MB) of the recorded releases


def test_fixture_regenerates_from_the_wheel_on_pypi(tmp_path):
    subprocess.run([sys.executable, os.path.join(HERE, 'extract.py'), VERSION, '--out', str(tmp_path)],
                   check=True, timeout=600)
    for name in ('sglang-%s.json' % VERSION, 'sglang-%s.help.gz' % VERSION):
        assert filecmp.cmp(str(tmp_path / name), os.path.join(releases.FIXTURES, name), shallow=False), name


def test_every_release_from_0_5_11_to_0_5_23_is_recorded():
    # the latest release of each line (0.5.12.post1 over 0.5.12, ...)
    assert releases.versions() == ['0.5.11', '0.5.12.post1', '0.5.13.post1', '0.5.14', '0.5.15.post1',
                                   '0.5.16', '0.5.17', '0.5.18', '0.5.19', '0.5.20', '0.5.21', '0.5.22',
                                   '0.5.23']
    for version in releases.versions():
        fixture = releases.load(version)
        assert fixture['version'] == version and len(fixture['options']) > 300
        assert 'sglang.srt.server_args' not in fixture['stubbed_sglang_modules']
        assert releases.usage_text(version).startswith('usage: sglang serve [-h] --model-path MODEL_PATH')


def test_usage_of_0_5_15_post1_is_the_one_the_h200_printed():
    # the stubbed extraction against a real run (pip install sglang==0.5.15.post1 on the H200,
    # smg-grpc-servicer 0.14.1 beside it): the usage of the unknown-flag failure, byte for byte
    root = os.path.dirname(os.path.dirname(HERE))
    with open(os.path.join(root, 'tests', 'fixtures', 'sglang-0.5.15.post1-h200', 'failures', 'unknown-flag.log'),
              encoding='utf-8') as handle:
        recorded = handle.read()
    recorded_usage = recorded[recorded.index('usage:'):recorded.index('sglang serve: error')]
    assert releases.usage_text('0.5.15.post1') == recorded_usage
