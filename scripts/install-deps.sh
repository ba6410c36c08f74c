#!/usr/bin/env bash
# install-deps.sh: installs the Debian packages dplhost needs when they are
# missing (idempotent; quick when all is present; says what it installs).
#   scripts/install-deps.sh           build, test and demo dependencies
#   scripts/install-deps.sh --bench   also the side-by-side references (python3-torch, hyperfine,
#                                     PyTorch Lightning 1.9.5 in build/plref)
set -euo pipefail

# LuaJIT: Debian's luajit2 (OpenResty's branch, 2.1-20230119), not bookworm's luajit
# (2.1.0~beta3+git20220320), whose JIT ends an outer pairs() loop early once a nested pairs()
# loop is blacklisted (LuaJIT issue #827, fixed upstream April 2022; spec/host_luajit_spec.lua).
# The two conflict: apt replaces the one with the other (libluajit-5.1.a, /usr/bin/luajit).
pkgs=(build-essential pkg-config luajit2 libluajit2-5.1-dev lua-busted libedit-dev
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

plref() {
  # PyTorch Lightning 1.9.5 (PyPI) over Debian's python3-torch 1.13, for the Trainer
  # benches' reference figures (bench/lightning_ref.py). --no-deps: pip must not
  # replace Debian's torch. Python 3.11 needs a small dataclass fix for torch 1.13's
  # distributed._shard, which Lightning imports (bench/plref/).
  [ "${1:-}" = "--bench" ] || return 0
  local root venv
  root="$(cd "$(dirname "$0")/.." && pwd)"
  venv="$root/build/plref"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import pytorch_lightning' 2>/dev/null; then
    echo "install-deps: creating build/plref (pip: pytorch-lightning 1.9.5 over Debian's torch)"
    {
      /usr/bin/python3 -m venv --system-site-packages "$venv" &&
      "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "pytorch-lightning==1.9.5" \
        "torchmetrics==0.11.4" "lightning-utilities==0.8.0" &&
      sp=$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])') &&
      cp "$root/bench/plref/dpl_py311_dataclass_fix.py" "$sp/" &&
      echo "import dpl_py311_dataclass_fix" > "$sp/dpl_py311_dataclass_fix.pth" &&
      "$venv/bin/python" -c 'import pytorch_lightning'
    } >/dev/null 2>&1 || echo "install-deps: could not set up Lightning; the benches will leave its figures out"
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  pyref
  plref "${1:-}"
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
plref "${1:-}"
echo "install-deps: done"
