#!/usr/bin/env bash
# Runs a comparison spec (docs/compare.md) on a release build:
#   tools/compare.sh scenarios/compare/lead-vs-baselines.json [--out DIR] [--only a,b] [--jobs N]
# Installs the Debian packages it needs if missing (the build's and python3-matplotlib for the
# plots), configures build-release/ once, builds node-launcher there, then runs tools/compare.py
# --build build-release (compare.py alone uses build/, the one tools/dev makes) with
# /usr/bin/python3, which is the interpreter that sees Debian's matplotlib (a pyenv or
# virtualenv python3 first on PATH does not). Output: build-release/compare/NAME/ unless --out.
# To be folded into tools/dev as a `compare` verb. Not named tools/compare: tools/ is on the C++
# include path, and that file would shadow the standard header <compare>.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(g++ meson ninja-build pkg-config python3 python3-matplotlib libboost-dev
          nlohmann-json3-dev catch2 libeigen3-dev libcli11-dev libisal-dev libucx-dev)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} > 0)); then
  echo "tools/compare.sh: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ -f build-release/build.ninja ] || meson setup build-release --buildtype=release
ninja -C build-release tools/node-launcher
exec /usr/bin/python3 tools/compare.py --build build-release "$@"
