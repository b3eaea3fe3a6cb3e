"""Small pure-Python wheels written here, with the standard library only: the test "releases" of the
integration tests (tests/integration/test_sglang_install.py, test_release_upgrade.py) and the wheels
the H200 proof's phase i writes on the device (tests/gpu/h200/proof.py)."""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile


def build_wheel(directory, name, version, module, init_source, extra_files=None):
    """Write a pure-Python wheel ``name-version-py3-none-any.whl`` holding ``module/__init__.py`` and
    ``extra_files`` ({path in site-packages: text})."""
    dist = '%s-%s' % (name.replace('-', '_'), version)
    files = {
        **(extra_files or {}),
        '%s/__init__.py' % module: init_source,
        '%s.dist-info/METADATA' % dist: 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' % (name, version),
        '%s.dist-info/WHEEL' % dist: 'Wheel-Version: 1.0\nGenerator: llmops-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
    }
    record = []
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()
        record.append('%s,sha256=%s,%d' % (path, digest, len(data)))
    record.append('%s.dist-info/RECORD,,' % dist)
    files['%s.dist-info/RECORD' % dist] = '\n'.join(record) + '\n'
    path = os.path.join(directory, '%s-py3-none-any.whl' % dist)
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_DEFLATED) as whl:
        for member, text in files.items():
            whl.writestr(member, text)
    return path
