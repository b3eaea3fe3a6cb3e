#!/usr/bin/env bash
# The H200 proof of llmops.serving: the collection's own playbooks against real SGLang
# 0.5.15.post1 (phase d: 0.5.11) on one GPU (tests/gpu/README.md says how to ship and install it first).
#   tests/gpu/h200_proof.sh a|b|c|d|all|STEP...      on the GPU machine, one phase per call
#   tests/gpu/h200_proof.sh --simulate [all]          dry run here: SGLang simulator, nvidia-smi stand-in
# Results: $OUT/h200-proof.tar.gz and $OUT/summary.md (cumulative over the phases of one
# machine hold); exit status 0 only when every step so far passed.
set -u
cd "$(dirname "$0")/../.." || exit 2
python=python3
for arg in "$@"; do
  [ "$arg" = --simulate ] && python=.venv/bin/python
done
exec "$python" tests/gpu/h200/proof.py "$@"
