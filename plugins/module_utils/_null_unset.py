# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""An option given as ``null`` is an option not given: its documented default applies.

A role passes each of its variables by name (``option: "{{ role_var }}"``), also where the variable is
null; AnsibleModule would otherwise keep the null and skip the option's default."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule


def without_nulls(args):
    """``args`` without the options whose value is None (Ansible's private ``_ansible_*`` keys kept)."""
    return dict((key, value) for key, value in args.items() if value is not None or key.startswith('_'))


class NullIsUnsetModule(AnsibleModule):
    """AnsibleModule for which an option passed as null is not passed: its default applies, a required one
    is missing."""

    def _load_params(self):
        super(NullIsUnsetModule, self)._load_params()
        self.params = without_nulls(self.params)
