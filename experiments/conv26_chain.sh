#!/usr/bin/env bash
# The conv-26 runs of results/embedded/conv26_full, one after another, at the lowest CPU priority
# and one torch thread; each resumes in RUNS/NAME. Run from the repository root:
#   RUNS=<dir> CACHE=<dir> experiments/conv26_chain.sh scgmem "" rag "method=rag" ...
# (NAME "overrides" pairs; the session ran two such chains side by side).
set -u
RUNS=${RUNS:?set RUNS to the folder of the run directories}
CACHE=${CACHE:?set CACHE to the run.cache_dir}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p "$RUNS"
while [ $# -gt 0 ]; do
  name=$1; over=$2; shift 2
  echo "$(date -u +%FT%TZ) start $name: $over"
  # $over is split on purpose: it holds zero or more overrides
  /usr/bin/time -v -o "$RUNS/$name.time" nice -n 19 .venv/bin/python -m scgmem.run \
    'data.samples=[conv-26]' run.progress=false run.cache_dir="$CACHE" $over hydra.run.dir="$RUNS/$name" \
    > "$RUNS/$name.log" 2>&1
  rc=$?  # taken before the echo's own command substitution resets $?
  echo "$(date -u +%FT%TZ) end $name rc=$rc"
done
