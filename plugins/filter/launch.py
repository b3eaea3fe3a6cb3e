# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that expose the launch-command rules of ``module_utils/_sglang_args.py`` to
roles; each filter is documented in the YAML file of its name next to this one."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils import _sglang_args as args
from ansible_collections.llmops.serving.plugins.plugin_utils._filters import as_filter


def speculative_settings(speculative):
    return args.running_speculative(speculative)


def launch_command(argv, python, engine='sglang', shim=None):
    return args.launch_command(python, argv, engine=engine, shim=shim)


def shell_join(argv, flag_per_line=False):
    if isinstance(argv, str):
        raise args.LaunchArgsError('shell_join takes a list of arguments, got a string')
    return args.shell_join(argv, flag_per_line=flag_per_line)


class FilterModule:
    def filters(self):
        return {name: as_filter(function, args.LaunchArgsError, named=False) for name, function in (
            ('speculative_settings', speculative_settings),
            ('launch_command', launch_command),
            ('shell_join', shell_join),
        )}
