"""The LoCoMo loader: the real file's facts and quirks, slicing, and structural errors."""
import json
from pathlib import Path

import pytest

from scgmem.data.locomo import DataError, LoCoMoSource, load_locomo, scored_questions, select

ROOT = Path(__file__).resolve().parents[2]

OFFICIAL = {1: "multi_hop", 2: "temporal", 4: "single_hop", 5: "adversarial"}


def test_real_file_counts(locomo_path):
    convs, report = load_locomo(locomo_path)
    assert len(convs) == 10
    assert sum(len(c.sessions) for c in convs) == 272
    assert sum(len(c.turns) for c in convs) == 5882
    qa = [q for c in convs for q in c.qa]
    assert len(qa) == 1986
    by_cat = {k: sum(q.category == k for q in qa) for k in range(1, 6)}
    assert by_cat == {1: 282, 2: 321, 3: 96, 4: 841, 5: 446}
    conv26 = next(c for c in convs if c.sample_id == "conv-26")
    assert len(conv26.turns) == 419


def test_real_file_quirks_are_counted(locomo_path):
    convs, report = load_locomo(locomo_path)
    assert report.integer_answers > 0
    assert report.malformed_evidence == 2  # "D" and "D:11:26"
    assert report.split_evidence == 4  # "D8:6; D9:17", "D9:1 D4:4 D4:6", ...
    qa = {(q.sample_id, q.index): q for c in convs for q in c.qa}
    assert qa[("conv-26", 37)].evidence == ("D8:6", "D9:17")
    assert qa[("conv-50", 69)].evidence == ("D30:5",)  # "D30:05" normalised
    assert report.renumbered_evidence == 1  # that id is the only one written with a leading zero
    assert all(isinstance(q.answer, str) for q in qa.values() if q.answer is not None)
    adversarial = [q for q in qa.values() if q.category == 5]
    assert sum(q.answer is None for q in adversarial) == 444


def test_image_turns_keep_their_caption(locomo_path):
    convs, _ = load_locomo(locomo_path)
    captions = [t for c in convs for t in c.turns if t.caption]
    assert captions and all(isinstance(t.caption, str) for t in captions)


def test_select_and_slice(locomo_path):
    convs, _ = load_locomo(locomo_path)
    two = select(convs, ["conv-30", "conv-26"], max_sessions=2)
    assert [c.sample_id for c in two] == ["conv-30", "conv-26"]
    c = two[1]
    assert len(c.sessions) == 2
    kept = {t.dia_id for t in c.turns}
    assert c.qa and all(q.evidence and set(q.evidence) <= kept for q in c.qa)
    qs = scored_questions(c, OFFICIAL, per_category=1)
    assert len({q.category for q in qs}) == len(qs)
    with pytest.raises(DataError, match="unknown sample"):
        select(convs, ["conv-99"])


def _sample():
    return [{
        "sample_id": "s1",
        "conversation": {"speaker_a": "A", "speaker_b": "B", "session_1_date_time": "1:00 pm on 1 May, 2023",
                         "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}]},
        "qa": [{"question": "q?", "answer": 3, "evidence": ["D1:1"], "category": 4}],
    }]


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d[0].pop("sample_id"), "missing field 'sample_id'"),
    (lambda d: d[0]["conversation"].pop("speaker_a"), "missing field 'speaker_a'"),
    (lambda d: d[0]["conversation"]["session_1"][0].pop("text"), "session_1[0]: missing field 'text'"),
    (lambda d: d[0]["conversation"]["session_1"][0].update(dia_id=7), "field 'dia_id' should be str"),
    (lambda d: d[0]["qa"][0].update(category="4"), "field 'category' should be int"),
    (lambda d: d[0]["qa"][0].update(category=9), "should be 1-5"),
    (lambda d: d[0]["qa"][0].pop("question"), "qa[0]: missing field 'question'"),
    (lambda d: d[0]["qa"][0].update(evidence="D1:1"), "field 'evidence' should be list"),
    (lambda d: d[0].update(qa={}), "field 'qa' should be list"),
    (lambda d: d[0]["conversation"].pop("session_1_date_time"), "missing field 'session_1_date_time'"),
])
def test_structural_errors_name_file_sample_and_field(tmp_path, mutate, needle):
    data = _sample()
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DataError) as e:
        load_locomo(path)
    message = str(e.value)
    assert needle in message and str(path) in message and "\n" not in message


@pytest.mark.parametrize("content, needle", [
    (b"", "not valid JSON"),
    (b"{\"a\": 1}", "top level should be a list"),
    (b"[]", "empty"),
    (b"[{\"sample_id\": \"x\", \"conv", "not valid JSON"),
    (bytes(range(256)), "not UTF-8"),
    (b"[1, 2]", "expected an object"),
])
def test_file_level_errors(tmp_path, content, needle):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(DataError, match=needle):
        load_locomo(path)


def test_integer_answer_is_cast(tmp_path):
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(_sample()))
    convs, report = load_locomo(path)
    assert convs[0].qa[0].answer == "3" and report.integer_answers == 1


# ---------------------------------------------------------------------------- configs/data/locomo.yaml
def _source(*overrides: str):
    """The data node as the runner instantiates it, with these command-line overrides."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides))
    return instantiate(cfg.data)


def test_the_data_config_selects_as_the_cli_says(locomo_path):
    source = _source(f"data.path={locomo_path}", "data.samples=[conv-30,conv-26]", "data.max_sessions=1",
                     "data.questions_per_category=1")
    assert isinstance(source, LoCoMoSource)
    convs, report = source.load()
    expected = select(load_locomo(locomo_path)[0], ["conv-30", "conv-26"], max_sessions=1)
    assert convs == expected and report.as_dict()["integer_answers"] > 0
    assert source.scored == OFFICIAL and source.questions_per_category == 1
    info = source.summary_info(convs, report)
    turns = {c.sample_id: len(c.sessions[0].turns) for c in expected}
    assert info["samples"] == ["conv-30", "conv-26"] and info["ingested_turns"] == turns
    assert info["ingested_turns_total"] == sum(turns.values()) > 0


@pytest.mark.parametrize("override, needle", [
    ("data.max_sessions=-1", "data.max_sessions must be a positive int, got -1"),
    ("data.max_sessions=abc", "data.max_sessions must be a positive int"),
    ("data.questions_per_category=0", "data.questions_per_category must be a positive int, got 0"),
    ("data.samples=conv-26", "data.samples must be a list of sample ids"),
    ("data.scored_categories=[1,7]", "data.scored_categories: [7] not in data.categories"),
    ("+data.categories.9=extra", "data.categories: category numbers are 1-5, got ['9']"),
])
def test_bad_data_values_are_one_line_naming_the_field(override, needle):
    from hydra.errors import InstantiationException

    with pytest.raises(InstantiationException) as caught:
        _source(override)
    cause = caught.value.__cause__
    assert isinstance(cause, DataError) and needle in str(cause) and "\n" not in str(cause)


def test_an_unknown_sample_names_the_field_when_loaded(locomo_path):
    with pytest.raises(DataError, match=r"data.samples names unknown sample\(s\) \['conv-0'\]"):
        _source(f"data.path={locomo_path}", "data.samples=[conv-0]").load()
