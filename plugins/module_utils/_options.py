# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The options of a controller-side action (remediation_guard, fleet_preflight) that the play's
variables give where the task leaves them out, so that a playbook does not repeat
``option: "{{ variable | default(...) }}"`` for each; the option's default applies where the
variable is unset too."""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator


def with_variables(args, task_vars, resolve, variables):
    """``args`` (the task's arguments) with each option of ``variables`` (``{option: variable name}``)
    that they leave out taken from its variable where ``task_vars`` has it (``resolve(name)`` templates it)."""
    merged = dict(args)
    for option, name in variables.items():
        if option not in merged and name in task_vars:
            merged[option] = resolve(name)
    return merged


def validated(spec, args, task_vars, resolve, variables):
    """``with_variables(...)`` checked against the argument spec ``spec`` (defaults filled in):
    ``(parameters, error messages)``."""
    result = ArgumentSpecValidator(spec).validate(with_variables(args, task_vars, resolve, variables))
    return result.validated_parameters, result.error_messages
