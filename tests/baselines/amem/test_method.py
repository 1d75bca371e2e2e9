"""A-MEM: parsers, fallbacks, evolution, link expansion, budget and caching (scripted LLM, fake embedder)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from scgmem.baselines.amem import prompts as P
from scgmem.baselines.amem.method import AMem, note_content
from scgmem.api import Conversation, Turn
from scgmem.llm.doubles.fake import ScriptedLLM
from tests.baselines import CONV, BagEmbedder, conversation, measured_ingest

RNG = np.random.default_rng(0)


def router(analyze="KEYWORDS: support, group, painting\nCONTEXT: A chat about hobbies.\nTAGS: life, art, community",
           retry="", decision="DECISION: NO_EVOLUTION\nREASON: none", strengthen="", update="", query="support group"):
    """A scripted LLM that answers by prompt kind."""
    def reply(prompt: str) -> str:
        if "Analyze the following content" in prompt:
            return analyze
        if "List exactly 5 keywords" in prompt:
            return retry
        if "decide if evolution is needed" in prompt:
            return decision
        if "provide updated connections and tags" in prompt:
            return strengthen
        if "update each neighbor's context and tags" in prompt:
            return update
        if "generate several keywords" in prompt:
            return query
        raise AssertionError(f"unexpected prompt: {prompt[:200]}")
    return reply


# ----------------------------------------------------------------------------- analyze
def test_note_content_keeps_the_original_format():
    turn = Turn("D1:5", "Caroline", "So inspiring!", 1, "d", caption="a photo of a dog")
    assert note_content(turn) == "Speaker Carolinesays : [Image: a photo of a dog] So inspiring!"


def test_empty_analysis_retries_then_uses_heuristics_and_counts():
    llm = ScriptedLLM(router(analyze="", retry=""))
    amem = AMem(llm, BagEmbedder())
    [result] = amem.analyze(["Speaker Carolinesays : I went to the LGBTQ support group."])
    assert result["keywords"] == P.heuristic_keywords("Speaker Carolinesays : I went to the LGBTQ support group.")
    assert result["context"] == "Speaker Carolinesays : I went to the LGBTQ support group."
    assert result["tags"] == result["keywords"][:3]
    assert amem.counters["analyze_none"] == 1 and amem.counters["analyze_retries"] == 1
    assert amem.deviations == {"analyze_heuristic_keywords": 1, "analyze_heuristic_context": 1,
                               "analyze_heuristic_tags": 1}


def test_retry_fills_keywords_without_a_deviation():
    llm = ScriptedLLM(router(analyze="CONTEXT: A support group.\nTAGS: community", retry="support, group, pride"))
    amem = AMem(llm, BagEmbedder())
    [result] = amem.analyze(["x"])
    assert result == {"keywords": ["support", "group", "pride"], "context": "A support group.", "tags": ["community"]}
    assert amem.counters["analyze_retries"] == 1 and not amem.deviations


def test_analysis_of_a_session_is_one_generate_call():
    llm = ScriptedLLM(router())
    calls = []
    original = llm.generate
    llm.generate = lambda prompts, **kw: calls.append(len(prompts)) or original(prompts, **kw)
    amem = AMem(llm, BagEmbedder())
    amem.ingest(CONV, RNG)
    # per session: one batched analyze call (2 prompts), then one decision call per note that has
    # neighbours (the very first note has none)
    assert calls == [2, 1, 2, 1, 1]
    assert [n["dia_id"] for n in amem.notes] == ["D1:1", "D1:2", "D2:1", "D2:2"]
    assert amem.notes[0]["timestamp"] == "1:56 pm on 1 May, 2023"
    assert amem.documents[0].startswith("content:Speaker Carolinesays : I went to a LGBTQ")
    assert " keywords: support, group, painting tags: life, art, community" in amem.documents[0]


# ----------------------------------------------------------------------------- evolution
def test_strengthen_links_are_bounds_checked_and_tags_replaced():
    llm = ScriptedLLM(router(decision="DECISION: STRENGTHEN", strengthen="CONNECTIONS: 0, 9, -1\nTAGS: pride, art"))
    amem = AMem(llm, BagEmbedder())
    amem.ingest(conversation([[("Caroline", "support group"), ("Melanie", "support group again")]]), RNG)
    assert amem.notes[1]["links"] == [0]
    assert amem.notes[1]["tags"] == ["pride", "art"]
    assert amem.counters["links_out_of_range"] == 2
    assert amem.evo_cnt == 1 and amem.counters["decision_section"] == 1


def test_update_neighbour_overwrites_in_order_without_reembedding():
    update = "NEIGHBOR 0:\nCONTEXT: updated zero\nTAGS: t0\nNEIGHBOR 1:\nCONTEXT: updated one\nTAGS: t1"
    llm = ScriptedLLM(router(decision="DECISION: UPDATE_NEIGHBOR", update=update))
    emb = BagEmbedder()
    amem = AMem(llm, emb, neighbours=2)
    amem.ingest(conversation([[("A", "lake painting"), ("B", "lake sunrise"), ("A", "lake painting sunrise")]]), RNG)
    # note 2's neighbours are notes 0 and 1 in cosine order; both were overwritten at note 2
    assert {amem.notes[0]["context"], amem.notes[1]["context"]} == {"updated zero", "updated one"}
    assert {amem.notes[0]["tags"][0], amem.notes[1]["tags"][0]} == {"t0", "t1"}
    # ... but their documents and embeddings are those of insert time
    assert "updated" not in " ".join(amem.documents) and "context:A chat about hobbies." in amem.documents[0]
    np.testing.assert_allclose(amem.matrix, emb.encode(amem.documents), atol=1e-6)


def test_unparsed_decision_means_no_evolution():
    llm = ScriptedLLM(router(decision="I like turtles"))
    amem = AMem(llm, BagEmbedder())
    amem.ingest(CONV, RNG)
    assert amem.evo_cnt == 0 and amem.counters["decision_unparsed"] == 3
    assert all(n["links"] == [] for n in amem.notes)


def test_consolidation_rebuilds_documents_every_threshold():
    llm = ScriptedLLM(router(decision="DECISION: STRENGTHEN", strengthen="CONNECTIONS: 0\nTAGS: x"))
    amem = AMem(llm, BagEmbedder(), evo_threshold=2)
    amem.ingest(CONV, RNG)  # notes 2..4 evolve -> one rebuild after the 2nd evolution
    assert amem.evo_cnt == 3 and amem.counters["consolidations"] == 1
    assert amem.documents[0] == AMem.rebuilt_document(amem.notes[0])
    assert amem.documents[3].startswith("content:")  # inserted after the rebuild
    assert amem.matrix.shape == (4, 64)


# ----------------------------------------------------------------------------- query
def test_query_keyword_fallback_is_counted():
    llm = ScriptedLLM(router(query=""))
    amem = AMem(llm, BagEmbedder(), k=1)
    amem.ingest(CONV, RNG)
    [r] = amem.recall_batch(["What did Melanie paint by the lake?"], budget_tokens=[500], rngs=[RNG])
    assert amem.deviations["query_keywords_fallback"] == 1
    assert r.dia_ids == ["D1:2"] and "painted a sunrise" in r.context


def test_link_expansion_repeats_notes_as_the_authors_by_default():
    amem = AMem(ScriptedLLM(router()), BagEmbedder(), k=2)
    amem.notes = [{"links": links} for links in ([2, 3, 4, 1], [0], [], [], [])]
    # find_related_memories_raw: every hit, then up to k+1 of its links, whether listed before or not
    assert amem.expand([0, 1]) == [0, 2, 3, 4, 1, 0]
    assert amem.expand([3, 0]) == [3, 0, 2, 3, 4]
    assert "link_expansion" not in amem.stats()["settings_deviations"]


def test_repeated_notes_are_rendered_again_but_their_ids_count_once():
    llm = ScriptedLLM(router(decision="DECISION: STRENGTHEN", strengthen="CONNECTIONS: 0\nTAGS: x",
                             query="support group painting"))
    amem = AMem(llm, BagEmbedder(), k=3)
    amem.ingest(CONV, RNG)  # every later note links to note 0
    [r] = amem.recall_batch(["q"], budget_tokens=[10_000], rngs=[RNG])
    assert r.context.count("Speaker Carolinesays : I went to a LGBTQ support group") == 3  # hit + 2 links
    assert len(r.dia_ids) == len(set(r.dia_ids)) == 3


def test_link_expansion_unique_lists_each_note_once():
    amem = AMem(ScriptedLLM(router()), BagEmbedder(), k=2, link_expansion="unique")
    amem.notes = [{"links": links} for links in ([2, 3, 4, 1], [0], [], [], [])]
    assert "link_expansion" in amem.stats()["settings_deviations"]
    # hit 0 brings at most k+1 = 3 links (2, 3, 4); hit 1 is new, its link 0 is already chosen
    assert amem.expand([0, 1]) == [0, 2, 3, 4, 1]
    # links already chosen still use up the k+1 looked at (as in find_related_memories_raw)
    assert amem.expand([3, 0]) == [3, 0, 2, 4]


def test_recall_renders_hits_then_links_within_budget():
    llm = ScriptedLLM(router(decision="DECISION: STRENGTHEN", strengthen="CONNECTIONS: 0\nTAGS: x",
                             query="adoption agencies"))
    amem = AMem(llm, BagEmbedder(), k=1)
    amem.ingest(CONV, RNG)
    [r] = amem.recall_batch(["Which agencies?"], budget_tokens=[10_000], rngs=[RNG])
    assert r.dia_ids == ["D2:1", "D1:1"]  # the hit, then its link
    assert r.context.startswith("talk start time:1:56 pm on 2 May, 2023memory content: Speaker Carolinesays : I am")
    assert "memory keywords: ['support', 'group', 'painting']memory tags: " in r.context
    one = llm.count_tokens(AMem.render_note(amem.notes[3]))
    [small] = amem.recall_batch(["Which agencies?"], budget_tokens=[one + 2], rngs=[RNG])
    assert small.dia_ids == ["D2:1"] and llm.count_tokens(small.context) <= one + 2
    [tiny] = amem.recall_batch(["Which agencies?"], budget_tokens=[5], rngs=[RNG])
    assert llm.count_tokens(tiny.context) <= 5 and tiny.dia_ids == ["D2:1"]


def test_state_dict_round_trip_is_json_and_recalls_the_same():
    llm = ScriptedLLM(router(decision="DECISION: STRENGTHEN", strengthen="CONNECTIONS: 0\nTAGS: x"))
    amem = AMem(llm, BagEmbedder())
    amem.ingest(CONV, RNG)
    state = json.loads(json.dumps(amem.state_dict()))
    other = AMem(llm, BagEmbedder())
    other.load_state_dict(state)
    a = amem.recall("camping?", budget_tokens=400, rng=RNG)
    b = other.recall("camping?", budget_tokens=400, rng=RNG)
    assert (a.context, a.dia_ids) == (b.context, b.dia_ids)
    assert other.stats()["evolutions"] == amem.evo_cnt == 3 and other.stats()["deviations"] == amem.stats()["deviations"]


class SpyLLM(ScriptedLLM):
    """Records the decoding settings of every generate call."""

    def __init__(self, script):
        super().__init__(script)
        self.settings = []

    def generate(self, prompts, **kw):
        self.settings.append((kw.get("temperature"), kw.get("seeds")))
        return super().generate(prompts, **kw)


def test_greedy_by_default_and_the_deviations_are_listed():
    llm = SpyLLM(router())
    amem = AMem(llm, BagEmbedder())
    amem.ingest(CONV, RNG)
    amem.recall_batch(["q"], budget_tokens=[500], rngs=[RNG])
    assert {t for t, _ in llm.settings} == {0.0} and all(seeds is None for _, seeds in llm.settings)
    deviations = amem.stats()["settings_deviations"]
    assert deviations["decoding"].startswith("greedy") and "max_tokens=1000" in deviations["generation_caps"]
    assert amem.memory_settings()["decoding"] == "greedy"


def test_authors_decoding_samples_at_0_7_with_seeds_from_the_run():
    def run(seed):
        llm = SpyLLM(router(analyze=""))  # empty analysis: the focused retry runs too
        amem = AMem(llm, BagEmbedder(), decoding="authors")
        amem.ingest(CONV, np.random.default_rng(seed))
        amem.recall_batch(["q1", "q2"], budget_tokens=[500, 500],
                          rngs=[np.random.default_rng(seed + 1), np.random.default_rng(seed + 2)])
        return amem, llm.settings

    amem, settings = run(0)
    temperatures = [t for t, _ in settings]
    assert set(temperatures) == {0.7, 0.3} and temperatures[1] == 0.3  # analysis, then the retry
    assert all(seeds is not None and len(set(seeds)) == len(seeds) for _, seeds in settings)
    assert run(0)[1] == settings and run(5)[1] != settings  # the run's seed decides the samples
    assert "decoding" not in amem.stats()["settings_deviations"]
    state = json.loads(json.dumps(amem.state_dict()))
    other = AMem(ScriptedLLM(router()), BagEmbedder(), decoding="authors")
    other.load_state_dict(state)
    assert other.seed_base == amem.seed_base != 0


def test_authors_decoding_on_the_real_backend_reproduces_per_seed(tiny_model_dir):
    from scgmem.llm import LLM

    llm = LLM(name="tiny", path=str(tiny_model_dir), context_window=2048, batch_size=4, memo_entries=0)
    caps = {f"{kind}_tokens": 8 for kind in ("analyze", "retry", "decision", "strengthen", "update", "query")}

    def run(seed):
        amem = AMem(llm, BagEmbedder(), decoding="authors", **caps)
        amem.ingest(CONV, np.random.default_rng(seed))
        [r] = amem.recall_batch(["q"], budget_tokens=[300], rngs=[np.random.default_rng(seed)])
        return [(n["keywords"], n["context"], n["tags"]) for n in amem.notes], r.context

    assert run(0) == run(0) and run(0) != run(1)


def test_memory_settings_and_arguments():
    amem = AMem(ScriptedLLM(router()), BagEmbedder(), k=20)
    settings = amem.memory_settings()
    assert settings["neighbours"] == 5 and settings["evo_threshold"] == 100 and "k" not in settings
    assert AMem(ScriptedLLM(router()), BagEmbedder(), k=50).memory_settings() == settings  # k is recall-only
    with pytest.raises(ValueError, match="method.k must be a positive int, got 0"):
        AMem(ScriptedLLM(router()), BagEmbedder(), k=0)
    with pytest.raises(ValueError, match="embedder"):
        AMem(ScriptedLLM(router()), None)
    for arg in ("link_expansion", "decoding"):
        with pytest.raises(ValueError, match=f"method.{arg}"):
            AMem(ScriptedLLM(router()), BagEmbedder(), **{arg: "sometimes"})


# ----------------------------------------------------------------------------- embedded model
@pytest.mark.slow
def test_embedded_model_end_to_end(smollm, minilm, locomo_path):
    from scgmem.data.locomo import load_locomo

    conv = next(c for c in load_locomo(locomo_path)[0] if c.sample_id == "conv-26")
    session = conv.sessions[0]
    small = Conversation(conv.sample_id, conv.speaker_a, conv.speaker_b, (session,), ())
    amem = AMem(smollm, minilm)
    ingest_s, calls = measured_ingest(amem, small, smollm, RNG)
    [r] = amem.recall_batch(["What did Caroline go to?"], budget_tokens=[600], rngs=[RNG])
    print(f"A-MEM on {len(session.turns)} turns: {ingest_s:.1f}s, {calls / len(session.turns):.2f} calls/turn; "
          f"stats {amem.stats()}")
    assert len(amem.notes) == len(session.turns)
    assert all(n["keywords"] and n["context"] and n["tags"] for n in amem.notes)
    assert r.dia_ids and set(r.dia_ids) <= {t.dia_id for t in session.turns}
    assert smollm.count_tokens(r.context) <= 600
    json.dumps(amem.state_dict())


# ----------------------------------------------------------------------------- resumable ingest
THREE_SESSIONS = conversation([
    [("Caroline", "I went to a LGBTQ support group yesterday."), ("Melanie", "I painted a sunrise by the lake.")],
    [("Caroline", "I am researching adoption agencies."), ("Melanie", "We went camping with the kids.")],
    [("Caroline", "My support group had a pride parade."), ("Melanie", "The kids loved the pottery class.")],
])


class Interrupt(Exception):
    pass


def evolving_llm(fail_on_session=None):
    """Router whose evolution prompts strengthen links, and which can fail inside one session."""
    reply = router(decision="DECISION: STRENGTHEN", strengthen="CONNECTIONS: 0\nTAGS: pride, art")

    def script(prompt):
        if fail_on_session is not None and f"{fail_on_session} May, 2023" in prompt:
            raise Interrupt(prompt[:80])
        return reply(prompt)
    return ScriptedLLM(script)


def test_pipeline_resumes_an_interrupted_ingest_from_its_last_session(tmp_path):
    from scgmem.harness.cache import MemoryCache
    from scgmem.harness.pipeline import Pipeline
    from scgmem.scoring.protocols import AmemProtocol

    def pipeline(llm, cache_dir, run_dir):
        return Pipeline(llm=llm, embedder=BagEmbedder(), protocol=AmemProtocol(),
                        method_factory=lambda _view: AMem(llm, BagEmbedder(), evo_threshold=2),
                        run_dir=run_dir, cache=MemoryCache(cache_dir), seed=0, progress=False)

    whole_llm = evolving_llm()
    whole_pipeline = pipeline(whole_llm, tmp_path / "c1", tmp_path / "r1")
    whole = whole_pipeline.build_memory(THREE_SESSIONS)

    broken = evolving_llm(fail_on_session=3)
    with pytest.raises(Interrupt):
        pipeline(broken, tmp_path / "c2", tmp_path / "r2").build_memory(THREE_SESSIONS)
    [partial] = (tmp_path / "c2").rglob("*.partial.json")
    saved = json.loads(partial.read_text())
    assert saved["session"] == 2 and len(saved["state"]["notes"]) == 4

    again = evolving_llm()
    resumed_pipeline = pipeline(again, tmp_path / "c2", tmp_path / "r2")
    resumed = resumed_pipeline.build_memory(THREE_SESSIONS)
    assert resumed.state_dict() == whole.state_dict()
    assert not any((tmp_path / "c2").rglob("*.partial.json"))  # the whole memory is cached instead
    # Only session 3 was asked about again, yet the run reports the whole ingest's cost.
    assert 0 < len(again.prompts) < len(whole_llm.prompts)
    assert not any("pottery" not in p and "pride parade" not in p and "Analyze" in p for p in again.prompts)
    assert resumed_pipeline.state.ingest_usage == whole_pipeline.state.ingest_usage
