"""Offline stand-in for ansible-test's get-pip bootstrap script.

ansible-test downloads ``get-pip-<version>.py`` to bootstrap pip in the virtual
environments it creates for sanity tests. Without network access that download fails, so
``tests/run-all.sh`` copies this file to ``~/.ansible/test/cache/get_pip_<version>.py``.
It installs pip from the wheel bundled with the standard library's ``ensurepip`` and
passes every other argument through to ``pip install``.
"""

from __future__ import annotations

import glob
import os
import sys

import ensurepip


def main() -> int:
    bundled = glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), '_bundled', 'pip-*.whl'))
    if not bundled:
        sys.stderr.write('ensurepip has no bundled pip wheel\n')
        return 1
    sys.path.insert(0, bundled[0])
    from pip._internal.cli.main import main as pip_main  # pylint: disable=import-outside-toplevel

    # get-pip's own options have no pip equivalent; the pinned pip comes from the bundle.
    args = [bundled[0] if arg.startswith('pip==') else arg for arg in sys.argv[1:] if arg not in ('--no-setuptools', '--no-wheel')]
    return pip_main(['install', '--upgrade'] + args)


if __name__ == '__main__':
    sys.exit(main())
