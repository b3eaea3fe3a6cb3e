#!/usr/bin/env bash
# Runs HERE (the developer's machine, which reaches PyPI). Downloads the pinned wheels that
# real SGLang needs beside the GPU machine's torch 2.11.0+cu130 (Python 3.12), plus
# ansible-core, and cuts them into parts small enough for one device call each (the device
# tool carries at most 64 MiB per call, working tree included).
#   tests/gpu/pack_wheels.sh [LIST [ROUTER_LIST]]
#       LIST: tests/gpu/wheels-sglang-0.5.15.post1.txt (default) or tests/gpu/wheels-sglang-0.5.11.txt (phase d)
#       ROUTER_LIST: tests/gpu/wheels-router-0.3.2.txt (phase g): downloaded into the folder router/ of
#       the shipped wheels, which device_step.sh install does not install (the router role's wheelhouse)
#   PD_LIST=tests/gpu/wheels-pd-mooncake.txt (phase p): these wheels too, installed with LIST's (the transfer engine
#       of the mooncake_tcp backend); downloaded into a folder of their own (.whl/<LIST>+<PD_LIST>)
#   SECOND_RELEASE=tests/gpu/wheels-sglang-0.5.11.txt (phase i): that list's wheels not in LIST go into the
#       folder release/, also left out of the install; phase i installs both releases side by side from them
# Output: .whl/parts/N/part (one folder per call, named in `carry`), .whl/parts/COUNT.
set -euo pipefail
cd "$(dirname "$0")/../.."
list=${1:-tests/gpu/wheels-sglang-0.5.15.post1.txt}
dl=.whl/$(basename "$list" .txt)
pd_list=${PD_LIST:-}
if [ -n "$pd_list" ]; then dl="$dl+$(basename "$pd_list" .txt)"; fi
# A device call carries the working tree (tracked and untracked-not-ignored files) and one part, 64 MiB
# in all: the parts take what the tree leaves, less 2 MiB (the tree grows with every result bundle).
tree_mib=$(git ls-files -z --cached --others --exclude-standard | du -c --files0-from=- -m 2>/dev/null | tail -1 | cut -f1)
part_mib=${PART_MIB:-$((64 - tree_mib - 2))}
mkdir -p "$dl"
platforms=()
for p in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_28_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64 \
         manylinux1_x86_64 linux_x86_64 any; do platforms+=(--platform "$p"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d "$dl" -r "$list"
if [ -n "$pd_list" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$dl" -r "$pd_list"
fi
router_list=${2:-}
rm -rf "$dl/router"
if [ -n "$router_list" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$dl/router" -r "$router_list"
fi
rm -rf "$dl/release"
if [ -n "${SECOND_RELEASE:-}" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$dl/release" -r "$SECOND_RELEASE"
  for whl in "$dl"/release/*.whl; do
    if [ -f "$dl/$(basename "$whl")" ]; then rm "$whl"; fi
  done
fi
rm -rf .whl/parts && mkdir -p .whl/parts
tar -C "$dl" -cf - . | split -b "${part_mib}M" -d -a 2 - .whl/parts/part-
n=0
for f in .whl/parts/part-*; do
  mkdir -p ".whl/parts/$n" && mv "$f" ".whl/parts/$n/part"
  n=$((n + 1))
done
echo "$n" > .whl/parts/COUNT
(cd "$dl" && shopt -s nullglob && sha256sum -- *.whl */*.whl) > .whl/parts/SHA256SUMS
echo "$(du -sh "$dl" | cut -f1) of wheels in $n parts of ${part_mib} MiB under .whl/parts/"
