"""Batches of one `generate` call: rows sharing a long prefix stay together, so a call that
merges several conversations prefills each conversation's shared prefix once."""
import pytest

from scgmem.llm import LLM
from scgmem.llm.local.batch_plan import PrefillCounter, groups_apart, plan_batches, prefix_groups
from scgmem.llm.local.prefix_cache import common_prefix_length

TEMPLATE = [1, 2, 3]


def test_rows_group_by_what_they_share_beyond_the_call_prefix():
    a, b = [10] * 6, [20] * 6
    rows = {0: TEMPLATE + a + [7], 1: TEMPLATE + b + [7], 2: TEMPLATE + a + [8, 8], 3: TEMPLATE + b + [8, 8],
            4: TEMPLATE + [30]}
    order = [4, 0, 1, 2, 3]  # by length
    assert prefix_groups(rows, order, min_tokens=4) == [[4], [0, 2], [1, 3]]
    # Within one conversation the call prefix is its whole context: every row is alone.
    assert prefix_groups({0: rows[0], 2: rows[2]}, [0, 2], min_tokens=4) == [[0], [2]]
    # What every row shares does not group them: the groups are as without the template.
    assert prefix_groups({i: r[3:] for i, r in rows.items()}, order, min_tokens=4) == [[4], [0, 2], [1, 3]]
    assert prefix_groups(rows, [3], min_tokens=4) == [[3]]
    groups = prefix_groups(rows, order, min_tokens=4)
    assert groups_apart(groups, rows, order, 4, kept=[]) == [False, True, True]
    assert groups_apart([[4], [0], [1]], rows, [4, 0, 1], 4, kept=[TEMPLATE + [30] * 5]) == [False, False, False]
    assert groups_apart([[4], [0], [1]], rows, [4, 0, 1], 4, kept=[TEMPLATE + [10] * 5]) == [False, True, False]


def test_batches_keep_groups_apart_and_pack_lone_rows():
    est = {i: 10 for i in range(8)}
    # Lone rows pack as before; a group of two never shares a batch with another group.
    assert plan_batches([[0], [1], [2, 3], [4], [5]], est, batch_size=4, max_batch_tokens=1000) == [
        [0, 1], [2, 3], [4, 5]]
    # One group, or only lone rows: plain length-sorted batches.
    assert plan_batches([[0, 1, 2, 3, 4]], est, batch_size=2, max_batch_tokens=1000) == [[0, 1], [2, 3], [4]]
    assert plan_batches([[0], [1], [2]], est, batch_size=2, max_batch_tokens=1000) == [[0, 1], [2]]
    # A lone row whose prefix the cache keeps stays apart too.
    assert plan_batches([[0], [1], [2], [3]], est, batch_size=4, max_batch_tokens=1000,
                        apart=[False, True, False, False]) == [[0], [1], [2, 3]]
    # The token cap counts rows x the longest row of the batch.
    assert plan_batches([[0, 1, 2]], {0: 10, 1: 10, 2: 30}, batch_size=8, max_batch_tokens=60) == [[0, 1], [2]]



def test_count_prefill_measures_the_grouping_without_a_model():
    """The bench's measure: words as tokens, two conversations' questions in one call prefill
    each transcript once, as in two calls; plain length-sorted batches prefill it per row."""
    vocab: dict[str, int] = {}
    def encode(text):
        return [vocab.setdefault(w, len(vocab)) for w in text.split()]

    def questions(conv, n):
        return [f"sys {' '.join(['rule'] * 70)} context {conv} {' '.join([conv] * 300)} q {'w ' * k}" for k in range(n)]
    a, b = questions("a", 6), questions("b", 6)
    merged = [p for pair in zip(a, b) for p in pair]

    def count_prefill(calls, group_prefixes=True, **limits):
        counter = PrefillCounter(group_prefixes=group_prefixes, **limits)
        for prompts, max_new_tokens, num_beams in calls:
            counter.add(prompts, [encode(p) for p in prompts], max_new_tokens, num_beams)
        return counter.report()

    limits = dict(batch_size=4, max_batch_tokens=10**6, min_tokens=64)
    apart = count_prefill([(a, 8, 1), (b, 8, 1)], **limits)
    together = count_prefill([(merged, 8, 1)], **limits)
    plain = count_prefill([(merged, 8, 1)], group_prefixes=False, **limits)
    assert together == apart
    assert plain["prompt_tokens"] == together["prompt_tokens"]
    # Grouped: each transcript once per conversation; plain: once per row, past the shared rules.
    assert together["prefilled_tokens"] < 2 * 400
    assert plain["prefilled_tokens"] > 12 * 300
    # Beam search never uses the cache.
    assert count_prefill([(a, 8, 2)], **limits)["prefilled_tokens"] == sum(len(p.split()) for p in a)


A_TEXT = ("Caroline went to the LGBTQ support group on 7 May 2023 and felt inspired. "
          "Melanie painted a sunrise by the lake; she loves hiking, camping and pottery. ") * 3
# The same sentences in another order: as long as A's transcript, so sorting by length alone
# would interleave the two conversations' questions.
B_TEXT = ("Melanie painted a sunrise by the lake; she loves hiking, camping and pottery. "
          "Caroline went to the LGBTQ support group on 7 May 2023 and felt inspired. ") * 3
QUESTIONS = ["What did Caroline research?", "When did Melanie run a charity race?", "kids, beach, art class?"]


def prompts(llm, transcript):
    return [llm.render(f"Context: {transcript}\nQuestion: {q}") for q in QUESTIONS]


def prefilled(llm, call):
    """Prompt tokens whose states were computed (not taken from the prefix cache) by `call()`."""
    before = llm.usage.snapshot().get("other", {})
    out = call()
    after = llm.usage.snapshot()["other"]
    return out, (after["prompt_tokens"] - before.get("prompt_tokens", 0)) - (
        after["cached_prompt_tokens"] - before.get("cached_prompt_tokens", 0))


@pytest.fixture(scope="module")
def cached_llm(tiny_model_dir):
    return LLM(name="tiny", path=str(tiny_model_dir), context_window=512, batch_size=4,
               prefix_cache_min_tokens=8, memo_entries=0)


def test_merged_call_prefills_each_transcript_once(cached_llm, tiny_model_dir):
    llm = cached_llm
    a, b = prompts(llm, A_TEXT), prompts(llm, B_TEXT)
    assert sorted(a + b, key=len) != sorted(a, key=len) + sorted(b, key=len)  # lengths interleave
    llm.prefix_cache.clear()
    (alone_a, n_a) = prefilled(llm, lambda: llm.generate(a, max_new_tokens=6))
    (alone_b, n_b) = prefilled(llm, lambda: llm.generate(b, max_new_tokens=6))
    llm.prefix_cache.clear()
    merged_prompts = [p for pair in zip(a, b) for p in pair]  # A1 B1 A2 B2 A3 B3
    merged, n_merged = prefilled(llm, lambda: llm.generate(merged_prompts, max_new_tokens=6))
    # Each transcript is prefilled once, exactly as in the two separate calls ...
    assert n_merged == n_a + n_b
    total = sum(len(llm.encode(p)) for p in merged_prompts)
    assert n_merged < total / 2
    # ... and every row gets what it got alone, in the order asked.
    separate = [g for pair in zip(alone_a, alone_b) for g in pair]
    assert [g[0].token_ids for g in merged] == [g[0].token_ids for g in separate]
    assert [g[0].logprob for g in merged] == pytest.approx([g[0].logprob for g in separate], abs=1e-4)
    # And what a model without the prefix cache generates.
    plain = LLM(name="tiny", path=str(tiny_model_dir), context_window=512, batch_size=4, prefix_cache=False,
                memo_entries=0)
    assert [g[0].token_ids for g in plain.generate(merged_prompts, max_new_tokens=6)] == [
        g[0].token_ids for g in merged]


def test_next_merged_call_finds_every_conversation_prefix(cached_llm):
    """Five conversations in one call: the cache makes room for all their prefixes (it starts
    with 4 entries). The next call holds one question per conversation, as when answers are
    split by temperature: each stays apart with its kept transcript, and only the question is new."""
    llm = cached_llm
    texts = [f"Session {k}. {A_TEXT}" for k in range(5)]
    llm.prefix_cache = type(llm.prefix_cache)(llm.model, min_tokens=8, max_tokens=16384)
    first = [p for t in texts for p in prompts(llm, t)[:2]]
    llm.generate(first, max_new_tokens=2)
    later = [prompts(llm, t)[2] for t in texts]
    _, n = prefilled(llm, lambda: llm.generate(later, max_new_tokens=2))
    known = [llm.encode(p) for p in first]
    new_tokens = sum(len(llm.encode(p)) - common_prefix_length(llm.encode(p), known[2 * k])
                     for k, p in enumerate(later))
    assert len(llm.encode(A_TEXT)) > 40
    assert n <= new_tokens + len(texts) * 4  # a few tokens of the question may be prefilled with it
    # Mixed in one batch, each row would have prefilled its transcript again.
    assert n < sum(len(llm.encode(p)) for p in later) / 3
