# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""EAGLE-3 drafters saved by vllm-project ``speculators``, converted to SGLang's layout
(private: not an API).

The speculators layout (``src/speculators/models/eagle3/{config,core,model_definitions}.py``,
``src/speculators/config.py``, ``src/speculators/model.py`` of vllm-project/speculators):

- config.json: ``architectures`` ``["Eagle3Speculator"]`` (older releases
  ``["Eagle3DraftModel"]``), ``speculators_model_type`` ``"eagle3"``,
  ``speculators_version``, ``speculators_config`` (algorithm, proposal methods,
  ``verifier: {name_or_path, architectures}``), the decoder sizes nested under
  ``transformer_layer_config`` (a transformers config: ``model_type`` llama or qwen3, the
  latter when absent), and at the top ``draft_vocab_size``, ``target_hidden_size``,
  ``eagle_aux_hidden_state_layer_ids``, ``norm_before_residual``, ``norm_before_fc``,
  ``fc_norm``, ``norm_output``.
- tensors: ``fc.weight``, ``norm.weight``, ``lm_head.weight``, ``embed_tokens.weight``,
  ``d2t``/``t2d`` (only with a draft vocabulary), ``input_norm.weight``
  (norm_before_fc), ``fc_norm.N.weight`` (fc_norm), ``layers.0.*`` (the EAGLE-3 input
  layer: q/k/v over 2 x hidden, ``hidden_norm``) and ``layers.N.*`` for N >= 1 (plain
  decoder layers: ``input_layernorm`` is their pre-attention norm, no ``hidden_norm``).

SGLang 0.5.12 ... 0.5.23 (``llama_eagle3.py``): a layer N >= 1 takes ``hidden_norm`` as
its pre-attention norm and never uses ``input_layernorm``, so the conversion renames
``layers.N.input_layernorm.weight`` to ``layers.N.hidden_norm.weight``; every other name
already is SGLang's. The config is flattened into what ``LlamaForCausalLMEagle3`` reads.
"""

from __future__ import annotations

import re

from ansible_collections.llmops.serving.plugins.module_utils._eagle3 import EAGLE3_ARCHITECTURE

ARCHITECTURES = ('Eagle3DraftModel', 'Eagle3Speculator')
NORM_OUTPUT_VERSION = (0, 5, 12)  # first SGLang whose llama_eagle3.py reads config norm_output
# Top-level speculators fields that SGLang's LlamaForCausalLMEagle3 reads as they are.
CARRIED_FLAGS = ('norm_before_fc', 'fc_norm', 'norm_output')
_PLAIN_LAYER_NORM = re.compile(r'^((?:model\.)?layers\.([1-9]\d*)\.)input_layernorm\.weight$')


def is_speculators(config):
    """Whether ``config`` (config.json, a dict or None) is a speculators one."""
    if not isinstance(config, dict):
        return False
    archs = config.get('architectures')
    return bool(isinstance(archs, list) and set(archs) & set(ARCHITECTURES)
                or 'speculators_model_type' in config or 'transformer_layer_config' in config)


def refusals(config, rules):
    """Why this speculators drafter cannot be made to load *correctly* in ``rules``'s SGLang
    (an empty list: it can). Each reason says what the engine would do wrong."""
    label = rules.label
    out = []
    kind = config.get('speculators_model_type', 'eagle3')
    if kind != 'eagle3':
        out.append('speculators_model_type is %r: only eagle3 drafters convert to SGLang\'s '
                   'LlamaForCausalLMEagle3' % kind)
    layer = config.get('transformer_layer_config')
    if not isinstance(layer, dict):
        return out + ['transformer_layer_config is missing or not an object: the drafter sizes are unknown']
    model_type = layer.get('model_type', 'qwen3')
    if model_type != 'llama':
        out.append('transformer_layer_config.model_type is %r (speculators builds qwen3 layers, with '
                   'q_norm/k_norm, when it is absent): SGLang\'s LlamaForCausalLMEagle3 has Llama layers '
                   'and would drop those weights' % model_type)
    if layer.get('attention_bias'):
        out.append('transformer_layer_config.attention_bias is true: SGLang builds the drafter\'s '
                   'q/k/v projections without bias and would drop the bias weights')
    if 'sliding_attention' in (layer.get('layer_types') or ()):
        out.append('transformer_layer_config.layer_types has sliding_attention layers: SGLang\'s drafter '
                   'attends over the full context, so drafts would differ from training')
    if config.get('norm_before_residual', True):
        out.append('norm_before_residual is %s: the drafter was trained with the normalised hidden state as '
                   'residual; no SGLang release implements that (its residual is the raw hidden state), so '
                   'drafts would be wrong' % ('true' if 'norm_before_residual' in config
                                              else 'not set (vLLM reads that as true)'))
    if config.get('norm_output') and (rules.version is None or rules.version < NORM_OUTPUT_VERSION):
        out.append('norm_output is true: %s ignores it (read from SGLang 0.5.12 on)' % label)
    return out


def flat_config(config):
    """The config.json SGLang's LlamaForCausalLMEagle3 reads, from a speculators one."""
    layer = config['transformer_layer_config']
    flat = {k: v for k, v in layer.items() if k not in ('architectures', 'auto_map')}
    flat.update(architectures=[EAGLE3_ARCHITECTURE], model_type='llama',
                tie_word_embeddings=False)  # speculators always saves its own lm_head
    vocab = layer.get('vocab_size')
    draft_vocab = config.get('draft_vocab_size')
    flat['draft_vocab_size'] = draft_vocab if isinstance(draft_vocab, int) else vocab
    # SGLang tests hasattr(config, 'target_hidden_size'): a null would be multiplied.
    if isinstance(config.get('target_hidden_size'), int):
        flat['target_hidden_size'] = config['target_hidden_size']
    aux = config.get('eagle_aux_hidden_state_layer_ids')
    if isinstance(aux, list) and aux:
        flat['eagle_config'] = {'eagle_aux_hidden_state_layer_ids': list(aux)}
    for key in CARRIED_FLAGS:
        if config.get(key):
            flat[key] = True
    return flat


def tensor_renames(names):
    """old -> new for the names SGLang calls otherwise: ``layers.N.input_layernorm`` of a
    plain layer (N >= 1) is SGLang's ``layers.N.hidden_norm``."""
    mapping = {}
    for name in names:
        match = _PLAIN_LAYER_NORM.match(name)
        if match:
            mapping[name] = match.group(1) + 'hidden_norm.weight'
    return mapping


def summary(config, converted, renames, reasons):
    """What the module reports about a speculators checkpoint."""
    spec = config.get('speculators_config') or {}
    verifier = spec.get('verifier') if isinstance(spec, dict) else None
    return {
        'speculators_version': config.get('speculators_version'),
        'speculators_model_type': config.get('speculators_model_type'),
        'verifier': (verifier or {}).get('name_or_path') if isinstance(verifier, dict) else None,
        'converted': converted,
        'tensors_renamed': len(renames),
        'refused': reasons,
    }
