#!/usr/bin/env bash
# Real-GPU proof of llmops.serving.gpu_memory: run from anywhere on a machine with an NVIDIA
# GPU, nvidia-smi and python3 with torch (Ansible is not needed). About 30-60 s.
#   tests/gpu/gpu_memory_proof.sh             # real GPU, torch holders
#   tests/gpu/gpu_memory_proof.sh --simulate  # dry run on the nvidia-smi stand-in (no GPU)
# Writes the report to stdout and, when $OUT is set, to $OUT/gpu_memory_proof.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec timeout --signal=TERM --kill-after=10 150 python3 tests/gpu/gpu_memory_proof.py "$@"
