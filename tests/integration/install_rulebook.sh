#!/usr/bin/env bash
# Installs the real ansible-rulebook (Event-Driven Ansible; its rule engine runs on Java, which
# tests/integration/install-system-packages.sh installs from Debian) into a virtualenv of its own,
# for the speculation guard's rulebook test.
#
#   tests/integration/install_rulebook.sh   # venv at .cache/rulebook-venv (or $LLMOPS_RULEBOOK_VENV)
#
# Idempotent: a stamp file inside the venv records the pinned spec; when it matches and
# ansible-rulebook answers, the script exits in seconds.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${LLMOPS_RULEBOOK_VENV:-$ROOT/.cache/rulebook-venv}
PY=${LLMOPS_RULEBOOK_BASE_PYTHON:-python3}

# Keep in step with speculation_guard_packages in roles/speculation_guard/defaults/main.yml.
SPEC="ansible-rulebook==1.3.2"
STAMP="$VENV/.llmops-rulebook-stamp"
WANT="$SPEC; python: $($PY -c 'import sys; print(sys.version.split()[0])')"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && "$VENV/bin/ansible-rulebook" --version >/dev/null 2>&1; then
  echo "rulebook venv up to date: $VENV ($SPEC)"
  exit 0
fi

echo "installing $SPEC into $VENV"
start=$(date +%s)
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip --quiet install "$SPEC" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
"$VENV/bin/ansible-rulebook" --version | head -1
printf '%s\n' "$WANT" >"$STAMP"
echo "installed in $(($(date +%s) - start)) s"
