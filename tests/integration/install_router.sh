#!/usr/bin/env bash
# Installs the real sglang-router (a Rust binary wheel that runs on a CPU) used by the router
# tests into a virtualenv of its own, and a wheelhouse of it and its dependencies that the
# role installs from on the test hosts (they have no network).
#
#   tests/integration/install_router.sh   # venv at .cache/router-venv (or $LLMOPS_ROUTER_VENV),
#                                         # wheels in .cache/router-wheels (or $LLMOPS_ROUTER_WHEELS)
#
# Idempotent: a stamp file inside the venv records the pinned spec; when it matches and the
# router imports, the script exits in seconds. A changed pin rebuilds both.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${LLMOPS_ROUTER_VENV:-$ROOT/.cache/router-venv}
WHEELS=${LLMOPS_ROUTER_WHEELS:-$ROOT/.cache/router-wheels}
PY=${LLMOPS_ROUTER_BASE_PYTHON:-python3}

# Keep in step with sglang_router_version in roles/sglang_router/defaults/main.yml.
SPEC="sglang-router==0.3.2"
STAMP="$VENV/.llmops-router-stamp"
WANT="$SPEC; python: $($PY -c 'import sys; print(sys.version.split()[0])')"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -d "$WHEELS" ] &&
  "$VENV/bin/python" -c 'import sglang_router.sglang_router_rs'; then
  echo "router venv up to date: $VENV ($SPEC)"
  exit 0
fi

echo "installing $SPEC into $VENV and its wheels into $WHEELS"
start=$(date +%s)
rm -rf "$VENV" "$WHEELS"
"$PY" -m venv "$VENV"
pip_quiet() {
  # pip warns once per package about index folders it cannot read; keep the rest.
  "$VENV/bin/python" -m pip --quiet "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}
pip_quiet download --dest "$WHEELS" "$SPEC"
pip_quiet install --no-index --find-links "$WHEELS" "$SPEC"
"$VENV/bin/python" -c 'import sglang_router.sglang_router_rs as r; print("sglang-router", r.get_version_string())'
printf '%s\n' "$WANT" >"$STAMP"
echo "installed in $(($(date +%s) - start)) s"
