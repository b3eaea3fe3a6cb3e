"""Run a module's main() in-process with arguments and read its JSON result."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args


def run_main(main, capsys, **args):
    """``(result, stdout)`` of one module run."""
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            main()
    out = capsys.readouterr().out
    return json.loads(out), out


def record_warnings(monkeypatch):
    """module.warn() calls, as a list (with the controller code imported, ansible routes them to Display)."""
    seen = []
    monkeypatch.setattr(AnsibleModule, 'warn', lambda self, msg, **kwargs: seen.append(msg))
    return seen
