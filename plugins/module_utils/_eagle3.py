# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an engine loads from an EAGLE-3 drafter checkpoint (private: not an API).

Everything here works on tensor *names and shapes* (from safetensors headers) and the
drafter's config.json; nothing loads tensor data. Sources of the rules: SGLang
``srt/models/llama_eagle3.py`` (<= 0.5.11: one ``midlayer``, unknown names skipped
silently; >= 0.5.12, PR #24663: ``layers`` ModuleList, ``midlayer`` kept as an alias of
``layers.0``), vLLM ``model_executor/models/llama_eagle3.py`` (``midlayer.`` renamed to
``layers.0.``, every other unknown name is a ``KeyError``, a ``model.`` prefix included),
and SGLang ``srt/models/kimi_k25_eagle3.py`` (from 0.5.12.post1: the Kimi-K2.5 drafter
``Eagle3DeepseekV2ForCausalLM``, one layer with DeepSeek-V2 multi-latent attention; its
``load_weights`` maps ``layers.0.`` to ``midlayer.`` itself, puts ``model.`` in front of
every name but ``lm_head``, fuses ``q_a_proj`` and ``kv_a_proj_with_mqa`` into
``fused_qkv_a_proj_with_mqa`` only when both halves come, and skips any other unknown name
with the warning "Eagle3 MLA: skipping unexpected weight"). The facts of each release are
recorded in ``tests/releases/fixtures`` (``loader``) and the unit tests hold these rules to them.

Names are discussed in *canonical* form: without a ``model.`` prefix and with layer
weights as ``layers.N.<rest>``. A checkpoint's own spelling (``midlayer.``, ``model.``)
is kept in messages so that users can find the tensor.
"""

from __future__ import annotations

import re

from ansible_collections.llmops.serving.plugins.module_utils._version import ENGINES
LAYOUTS = ('auto', 'midlayer', 'layers')
EAGLE3_ARCHITECTURE = 'LlamaForCausalLMEagle3'
MLA_ARCHITECTURE = 'Eagle3DeepseekV2ForCausalLM'
# The drafter classes: 'llama' (llama_eagle3.py) and 'mla' (kimi_k25_eagle3.py). A drafter
# keeps its class: fixing config.json never turns one into the other.
DRAFTER_CLASSES = {'llama': EAGLE3_ARCHITECTURE, 'mla': MLA_ARCHITECTURE}
# Architectures each engine builds the EAGLE-3 drafter class for. vLLM builds
# Eagle3LlamaForCausalLM from the speculative method whatever config.json says (seen with
# vLLM 0.32.0: tests/engines/RESULTS.md, variant bad-arch-llama), so it accepts any.
ACCEPTED_ARCHITECTURES = {
    'sglang': ('LlamaForCausalLMEagle3',),
    'vllm': None,
}
# vLLM's LlamaModel (the drafter's `model.`) loads q/k/v and gate/up into fused parameters.
VLLM_STACKED = (('.q_proj', '.qkv_proj'), ('.k_proj', '.qkv_proj'), ('.v_proj', '.qkv_proj'),
                ('.gate_proj', '.gate_up_proj'), ('.up_proj', '.gate_up_proj'))
VLLM_MODEL_PARAMS = ('fc.weight', 'norm.weight', 'embed_tokens.weight')
VLLM_LAYER_PARAMS = ('self_attn.qkv_proj.weight', 'self_attn.o_proj.weight',
                     'mlp.gate_up_proj.weight', 'mlp.down_proj.weight', 'input_layernorm.weight',
                     'hidden_norm.weight', 'post_attention_layernorm.weight')
SGLANG_LAYERS_VERSION = (0, 5, 12)  # first SGLang that loads layers.N. and >1 layer
# From the real llama_eagle3.py of each release (tests/releases/fixtures, "loader"):
# fc_norm.{i} (legacy aux_norm_low/mid/high) from 0.5.12, built only when config.json sets
# fc_norm or use_aux_norm; input_norm (one RMSNorm over the concatenated aux states) from
# 0.5.17, built only when config.json or its eagle_config sets norm_before_fc. A norm the
# config does not ask for has no parameter: SGLang skips its tensor without a word.
SGLANG_INPUT_NORM_VERSION = (0, 5, 17)
# kimi_k25_eagle3.py: first in the 0.5.12.post1 wheel (a version reads as (0, 5, 12));
# fc_norm (config fc_norm or use_aux_norm) from 0.5.13.post1. No legacy aux_norm_* names,
# no input_norm, exactly one layer (ValueError "EAGLE3 currently only supports 1 layer").
SGLANG_MLA_VERSION, SGLANG_MLA_RELEASE = (0, 5, 12), '0.5.12.post1'
SGLANG_MLA_FC_NORM_VERSION, SGLANG_MLA_FC_NORM_RELEASE = (0, 5, 13), '0.5.13.post1'
MLA_WARNING = 'Eagle3 MLA: skipping unexpected weight'
# The two halves the MLA loader concatenates into self_attn.fused_qkv_a_proj_with_mqa.
MLA_FUSED = ('self_attn.q_a_proj.weight', 'self_attn.kv_a_proj_with_mqa.weight')
MLA_LAYER_WEIGHTS = MLA_FUSED + (
    'self_attn.q_a_layernorm.weight', 'self_attn.q_b_proj.weight', 'self_attn.kv_a_layernorm.weight',
    'self_attn.kv_b_proj.weight', 'self_attn.o_proj.weight', 'mlp.gate_proj.weight', 'mlp.up_proj.weight',
    'mlp.down_proj.weight', 'input_layernorm.weight', 'hidden_norm.weight', 'post_attention_layernorm.weight',
)
# Tensors only an MLA attention has (how the class of a drafter is told from its tensors).
MLA_MARKERS = MLA_FUSED + ('self_attn.kv_b_proj.weight', 'self_attn.fused_qkv_a_proj_with_mqa.weight')
MLA_CONFIG_FIELDS = ('q_lora_rank', 'kv_lora_rank', 'qk_rope_head_dim', 'qk_nope_head_dim', 'v_head_dim')
# vllm-project speculators writes its own layout, which no SGLang release reads.
SPECULATORS_ARCHITECTURES = ('Eagle3DraftModel', 'Eagle3Speculator')

TOP_LEVEL = ('fc.weight', 'norm.weight', 'lm_head.weight', 'd2t', 't2d', 'embed_tokens.weight')
# SGLang >= 0.5.12 also knows the optional per-aux-layer norms (legacy aux_norm_* names).
SGLANG_FC_NORMS = ('fc_norm.0.weight', 'fc_norm.1.weight', 'fc_norm.2.weight',
                   'aux_norm_low.weight', 'aux_norm_mid.weight', 'aux_norm_high.weight')
LAYER_WEIGHTS = (
    'self_attn.q_proj.weight', 'self_attn.k_proj.weight', 'self_attn.v_proj.weight',
    'self_attn.o_proj.weight', 'mlp.gate_proj.weight', 'mlp.up_proj.weight',
    'mlp.down_proj.weight', 'input_layernorm.weight', 'hidden_norm.weight',
    'post_attention_layernorm.weight',
)
MIDLAYER = 'midlayer.'
MODEL = 'model.'
_LAYERS_RE = re.compile(r'^layers\.(\d+)\.(.*)$')


class Rules:
    """The naming rules of one engine and version (version None: all versions) for one
    drafter class ('llama' or 'mla', DRAFTER_CLASSES)."""

    def __init__(self, engine, version=None, drafter='llama'):
        if engine not in ENGINES:
            raise ValueError('engine %r is not one of %s' % (engine, ', '.join(ENGINES)))
        self.engine = engine
        self.version = version  # tuple or None
        self.version_text = '.'.join(str(p) for p in version) if version else None
        self.drafter = drafter
        self.architecture = DRAFTER_CLASSES[drafter]

    def for_drafter(self, drafter):
        """The same engine and version for the drafter class ``drafter``."""
        return Rules(self.engine, self.version, drafter)

    @property
    def mla(self):
        return self.drafter == 'mla'

    @property
    def has_mla_loader(self):
        """Whether this engine and version ship kimi_k25_eagle3.py."""
        return self.engine == 'sglang' and self.version is not None and self.version >= SGLANG_MLA_VERSION

    @property
    def label(self):
        name = 'SGLang' if self.engine == 'sglang' else 'vLLM'
        if self.version is None:
            return 'SGLang <= 0.5.11 (no engine_version given)' if self.engine == 'sglang' else name
        return '%s %s' % (name, self.version_text)

    @property
    def strict(self):
        """True when unknown names fail the load (vLLM) instead of being skipped (SGLang)."""
        return self.engine == 'vllm'

    @property
    def loads_layers_names(self):
        """Whether ``layers.N.`` names load. Without a version SGLang <= 0.5.11 counts.
        The MLA loader maps ``layers.0.`` to ``midlayer.`` itself."""
        if self.engine == 'vllm' or self.mla:
            return True
        return self.version is not None and self.version >= SGLANG_LAYERS_VERSION

    @property
    def max_layers(self):
        return None if self.loads_layers_names and not self.mla else 1

    def loads_model_prefix(self, canonical):
        """SGLang tries a name as is, then with ``model.`` in front; vLLM adds ``model.``
        itself, so a checkpoint's own ``model.`` prefix never matches there; nor in the MLA
        loader, which puts ``model.`` in front of every name but ``lm_head``."""
        return self.engine == 'sglang' and not self.mla and canonical != 'lm_head.weight'

    def fc_norm_flag(self, config):
        """Whether this engine builds fc_norm for ``config`` (None: it never does)."""
        if self.engine != 'sglang' or not self.loads_layers_names:
            return None
        if self.mla and (self.version is None or self.version < SGLANG_MLA_FC_NORM_VERSION):
            return None
        return bool(config.get('fc_norm') or config.get('use_aux_norm'))

    def input_norm_flag(self, config):
        """Whether this engine builds input_norm for ``config`` (None: it never does)."""
        if self.engine != 'sglang' or self.mla or self.version is None or self.version < SGLANG_INPUT_NORM_VERSION:
            return None
        eagle = config.get('eagle_config') or {}
        return bool(eagle.get('norm_before_fc', config.get('norm_before_fc', False)))

    def known_top_level(self, config=None):
        names = TOP_LEVEL
        config = config or {}
        if self.mla and config.get('bias'):
            names += ('fc.bias',)
        if self.mla and config.get('tie_word_embeddings') is True:
            names = tuple(n for n in names if n != 'lm_head.weight')
        if self.fc_norm_flag(config):
            names += tuple(n for n in SGLANG_FC_NORMS if not (self.mla and n in AUX_NORM_NAMES))
        if self.input_norm_flag(config):
            names += ('input_norm.weight',)
        return names

    def optional_norm_hint(self, canon, config):
        """Why a norm tensor of ``canon`` is skipped and what would load it, or None."""
        if canon in AUX_NORM_NAMES and self.mla:
            return 'the MLA loader knows no legacy aux_norm_* names: rename it to %s' % AUX_NORM_NAMES[canon]
        if canon in SGLANG_FC_NORMS and self.fc_norm_flag(config) is False:
            return ('config.json sets neither fc_norm nor use_aux_norm, so %s builds no fc_norm: set '
                    '"fc_norm": true in config.json if the drafter was trained with it' % self.label)
        if canon in SGLANG_FC_NORMS and self.fc_norm_flag(config) is None and self.engine == 'sglang':
            return 'fc_norm loads%s from SGLang %s on (with "fc_norm": true in config.json)' % (
                (' in the MLA drafter', SGLANG_MLA_FC_NORM_RELEASE) if self.mla else ('', '0.5.12'))
        if canon == 'input_norm.weight' and self.input_norm_flag(config) is False:
            return ('config.json does not set norm_before_fc, so %s builds no input_norm: set '
                    '"norm_before_fc": true if the drafter was trained with it' % self.label)
        if canon == 'input_norm.weight' and self.input_norm_flag(config) is None and self.engine == 'sglang':
            return 'input_norm (norm_before_fc) loads from SGLang 0.5.17 on'
        return None


def split_name(name):
    """(had_model_prefix, layer index or None, rest, layer spelling) of a tensor name.

    ``layer spelling`` is 'midlayer', 'layers' or None.
    """
    had_model = name.startswith(MODEL)
    base = name[len(MODEL):] if had_model else name
    if base.startswith(MIDLAYER):
        return had_model, 0, base[len(MIDLAYER):], 'midlayer'
    match = _LAYERS_RE.match(base)
    if match:
        return had_model, int(match.group(1)), match.group(2), 'layers'
    return had_model, None, base, None


# SGLang's legacy_name_map (0.5.12 on): the old per-aux norm names load as fc_norm.N.
AUX_NORM_NAMES = {'aux_norm_low.weight': 'fc_norm.0.weight', 'aux_norm_mid.weight': 'fc_norm.1.weight',
                  'aux_norm_high.weight': 'fc_norm.2.weight'}


def canonical(name):
    had_model, index, rest, spelling = split_name(name)
    if index is None:
        return AUX_NORM_NAMES.get(rest, rest)
    return 'layers.%d.%s' % (index, rest)


def detect_layout(names):
    """'midlayer', 'layers', 'mixed' or 'none' for a collection of tensor names."""
    spellings = {split_name(n)[3] for n in names} - {None}
    if not spellings:
        return 'none'
    if len(spellings) == 2:
        return 'mixed'
    return spellings.pop()


def apply_rename_rules(name, rules):
    """First ``{from, to}`` prefix rule that matches ``name`` wins."""
    for rule in rules or ():
        if name.startswith(rule['from']):
            return rule['to'] + name[len(rule['from']):]
    return name


class DraftConfig:
    """The config.json fields that decide the drafter's tensors and shapes."""

    def __init__(self, config, drafter='llama'):
        self.raw = config
        self.drafter = drafter
        fields = ('hidden_size', 'intermediate_size', 'num_attention_heads', 'num_hidden_layers', 'vocab_size')
        if drafter == 'mla':
            fields += MLA_CONFIG_FIELDS
        self.missing = [k for k in fields if not isinstance(config.get(k), int)]
        self.hidden = config.get('hidden_size')
        self.intermediate = config.get('intermediate_size')
        self.heads = config.get('num_attention_heads')
        self.kv_heads = config.get('num_key_value_heads') or self.heads
        self.layers = config.get('num_hidden_layers')
        self.vocab = config.get('vocab_size')
        self.draft_vocab = config.get('draft_vocab_size') or self.vocab
        self.target_hidden = config.get('target_hidden_size') or self.hidden
        head_dim = config.get('head_dim')
        if not head_dim and self.hidden and self.heads:
            head_dim = self.hidden // self.heads
        self.head_dim = head_dim
        eagle = config.get('eagle_config') or {}
        aux = eagle.get('eagle_aux_hidden_state_layer_ids') or config.get(
            'eagle_aux_hidden_state_layer_ids')
        self.aux_layers = len(aux) if isinstance(aux, list) and aux else 3
        # Without a draft vocabulary and untied embeddings, the engine reuses the target's
        # lm_head (FACTS: SGLang llama_eagle3).
        self.lm_head_from_target = (config.get('tie_word_embeddings') is False
                                    and config.get('draft_vocab_size') is None)

    def expected_shapes(self, rules=None):
        """Canonical name -> (shape or None, required) for every tensor the engine reads."""
        self.fc_norm = bool(rules and rules.fc_norm_flag(self.raw))
        self.norm_before_fc = bool(rules and rules.input_norm_flag(self.raw))
        if self.missing:
            return {}
        h, hd = self.hidden, self.head_dim
        # SGLang 0.5.12+: a layer N >= 1 normalises with hidden_norm, its input_layernorm is unused.
        unused_after_first = ('input_layernorm.weight',) if rules and rules.engine == 'sglang' else ()
        shapes = {
            'fc.weight': ([h, self.aux_layers * self.target_hidden], True),
            'norm.weight': ([h], True),
            'lm_head.weight': ([self.draft_vocab, h], not self.lm_head_from_target),
            'd2t': ([self.draft_vocab], self.draft_vocab < self.vocab),
            't2d': ([self.vocab], False),
            'embed_tokens.weight': ([self.vocab, h], False),
        }
        for index in range(self.aux_layers if self.fc_norm else 0):
            shapes['fc_norm.%d.weight' % index] = ([self.target_hidden], True)
        if self.norm_before_fc:
            shapes['input_norm.weight'] = ([self.aux_layers * self.target_hidden], True)
        if self.drafter == 'mla':
            self.expected = shapes
            shapes.update(self._mla_shapes())
            return shapes
        for index in range(self.layers):
            qkv_in = 2 * h if index == 0 else h
            layer = {
                'self_attn.q_proj.weight': [self.heads * hd, qkv_in],
                'self_attn.k_proj.weight': [self.kv_heads * hd, qkv_in],
                'self_attn.v_proj.weight': [self.kv_heads * hd, qkv_in],
                'self_attn.o_proj.weight': [h, self.heads * hd],
                'mlp.gate_proj.weight': [self.intermediate, h],
                'mlp.up_proj.weight': [self.intermediate, h],
                'mlp.down_proj.weight': [h, self.intermediate],
                'input_layernorm.weight': [h],
                'hidden_norm.weight': [h],
                'post_attention_layernorm.weight': [h],
            }
            for rest, shape in layer.items():
                shapes['layers.%d.%s' % (index, rest)] = (shape, not (index and rest in unused_after_first))
        return shapes

    def _mla_shapes(self):
        """The MLA drafter's own tensors (kimi_k25_eagle3.py: DeepseekV2AttentionMLA with a
        q_a / kv_a projection over the concatenated 2 x hidden input, a dense MLP)."""
        c, h = self.raw, self.hidden
        rope, nope, v_dim = c['qk_rope_head_dim'], c['qk_nope_head_dim'], c['v_head_dim']
        q_rank, kv_rank = c['q_lora_rank'], c['kv_lora_rank']
        layer = {
            'self_attn.q_a_proj.weight': [q_rank, 2 * h],
            'self_attn.kv_a_proj_with_mqa.weight': [kv_rank + rope, 2 * h],
            'self_attn.q_a_layernorm.weight': [q_rank],
            'self_attn.q_b_proj.weight': [self.heads * (nope + rope), q_rank],
            'self_attn.kv_a_layernorm.weight': [kv_rank],
            'self_attn.kv_b_proj.weight': [self.heads * (nope + v_dim), kv_rank],
            'self_attn.o_proj.weight': [h, self.heads * v_dim],
            'mlp.gate_proj.weight': [self.intermediate, h],
            'mlp.up_proj.weight': [self.intermediate, h],
            'mlp.down_proj.weight': [h, self.intermediate],
            'input_layernorm.weight': [h],
            'hidden_norm.weight': [h],
            'post_attention_layernorm.weight': [h],
        }
        shapes = {'layers.0.' + rest: (shape, True) for rest, shape in layer.items()}
        if c.get('tie_word_embeddings') is True:  # lm_head is embed_tokens: no lm_head.weight parameter
            del self.expected['lm_head.weight']
            shapes['embed_tokens.weight'] = ([self.vocab, h], True)
        if c.get('bias'):
            shapes['fc.bias'] = ([h], True)
        return shapes


def drafter_kind(config, names):
    """'mla' or 'llama': the drafter class config.json names, else the one its tensors show."""
    archs = (config or {}).get('architectures')
    archs = archs if isinstance(archs, list) else []
    for kind, architecture in DRAFTER_CLASSES.items():
        if architecture in archs:
            return kind
    return tensors_kind(names) or 'llama'


def tensors_kind(names):
    """The drafter class the attention tensors show ('mla', 'llama'), None without any."""
    rests = {split_name(n)[2] for n in names}
    if rests & set(MLA_MARKERS):
        return 'mla'
    return 'llama' if rests & set(LAYER_WEIGHTS[:3]) else None


def architecture_accepted(config, rules):
    accepted = ACCEPTED_ARCHITECTURES[rules.engine]
    if rules.mla:
        accepted = (MLA_ARCHITECTURE,)
    archs = config.get('architectures')
    return accepted is None or isinstance(archs, list) and any(a in accepted for a in archs)


def fixed_architecture(config, names, rules):
    """The ``architectures`` a fix may write, or None: the class of the drafter's own
    tensors, and only when config.json names no drafter class (never Llama <-> MLA)."""
    if config is None or architecture_accepted(config, rules) or not looks_like_eagle3(names):
        return None
    archs = config.get('architectures')
    if isinstance(archs, list) and set(archs) & set(DRAFTER_CLASSES.values()):
        return None
    return [DRAFTER_CLASSES[tensors_kind(names)]]


def vllm_load_error(name, layers):
    """The exception vLLM's Eagle3LlamaForCausalLM.load_weights raises for ``name``, or None.

    It skips names containing ``t2d``, renames ``d2t`` to ``draft_id_to_target_id``, puts
    ``model.`` in front of every name without ``lm_head``, then resolves the first
    component on the top-level model (unknown: ValueError) and, under ``model.``, looks the
    rest up after ``midlayer.`` -> ``layers.0.`` and the q/k/v, gate/up fusion (KeyError).
    """
    if 't2d' in name:
        return None
    if 'd2t' in name:
        full = name.replace('d2t', 'draft_id_to_target_id')
    elif 'lm_head' in name:
        full = name
    else:
        full = MODEL + name
    first, dummy, rest = full.partition('.')
    if first == 'model':
        inner = rest.replace(MIDLAYER, 'layers.0.')
        for shard, fused in VLLM_STACKED:
            if shard in inner:
                inner = inner.replace(shard, fused)
                break
        match = _LAYERS_RE.match(inner)
        if inner in VLLM_MODEL_PARAMS or (match and int(match.group(1)) < layers
                                          and match.group(2) in VLLM_LAYER_PARAMS):
            return None
        return 'KeyError: %r' % inner
    if full in ('lm_head.weight', 'draft_id_to_target_id'):
        return None
    return ("ValueError: There is no module or parameter named %r in Eagle3LlamaForCausalLM"
            % first)


def _common_prefix_hint(names):
    """The first name component all ``names`` share, when stripping it is the likely fix."""
    firsts = {n.split('.', 1)[0] for n in names if '.' in n}
    if len(names) < 2 or len(firsts) != 1 or len(firsts) != len({n.split('.', 1)[0] for n in names}):
        return None
    first = firsts.pop()
    if first in ('model', 'layers', 'midlayer', 'fc', 'norm', 'lm_head', 'embed_tokens'):
        return None
    return first + '.'


def _loads_after_stripping(prefix, names, rules, known_top, layer_count, config):
    """Whether every name of ``names`` loads once ``prefix`` is stripped: the only rename
    advice worth giving (stripping "fc_norm." from fc_norm.0.weight gives "0.weight")."""
    for name in names:
        stripped = name[len(prefix):]
        had_model, index, rest, spelling = split_name(stripped)
        canon = 'd2t' if 'd2t' in stripped else canonical(stripped)
        if _load_error(rules, stripped, had_model, index, rest, spelling, canon, known_top, layer_count, config):
            return False
    return True


def looks_like_eagle3(names):
    """Tensors of an EAGLE-3 drafter: an ``fc`` over the aux hidden states and a layer
    with ``hidden_norm``."""
    canon = {canonical(n) for n in names}
    return 'fc.weight' in canon and any(c.endswith('.hidden_norm.weight') for c in canon)


def plan_renames(names, config, rules, layout='auto', rename=None):
    """Map each tensor name to the name the engine loads: user prefix rules, then the
    ``model.`` prefix the engine does not take, then the layer spelling of ``layout``.

    Returns (mapping old -> new for changed names only, layout chosen after renaming).
    """
    step1 = {n: apply_rename_rules(n, rename) for n in names}
    target = layout
    if layout == 'auto':
        spellings = {split_name(n)[3] for n in step1.values()} - {None}
        if 'layers' not in spellings or rules.loads_layers_names:
            target = None  # what is there loads: keep it
        else:
            layers = config.get('num_hidden_layers')
            target = 'midlayer' if layers in (None, 1) else 'layers'
    mapping = {}
    for old, name in step1.items():
        had_model, index, rest, spelling = split_name(name)
        if had_model and not rules.loads_model_prefix(canonical(name)):
            had_model = False
        if index is not None and target == 'midlayer' and index == 0:
            spelling = 'midlayer'
        elif index is not None and target == 'layers':
            spelling = 'layers'
        if index is None:
            base = rest
        elif spelling == 'midlayer':
            base = MIDLAYER + rest
        else:
            base = 'layers.%d.%s' % (index, rest)
        new = (MODEL if had_model else '') + base
        if new != old:
            mapping[old] = new
    after = [mapping.get(n, n) for n in names]
    return mapping, detect_layout(after)


def find_problems(tensors, config, config_file, rules, source, layout='auto'):
    """What stops ``rules`` from loading these tensors correctly.

    ``tensors``: name -> (file, dtype, shape); ``source``: the drafter, named in messages
    about missing tensors; ``config`` None (a lone file without config.json): only the
    names are checked. Returns a list of messages, each naming the file and the root
    cause the engine would hit.
    """
    if config is None:
        indexes = [split_name(n)[1] for n in tensors]
        layers = max([i for i in indexes if i is not None] or [0]) + 1
        config = {'architectures': [rules.architecture], 'num_hidden_layers': layers}
        cfg = None
    else:
        cfg = DraftConfig(config, rules.drafter)
    refused = _mla_refusal(rules, config_file)
    if refused:
        return [refused]
    problems = _config_problems(cfg, config, config_file, rules, layout, tensors) if cfg else []
    layer_count = config['num_hidden_layers'] if isinstance(config.get('num_hidden_layers'), int) else 1

    known_top = rules.known_top_level(config)
    seen = {}
    dropped = set()  # canonical names already reported, not to be reported missing again
    failing = []
    for name, (path, dtype, shape) in tensors.items():
        had_model, index, rest, spelling = split_name(name)
        canon = 'd2t' if 'd2t' in name else canonical(name)
        dropped.add(canon)
        if 't2d' in name:
            continue  # both engines skip it
        error = _load_error(rules, name, had_model, index, rest, spelling, canon, known_top, layer_count, config)
        if error:
            failing.append(name)
            problems.append('%s: tensor %r %s' % (path, name, error))
            continue
        if canon in seen:
            problems.append('%s: tensors %r and %r both load into %r: duplicate weight (both '
                            'layers.0.x and midlayer.x, or with and without "model.")'
                            % (path, seen[canon], name, canon))
            continue
        seen[canon] = name
    prefix = _common_prefix_hint(failing)
    if prefix and _loads_after_stripping(prefix, failing, rules, known_top, layer_count, config):
        problems.insert(0, '%s: every unloadable tensor name starts with %r: add the rename rule '
                           '{from: %r, to: \'\'}' % (source, prefix, prefix))
    for canon, (shape, required) in (cfg.expected_shapes(rules) if cfg else {}).items():
        if canon not in seen:
            if required and canon not in dropped:
                problems.append('%s: missing required tensor %r: %s' % (source, canon, _missing(rules, canon)))
            continue
        name = seen[canon]
        path, dtype, actual = tensors[name]
        if list(actual) != shape:
            problems.append('%s: tensor %r has shape %r, config.json implies %r: size mismatch '
                            'when the engine loads it' % (path, name, list(actual), shape))
    return problems


def _load_error(rules, name, had_model, index, rest, spelling, canon, known_top, layer_count, config=None):
    """Why ``rules`` would not load tensor ``name`` (text after the name), or None."""
    if rules.mla:
        return _mla_load_error(rules, name, had_model, index, rest, canon, known_top, config or {})
    if rules.strict:
        error = vllm_load_error(name, layer_count)
        return error and 'makes %s fail to start: %s (unknown weight name)' % (rules.label, error)
    dropped = 'would be silently dropped by %s' % rules.label
    if canon == 'd2t':
        return None  # SGLang takes any name containing d2t as the draft -> target map
    if had_model and not rules.loads_model_prefix(canon):
        return '%s (no parameter of that name; strip the "model." prefix)' % dropped
    if spelling == 'layers' and not rules.loads_layers_names:
        return ('%s, which loads only "midlayer." names (the layer keeps random weights, accept '
                'length ~1.00); rename to "midlayer." or use SGLang >= 0.5.12' % dropped)
    if index is None:
        known = canon in known_top
    else:
        known = rest in LAYER_WEIGHTS and index < layer_count
    if known:
        return None
    hint = rules.optional_norm_hint(canon, config or {})
    return '%s (%s)' % (dropped, hint or 'unknown weight name')


def _mla_load_error(rules, name, had_model, index, rest, canon, known_top, config):
    """Why kimi_k25_eagle3.py's load_weights would not load tensor ``name``, or None."""
    warned = 'would be skipped by %s with the warning "%s %s"' % (rules.label, MLA_WARNING, name)
    dropped = 'would be silently dropped by %s' % rules.label
    if canon == 'd2t':
        if name == 'd2t' or name.endswith('.d2t'):
            return None
        return '%s (the loader takes only "d2t" or a name ending in ".d2t" as the draft -> target map)' % warned
    if had_model:
        return '%s (the loader puts "model." in front itself; strip the "model." prefix)' % warned
    if index is None:
        if rest in known_top:
            return None
        return '%s (%s)' % (warned, rules.optional_norm_hint(rest, config) or 'unknown weight name')
    if 'q_a_proj' in name or 'kv_a_proj_with_mqa' in name:
        if index == 0 and rest in MLA_FUSED:
            return None
        return ('%s (the loader builds fused_qkv_a_proj_with_mqa of layer 0 from q_a_proj and '
                'kv_a_proj_with_mqa itself and loads nothing else of that name: save the two halves '
                'as layers.0.%s and layers.0.%s)' % ((dropped,) + MLA_FUSED))
    if index == 0 and rest in MLA_LAYER_WEIGHTS:
        return None
    if index != 0:
        return '%s (the MLA drafter has one layer: layers.0 or midlayer)' % warned
    if rest in LAYER_WEIGHTS:
        return '%s (a Llama attention weight: the MLA drafter has q_a_proj, kv_a_proj_with_mqa, ...)' % warned
    return '%s (unknown weight name)' % warned


def _mla_refusal(rules, config_file):
    """Why this engine and version cannot load an MLA drafter at all, or None."""
    if not rules.mla:
        return None
    if rules.engine != 'sglang':
        return ('%s: architectures %s is the Kimi-K2.5 MLA EAGLE-3 drafter, whose rules drafter_checkpoint '
                'knows for SGLang (kimi_k25_eagle3.py) only; %s builds its Llama EAGLE-3 class whatever '
                'config.json says' % (config_file, MLA_ARCHITECTURE, rules.label))
    if not rules.has_mla_loader:
        return ('%s: architectures %s (the Kimi-K2.5 MLA EAGLE-3 drafter) has no loader in %s: '
                'kimi_k25_eagle3.py first ships in SGLang %s%s'
                % (config_file, MLA_ARCHITECTURE, rules.label, SGLANG_MLA_RELEASE,
                   '; set engine_version' if rules.version is None else ''))
    return None


def _missing(rules, canon):
    """What the engine does when ``canon`` is absent."""
    if rules.mla and canon in ['layers.0.' + n for n in MLA_FUSED]:
        return ('SGLang fills fused_qkv_a_proj_with_mqa only from both q_a_proj and kv_a_proj_with_mqa, '
                'so it silently drops the other half too and serves with random weights (accept length ~1.00)')
    if rules.engine == 'vllm':
        if canon == 'lm_head.weight':
            return ("vLLM starts and shares the target's lm_head instead ('Detected EAGLE model "
                    "without its own lm_head in the checkpoint'), so drafts are rejected "
                    "(acceptance length ~1.00)")
        return 'vLLM fails to start (ValueError: Following weights were not initialized from checkpoint)'
    return ('SGLang never reports missing weights; the drafter would serve with random weights '
            '(accept length ~1.00)')


def _config_problems(cfg, config, config_file, rules, layout, names=()):
    """Problems of config.json itself: fields, architecture, layer count, layout."""
    archs = config.get('architectures')
    if isinstance(archs, list) and set(archs) & set(SPECULATORS_ARCHITECTURES) or 'transformer_layer_config' in config:
        return ['%s: a vllm-project speculators checkpoint (architectures %r, sizes under '
                'transformer_layer_config): no SGLang release reads this layout (it needs a flat config.json '
                'with architectures ["%s"] and SGLang tensor names); drafter_checkpoint converts it with '
                'fix=true and engine sglang' % (config_file, archs, EAGLE3_ARCHITECTURE)]
    problems = []
    if layout == 'midlayer' and isinstance(cfg.layers, int) and cfg.layers > 1:
        problems.append('%s: layout midlayer holds one layer but num_hidden_layers is %d; use '
                        'layout layers (SGLang >= 0.5.12 or vLLM)' % (config_file, cfg.layers))
    if cfg.missing:
        problems.append('%s: lacks integer %s: the engine cannot build the drafter'
                        % (config_file, ', '.join(cfg.missing)))
    shown = tensors_kind(names) or rules.drafter
    if shown != rules.drafter:
        problems.append(
            '%s: architectures %r names the %s drafter class but the tensors are those of %s (%s): fix '
            'config.json by hand (drafter_checkpoint never turns one drafter class into the other)'
            % (config_file, archs, rules.architecture, DRAFTER_CLASSES[shown],
               'MLA attention: q_a_proj, kv_a_proj_with_mqa' if shown == 'mla' else 'q_proj, k_proj, v_proj'))
    elif rules.mla:
        problems.extend(_mla_config_problems(cfg, config, config_file, rules))
    elif not architecture_accepted(config, rules):
        problems.append(
            '%s: architectures %r is not %s: %s builds the plain model class for it and '
            'fails (e.g. KeyError: \'midlayer.self_attn.qkv_proj.weight\')'
            % (config_file, archs, ' or '.join(ACCEPTED_ARCHITECTURES[rules.engine]), rules.label))
    if isinstance(cfg.layers, int) and not rules.mla and rules.max_layers is not None and cfg.layers > rules.max_layers:
        if rules.version is None:
            problems.append(
                '%s: num_hidden_layers is %d: a multi-layer drafter needs SGLang >= 0.5.12 '
                '(0.5.11 and earlier reject num_hidden_layers != 1); set engine_version'
                % (config_file, cfg.layers))
        else:
            problems.append(
                '%s: num_hidden_layers is %d but %s rejects num_hidden_layers != 1; a '
                'multi-layer drafter needs SGLang >= 0.5.12' % (config_file, cfg.layers, rules.label))
    return problems


def _mla_config_problems(cfg, config, config_file, rules):
    """What stops kimi_k25_eagle3.py from building the drafter of this config.json."""
    problems = []
    if not architecture_accepted(config, rules):
        problems.append('%s: architectures %r is not %s: %s builds another model class for it'
                        % (config_file, config.get('architectures'), MLA_ARCHITECTURE, rules.label))
    if config.get('q_lora_rank') is None:
        problems.append('%s: q_lora_rank is not set: %s fails to start (ValueError: Eagle3 MLA layer '
                        'requires q_lora_rank in the draft config)' % (config_file, rules.label))
    if isinstance(cfg.layers, int) and cfg.layers != 1:
        problems.append('%s: num_hidden_layers is %d: %s fails to start (ValueError: EAGLE3 currently only '
                        'supports 1 layer)' % (config_file, cfg.layers, rules.label))
    return problems


# ---- a drafter against the target it will serve (module option target_path)

def text_config(target):
    """The language model's part of a target config.json: ``text_config`` of a multimodal
    model (Kimi-K2.5 is KimiK25ForConditionalGeneration around a DeepSeek-V3 text model)."""
    inner = target.get('text_config')
    if not isinstance(target.get('hidden_size'), int) and isinstance(inner, dict):
        return inner
    return target


def aux_layer_ids(config):
    """(field, ids) of the target layers whose hidden states the drafter reads, or (field, None)."""
    eagle = config.get('eagle_config') or {}
    if isinstance(eagle, dict) and eagle.get('eagle_aux_hidden_state_layer_ids') is not None:
        return 'eagle_config.eagle_aux_hidden_state_layer_ids', eagle['eagle_aux_hidden_state_layer_ids']
    return 'eagle_aux_hidden_state_layer_ids', config.get('eagle_aux_hidden_state_layer_ids')


def target_problems(config, config_file, target, target_file, drafter, d2t=None):
    """Why the drafter of ``config`` (class ``drafter``) does not fit the target model of
    ``target`` (its config.json): each message names both files and the field. ``d2t``:
    (file, tensor name, values) of the drafter's draft -> target map, when read."""
    text = text_config(target)
    problems = []

    def mismatch(field, value, target_field, target_value, why):
        problems.append('%s: %s is %r but the target %s: %s is %r: %s'
                        % (config_file, field, value, target_file, target_field, target_value, why))

    hidden_field = 'target_hidden_size' if config.get('target_hidden_size') else 'hidden_size'
    hidden, target_hidden = config.get(hidden_field), text.get('hidden_size')
    if isinstance(hidden, int) and isinstance(target_hidden, int) and hidden != target_hidden:
        mismatch(hidden_field, hidden, 'hidden_size', target_hidden,
                 "the drafter's fc reads the target's hidden states of that width")
    vocab, target_vocab = config.get('vocab_size'), text.get('vocab_size')
    if isinstance(vocab, int) and isinstance(target_vocab, int) and vocab != target_vocab:
        mismatch('vocab_size', vocab, 'vocab_size', target_vocab,
                 'the drafter embeds and proposes token ids of another vocabulary')
    draft_vocab = config.get('draft_vocab_size')
    if isinstance(draft_vocab, int) and isinstance(target_vocab, int) and draft_vocab > target_vocab:
        mismatch('draft_vocab_size', draft_vocab, 'vocab_size', target_vocab,
                 'a draft vocabulary cannot be larger than the target vocabulary (d2t maps into it)')
    if d2t is not None and isinstance(target_vocab, int):
        path, name, values = d2t
        beyond = [(i, i + v) for i, v in enumerate(values) if not 0 <= i + v < target_vocab]
        if beyond:
            problems.append('%s: tensor %r maps draft token %d to target token %d (%d such), but the target %s: '
                            'vocab_size is %d: the draft vocabulary was built for another target'
                            % (path, name, beyond[0][0], beyond[0][1], len(beyond), target_file, target_vocab))
    field, ids = aux_layer_ids(config)
    layers = text.get('num_hidden_layers')
    if isinstance(ids, list) and isinstance(layers, int):
        outside = [i for i in ids if not isinstance(i, int) or not 0 <= i < layers]
        if outside:
            mismatch(field, ids, 'num_hidden_layers', layers,
                     'layer id(s) %s are not layers of the target (0 ... %d)' % (outside, layers - 1))
    if drafter == 'mla' and not isinstance(text.get('kv_lora_rank'), int):
        archs = target.get('architectures')
        problems.append('%s: architectures %r is the MLA drafter, made for a DeepSeek-V2/V3 or Kimi target '
                        '(multi-latent attention), but the target %s: architectures %r has no kv_lora_rank '
                        '(no multi-latent attention)' % (config_file, config.get('architectures'), target_file, archs))
    return problems
