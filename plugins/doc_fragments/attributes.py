# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment(object):

    # Every module: check_mode, diff_mode and idempotent are documented per module (with
    # llmops.serving.attributes.<support>) on top of this.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
  idempotent:
    description:
      - When run twice in a row outside check mode, with the same arguments, the second run indicates no change.
      - This assumes that the system controlled/queried by the module has not changed in a relevant way.
"""

    # Modules that only read: no change, so check and diff mode have nothing to differ in.
    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: This action does not modify state.
  diff_mode:
    support: N/A
    details: This action does not modify state.
  idempotent:
    support: full
"""

    # Modules whose work is done by an action plugin of the same name on the controller.
    CONTROLLER_ACTION = r"""
options: {}
attributes:
  action:
    description: Runs on the controller as an action plugin.
    support: full
"""
