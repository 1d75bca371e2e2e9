"""`data.gold=audited`: the committed corrections file, its key mapping, and what it changes."""
import json
import re
from collections import Counter

import pytest

from scgmem.data.locomo import DataError, LoCoMoSource, load_locomo
from scgmem.data.locomo_audit import AUDIT_PATH, apply_corrections, load_corrections
from scgmem.scoring.protocols import AmemProtocol

SCORED = [1, 2, 4, 5]


def test_the_committed_file_names_its_source_commit_and_licence():
    corrections = load_corrections()
    source = corrections["_source"]
    assert source["repository"] == "https://github.com/dial481/locomo-audit"
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    assert "CC BY-NC 4.0" in source["licence"] and "attribution" in source
    entries = corrections["entries"].values()
    assert len(entries) == 156  # the audit: 99 score-corrupting errors and 57 wrong citations
    answered = Counter(e["category"] for e in entries if e["corrected_answer"] is not None)
    assert sum(answered.values()) == 99 and answered == {1: 28, 2: 26, 3: 9, 4: 36}  # AUDIT_REPORT.md's table
    assert all(e["corrected_answer"] is None for e in entries if e["error_type"] == "WRONG_CITATION")


@pytest.mark.parametrize("key, audit_id, question", [
    ("conv-26:1", "locomo_0_qa1", "When did Melanie paint a sunrise?"),
    ("conv-26:5", "locomo_0_qa5", "When did Melanie run a charity race?"),
    ("conv-30:31", "locomo_1_qa31", None),  # conv-30 interleaves category 5: the index counts every qa
    ("conv-50:151", "locomo_9_qa151", None),
])
def test_keys_map_to_the_data_files_question(locomo_path, key, audit_id, question):
    entry = load_corrections()["entries"][key]
    sample_id, index = key.split(":")
    raw = {s["sample_id"]: s for s in json.loads(locomo_path.read_text())}
    assert list(raw).index(sample_id) == int(audit_id.split("_")[1])  # locomo_<i>: the i-th sample
    assert entry["audit_id"] == audit_id
    assert raw[sample_id]["qa"][int(index)]["question"] == entry["question"]
    if question is not None:
        assert entry["question"] == question


def _references(path, gold: str, **slice_args) -> tuple[dict, LoCoMoSource]:
    """(sample_id, qa_index) -> (A-MEM's reference, evidence) of the scored questions, and the source."""
    source = LoCoMoSource(path, scored_categories=SCORED, gold=gold, **slice_args)
    convs, report = source.load()
    protocol = AmemProtocol(categories={c: str(c) for c in SCORED})
    refs = {(q.sample_id, q.index): (protocol.reference(q), q.evidence) for c in convs for q in c.qa
            if q.category in SCORED}
    source.info = source.summary_info(convs, report)
    return refs, source


def test_audited_gold_changes_90_references_of_the_1890(locomo_path):
    original, _ = _references(locomo_path, "original")
    audited, source = _references(locomo_path, "audited")
    assert len(original) == len(audited) == 1890
    answers = Counter(k[0] for k in original if original[k][0] != audited[k][0])
    assert sum(answers.values()) == 90  # 99 corrected answers less the 9 of category 3 (not scored)
    assert sum(original[k][1] != audited[k][1] for k in original) == 89
    assert source.info["gold"]["replaced"] == {"1": {"answers": 28, "evidence": 43}, "2": {"answers": 26, "evidence": 14},
                                               "4": {"answers": 36, "evidence": 32}}
    assert audited[("conv-30", 31)][0] == "five months" and original[("conv-30", 31)][0] == "six months"
    assert audited[("conv-26", 1)] == ("2022", ("D1:14",))  # a wrong citation: answer kept, evidence corrected


def test_corrected_evidence_changes_which_questions_a_session_slice_keeps(locomo_path):
    original, _ = _references(locomo_path, "original", max_sessions=4)
    audited, source = _references(locomo_path, "audited", max_sessions=4)
    assert (len(original), len(audited)) == (267, 265)  # scored questions of the first 4 sessions
    assert source.info["gold"]["replaced"]["2"] == {"answers": 6, "evidence": 4}


def test_original_gold_says_so_and_bad_values_are_one_line_errors(locomo_path, tmp_path):
    source = LoCoMoSource(locomo_path, gold="original")
    convs, report = source.load()
    assert source.summary_info(convs, report)["gold"] == {"gold": "original"}
    with pytest.raises(DataError, match=r"data.gold must be one of \['original', 'audited'\], got 'fixed'"):
        LoCoMoSource(locomo_path, gold="fixed")


def test_a_question_that_differs_from_the_data_file_is_refused(locomo_path, tmp_path):
    convs, _ = load_locomo(locomo_path)
    corrections = load_corrections()
    corrections["entries"]["conv-26:1"] = {**corrections["entries"]["conv-26:1"], "question": "Another question?"}
    with pytest.raises(DataError, match=r"entry 'conv-26:1': question or category differ"):
        apply_corrections(convs, corrections)
    bad = tmp_path / "audit.json"
    bad.write_text(json.dumps({"_source": {}, "entries": {"conv-26:1": {"question": "q"}}}))
    with pytest.raises(DataError, match=rf"{re.escape(str(bad))}: entry 'conv-26:1': missing field 'category'"):
        load_corrections(bad)
    assert AUDIT_PATH.is_file()


def _audit_entry(question_id, question="Where?", golden="Paris", error_type="HALLUCINATION"):
    return {"question_id": question_id, "question": question, "golden_answer": golden, "category": 4,
            "error_type": error_type, "cited_evidence": ["D1:1"], "correct_evidence": ["D1:2"],
            "reasoning": "...", "correct_answer": "Rome (note)"}


def test_the_build_script_keys_by_sample_and_index_and_checks_the_question(tmp_path):
    from scripts.build_locomo_audit import build

    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([{"sample_id": "conv-9", "qa": [
        {"question": "Other?", "category": 5, "adversarial_answer": "x"},
        {"question": "Where?", "category": 4, "answer": "Paris"}]}]))
    (tmp_path / "audit").mkdir()
    errors = tmp_path / "audit" / "errors_conv_0.json"
    errors.write_text(json.dumps([_audit_entry("locomo_0_qa1"),
                                  {**_audit_entry("locomo_0_qa1", error_type="WRONG_CITATION")}]))
    out = build(tmp_path, data, "f" * 40)
    assert out["_source"]["commit"] == "f" * 40
    entry = out["entries"]["conv-9:1"]
    assert entry["corrected_answer"] is None  # the later WRONG_CITATION entry: the gold answer stays
    errors.write_text(json.dumps([_audit_entry("locomo_0_qa1")]))
    assert build(tmp_path, data, "f" * 40)["entries"]["conv-9:1"]["corrected_answer"] == "Rome (note)"
    errors.write_text(json.dumps([_audit_entry("locomo_0_qa0")]))  # names the category-5 question
    with pytest.raises(SystemExit, match="locomo_0_qa0: question, category or gold answer differ"):
        build(tmp_path, data, "f" * 40)
