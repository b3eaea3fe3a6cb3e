#!/usr/bin/env bash
# shellcheck disable=SC2317  # stage_* functions are called indirectly, as "stage_$s"
# Runs the quality gates of llmops.serving. Called by `make test` (all stages) or with
# stage names: unit sanity lint build integration engines.
# Every stage runs; the script exits non-zero if any stage failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
export PATH="$ROOT/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$ROOT/.collections"
export ANSIBLE_CONFIG="$ROOT/ansible.cfg"
export PYTHONDONTWRITEBYTECODE=1

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(unit sanity lint build integration engines)

declare -A result
failed=0

stage_unit() {
  # 4 workers on 2 cores: most unit tests wait on the processes they start
  python -m pytest -q -p no:cacheprovider -n 4 tests/unit tests/sim tests/releases
}

# ansible-test must run from .../ansible_collections/<ns>/<name>/: sanity runs on a copy
# of the files git knows about (tracked and untracked-but-not-ignored).
# SANITY_ARGS (e.g. a list of files, or "--test pylint") narrows the run.
stage_sanity() {
  mkdir -p "$ROOT/build"
  local work
  work=$(mktemp -d "$ROOT/build/sanity.XXXXXX")
  local dest="$work/ansible_collections/llmops/serving"
  mkdir -p "$dest"
  git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -e "$f" ] && printf '%s\0' "$f"
  done | tar --null -T - -cf - | tar -xf - -C "$dest"
  local cache="$HOME/.ansible/test/cache"
  mkdir -p "$cache"
  for v in 24_2 24_0 25_0; do cp tests/sanity/get_pip_standin.py "$cache/get_pip_$v.py"; done
  # shellcheck disable=SC2086
  (cd "$dest" && git init -q && git add -A && ansible-test sanity --local --python 3.11 --color no ${SANITY_ARGS:-})
  local rc=$?
  rm -rf "$work"
  return "$rc"
}

stage_lint() {
  ansible-lint --offline --profile production
}

# The collection tarball builds, installs, and its plugins are documented; its docs lint clean
# as collections publish them; the execution environment's build context is generated; and
# galaxy-importer accepts the tarball.
stage_build() {
  local tmp rc
  tmp=$(mktemp -d)
  ansible-galaxy collection build --force --output-path "$tmp" . >/dev/null &&
    ansible-galaxy collection install --force -p "$tmp/collections" "$tmp"/llmops-serving-*.tar.gz >/dev/null &&
    ANSIBLE_COLLECTIONS_PATH="$tmp/collections" ansible-doc -l llmops.serving &&
    echo "build: ok ($(basename "$tmp"/llmops-serving-*.tar.gz), $(stat -c %s "$tmp"/llmops-serving-*.tar.gz) bytes)" &&
    ANSIBLE_COLLECTIONS_PATH="$tmp/collections" antsibull-docs lint-collection-docs --plugin-docs \
      "$tmp/collections/ansible_collections/llmops/serving" && echo "antsibull-docs lint-collection-docs: ok" &&
    check_execution_environment "$tmp" &&
    check_galaxy_importer "$tmp"
  rc=$?
  rm -rf "$tmp"
  return "$rc"
}

# ansible-builder create on execution-environment.yml with the tarball in "$1": the context
# holds the tarball, and the requirements ansible-builder collects from the installed
# collection (meta/execution-environment.yml) are those of meta/ee-*.txt.
check_execution_environment() {
  local ee=$1/ee
  mkdir -p "$ee/build" && cp execution-environment.yml "$ee/" && cp "$1"/llmops-serving-*.tar.gz "$ee/build/" &&
    ansible-builder create -f "$ee/execution-environment.yml" -c "$ee/context" >/dev/null &&
    ls "$ee"/context/_build/collections/llmops-serving-*.tar.gz >/dev/null &&
    grep -q 'ansible-galaxy collection install .*-r requirements.yml' "$ee/context/Dockerfile" &&
    python "$ee/context/_build/scripts/introspect.py" introspect "$1/collections" \
      --write-pip "$ee/pip.txt" --write-bindep "$ee/bindep.txt" >/dev/null &&
    diff <(grep -hv '^#' meta/ee-requirements.txt meta/ee-bindep.txt) \
      <(sed 's/  # from collection llmops.serving$//' "$ee/pip.txt" "$ee/bindep.txt") &&
    echo "ansible-builder create: ok"
}

# galaxy-importer (what Galaxy runs on an upload) in a venv of its own under .cache (its pins,
# e.g. attrs<24, would downgrade the test venv), without ansible-test (tests/ is not in the
# tarball; the sanity stage runs it on the checkout): tests/galaxy-importer.cfg.
check_galaxy_importer() {
  local venv=$ROOT/.cache/galaxy-importer-venv out
  # (re)created when the pins change: the venv keeps a copy of the file it was made from
  if ! cmp -s tests/galaxy-importer-requirements.txt "$venv/requirements.txt"; then
    rm -rf "$venv" && python3 -m venv "$venv" &&
      "$venv/bin/pip" install -q -r tests/galaxy-importer-requirements.txt &&
      cp tests/galaxy-importer-requirements.txt "$venv/requirements.txt" || return 1
  fi
  out=$(cd "$1" && GALAXY_IMPORTER_CONFIG="$ROOT/tests/galaxy-importer.cfg" PATH="$venv/bin:$PATH" \
    "$venv/bin/python" -m galaxy_importer.main "$1"/llmops-serving-*.tar.gz 2>&1) || { echo "$out"; return 1; }
  if grep -E '^(WARNING|ERROR)' <<<"$out"; then return 1; fi
  echo "galaxy-importer: ok"
}

# The slow stages print each test's name as it ends and, at the end, the slowest tests.
SLOW_STAGE_PYTEST=(python -m pytest -v -p no:cacheprovider --durations=15 --durations-min=20)

# Some deploy tests serve the real vLLM CPU engine through the role, the guard's test runs the real
# ansible-rulebook: install them first. Then two workers, a test file each at a time (the tests of one
# file share its fixtures), each in a mount namespace of its own (tests/integration/worker-python): most
# of a test's time is spent waiting for servers, routers and hosts, so two run in little more than one.
stage_integration() {
  tests/engines/install_vllm.sh && tests/integration/install_rulebook.sh &&
    "${SLOW_STAGE_PYTEST[@]}" --dist loadfile --tx "2*popen//python=$ROOT/tests/integration/worker-python" \
      tests/integration
}

# The real vLLM CPU engine: a cached venv of its own (cold about 100 s, warm instant).
stage_engines() {
  tests/engines/install_vllm.sh && "${SLOW_STAGE_PYTEST[@]}" tests/engines
}

# Prints the stage's output, then "ok (N s)" or "FAILED (N s)" as its last line.
run_stage() {
  local start=$SECONDS
  if "stage_$1"; then echo "ok ($((SECONDS - start)) s)"; else echo "FAILED ($((SECONDS - start)) s)"; fi
}

# The quick stages run side by side (they mostly wait on processes, and 2 cores sit idle),
# together with the vLLM venv's installation; the slow stages then run one at a time,
# alone on the machine, since their tests time servers.
is_quick() { case $1 in unit | sanity | lint | build) return 0 ;; *) return 1 ;; esac; }
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
quick=()
for s in "${stages[@]}"; do
  if is_quick "$s"; then quick+=("$s"); run_stage "$s" >"$logs/$s" 2>&1 & fi
done
case " ${stages[*]} " in *" integration "* | *" engines "*) tests/engines/install_vllm.sh >"$logs/vllm" 2>&1 & ;; esac
wait
[ -f "$logs/vllm" ] && { echo "=== vLLM engine venv (for integration and engines) ==="; cat "$logs/vllm"; }
for s in "${quick[@]}"; do
  echo "=== stage: $s ==="
  cat "$logs/$s"
  result[$s]=$(tail -n 1 "$logs/$s")
  [[ ${result[$s]} == ok* ]] || failed=1
done
for s in "${stages[@]}"; do
  is_quick "$s" && continue
  echo "=== stage: $s ==="
  run_stage "$s" 2>&1 | tee "$logs/$s"
  result[$s]=$(tail -n 1 "$logs/$s")
  [[ ${result[$s]} == ok* ]] || failed=1
done

echo "=== summary ==="
for s in "${stages[@]}"; do printf '%-12s %s\n' "$s" "${result[$s]}"; done
exit $failed
