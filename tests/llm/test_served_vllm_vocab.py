"""The paper models' vocabularies on vLLM (issue 45, item 4): random-weight 2-layer Qwen2 and Llama
models with the real tokenizers, vocabulary sizes and chat templates (scgmem/llm/doubles/
tiny_real_models.py), served by vLLM's own server. The nearest we can come to the paper's models here.

For each vocabulary (151,936 and 128,256 score columns):
* SCG-Mem's schema grammar compiles on the server and constrains it: every key of a greedy list
  and of a beam search is a key of the schema;
* the prompts vLLM receives are the token ids the local backend feeds (vLLM echoes them);
* `results/served/vllm_vocab.json` gets the grammar compile time and the per-request overhead
  (`experiments/vllm_vocab.py` writes it from the same calls).

Slow: each vocabulary starts its own server (one to three minutes on a CPU).
"""
from __future__ import annotations

import pytest

from scgmem.llm.served.launchers.vllm import vllm_python
from tests.llm.servers import free_port

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(vllm_python() is None, reason="vLLM is not set up here (make vllm-install)")]


@pytest.fixture(scope="module", params=["qwen2.5", "llama3.2"])
def served_tiny(request, tmp_path_factory):
    from scgmem.llm.doubles.tiny_real_models import build_tiny_real_model
    from scgmem.llm.served.launchers.launch import stop_process
    from scgmem.llm.served.launchers.vllm import start

    family = request.param
    folder = build_tiny_real_model(family, tmp_path_factory.mktemp(family) / "model", hidden=256)  # head_dim 64 for vLLM CPU
    port = free_port()
    log = folder.parent / "server.log"
    proc = start(port, model=str(folder), served_name=None, max_model_len=4096, wait_s=900, log=log)
    yield family, folder, f"http://127.0.0.1:{port}/v1"
    stop_process(proc)


def test_the_schema_grammar_constrains_vllm_over_the_paper_vocabularies(served_tiny):
    from experiments.vllm_vocab import probe_vocabulary

    family, folder, url = served_tiny
    facts = probe_vocabulary(url, str(folder))
    assert facts["vocab_size"] == {"qwen2.5": 151936, "llama3.2": 128256}[family]
    assert facts["greedy_keys"] and facts["beam_keys"], facts
    assert facts["outside_schema"] == 0, facts
    assert facts["prompt_ids_equal"], facts
