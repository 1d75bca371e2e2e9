"""Dense RAG (generic) and LoCoMo's RAG: units, rank order, date prefixes, budget, the annotations file."""
from __future__ import annotations

import json
import re
import zlib
from pathlib import Path

import numpy as np
import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from scgmem.baselines.rag.dense import DenseRAG
from scgmem.baselines.rag.locomo import LoCoMoRAG, split_dia_ids
from scgmem.data.locomo import load_locomo
from scgmem.llm.doubles.fake import ScriptedLLM
from tests.baselines import CONV

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
LLM = ScriptedLLM(["x"])


class BagEmbedder:
    """Hashed bag of words, unit length; a few function words ignored."""

    name = "bag"
    IGNORE = {"said", "the", "a", "i", "am", "we", "with", "by", "to", "what", "did", "who"}

    def encode(self, texts):
        out = np.zeros((len(texts), 512), dtype=np.float32)
        for row, text in enumerate(texts):
            for w in re.findall(r"[a-z]+", text.lower()):
                if w not in self.IGNORE:
                    out[row, zlib.crc32(w.encode()) % 512] += 1
            out[row, 0] += 1e-3
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def annotations(tmp_path, sample_id="conv-test"):
    sample = {"sample_id": sample_id,
              "observation": {"session_1_observation": {"Caroline": [["Caroline goes to a support group.", "D1:1"]],
                                                        "Melanie": [["Melanie painted a lake sunrise.", "D1:2, D9"]]},
                              "session_2_observation": {"Caroline": [["Caroline researches adoption.",
                                                                      ["D2:1"]]]}},
              "session_summary": {"session_1_summary": "Support group and a lake painting.",
                                  "session_2_summary": "Adoption agencies and camping."}}
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    return str(path)


def test_generic_rag_is_named_as_such_and_chronological():
    rag = DenseRAG(LLM, BagEmbedder(), k=2)
    rag.ingest(CONV, None)
    r = rag.recall("camping kids support group", budget_tokens=1000, rng=None)
    assert r.dia_ids == ["D1:1", "D2:2"]  # chronological, not rank order
    assert r.context.startswith("DATE: 1:56 pm on 1 May, 2023\nCaroline: I went")
    assert "not LoCoMo's RAG" in rag.stats()["baseline"] and "k=2" in rag.stats()["baseline"]


def test_locomo_dialog_units_are_date_prefixed_in_rank_order():
    rag = LoCoMoRAG(LLM, BagEmbedder(), k=2)
    rag.ingest(CONV, None)
    assert rag.texts[1] == 'Melanie said, "I painted a sunrise by the lake."'
    r = rag.recall("camping with the kids, and a support group?", budget_tokens=1000, rng=None)
    assert r.dia_ids == ["D2:2", "D1:1"]  # best first: rank order is kept
    assert r.context == ('1:56 pm on 2 May, 2023: Melanie said, "We went camping with the kids."\n'
                         '1:56 pm on 1 May, 2023: Caroline said, "I went to a LGBTQ support group yesterday."')
    small = rag.recall("camping with the kids, and a support group?", budget_tokens=20, rng=None)
    assert small.dia_ids == ["D2:2"]  # the lowest-ranked unit went first


def test_observations_come_from_the_data_file_with_their_evidence(tmp_path):
    rag = LoCoMoRAG(LLM, BagEmbedder(), k=1, unit="observation", data_path=annotations(tmp_path))
    rag.ingest(CONV, None)
    assert len(rag.texts) == 3 and rag.deviations["observation_bad_dia_id"] == 1  # "D9"
    r = rag.recall("Who painted the sunrise at the lake?", budget_tokens=1000, rng=None)
    assert r.context == "1:56 pm on 1 May, 2023: Melanie painted a lake sunrise."
    assert r.dia_ids == ["D1:2"]
    assert split_dia_ids("D1:3, D1:5") == ["D1:3", "D1:5"] and split_dia_ids(["D2:1"]) == ["D2:1"]


def test_summaries_count_their_whole_session_and_are_blank_line_separated(tmp_path):
    rag = LoCoMoRAG(LLM, BagEmbedder(), k=2, unit="summary", data_path=annotations(tmp_path))
    rag.ingest(CONV, None)
    r = rag.recall("adoption agencies", budget_tokens=1000, rng=None)
    assert r.context.split("\n\n")[0] == "1:56 pm on 2 May, 2023: Adoption agencies and camping."
    assert r.dia_ids == ["D2:1", "D2:2", "D1:1", "D1:2"]
    assert "summary_ids" in rag.stats()["settings_deviations"]


def test_bad_settings_and_missing_samples_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="method.unit"):
        LoCoMoRAG(LLM, BagEmbedder(), unit="facts")
    with pytest.raises(ValueError, match="method.data_path"):
        LoCoMoRAG(LLM, BagEmbedder(), unit="summary")
    rag = LoCoMoRAG(LLM, BagEmbedder(), unit="summary", data_path=annotations(tmp_path, sample_id="conv-1"))
    with pytest.raises(ValueError, match="sample_id"):
        rag.ingest(CONV, None)


def test_config_reads_observations_of_conv26_from_the_data_path(locomo_path):
    cfg = OmegaConf.create({"data": {"path": str(locomo_path)},
                            "method": OmegaConf.load(CONFIGS / "method" / "rag_locomo.yaml")})
    cfg.method.unit = "observation"
    rag = instantiate(cfg.method, llm=LLM, embedder=BagEmbedder())
    conv = load_locomo(locomo_path)[0][0]
    rag.ingest(conv, None)
    assert rag.k == 5 and len(rag.texts) > len(conv.sessions)
    all_ids = {t.dia_id for t in conv.turns}
    assert all(set(ids) <= all_ids for ids in rag.ids if ids)
