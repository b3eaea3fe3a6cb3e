# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.model_stage: runs the module, and while it copies or hashes in the
background, prints its progress every progress_interval seconds (plugin_utils/_progress_action.py)."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.modules.model_stage import ARGUMENT_SPEC
from ansible_collections.llmops.serving.plugins.plugin_utils._progress_action import ProgressAction


class ActionModule(ProgressAction):
    MODULE = 'llmops.serving.model_stage'
    ARGUMENT_SPEC = ARGUMENT_SPEC
