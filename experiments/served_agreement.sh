#!/usr/bin/env bash
# Agreement of SCG-Mem on a serving engine and on the local backend (de-quantised), conv-26 sessions 1-4:
# `experiments/served_agreement.sh local`, `... served` (llama.cpp, Q4_1 GGUF, side by side) or `... vllm`
# (vLLM's own server, fp32, on `make vllm`'s port 8000 with model=vllm's defaults), then
# `python -m experiments.served_agreement $OUT/local $OUT/served` (or $OUT/vllm).
# OUT defaults to results/served/agreement_runs.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
SLICE="data.samples=[conv-26] data.max_sessions=4 run.use_memory_cache=false run.progress=false"
G=$(.venv/bin/python -c "from scgmem.llm.served.launchers.llamacpp import bundled_gguf; print(bundled_gguf())")
T=$HOME/.cache/scgmem/models/SmolLM2-135M-Instruct.Q4_1   # make install de-quantises the GGUF there
mkdir -p "${OUT:-results/served/agreement_runs}"
case "${1:-}" in
local) /usr/bin/time -v .venv/bin/scgmem-run method=scgmem $SLICE hydra.run.dir=${OUT:-results/served/agreement_runs}/local ;;
served) .venv/bin/python -m scgmem.llm.served.launchers.llamacpp --port 18282 --slots 4 --threads 1 & SRV=$!
        sleep 5
        /usr/bin/time -v .venv/bin/scgmem-run model=openai_compatible model.engine=llamacpp model.api=completions \
          model.base_url=http://127.0.0.1:18282/v1 model.model_id=$G model.tokenizer=$T model.name=smollm2-135m-llamacpp \
          model.max_concurrency=4 method=scgmem $SLICE hydra.run.dir=${OUT:-results/served/agreement_runs}/served; kill $SRV ;;
vllm)   make vllm > /dev/null
        /usr/bin/time -v .venv/bin/scgmem-run model=vllm method=scgmem $SLICE hydra.run.dir=${OUT:-results/served/agreement_runs}/vllm ;;
esac
