"""SCGMem behind the harness interface: ingest -> recall -> stats/export/state, both ablations,
and the embedded model on real LoCoMo turns (structural hallucination rate exactly 0)."""
from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from scgmem.core.method import SCGMem
from tests.core.conftest import make_conversation
from tests.core.test_evolution import texts, words_script

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "method" / "scgmem.yaml"


class HashEmbedder:
    """Deterministic bag-of-words vectors: enough to test the ablation's wiring without a model."""

    name = "hash"

    def encode(self, items):
        out = np.zeros((len(items), 64), dtype=np.float32)
        for i, text in enumerate(items):
            for w in text.lower().replace(",", " ").split():
                out[i, zlib.crc32(w.encode()) % 64] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


def built(llm, **kwargs) -> SCGMem:
    # low thresholds: the tiny random model's keys are kept, so turns do ground in shared concepts
    method = SCGMem(llm, kwargs.pop("embedder", None), threshold_mode="absolute", keep_threshold=-1e9, trigger_threshold=-1e9,
                    ingest_batch_size=3, **kwargs)
    method.ingest(make_conversation(texts() * 2), np.random.default_rng(0))
    return method


def test_ingest_stats_export_and_state(hybrid):
    method = built(hybrid(words_script))
    stats = method.stats()
    assert stats["turns"] == 12 and stats["schema_size"] == len(method.schema) > 0
    assert stats["keys_generated"] > 0 and stats["keys_outside_schema"] == 0
    assert stats["accommodated_turns"] == 3  # the first batch only: S was empty
    exported = json.loads(json.dumps(method.export()))
    assert exported["n_turns"] == 12 and set(exported["concepts"]) == set(method.schema.concepts)
    assert any(len(ids) > 1 for ids in exported["concepts"].values())  # turns share concepts
    for u, v, w in exported["edges"]:
        assert w == pytest.approx(method.graph.weight(u, v))
    clone = SCGMem(method.llm, threshold_mode="absolute", keep_threshold=-1e9, trigger_threshold=-1e9, ingest_batch_size=3)
    clone.load_state_dict(json.loads(json.dumps(method.state_dict())))
    assert clone.export() == method.export() and clone.stats() == stats
    a = method.recall("Where did they go hiking?", budget_tokens=200, rng=np.random.default_rng(3))
    b = clone.recall("Where did they go hiking?", budget_tokens=200, rng=np.random.default_rng(3))
    assert (a.context, a.dia_ids, a.extras) == (b.context, b.dia_ids, b.extras)


def test_recall_contract(hybrid):
    method = built(hybrid(words_script))
    questions = ["Where did they go hiking?", "What class did they try?", "Who has a dog?"]
    rngs = [np.random.default_rng(i) for i in range(3)]
    recalls = method.recall_batch(questions, budget_tokens=[60, 300, 300], rngs=rngs)
    for r, budget in zip(recalls, [60, 300, 300]):
        assert r.extras["seed_keys"] and set(r.extras["seed_keys"]) <= set(method.schema.concepts)
        assert r.extras["context_keys"][:len(r.extras["seed_keys"])] == r.extras["seed_keys"]
        assert len(r.extras["context_keys"]) <= method.k
        assert set(r.extras["generated_keys"]) <= set(method.schema.concepts)
        assert method.llm.count_tokens(r.context) <= budget
        assert all(f"{method.turns[d].text}" in r.context for d in r.dia_ids)
        assert r.dia_ids == sorted(r.dia_ids, key=lambda d: tuple(int(x) for x in d[1:].split(":")))
    stats = method.stats()
    assert stats["recall_keys_generated"] > 0 and stats["keys_outside_schema"] == 0


def test_same_seed_same_recall(hybrid):
    method = built(hybrid(words_script), temperature=50.0, k=4)
    out = [method.recall("hiking and the lake", budget_tokens=300, rng=np.random.default_rng(11)) for _ in range(2)]
    assert out[0].context == out[1].context and out[0].extras == out[1].extras


def test_hops_zero_returns_only_seeds(hybrid):
    method = built(hybrid(words_script), hops=0)
    r = method.recall("Where did they go hiking?", budget_tokens=1000, rng=np.random.default_rng(0))
    assert r.extras["context_keys"] == r.extras["seed_keys"]
    seed_turns = {d for c in r.extras["seed_keys"] for d in method.index[c]}
    assert r.dia_ids and set(r.dia_ids) <= seed_turns


def test_constraint_false_ablation(hybrid):
    with pytest.raises(ValueError, match="needs an embedder"):
        SCGMem(hybrid(words_script), None, constraint=False)
    # free keywords for questions: one in S ("hiking"), one not ("volcano")
    llm = hybrid(lambda p: "hiking, volcano" if "Question:" in p else words_script(p))
    method = built(llm, constraint=False, embedder=HashEmbedder())
    r = method.recall("Did they hike near a volcano?", budget_tokens=300, rng=np.random.default_rng(0))
    assert r.extras["generated_keys"] == ["hiking", "volcano"]
    assert r.extras["seed_keys"][0] == "hiking" and set(r.extras["seed_keys"]) <= set(method.schema.concepts)
    assert len(r.extras["seed_keys"]) == method.num_beams
    stats = method.stats()
    assert stats["recall_keys_outside_schema"] == 1 and stats["recall_keys_generated"] == 2


def test_evolution_false_memory(hybrid):
    method = built(hybrid(words_script), evolution=False)
    assert all(len(ids) == 1 for ids in method.index.values())  # no turn grounds in an existing concept
    assert method.stats()["keys_generated"] == 0 and method.stats()["accommodated_turns"] == 12


def test_memory_settings_hold_only_what_changes_the_memory(hybrid):
    llm = hybrid(words_script)
    base = SCGMem(llm).memory_settings()
    for recall_only in ({"k": 5}, {"hops": 2}, {"temperature": 3.0}, {"num_beams": 2}, {"context_tokens": 99},
                        {"turns_per_concept": "all"}, {"turns_per_concept": 3},
                        {"recall_prompt": "Q {question}"}):
        assert SCGMem(llm, **recall_only).memory_settings() == base, recall_only
    assert SCGMem(llm, HashEmbedder(), constraint=False).memory_settings() == base
    for ingest in ({"evolution": False}, {"keep_threshold": -1.0}, {"trigger_threshold": -1.0},
                   {"threshold_mode": "absolute"}, {"keep_quantile": 0.4}, {"trigger_quantile": 0.2},
                   {"min_assimilated": 2}, {"max_keys": 3}, {"ingest_batch_size": 4}, {"ingest_prompt": "{turn}"}):
        assert SCGMem(llm, **ingest).memory_settings() != base, ingest
    json.dumps(base)


def test_bad_values_name_the_argument(hybrid):
    llm = hybrid(words_script)
    for kwargs, name in (({"k": 0}, "method.k"), ({"hops": -1}, "method.hops"), ({"num_beams": 0}, "method.num_beams"),
                         ({"temperature": 0}, "method.temperature"), ({"constraint": "no"}, "method.constraint"),
                         ({"max_keys": 0}, "method.max_keys"), ({"ingest_prompt": "no slot"}, "ingest_prompt"),
                         ({"turns_per_concept": 0}, "method.turns_per_concept"),
                         ({"recall_prompt": "no slot"}, "method.recall_prompt")):
        with pytest.raises(ValueError, match=name):
            SCGMem(llm, **kwargs)


def test_the_config_file_instantiates(hybrid):
    from hydra.utils import instantiate

    cfg = OmegaConf.load(CONFIG)
    method = instantiate(cfg, llm=hybrid(words_script), embedder=None)
    assert (method.k, method.hops, method.num_beams, method.constraint, method.evolution) == (35, 1, 5, True, True)
    defaults = SCGMem(hybrid(words_script))
    assert method.memory_settings() == defaults.memory_settings()  # the YAML spells out the defaults


def test_a_model_less_llm_builds_but_cannot_ingest():
    from scgmem.llm.doubles.fake import ScriptedLLM

    method = SCGMem(ScriptedLLM(["hiking"]))  # e.g. a config check with the dummy backend
    with pytest.raises(TypeError, match="does not apply constraints"):
        method.ingest(make_conversation(["hi"]), np.random.default_rng(0))


def test_empty_memory_recalls_nothing(hybrid):
    method = SCGMem(hybrid(lambda p: ""))
    method.ingest(make_conversation(["hmm", "ok"]), np.random.default_rng(0))
    r = method.recall("anything?", budget_tokens=100, rng=np.random.default_rng(0))
    assert (r.context, r.dia_ids) == ("", []) and method.stats()["deviations"]["recall_no_seeds"] == 1


# ---------------------------------------------------------------------- the embedded model


def test_smollm_ingest_and_recall_on_conv26(smollm, locomo_path):
    """~10 real turns: the constrained path generates keys and none is outside the schema."""
    from scgmem.data.locomo import load_locomo

    conversations, _ = load_locomo(locomo_path)
    conv = next(c for c in conversations if c.sample_id == "conv-26")
    first = conv.sessions[0]
    small = type(conv)(sample_id=conv.sample_id, speaker_a=conv.speaker_a, speaker_b=conv.speaker_b,
                       sessions=(type(first)(first.index, first.date_time, first.turns[:10]),), qa=())
    method = SCGMem(smollm, None, ingest_batch_size=5)  # two batches: the second one assimilates
    method.ingest(small, np.random.default_rng(0))
    stats = method.stats()
    assert stats["turns"] == 10 and stats["schema_size"] > 5
    questions = ["What did Caroline go to yesterday?", "What does Caroline want to do for her career?"]
    recalls = method.recall_batch(questions, budget_tokens=[400, 400], rngs=[np.random.default_rng(i) for i in (0, 1)])
    stats = method.stats()
    assert stats["keys_generated"] >= 2 * method.num_beams // 2
    assert stats["keys_outside_schema"] == 0  # Definition 1: structural hallucination rate exactly 0
    for r in recalls:
        assert r.extras["seed_keys"] and set(r.extras["generated_keys"]) <= set(method.schema.concepts)
        assert r.dia_ids and set(r.dia_ids) <= {t.dia_id for t in small.turns}
        assert smollm.count_tokens(r.context) <= 400 and "DATE: 1:56 pm on 8 May, 2023" in r.context


def test_the_config_check_refuses_scgmem_on_a_server_without_an_engine():
    from hydra import compose, initialize_config_dir

    from scgmem.harness.cli_checks import check_method_model
    from scgmem.harness.run import CONFIG_DIR

    served = ["model=openai_compatible", "model.base_url=http://127.0.0.1:18250/v1", "model.model_id=m"]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        def problem(*overrides):
            return check_method_model(compose(config_name="config", overrides=list(overrides)))

        assert "needs model.engine=" in problem("method=scgmem", *served)
        assert problem("method=scgmem", *served, "model.engine=llamacpp") is None
        assert problem("method=full_context", *served) is None  # free text needs no engine
        assert problem("method=scgmem") is None  # the local backend


@pytest.mark.slow
def test_scgmem_on_a_server_without_an_engine_is_one_line_before_anything_loads(tmp_path):
    """`method=scgmem model=openai_compatible` without model.engine: exit 2 and one line on stderr,
    from the config alone (no request reaches the URL, no data, model or embedder loads, no run
    folder is written)."""
    import subprocess
    import sys

    from scgmem.llm.served.engines import one_of

    cmd = [sys.executable, "-m", "scgmem.run", "method=scgmem", "model=openai_compatible",
           "model.base_url=http://127.0.0.1:18250/v1", "model.model_id=m", f"hydra.run.dir={tmp_path}/run"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"error: method=scgmem on a server needs model.engine={one_of()} "
                                                "(its schema constraint as an llguidance token-id grammar) and "
                                                "model.tokenizer; or use the local backend"]
    assert not (tmp_path / "run").exists()
