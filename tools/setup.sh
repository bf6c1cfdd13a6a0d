#!/usr/bin/env bash
# Installs seqbench's build dependencies from Debian packages, only when they are missing.
# Safe to run again: it does nothing when everything is present. Needs root (or sudo) and apt.
# On a machine with no package access, use tools/bundle.sh on a machine that has it instead.
set -euo pipefail

packages=(cmake ninja-build g++ libeigen3-dev nlohmann-json3-dev libcli11-dev googletest libgtest-dev
          libbenchmark-dev git python3)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: nvcc not found; install the CUDA Toolkit 13 (it is not a Debian package here)" >&2
  exit 1
fi
