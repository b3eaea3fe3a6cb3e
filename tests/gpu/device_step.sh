#!/usr/bin/env bash
# Runs ON THE GPU MACHINE, one step per device call (see tests/gpu/README.md).
#   device_step.sh receive N   keep the wheel part N that this call carried (.whl/parts/N)
#   device_step.sh install     check all parts arrived, unpack, verify, install into $SITE
# Every call prints `have: <parts present>` so the caller notices a fresh machine (a
# machine keeps files only while it stays warm) and starts the shipping over.
set -euo pipefail
STATE=${LLMOPS_GPU_STATE:-/tmp/llmops-gpu}
SITE=$STATE/site
mkdir -p "$STATE/parts"

have() { printf 'have: %s\n' "$(find "$STATE/parts" -type f -printf '%f\n' | sort -n | tr '\n' ' ')"; }

case "${1:-}" in
  receive)
    n=$2
    cp ".whl/parts/$n/part" "$STATE/parts/$n"
    cp .whl/parts/COUNT .whl/parts/SHA256SUMS "$STATE/" 2>/dev/null || true
    have
    ;;
  install)
    [ -f "$SITE/.installed" ] && { echo "already installed in $SITE"; exit 0; }
    count=$(cat "$STATE/COUNT")
    for ((i = 0; i < count; i++)); do
      [ -f "$STATE/parts/$i" ] || { have; echo "missing part $i of $count: fresh machine? ship again"; exit 3; }
    done
    rm -rf "$STATE/wheels" && mkdir -p "$STATE/wheels"
    for ((i = 0; i < count; i++)); do cat "$STATE/parts/$i"; done | tar -C "$STATE/wheels" -xf -
    (cd "$STATE/wheels" && sha256sum --quiet -c "$STATE/SHA256SUMS")
    # pip download may keep one version under two platform tags; two copies stop pip.
    python3 - "$STATE/wheels" <<'PY'
import os
import sys
seen = set()
for name in sorted(os.listdir(sys.argv[1])):
    key = tuple(name.split('-')[:2])
    if key in seen:
        os.remove(os.path.join(sys.argv[1], name))
    seen.add(key)
PY
    start=$SECONDS
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$STATE"/wheels/*.whl
    # Packages with .pth files (nvidia-cutlass-dsl) need their site dir processed, or the
    # draft CUDA-graph capture fails with "No module named 'cutlass'" (FACTS.md).
    printf 'import site\nsite.addsitedir("%s")\n' "$SITE" > "$SITE/sitecustomize.py"
    # Bytecode, as pip's default (and the role sglang_install) writes it at install time: the device's image
    # sets PYTHONDONTWRITEBYTECODE, so without it every SGLang process compiles every module at every start.
    # The image's torch and triton are compiled too.
    mapfile -t dirs < <(PYTHONPATH=$SITE python3 -c 'import os, torch, triton; print(os.path.dirname(torch.__file__)); print(os.path.dirname(triton.__file__))')
    python3 -c 'import os, sys; print("sys.flags.dont_write_bytecode:", sys.flags.dont_write_bytecode, "PYTHONDONTWRITEBYTECODE:", os.environ.get("PYTHONDONTWRITEBYTECODE"))'
    python3 -m compileall -q -j 0 "$SITE" "${dirs[@]}" >/dev/null 2>&1 || true
    touch "$SITE/.installed"
    wheels=("$STATE"/wheels/*.whl)
    echo "installed ${#wheels[@]} wheels into $SITE and compiled their bytecode in $((SECONDS - start)) s"
    ;;
  *)
    echo "usage: $0 receive N | install" >&2
    exit 2
    ;;
esac
