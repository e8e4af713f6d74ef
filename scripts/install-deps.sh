#!/usr/bin/env bash
# Installs the Debian packages pmhash needs, if missing. As root it runs apt-get; otherwise
# it names the packages to install and fails.
set -euo pipefail
pkgs=(cmake g++ make pkg-config libpmem2-dev libxxhash-dev liburcu-dev ccache libgtest-dev libabsl-dev libcuckoo-dev
      python3 python3-matplotlib clang-format python3-dev pybind11-dev python3-pytest
      python3-venv)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "pmhash needs these Debian packages: ${missing[*]}" >&2
  echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq "${missing[@]}" >/dev/null
