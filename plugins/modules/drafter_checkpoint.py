#!/usr/bin/python
# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: drafter_checkpoint
short_description: Validate and fix an EAGLE-3 drafter checkpoint for SGLang or vLLM
version_added: 1.0.0
description:
  - Checks that an EAGLE-3 drafter (config.json plus safetensors files) will load
    correctly in the given engine and version, and fixes what can be fixed.
  - Reads only the safetensors headers; tensor data is never loaded, so neither torch
    nor numpy is needed on the managed host.
  - "Validation: required tensors present (C(fc), C(norm), C(lm_head) unless taken from
    the target, every layer's attention, MLP and norm weights, C(d2t) when the draft
    vocabulary is smaller), shapes consistent with config.json, C(num_hidden_layers)
    allowed by the version, the config's C(architectures) (SGLang), and no tensor name
    that the engine would drop silently (SGLang) or fail on (vLLM raises C(KeyError) or
    C(ValueError)). Messages name the file and the cause the engine would hit."
  - "Fixing renames tensors (layer prefix C(midlayer.) / C(layers.N.), a C(model.) prefix
    the engine does not take, user prefix rules) and sets C(architectures). When the new
    header fits in the old header region only the changed header bytes are written in
    place (C(layers.0.) and C(midlayer.) have the same length, so this is the usual case);
    otherwise the data is streamed by the kernel into a temporary file that is renamed
    over the original. The sharded index and config.json are replaced atomically."
  - "Two drafter classes: the Llama EAGLE-3 drafter (C(LlamaForCausalLMEagle3), SGLang
    C(llama_eagle3.py)) and the Kimi-K2.5 MLA EAGLE-3 drafter (C(Eagle3DeepseekV2ForCausalLM),
    SGLang C(kimi_k25_eagle3.py), from 0.5.12.post1): one layer with DeepSeek-V2 multi-latent
    attention (C(q_a_proj), C(q_a_layernorm), C(q_b_proj), C(kv_a_proj_with_mqa), C(kv_a_layernorm),
    C(kv_b_proj), C(o_proj)), shapes from C(q_lora_rank), C(kv_lora_rank), C(qk_rope_head_dim),
    C(qk_nope_head_dim), C(v_head_dim) and the heads of config.json. Its loader maps C(layers.0.)
    to C(midlayer.) itself, so both spellings are kept as they are; it fuses C(q_a_proj) and
    C(kv_a_proj_with_mqa) only when both are present, skips other unknown names with the warning
    C(Eagle3 MLA: skipping unexpected weight) and loads C(fc_norm.N) (from 0.5.13.post1) only when
    config.json sets C(fc_norm) or C(use_aux_norm). The class is the one config.json names, else the
    one the attention tensors show. An SGLang release before 0.5.12.post1 (or no O(engine_version))
    refuses it, as does O(engine=vllm)."
  - "A drafter saved by vllm-project C(speculators) (config.json with
    C(speculators_model_type) and the sizes under C(transformer_layer_config),
    C(architectures) C(Eagle3Speculator) or C(Eagle3DraftModel)) is read by no SGLang
    release. For O(engine=sglang) it is converted (O(convert_speculators)): config.json is
    flattened into what C(LlamaForCausalLMEagle3) reads (the layer config's fields,
    C(draft_vocab_size), C(target_hidden_size), C(eagle_config.eagle_aux_hidden_state_layer_ids),
    C(fc_norm), C(norm_before_fc), C(norm_output), C(tie_word_embeddings=false)) and the
    pre-attention norm of each layer after the first, C(layers.N.input_layernorm.weight), is
    renamed C(layers.N.hidden_norm.weight) (SGLang's name for it); the other names are
    already SGLang's and then follow O(layout). Tensor data is never touched."
  - "A speculators drafter that SGLang cannot run as trained is refused with the reason
    and left unchanged: C(norm_before_residual) true (or unset), qwen3 layers
    (C(q_norm)/C(k_norm)), attention bias, sliding-window layers, an algorithm other
    than eagle3, C(norm_output) before SGLang 0.5.12."
  - Crash safe. A run killed at any instant leaves each file as it was or fully fixed,
    and the next run finishes the job (interrupted in-place writes are journaled and
    recovered first).
  - "Symbolic links (Hugging Face cache C(snapshots/) pointing into C(blobs/)) and hard
    links (a file whose link count is above 1, for example a C(cp -al) backup): by
    default a file that must change and has another name is replaced by a fixed private
    copy, and the shared blob or the other names keep the original.
    O(modify_shared_blobs=true) fixes the blob or the hard-linked file in place instead,
    which changes it for every name that shares it."
  - "Concurrent runs on one directory (hosts sharing a model store) are serialised by an
    exclusive C(flock) on a lock file C(.drafter-lock) in the directory, created by the
    first run that writes there and kept. A run that waited for another finds the files
    it left and reports them unchanged. On NFS the Linux client emulates C(flock) with a
    POSIX byte-range lock that the server arbitrates for every client: NFSv4 supports it
    natively; NFSv3 needs C(lockd)/C(rpc.statd) on the clients and the server, and a mount
    with C(nolock) or C(local_lock) makes the lock local to each host (no protection
    between hosts)."
  - "A training run's output directory is refused with what to give instead: SpecForge's
    checkpoint folders (C(epoch_N_step_M/), each a drafter directory) are listed with the latest
    named, and a SpecForge training state (C(training_state.pt)) needs C(specforge export --to sglang)
    first. A SpecForge drafter (C(midlayer.) names, C(fc), C(norm), C(lm_head), C(d2t), C(t2d),
    no embeddings) is checked like any Llama EAGLE-3 drafter."
  - Fails, without modifying anything, on bad input (not safetensors, truncated, invalid
    header, read-only files, C(pytorch_model.bin) ...) and when problems remain that
    would stop the engine loading the drafter correctly.
author:
  - llmops.serving contributors (@llmops)
attributes:
  check_mode:
    support: full
    description: Reports what would change, including the method per file, and changes nothing.
  diff_mode:
    support: full
    description: Shows the tensor names and architectures (and a converted config.json) before and after.
  idempotent:
    support: full
    description: A second run with the same options reports C(changed=false).
options:
  path:
    description:
      - A drafter directory (C(config.json) plus one or more C(.safetensors) files,
        optionally C(model.safetensors.index.json)), or a single C(.safetensors) file
        (then a C(config.json) beside it is used when present).
    type: path
    required: true
  engine:
    description: The engine that will load the drafter.
    type: str
    choices: [sglang, vllm]
    default: sglang
  engine_version:
    description:
      - Version of the engine, for example V(0.5.11) or V(0.5.15.post1).
      - Without it the rules that every version of O(engine) accepts are applied (for
        SGLang, those of 0.5.11 and earlier).
    type: str
  layout:
    description:
      - Layer naming to produce.
      - V(auto) keeps the names when the engine and version load them; otherwise it picks
        V(midlayer) for a one-layer drafter (every SGLang version and vLLM load it) and
        V(layers) for a multi-layer drafter (needs SGLang 0.5.12 or later, or vLLM).
    type: str
    choices: [auto, midlayer, layers]
    default: auto
  rename:
    description:
      - "Extra prefix rules applied to every tensor name before the layer naming, first
        match wins. For example C([{from: draft_model., to: ''}]) strips C(draft_model.)."
    type: list
    elements: dict
    default: []
    suboptions:
      from:
        description: Prefix to replace.
        type: str
        required: true
      to:
        description: Replacement.
        type: str
        required: true
  target_path:
    description:
      - The target model directory on the host (with its C(config.json)), or that
        C(config.json) itself. The drafter is then checked against the model it will serve -
        its C(hidden_size) (or C(target_hidden_size)) against the target's C(hidden_size),
        C(vocab_size) against the target's, C(draft_vocab_size) no larger than the target's
        vocabulary, the target token ids C(d2t) maps the draft tokens to within the target's
        vocabulary (the only tensor data read, an integer tensor of C(draft_vocab_size) entries;
        its length is checked against C(draft_vocab_size) in any case), every
        C(eagle_aux_hidden_state_layer_ids) entry a layer of the target (below its
        C(num_hidden_layers)), and an MLA drafter (C(Eagle3DeepseekV2ForCausalLM)) only for a
        target with multi-latent attention (DeepSeek-V2/V3 or Kimi, with C(kv_lora_rank)). A Llama
        EAGLE-3 drafter may serve any target.
      - The fields of a multimodal target (Kimi-K2.5) are read from its C(text_config).
      - A mismatch is a problem (the task fails, nothing is changed), naming both files and the field.
    type: path
    version_added: 1.0.0
  fix_architecture:
    description:
      - Set C(architectures) in config.json to the drafter class its tensors show
        (V(LlamaForCausalLMEagle3), or V(Eagle3DeepseekV2ForCausalLM) for MLA attention) when
        the tensors are an EAGLE-3 drafter but the config names a class the engine does not
        build the drafter for (for example C(LlamaForCausalLM) or C(DeepseekV3ForCausalLM)).
      - A config.json that names one drafter class is never given the other; a mismatch with
        the tensors is reported instead.
    type: bool
    default: true
  convert_speculators:
    description:
      - Convert a vllm-project C(speculators) EAGLE-3 checkpoint into SGLang's layout
        (flattened config.json, tensor names) when O(engine=sglang) and O(fix=true).
      - When V(false) such a checkpoint is only reported, and fails the task.
    type: bool
    default: true
  fix:
    description:
      - When V(false), only validate and report; problems make the task fail.
    type: bool
    default: true
  backup:
    description:
      - Keep the original beside each changed file - the original header region as
        C(NAME.<time>.header-backup) for an in-place fix, the original file (a hard link,
        no copy) as C(NAME.<time>.orig) for a rewrite, and C(config.json.<time>.orig).
    type: bool
    default: false
  modify_shared_blobs:
    description:
      - When a file to fix is a symbolic link or has other hard links, fix it in place
        instead of replacing the name with a fixed private copy.
      - Other Hugging Face cache snapshots that share the blob (or the other hard links)
        see the change.
    type: bool
    default: false
notes:
  - Files are fixed one after another, then the index, then config.json. Each step is
    atomic; a rerun after an interruption converges.
  - config.json and the index are always replaced by a rename, so a hard-linked copy of
    them elsewhere keeps the original.
  - The recovery of an interrupted run happens even with O(fix=false) (it only restores
    or completes the state the interrupted run left); in check mode it is only reported.
  - vLLM builds the EAGLE-3 class from its speculative method whatever C(architectures)
    says, so O(fix_architecture) changes config.json only for SGLang.
seealso:
  - name: EAGLE-3 in SGLang
    description: The drafter model class and its weight names.
    link: https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/models/llama_eagle3.py
  - name: The Kimi-K2.5 MLA EAGLE-3 drafter in SGLang
    description: Eagle3DeepseekV2ForCausalLM and its weight names.
    link: https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/models/kimi_k25_eagle3.py
"""

EXAMPLES = r"""
- name: Make the drafter load in SGLang 0.5.11
  llmops.serving.drafter_checkpoint:
    path: /models/kimi-k2.5-eagle3
    engine: sglang
    engine_version: 0.5.11

- name: Check the Kimi-K2.5 MLA drafter for SGLang 0.5.23 against the target it serves
  llmops.serving.drafter_checkpoint:
    path: /models/kimi-k2.5-eagle3-mla
    engine_version: 0.5.23
    target_path: /models/Kimi-K2.5
    fix: false

- name: Only check a drafter for vLLM (fails on any problem)
  llmops.serving.drafter_checkpoint:
    path: /models/llama3-eagle3
    engine: vllm
    fix: false

- name: Convert a drafter trained with vllm-project speculators for SGLang 0.5.23
  llmops.serving.drafter_checkpoint:
    path: /models/llama3-8b-speculators-eagle3
    engine: sglang
    engine_version: 0.5.23
    backup: true
  register: drafter

- name: Say what was converted
  ansible.builtin.debug:
    msg: "{{ drafter.speculators | default('not a speculators checkpoint') }}"

- name: Strip a training prefix and keep the original headers
  llmops.serving.drafter_checkpoint:
    path: /models/specforge-out/epoch_9_step_12000
    rename:
      - from: draft_model.
        to: ''
    backup: true
"""

RETURN = r"""
summary:
  description: What was found and done, in one line (the path as O(path) names it).
  returned: success
  type: str
  sample: "/srv/drafter: 12 tensors, layout layers -> midlayer, 10 renamed (header_in_place), config fixed"
layout_before:
  description: Layer naming found (V(midlayer), V(layers), V(mixed) or V(none)).
  returned: always
  type: str
  sample: layers
layout_after:
  description: Layer naming after the fix (what a fix would produce in check mode).
  returned: always
  type: str
  sample: midlayer
renamed:
  description: Number of tensors renamed (or that would be).
  returned: always
  type: int
  sample: 10
renames:
  description: Up to 10 of the renames, as C(from) and C(to).
  returned: always
  type: list
  elements: dict
  sample: [{"from": "layers.0.mlp.up_proj.weight", "to": "midlayer.mlp.up_proj.weight"}]
files:
  description: One entry per safetensors file.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The file.
      type: str
    method:
      description: V(header_in_place), V(rewritten) or V(unchanged).
      type: str
    bytes_written:
      description: Bytes written (or that would be).
      type: int
    tensors:
      description: Number of tensors in the file.
      type: int
    private_copy:
      description:
        - The file was a symbolic link or had other hard links, and is replaced by a fixed
          private copy (the other names keep the original).
      type: bool
    backup_file:
      description: Where the original was kept, with O(backup=true).
      type: str
      returned: when a backup was made
  sample: [{"path": "/models/d/model.safetensors", "method": "header_in_place", "bytes_written": 1480,
            "tensors": 14, "private_copy": false}]
config_changed:
  description: Whether config.json (C(architectures), or a speculators conversion) was (or would be) changed.
  returned: always
  type: bool
speculators:
  description:
    - What was found in a vllm-project C(speculators) checkpoint and done with it.
  returned: when config.json is a speculators one
  type: dict
  contains:
    speculators_version:
      description: The speculators release that saved it.
      type: str
    speculators_model_type:
      description: The algorithm (V(eagle3) converts).
      type: str
    verifier:
      description: The target model the drafter was trained for (C(speculators_config.verifier.name_or_path)).
      type: str
    converted:
      description: Whether config.json and the names were (or would be) converted to SGLang's layout.
      type: bool
    tensors_renamed:
      description: Tensors renamed by the conversion itself (before O(layout)).
      type: int
    refused:
      description: Why it cannot be made to load correctly in the engine and version (also in RV(problems)).
      type: list
      elements: str
  sample: {"speculators_version": "0.3.0", "speculators_model_type": "eagle3",
           "verifier": "meta-llama/Llama-3.1-8B-Instruct", "converted": true,
           "tensors_renamed": 1, "refused": []}
target_config:
  description: The target's config.json the drafter was checked against.
  returned: when O(target_path) is set
  type: str
  sample: /models/Kimi-K2.5/config.json
config_backup_file:
  description: Where the original config.json was kept, with O(backup=true).
  returned: when config.json was changed with O(backup=true)
  type: str
index_changed:
  description: Whether the sharded index's C(weight_map) was (or would be) rewritten.
  returned: always
  type: bool
tensors:
  description: Number of tensors in the drafter.
  returned: always
  type: int
  sample: 14
parameters:
  description: Number of parameters (elements) in the drafter.
  returned: always
  type: int
  sample: 1108312064
problems:
  description:
    - What would still stop the engine loading the drafter correctly, each naming the
      file and the cause. Any problem fails the task.
  returned: always
  type: list
  elements: str
fixed_problems:
  description: Problems found before the fix that the fix removes (or would remove).
  returned: always
  type: list
  elements: str
recovered:
  description: What was done to finish or undo a previously interrupted run.
  returned: always
  type: list
  elements: str
diff:
  description:
    - Tensor names and architectures before and after, in diff mode; with a speculators
      conversion also the whole config.json (C(config)).
  returned: when diff mode is on
  type: dict
"""

import json
import os
import re
import stat

from ansible_collections.llmops.serving.plugins.module_utils._null_unset import NullIsUnsetModule

from ansible_collections.llmops.serving.plugins.module_utils import _eagle3
from ansible_collections.llmops.serving.plugins.module_utils import _safetensors
from ansible_collections.llmops.serving.plugins.module_utils import _speculators
from ansible_collections.llmops.serving.plugins.module_utils._version import parse_version

INDEX_NAME = 'model.safetensors.index.json'
RENAMES_SHOWN = 10


class DrafterError(Exception):
    """Bad input: the message names the file and the problem; nothing was modified."""


def _load_json(path, what):
    try:
        with open(path, 'rb') as f:
            doc = json.loads(f.read().decode('utf-8'))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DrafterError('%s: cannot read %s: %s' % (path, what, exc))
    if not isinstance(doc, dict):
        raise DrafterError('%s: %s is not a JSON object' % (path, what))
    return doc


def locate(path):
    """(directory, config path or None, index path or None, safetensors files)."""
    if not os.path.lexists(path):
        raise DrafterError('%s: path does not exist' % path)
    if os.path.isfile(path):
        directory = os.path.dirname(os.path.abspath(path))
        if not path.endswith('.safetensors'):
            if path.endswith('.bin') or path.endswith('.pt'):
                raise DrafterError('%s: a PyTorch pickle checkpoint; convert it to safetensors '
                                   'first (the engines need .safetensors)' % path)
            raise DrafterError('%s: not a .safetensors file' % path)
        config = os.path.join(directory, 'config.json')
        return directory, config if os.path.isfile(config) else None, None, [os.path.abspath(path)]
    if not os.path.isdir(path):
        raise DrafterError('%s: neither a directory nor a file' % path)
    directory = os.path.abspath(path)
    entries = sorted(n for n in os.listdir(directory) if not n.startswith('.'))
    if not entries:
        raise DrafterError('%s: empty directory; expected config.json and .safetensors files'
                           % directory)
    shards = [n for n in entries if n.endswith('.safetensors')]
    if not shards:
        _refuse_training_output(directory, entries)
        pickles = [n for n in entries if n.endswith('.bin') or n.endswith('.pt')]
        if pickles:
            raise DrafterError('%s: holds %s but no .safetensors: convert the checkpoint to '
                               'safetensors first' % (directory, ', '.join(pickles)))
        raise DrafterError('%s: no .safetensors files' % directory)
    config = os.path.join(directory, 'config.json')
    if not os.path.isfile(config):
        raise DrafterError('%s: no config.json: an EAGLE-3 drafter needs one' % directory)
    index = os.path.join(directory, INDEX_NAME)
    if os.path.isfile(index):
        weight_map = _load_json(index, 'the sharded index').get('weight_map')
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise DrafterError('%s: weight_map is not an object of tensor -> file' % index)
        listed = sorted(set(weight_map.values()))
        for name in listed:
            if os.path.basename(name) != name or not os.path.isfile(os.path.join(directory, name)):
                raise DrafterError('%s: weight_map names shard %r, which is not in %s'
                                   % (index, name, directory))
        return directory, config, index, [os.path.join(directory, n) for n in listed]
    return directory, config, None, [os.path.join(directory, n) for n in shards]


def _target_config(path):
    """The target's config.json: ``path`` itself or the one in the directory ``path``."""
    config = os.path.join(path, 'config.json') if os.path.isdir(path) else path
    if not os.path.isfile(config):
        raise DrafterError('%s: no config.json: target_path must be the target model directory (or its '
                           'config.json) on the host' % path)
    return config


def _checkpoint_folders(directory, depth=2):
    """Folders under ``directory`` (``depth`` levels) holding config.json and safetensors
    files, oldest first by the numbers in their names (``epoch_9_step_1000``)."""
    found = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.startswith('.') or not os.path.isdir(path):
            continue
        inside = os.listdir(path)
        if 'config.json' in inside and any(n.endswith('.safetensors') for n in inside):
            found.append(path)
        elif depth > 1:
            found.extend(_checkpoint_folders(path, depth - 1))
    return sorted(found, key=lambda p: [int(n) for n in re.findall(r'\d+', os.path.relpath(p, directory))])


def _refuse_training_output(directory, entries):
    """Raise DrafterError for a training run's output directory (SpecForge): the drafter is
    one of its checkpoint folders, or must be exported from its training state first."""
    if 'training_state.pt' in entries:
        raise DrafterError('%s: a SpecForge training checkpoint (training_state.pt, which no engine loads): export '
                           'it with "specforge export --to sglang --checkpoint %s --draft-config <the draft '
                           'config.json> --output-dir <dir>" and give that directory as path' % (directory, directory))
    folders = _checkpoint_folders(directory)
    if folders:
        raise DrafterError('%s: no .safetensors here but %d checkpoint folder(s) (%s): give one of them as path, '
                           'for example the latest, %s' % (directory, len(folders), ', '.join(
                               os.path.relpath(f, directory) for f in folders[-3:]), folders[-1]))


def _read_d2t(found):
    """(file, name, values) of the drafter's d2t tensor, or None (absent, not an integer tensor)."""
    for header in found.headers:
        for name in header.tensors:
            if name == 'd2t' or name.endswith('.d2t'):
                values = _safetensors.read_int_tensor(header, name)
                return None if values is None else (header.path, name, values)
    return None


def _lock_dirs(directory, files, modify_shared_blobs):
    """The directories a run locks, recovers and may write in: the drafter's, and the
    link targets' (a Hugging Face cache's blobs/) when it writes there or an interrupted
    run left files there."""
    dirs = {directory} | {os.path.dirname(f) for f in files}
    for f in files:
        target = os.path.dirname(os.path.realpath(f))
        if modify_shared_blobs or _safetensors.pending_recovery(target):
            dirs.add(target)
    return sorted(dirs)


def _check_writable(path, replace=False):
    """Raise DrafterError unless ``path`` can be changed (``replace``: only its directory
    must be writable, as when a symbolic link is replaced by a private copy)."""
    if not replace and os.path.exists(path):
        mode = os.stat(path).st_mode
        if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(path, os.W_OK):
            raise DrafterError('%s: file is read-only (mode %o); make it writable or fix a copy'
                               % (path, stat.S_IMODE(mode)))
    directory = os.path.dirname(path)
    if not os.access(directory, os.W_OK):
        raise DrafterError('%s: directory %s is not writable' % (path, directory))


def _shared(path):
    """Whether a fix in place would also change another name of the file: a symbolic
    link (into a Hugging Face cache's blobs/) or a hard link (a ``cp -al`` backup)."""
    return os.path.islink(path) or os.stat(path).st_nlink > 1


class Checkpoint:
    """What ``Drafter.read`` found."""

    def __init__(self, directory, config_path, index_path):
        self.directory = directory
        self.config_path = config_path
        self.config_label = config_path or os.path.join(directory, 'config.json (absent)')
        self.index_path = index_path
        self.headers = []
        self.tensors = {}  # name -> (file, dtype, shape)
        self.config = None
        self.index = None
        self.target_path = None  # the target's config.json
        self.target = None
        self.d2t = None  # (file, name, values) of the draft -> target map, read with a target


class Plan:
    """What ``Drafter.plan`` would change: tensor names, config.json, index, each file."""

    def __init__(self, mapping, layout_after):
        self.mapping = mapping  # old name -> new name, renamed tensors only
        self.layout_after = layout_after
        self.tensors_after = {}
        self.rename_problems = []
        self.config_after = None
        self.index_after = None
        self.files = []  # one _plan_file() per header
        self.speculators = None  # what was found and done for a speculators checkpoint


class Drafter:
    """One run of the module: read, plan, validate, apply."""

    def __init__(self, params, check_mode=False):
        self.p = params
        self.check_mode = check_mode
        try:
            self.rules = _eagle3.Rules(params['engine'], parse_version(params.get('engine_version')))
        except ValueError as exc:
            raise DrafterError(str(exc))
        for rule in params.get('rename') or ():
            if not rule.get('from'):
                raise DrafterError('rename: every rule needs a non-empty "from" prefix')

    def run(self):
        """Read, plan, validate and apply while holding the directory locks.

        A first pass holds the locks whose files exist (creating none, so a run that
        changes nothing leaves the directory as it was). A run that has something to
        write starts again holding all of them: when it waited for another run, it reads
        what that run left, usually a drafter that needs nothing more.
        """
        located = locate(self.p['path'])
        dirs = _lock_dirs(located[0], located[3], self.p['modify_shared_blobs'])
        result = self._locked_pass(located, dirs, create=False)
        if result is None:
            result = self._locked_pass(located, dirs, create=True)
        return result

    def _locked_pass(self, located, dirs, create):
        """The result, or None when there is something to write without every lock held."""
        with _safetensors.DirectoryLocks(dirs, exclusive=not self.check_mode, create=create) as locks:
            recovered = self._recover(dirs, locks.exclusive)
            found = self.read(located)
            plan = self.plan(found)
            result = self.validate(found, plan, recovered)
            if result['changed'] and not (create or self.check_mode or locks.exclusive == set(dirs)):
                return None
            self.apply(found, plan, result)
        return result

    def _recover(self, dirs, exclusive):
        """Finish or undo interrupted runs where this run holds the lock; elsewhere (check
        mode, first pass) only report them."""
        done = []
        for d in dirs:
            if d in exclusive:
                done.extend(_safetensors.recover(d))
            elif _safetensors.pending_recovery(d):
                done.append('%s: an interrupted fix would be recovered' % d)
        return done

    def read(self, located):
        """Headers of every file, config.json and the sharded index."""
        directory, config_path, index_path, files = located
        found = Checkpoint(directory, config_path, index_path)
        for f in files:
            try:
                header = _safetensors.read_header(f)
            except _safetensors.SafetensorsError as exc:
                raise DrafterError(str(exc))
            for name, info in header.tensors.items():
                if name in found.tensors:
                    raise DrafterError('%s: tensor %r is also in %s' % (f, name, found.tensors[name][0]))
                found.tensors[name] = (f, info['dtype'], info['shape'])
            found.headers.append(header)
        if config_path:
            found.config = _load_json(config_path, 'config.json')
        if index_path:
            found.index = _load_json(index_path, 'the sharded index')
        if self.p.get('target_path'):
            found.target_path = _target_config(self.p['target_path'])
            found.target = _load_json(found.target_path, "the target's config.json")
            found.d2t = _read_d2t(found)
        return found

    def plan(self, found):
        """The renames, config.json (architectures, a speculators conversion), the index and
        how each file is written."""
        p = self.p
        tensors = found.tensors
        self.rules = self.rules.for_drafter(_eagle3.drafter_kind(found.config, tensors))
        converted, reasons = self._speculators_plan(found)
        spec_renames = {}
        if p['fix']:
            # user prefix rules, then speculators' names, then the engine's layer spelling
            step = {n: _eagle3.apply_rename_rules(n, p['rename']) for n in tensors}
            if converted:
                spec_renames = _speculators.tensor_renames(step.values())
            step = {n: spec_renames.get(s, s) for n, s in step.items()}
            engine_map, layout_after = _eagle3.plan_renames(list(step.values()), converted or found.config or {},
                                                            self.rules, p['layout'])
            mapping = {n: engine_map.get(s, s) for n, s in step.items() if engine_map.get(s, s) != n}
            plan = Plan(mapping, layout_after)
        else:
            plan = Plan({}, _eagle3.detect_layout(tensors))
        if _speculators.is_speculators(found.config):
            plan.speculators = _speculators.summary(found.config, converted is not None, spec_renames, reasons)
            plan.rename_problems.extend('%s: cannot convert this speculators checkpoint for %s: %s'
                                        % (found.config_label, self.rules.label, why) for why in reasons)
        origin = {}
        for name, value in tensors.items():
            new = plan.mapping.get(name, name)
            if new in plan.tensors_after:
                plan.rename_problems.append('%s: duplicate tensor name %r after renaming (from %r and %r)'
                                            % (value[0], new, origin[new], name))
            plan.tensors_after[new] = value
            origin[new] = name

        plan.config_after = converted or found.config
        architectures = _eagle3.fixed_architecture(found.config, tensors, self.rules)
        if converted is None and architectures and p['fix'] and p['fix_architecture']:
            plan.config_after = dict(found.config, architectures=architectures)

        if found.index is not None:
            weight_map = {plan.mapping.get(n, n): os.path.basename(v[0]) for n, v in tensors.items()}
            if found.index['weight_map'] != weight_map:
                plan.index_after = dict(found.index, weight_map=weight_map)
        plan.files = [self._plan_file(h, plan.mapping) for h in found.headers]
        return plan

    def _speculators_plan(self, found):
        """(flattened config or None, reasons it cannot be converted) for a speculators
        checkpoint; the config only when this run converts it (fix, SGLang, convert_speculators)."""
        if not _speculators.is_speculators(found.config) or self.rules.engine != 'sglang':
            return None, []
        reasons = _speculators.refusals(found.config, self.rules)
        if reasons or not (self.p['fix'] and self.p['convert_speculators']):
            return None, reasons
        return _speculators.flat_config(found.config), []

    def validate(self, found, plan, recovered):
        """The result: problems before and after the plan; raise DrafterError when a file
        that must change cannot be written."""
        p = self.p
        tensors = found.tensors

        def problems_of(tensor_map, cfg):
            found_problems = _eagle3.find_problems(tensor_map, cfg, found.config_label, self.rules,
                                                   p['path'], p['layout'])
            if found.target is not None and cfg is not None:
                found_problems += _eagle3.target_problems(cfg, found.config_label, found.target,
                                                          found.target_path, self.rules.drafter, found.d2t)
            return found_problems
        before = problems_of(tensors, found.config)
        after = plan.rename_problems + problems_of(plan.tensors_after, plan.config_after)
        if plan.index_after is not None:
            stale = sorted(set(found.index['weight_map'].items()) ^ set(
                (n, os.path.basename(v[0])) for n, v in tensors.items()))
            if stale:
                before.append('%s: weight_map disagrees with the shards (%d entries, e.g. %r)'
                              % (found.index_path, len(stale), stale[0][0]))
        problems = after if p['fix'] else before
        writes = [pl for pl in plan.files if pl['method'] != 'unchanged']
        config_changed = plan.config_after is not found.config and not problems
        index_changed = plan.index_after is not None and p['fix'] and not problems
        if problems:
            writes = []
        result = {
            'changed': bool(recovered or writes or config_changed or index_changed),
            'layout_before': _eagle3.detect_layout(tensors),
            'layout_after': plan.layout_after,
            'renamed': len(plan.mapping),
            'renames': [{'from': k, 'to': v} for k, v in list(plan.mapping.items())[:RENAMES_SHOWN]],
            'files': [],
            'config_changed': config_changed,
            'index_changed': index_changed,
            'tensors': len(tensors),
            'parameters': sum(h.parameters() for h in found.headers),
            'problems': problems,
            'fixed_problems': [m for m in before if m not in after] if p['fix'] else [],
            'recovered': recovered,
            '_label': self.rules.label,
            '_diff': {
                'before': {'tensors': sorted(tensors),
                           'architectures': (found.config or {}).get('architectures')},
                'after': {'tensors': sorted(plan.tensors_after),
                          'architectures': (plan.config_after or {}).get('architectures')},
            },
        }
        if found.target_path:
            result['target_config'] = found.target_path
        if plan.speculators is not None:
            plan.speculators['converted'] = plan.speculators['converted'] and not problems
            result['speculators'] = plan.speculators
            if plan.config_after is not found.config:
                result['_diff']['before']['config'] = found.config
                result['_diff']['after']['config'] = plan.config_after
        for pl in writes:
            _check_writable(pl['write_path'], replace=pl['private_copy'])
        for changed, path in ((config_changed, found.config_path), (index_changed, found.index_path)):
            if changed:
                target = self._json_target(path)
                _check_writable(target, replace=os.path.islink(target))
        return result

    def apply(self, found, plan, result):
        """Write each file, then the index, then config.json (nothing in check mode or
        when problems remain); fill in ``result['files']``."""
        write = not self.check_mode and not result['problems']
        for pl in plan.files:
            method = pl['method'] if not result['problems'] else 'unchanged'
            entry = {'path': pl['header'].path, 'method': method,
                     'bytes_written': pl['bytes'] if method != 'unchanged' else 0,
                     'tensors': len(pl['header'].tensors),
                     'private_copy': pl['private_copy'] and method != 'unchanged'}
            if method != 'unchanged' and write:
                entry['bytes_written'], saved = self._write_file(pl)
                if saved:
                    entry['backup_file'] = saved
            result['files'].append(entry)
        if not write:
            return
        if result['index_changed']:
            _safetensors.atomic_write(self._json_target(found.index_path), _dump_json(plan.index_after))
        if result['config_changed']:
            if self.p['backup']:
                saved = _safetensors.backup_path(found.config_path, 'orig')
                _safetensors.atomic_write(saved, _dump_json(found.config))
                result['config_backup_file'] = saved
            _safetensors.atomic_write(self._json_target(found.config_path), _dump_json(plan.config_after))

    def _json_target(self, path):
        """Where a JSON file is written: a symbolic link is replaced by a private file
        (atomic_write does not follow it) unless modify_shared_blobs is set."""
        if path and self.p['modify_shared_blobs']:
            return os.path.realpath(path)
        return path

    def _plan_file(self, header, mapping):
        """How to write this file's new header: unchanged, header_in_place or rewritten."""
        plan = {'header': header, 'method': 'unchanged', 'bytes': 0, 'private_copy': False,
                'write_path': header.path, 'region': None}
        new_tensors = {mapping.get(n, n): info for n, info in header.tensors.items()}
        if list(new_tensors) == list(header.tensors):
            return plan
        if _shared(header.path) and not self.p['modify_shared_blobs']:
            plan.update(method='rewritten', private_copy=True)
        else:
            plan['write_path'] = os.path.realpath(header.path)
            region = _safetensors.encode_header(new_tensors, header.metadata, header.header_len)
            if region is not None and _safetensors.in_place_is_atomic(header.raw, region):
                span = _safetensors.changed_span(header.raw, region)
                plan.update(method='header_in_place', region=region, bytes=span[1] - span[0])
                return plan
            plan['method'] = 'rewritten'
        plan['region'] = _safetensors.encode_header(new_tensors, header.metadata)
        plan['bytes'] = 8 + len(plan['region']) + header.data_len
        return plan

    def _write_file(self, plan):
        header = plan['header']
        backup = self.p['backup']
        if plan['method'] == 'header_in_place':
            real = _safetensors.Header(plan['write_path'], header.header_len, header.tensors,
                                       header.metadata, header.data_len, header.raw)
            return _safetensors.write_header_in_place(real, plan['region'], backup=backup)
        return _safetensors.rewrite_with_header(header, plan['region'], dest=plan['write_path'],
                                                backup=backup and not plan['private_copy'])


def _dump_json(doc):
    return (json.dumps(doc, indent=2, ensure_ascii=False) + '\n').encode('utf-8')


ARGUMENT_SPEC = dict(
    path=dict(type='path', required=True),
    engine=dict(type='str', default='sglang', choices=list(_eagle3.ENGINES)),
    engine_version=dict(type='str'),
    layout=dict(type='str', default='auto', choices=list(_eagle3.LAYOUTS)),
    target_path=dict(type='path'),
    rename=dict(type='list', elements='dict', default=[], options=dict(
        **{'from': dict(type='str', required=True), 'to': dict(type='str', required=True)})),
    fix_architecture=dict(type='bool', default=True),
    convert_speculators=dict(type='bool', default=True),
    fix=dict(type='bool', default=True),
    backup=dict(type='bool', default=False),
    modify_shared_blobs=dict(type='bool', default=False),
)


def summary_line(path, result):
    """What was found and done, in one line (the drafter role shows it)."""
    methods = []
    for entry in result['files']:
        if entry['method'] not in methods:
            methods.append(entry['method'])
    return '%s: %d tensors, layout %s -> %s, %d renamed (%s), config %s' % (
        path, result['tensors'], result['layout_before'], result['layout_after'], result['renamed'], ', '.join(methods),
        'fixed' if result['config_changed'] else 'unchanged')


def main():
    module = NullIsUnsetModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    try:
        result = Drafter(module.params, module.check_mode).run()
    except DrafterError as exc:
        module.fail_json(msg=str(exc))
    except (OSError, _safetensors.SafetensorsError) as exc:
        module.fail_json(msg='%s: %s' % (getattr(exc, 'filename', None) or module.params['path'], exc))
    diff = result.pop('_diff')
    label = result.pop('_label')
    if module._diff:
        result['diff'] = diff
    if result['problems']:
        what = 'has' if module.params['fix'] else 'has (fix=false)'
        module.fail_json(msg='drafter %s %s %d problem(s) for %s: %s' % (
            module.params['path'], what, len(result['problems']), label,
            '; '.join(result['problems'])), **result)
    result['summary'] = summary_line(module.params['path'], result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
