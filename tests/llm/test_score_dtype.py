"""SCG-Mem's recorded key log-probs on a bf16 model are computed from float32 logits (issue 26,
item 3): they agree with a float32 head applied to the same hidden states within 1e-3.

The tiny model's head is scaled so its logits reach 10-40, as a real instruct model's do: there
the bf16 step is 0.06-0.25, so bf16 logits miss the reference by far more than 1e-3."""
from __future__ import annotations

import math

import pytest
import torch

from scgmem.core.decoding import generate_keys, key_end_id
from scgmem.core.schema import CognitiveSchema

CONCEPTS = ["hiking", "pottery", "coffee shop", "art class", "beach", "career counseling", "mental health"]


@pytest.fixture(scope="module")
def sharp_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny Llama with an untied head whose logits are 10-40 in size."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny-sharp")
    model = LlamaForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model.config.tie_word_embeddings = False
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=False)
    torch.manual_seed(1)
    head.weight.data.normal_(0.0, 4.0)  # unit-RMS hidden states x 32 dims -> logits of std ~23
    model.lm_head = head
    model.save_pretrained(folder, safe_serialization=True)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(folder)
    return folder


def _keys_and_reference(llm, prompt):
    """(recorded log-prob of the keys of `prompt`, the same from a float32 head over the hidden
    states the run produced, captured at the final norm)."""
    captured = []
    hook = llm.model.model.norm.register_forward_hook(lambda m, i, out: captured.append(out[:, -1].detach()))
    schema = CognitiveSchema(llm.encode, len(llm.tokenizer), forbidden_ids=llm.eos_token_ids)
    for c in CONCEPTS:
        schema.add(c)
    try:
        [[keys]], _ = generate_keys(llm, schema, [prompt], max_keys=3)
    finally:
        hook.remove()
    assert keys.complete and keys.keys, keys
    weight = llm.model.get_output_embeddings().weight.detach().float()
    ids = [t for k in keys.keys for t in k.token_ids + [schema.terminator]][:-1] + [key_end_id(llm)]
    reference = sum(float(torch.log_softmax(captured[step][0].float() @ weight.T, dim=-1)[t])
                    for step, t in enumerate(ids))
    return sum(k.logprob for k in keys.keys), reference


def test_bf16_recorded_logprobs_match_float32_head(sharp_model_dir):
    from scgmem.llm import LLM

    llm = LLM(name="sharp", path=str(sharp_model_dir), dtype="bfloat16", context_window=512, batch_size=1,
              memo_entries=0, prefix_cache=False)
    assert llm.model.dtype == torch.bfloat16
    for i in range(2):
        recorded, reference = _keys_and_reference(llm, llm.render(f"Note {i}: Melanie loves hiking. Concepts:"))
        assert math.isfinite(recorded)
        assert abs(recorded - reference) < 1e-3, (recorded, reference)
    assert llm.generation_report()["score_dtype"] == "float32"


def test_model_score_dtype_keeps_bf16_logits(sharp_model_dir):
    """score_dtype=model is the old behaviour: the recorded log-probs carry bf16 rounding."""
    from scgmem.llm import LLM

    llm = LLM(name="sharp", path=str(sharp_model_dir), dtype="bfloat16", context_window=512, batch_size=1,
              memo_entries=0, prefix_cache=False, score_dtype="model")
    recorded, reference = _keys_and_reference(llm, llm.render("Melanie loves hiking and pottery. Concepts:"))
    assert abs(recorded - reference) > 1e-3
    assert llm.generation_report()["score_dtype"] == "bfloat16"


def test_bad_score_dtype_is_refused(tiny_model_dir):
    from scgmem.llm import LLM

    with pytest.raises(ValueError, match="model.score_dtype='half'"):
        LLM(name="tiny", path=str(tiny_model_dir), score_dtype="half", memo_entries=0)


def test_scgmem_run_bf16_records_float32_score_dtype(tiny_model_dir, tmp_path):
    """Acceptance: `scgmem-run model=local model.dtype=bfloat16 method=scgmem` on a one-session slice
    writes generation.score_dtype float32 into summary.json."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    run_dir = tmp_path / "run"
    env = {**os.environ, "SCGMEM_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "scgmem.run", "model=local", f"model.path={tiny_model_dir}",
                    "model.dtype=bfloat16", "model.context_window=2048", "method=scgmem",
                    "data.samples=[conv-26]", "data.max_sessions=1", "data.questions_per_category=1",
                    "run.progress=false", f"hydra.run.dir={run_dir}"], cwd=root, env=env, check=True, timeout=900)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["generation"]["score_dtype"] == "float32"
    assert any(kind.startswith("ingest/") for kind in summary["generation"]["calls"])
