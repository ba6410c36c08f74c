#!/usr/bin/env bash
# install-deps.sh: installs the Debian packages dplhost needs when they are
# missing (idempotent; quick when all is present; says what it installs).
#   scripts/install-deps.sh           build, test and demo dependencies
#   scripts/install-deps.sh --bench   also the side-by-side references (python3-torch, hyperfine)
set -euo pipefail

pkgs=(build-essential pkg-config luajit libluajit-5.1-dev lua-busted libedit-dev
      libopenblas-dev zlib1g-dev openmpi-bin libopenmpi-dev dataset-fashion-mnist tmux)
if [ "${1:-}" = "--bench" ]; then
  pkgs+=(python3-torch hyperfine)
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

pyref() {
  # Python's safetensors (PyPI; Debian has no package) in a venv for the format
  # interop spec. Best effort: the spec skips with a message when it is absent.
  local venv="$(dirname "$0")/../build/pyref"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import safetensors, numpy' 2>/dev/null; then
    echo "install-deps: creating build/pyref (pip: safetensors numpy)"
    { python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check safetensors numpy; } \
      >/dev/null 2>&1 || echo "install-deps: could not install Python safetensors; its interop spec will skip"
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  pyref
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" != 0 ]; then
  SUDO=sudo
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install these packages: ${missing[*]}" >&2; exit 1; }
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
# refresh the package lists when they are missing or older than a day
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
  $SUDO apt-get update -q
fi
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
pyref
echo "install-deps: done"
