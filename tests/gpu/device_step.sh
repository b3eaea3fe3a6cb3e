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
    touch "$SITE/.installed"
    wheels=("$STATE"/wheels/*.whl)
    echo "installed ${#wheels[@]} wheels into $SITE in $((SECONDS - start)) s"
    ;;
  bytecode)
    # Bytecode for the engine's imports: the wheels are installed with --no-compile (pip's default compiles
    # them, as the role sglang_install does), and an image may forbid writing it at import. Prints that flag
    # and compiles the installed wheels and the image's torch and triton.
    export PYTHONPATH=$SITE
    mapfile -t dirs < <(python3 -c 'import os, torch, triton; print(os.path.dirname(torch.__file__)); print(os.path.dirname(triton.__file__))')
    python3 -c 'import os, sys; print("sys.flags.dont_write_bytecode:", sys.flags.dont_write_bytecode, "PYTHONDONTWRITEBYTECODE:", os.environ.get("PYTHONDONTWRITEBYTECODE"))'
    start=$SECONDS
    python3 -m compileall -q -j 0 "$SITE" "${dirs[@]}" >/dev/null 2>&1 || true
    echo "compileall of $SITE ${dirs[*]}: $((SECONDS - start)) s"
    ;;
  *)
    echo "usage: $0 receive N | install | bytecode" >&2
    exit 2
    ;;
esac
