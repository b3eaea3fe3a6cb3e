# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``--speculative-adaptive`` of the simulated SGLang (TEST DOUBLE), after the releases' own
``sglang/srt/speculative/adaptive_spec_params.py`` (0.5.13 to 0.5.23: per batch-size slot).

The steps of each verify pass come from the slot that serves the batch size (the largest slot
key not above it; smaller batches go to the first slot). A slot starts at
``--speculative-num-steps`` when that is one of its candidate steps, else at its middle
candidate, and moves between its candidates on an EMA of the accepted drafts, as SGLang's
``AdaptiveStepSlot`` does. The default candidates are the release's (its recorded fixture,
``tests/releases/fixtures``); ``--speculative-adaptive-config FILE`` replaces them with the
file's ``{"<batch size>": {"candidate_steps": [...]}, ...}``. Releases before 0.5.13 (one flat
``candidate_steps`` list, no slots) are modelled as one slot.
"""

from __future__ import annotations

import bisect
import json

from . import _flags

TIERS_SINCE = (0, 5, 13)
ZERO_STEPS_SINCE = (0, 5, 14)


def load_config(path, version):
    """``{batch size: slot settings}`` of a config file, validated as ``_load_adaptive_config``
    (ValueError with the release's message)."""
    with open(path, encoding='utf-8') as handle:
        cfg = json.load(handle)
    release = _flags.version_tuple(version)
    if release < TIERS_SINCE:
        return {1: dict(cfg)}
    entries = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        steps = entry.get('candidate_steps')
        least = 0 if release >= ZERO_STEPS_SINCE else 1
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and s >= least for s in steps):
            raise ValueError('BS %s: candidate_steps must be a list of %s ints, got %r'
                             % (key, 'non-negative' if least == 0 else 'positive', steps))
        entries[int(key)] = dict({k: v for k, v in cfg.items() if not k.isdigit()}, **entry)
    if not entries:
        raise ValueError('speculative_adaptive_config must contain at least one integer-string BS key, e.g. '
                         '{"1": {"candidate_steps": [1,3,7]}}. Got keys: %s' % list(cfg))
    return entries


def default_config(version):
    fixture = _flags.releases.load(_flags.fixture_version(version))
    return {int(key): {'candidate_steps': steps} for key, steps in fixture['adaptive']['candidate_steps'].items()}


class Slot:
    """SGLang's ``AdaptiveStepSlot``: an EMA of the accepted drafts picks among the candidates."""

    def __init__(self, initial_steps, cfg):
        self.candidates = sorted(set(cfg['candidate_steps']))
        self.ema_alpha = cfg.get('ema_alpha', 0.2)
        self.update_interval = cfg.get('update_interval', 5)
        self.warmup_batches = cfg.get('warmup_batches', 10)
        self.down_hysteresis = cfg.get('down_hysteresis', -0.25)
        self.up_hysteresis = cfg.get('up_hysteresis', 0.0)
        self.steps = initial_steps if initial_steps in self.candidates else self.candidates[len(self.candidates) // 2]
        self.ema = float(self.steps - 1)
        self.batches = 0

    def _drop_threshold(self, lower):
        # A zero-step candidate (no drafting) is reached when hardly any draft is accepted.
        return (0.5 if lower == 0 else lower - 0.5) + self.down_hysteresis

    def update(self, accepted):
        if self.steps > 0 and accepted:
            self.ema = (1 - self.ema_alpha) * self.ema + self.ema_alpha * sum(accepted) / len(accepted)
        self.batches += 1
        if self.batches <= self.warmup_batches or (self.batches - self.warmup_batches) % self.update_interval:
            return
        index = self.candidates.index(self.steps)
        if self.steps == 0:
            index = min(index + 1, len(self.candidates) - 1)
            if self.candidates[index] > 0 and self.ema < 0:
                self.ema = float(self.candidates[index] - 1)
        else:
            moved_down = False
            while index > 0 and self.ema <= self._drop_threshold(self.candidates[index - 1]):
                index, moved_down = index - 1, True
            while not moved_down and index < len(self.candidates) - 1 and \
                    self.ema > self.candidates[index] - 0.5 + self.up_hysteresis:
                index += 1
        self.steps = self.candidates[index]


class Adaptive:
    """The slots of one server: ``steps(batch)`` for the next verify pass, ``update`` after it."""

    def __init__(self, version, initial_steps, config_path=None):
        config = load_config(config_path, version) if config_path else default_config(version)
        self.keys = sorted(config)
        self.slots = {key: Slot(initial_steps, config[key]) for key in self.keys}

    def slot(self, batch):
        return self.slots[self.keys[max(0, bisect.bisect_right(self.keys, batch) - 1)]]

    def steps(self, batch):
        return self.slot(batch).steps

    def update(self, batch, accepted):
        self.slot(batch).update(accepted)

    def describe(self):
        return ', '.join('%d: steps %d of %s' % (key, self.slots[key].steps, self.slots[key].candidates)
                         for key in self.keys)
