#!/usr/bin/env bash
# Idempotent set-up of a development environment in ./.venv:
#   * Open3D's system libraries (apt, when run as root; otherwise the exact command is printed),
#   * a virtual environment with the CPU build of torch==2.13.0 (an unpinned torch would pull
#     several GB of CUDA packages),
#   * gridify installed editable with its dev extras.
# Re-running it only redoes what changed (it keys on pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
VENV=${VENV:-.venv}
SYSTEM_LIBS=(libusb-1.0-0 libgl1 libgomp1 mesa-vulkan-drivers)  # mesa-vulkan-drivers: headless rendering (gridify show --out)

say() { printf '[setup] %s\n' "$*"; }

# 1. System libraries Open3D links against.
if command -v dpkg >/dev/null 2>&1; then
  missing=()
  for lib in "${SYSTEM_LIBS[@]}"; do
    dpkg -s "$lib" >/dev/null 2>&1 || missing+=("$lib")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      say "installing Open3D system libraries: ${missing[*]}"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
      say "Open3D needs system libraries that are missing; install them with:"
      say "    sudo apt-get update && sudo apt-get install -y ${missing[*]}"
    fi
  fi
fi

# 2. Python >= 3.10 and the virtual environment.
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' || {
  say "gridify needs Python >= 3.10; $PYTHON is $("$PYTHON" --version 2>&1). Set PYTHON=python3.x"; exit 1; }
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"

# 3. torch, pinned to the CPU wheel (installed first so nothing else pulls a CUDA build).
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
  say "installing torch==$TORCH_VERSION"
  "$PY" -m pip install -q "torch==$TORCH_VERSION"
fi

# 4. gridify (editable) with dev extras, redone only when pyproject.toml changes.
stamp="$VENV/.gridify-setup-stamp"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) torch==$TORCH_VERSION"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! "$PY" -c "import gridify" 2>/dev/null; then
  say "installing gridify (editable) with dev extras"
  "$PY" -m pip install -q -e ".[dev]" "torch==$TORCH_VERSION"
  echo "$want" > "$stamp"
fi
say "ready: $("$PY" -c 'import gridify, torch; print(f"gridify {gridify.__version__}, torch {torch.__version__}")')"
