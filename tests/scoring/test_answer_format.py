"""answer_format=text|json: prompts, extraction, fallback counting, and the pipeline's records and summary."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from scgmem.api import QA
from scgmem.scoring.answer_format import JSON_PREFIX, JSON_SYSTEM, extract_json_answer, parse_json_answer, unparsed_count
from scgmem.scoring.protocols import AmemProtocol, LocomoProtocol
from tests.scoring.test_protocols import CATS, protocol_node, qa


def test_defaults_follow_each_upstream_code_and_are_recorded():
    assert AmemProtocol().answer_format == "json"  # A-MEM: JSON reply, `answer` field scored
    assert LocomoProtocol().answer_format == "text"  # LoCoMo: the reply is the answer
    for name, fmt in (("amem", "json"), ("locomo", "text")):
        protocol = instantiate(protocol_node(name), categories=CATS)
        assert protocol.answer_format == fmt and protocol.settings()["answer_format"] == fmt
    assert "fall back" in AmemProtocol().settings()["answer_format_note"]
    with pytest.raises(ValueError, match="answer_format must be one of .*'xml'"):
        AmemProtocol(answer_format="xml")


@pytest.mark.parametrize("cls", [AmemProtocol, LocomoProtocol])
def test_json_prompt_sends_amem_system_message_schema_and_primed_reply(cls):
    rng = np.random.default_rng(0)
    json_prompt = cls(CATS, answer_format="json").build_prompt(qa(2), "ctx", rng)
    assert json_prompt.messages[0] == {"role": "system", "content": JSON_SYSTEM}
    assert JSON_SYSTEM == "You must respond with a JSON object."  # A-MEM memory_layer.py, verbatim
    assert json_prompt.messages[1]["content"].endswith('{"answer": "<short answer>"}.')
    assert json_prompt.assistant_prefix == JSON_PREFIX == '{"answer": "'
    text_prompt = cls(CATS, answer_format="text").build_prompt(qa(2), "ctx", np.random.default_rng(0))
    assert [m["role"] for m in text_prompt.messages] == ["user"] and text_prompt.assistant_prefix == ""
    # the same question text in both formats
    assert json_prompt.messages[1]["content"].startswith(text_prompt.messages[0]["content"])


@pytest.mark.parametrize("reply, answer, read", [
    ('7 May 2023"}', "7 May 2023", "primed"),                     # the primed object, closed
    ('7 May 2023"} I hope this helps.', "7 May 2023", "primed"),  # text after the object is ignored
    ('  Paris "}', "Paris", "primed"),
    # the model ignored the primer and wrote its own object (seen with small instruct models)
    ('{"answer": "7 May 2023"}', "7 May 2023", "own_object"),
    ('```json\n{"answer": "7 May 2023"}\n```', "7 May 2023", "own_object"),
    ('Sure! ```\n{"answer": 2022}```', "2022", "own_object"),
    ('{"note": "x"} then {"answer": "Paris"}', "Paris", "own_object"),  # the first object with an answer
    ('7 May 2023', "7 May 2023", "fallback"),                       # cut by max_new_tokens: fallback to the text
    ('He said "hi" twice', "He said", "fallback"),                  # unescaped quote: the string ends there
    ('{"answer": "cut by the cap', "cut by the cap", "fallback"),   # an own object that never closes
    ('', "", "fallback"),
])
def test_extraction_and_fallback(reply, answer, read):
    got, fields = extract_json_answer(reply, JSON_PREFIX)
    assert (got, fields) == (answer, {"reply": reply, "answer_parsed": read != "fallback", "answer_read": read})


def test_parse_takes_the_first_object_and_stringifies_non_strings():
    assert parse_json_answer('Sure! {"answer": "yes"} {"answer": "no"}') == "yes"
    assert parse_json_answer('{"answer": 2022}') == "2022"
    assert parse_json_answer('{"reply": "x"}') is None and parse_json_answer("no json") is None
    # without a primed prefix, a reply that is not JSON falls back whole (A-MEM: the raw response)
    assert extract_json_answer('The answer is "x"', prefix="") == (
        'The answer is "x"', {"reply": 'The answer is "x"', "answer_parsed": False, "answer_read": "fallback"})


def test_text_format_scores_the_reply_as_generated():
    p = LocomoProtocol(CATS)
    prompt = p.build_prompt(qa(4), "ctx", np.random.default_rng(0))
    assert p.extract_answer(' {"answer": "x"}', prompt) == (' {"answer": "x"}', {})


def _conversation_with_questions():
    from tests.baselines import CONV

    qas = (QA(CONV.sample_id, 0, "When did Caroline go?", 2, "7 May 2023", None, ("D1:1",)),
           QA(CONV.sample_id, 1, "What did Melanie paint?", 4, "a sunrise", None, ("D1:2",)))
    return dataclasses.replace(CONV, qa=qas)


def test_pipeline_scores_the_field_records_the_reply_and_counts_fallbacks(tmp_path):
    from scgmem.harness.cache import MemoryCache
    from scgmem.harness.pipeline import Pipeline, RunState
    from scgmem.harness.run import CONFIG_DIR
    from scgmem.harness.summary import build_summary
    from scgmem.llm.doubles.fake import ScriptedLLM

    def reply(prompt: str) -> str:  # the date question: its own fenced object; the other: cut by the cap
        return '```json\n{"answer": "7 May 2023"}\n```' if "When did" in prompt else "a sunrise by the"

    llm = ScriptedLLM(reply)
    node = OmegaConf.load(CONFIG_DIR / "method" / "full_context.yaml")
    protocol = AmemProtocol(CATS, temperature=0)
    pipeline = Pipeline(llm=llm, embedder=None, protocol=protocol,
                        method_factory=lambda view: instantiate(node, llm=view, embedder=None), run_dir=tmp_path,
                        cache=MemoryCache(tmp_path / "cache", enabled=False), seed=0, progress=False)
    records = sorted(pipeline.run([_conversation_with_questions()]), key=lambda r: r["qa_index"])
    assert all(p.endswith(JSON_PREFIX) for p in llm.prompts)  # every answer prompt is primed
    assert [r["prediction"] for r in records] == ["7 May 2023", "a sunrise by the"]
    assert [r["answer_parsed"] for r in records] == [True, False]
    assert [r["answer_read"] for r in records] == ["own_object", "fallback"]
    assert records[0]["reply"].startswith("```json") and records[0]["f1"] == 1.0
    summary = build_summary(records=records, state=RunState(), method_name="full_context", model_name="m",
                            protocol=protocol, categories=CATS, seed=0, data_info={}, llm_usage={}, config={})
    assert summary["answer_format"] == {"format": "json", "n": 2, "unparsed": 1,
                                        "read": {"primed": 0, "own_object": 1, "fallback": 1}}
    assert summary["protocol_settings"]["answer_format"] == "json"
    assert unparsed_count([{"f1": 1.0}]) is None  # text-format records carry no such field
    # records written before "answer_read" existed are counted by answer_parsed
    assert unparsed_count([{"answer_parsed": True}, {"answer_parsed": False}])["read"] == {
        "primed": 1, "own_object": 0, "fallback": 1}
