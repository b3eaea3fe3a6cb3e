# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters about the GPUs of a host; each filter is documented in the YAML file of its name next to this one."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils._nvidia_smi import listing_check


def gpu_listing_check(listed, gpus, required_by, host):
    """Whether the GPUs nvidia-smi ``listed`` include each of ``gpus``, with the message to show."""
    return listing_check(list(listed or []), list(gpus or []), str(required_by), str(host))


class FilterModule:
    def filters(self):
        return {'gpu_listing_check': gpu_listing_check}
