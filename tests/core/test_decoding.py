"""Schema-constrained decoding (Section 3.3): every completed key is in the schema.

The property tests drive `SchemaConstraint` the way `generate` does - greedy, seeded
sampling and beam search (rows reordered between steps) - over random schemas and random
logits, in a loop cheap enough for 10^3 cases in the default suite (10^4 in the slow one).
A second set runs the processor inside transformers' own `generate` on a tiny random
Llama (LlamaConfig, vocab 40), and the last ones go through `LLM.generate` and the
embedded model.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from scgmem.llm.local.schema_processor import SchemaConstraint
from scgmem.llm.local.key_tracker import KeyTracker
from scgmem.core.schema import TokenTrie
from tests.core.reference_trie import ReferenceTrie



def constraint(trie, prompt_length, *, terminator, eos_ids, pad_id, max_keys=None, distinct=True, **kwargs):
    """One batch's processor over its own tracker, as `LocalKeyConstraint` builds it."""
    tracker = KeyTracker(trie, terminator=terminator, eos_ids=eos_ids, max_keys=max_keys, distinct=distinct)
    return SchemaConstraint(tracker, prompt_length, pad_id=pad_id, **kwargs)


# A vocabulary of V ids: 0..V-4 key tokens, then the terminator, pad, EOS.


def special(vocab):
    return vocab - 3, vocab - 2, vocab - 1  # terminator, pad, eos


@st.composite
def schemas(draw, min_vocab=6, max_vocab=30):
    vocab = draw(st.integers(min_vocab, max_vocab))
    term, _, _ = special(vocab)
    bodies = draw(st.lists(st.lists(st.integers(0, term - 1), min_size=1, max_size=4), min_size=1, max_size=12))
    return vocab, [b + [term] for b in bodies]


def build(vocab, keys, dense_threshold=4):
    trie, ref = TokenTrie(vocab, dense_threshold=dense_threshold), ReferenceTrie()
    for k in keys:
        trie.insert(k)
        ref.insert(k)
    return trie, ref


def split_keys(gen, term, eos, pad):
    """(keys, ended_with_eos) of a generated sequence: bodies between terminators/EOS."""
    keys, cur = [], []
    for t in gen:
        if t == eos:
            if cur:
                keys.append(cur)
            return keys, True
        if t == term:
            keys.append(cur)
            cur = []
        else:
            cur.append(t)
    if cur:
        keys.append(cur)
    return keys, False


def simulate(vocab, trie, mode, seed, *, batch=2, num_beams=3, max_keys=None, max_steps=None, distinct=True):
    """Decode with random logits; returns the finished generated sequences (token lists)."""
    term, pad, eos = special(vocab)
    gen = torch.Generator().manual_seed(seed)
    prompt_len = 3
    beams = num_beams if mode == "beam" else 1
    prompts = torch.randint(0, term, (batch, prompt_len), generator=gen)
    input_ids = prompts.repeat_interleave(beams, dim=0)  # (batch*beams, prompt_len)
    rows = input_ids.shape[0]
    proc = constraint(trie, prompt_len, terminator=term, eos_ids=[eos], pad_id=pad, max_keys=max_keys,
                            distinct=distinct)
    max_steps = max_steps or (max_keys or 4) * trie.max_depth + 2
    beam_scores = torch.zeros(rows)
    if mode == "beam":
        beam_scores.view(batch, beams)[:, 1:] = -1e9  # as transformers: start from one beam per prompt
    finished: list[list[int]] = []
    for _ in range(max_steps):
        logits = torch.randn(rows, vocab, generator=gen) * 3
        if mode == "beam":
            scores = proc(input_ids, torch.log_softmax(logits, -1))
            assert torch.isfinite(scores).any(dim=1).all(), "a row with every token masked"
            total = (scores + beam_scores[:, None]).view(batch, beams * vocab)
            top, idx = total.topk(2 * beams, dim=1)
            new_ids, new_scores = [], []
            for b in range(batch):
                kept = 0
                for score, flat in zip(top[b].tolist(), idx[b].tolist()):
                    src, tok = b * beams + flat // vocab, flat % vocab
                    seq = input_ids[src].tolist() + [tok]
                    if tok == eos:
                        if math.isfinite(score):
                            finished.append(seq[prompt_len:])
                        continue
                    if kept < beams:
                        new_ids.append(seq)
                        new_scores.append(score)
                        kept += 1
            input_ids = torch.tensor(new_ids)
            beam_scores = torch.tensor(new_scores)
            if not torch.isfinite(beam_scores).any():
                return finished
            continue
        scores = proc(input_ids, logits)
        assert torch.isfinite(scores).any(dim=1).all(), "a row with every token masked"
        if mode == "sample":
            u = torch.rand(scores.shape, generator=gen).clamp_min(1e-20)
            scores = scores - torch.log(-torch.log(u))
        nxt = scores.argmax(dim=1)
        done = (input_ids[:, prompt_len:] == eos).any(dim=1)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        input_ids = torch.cat([input_ids, nxt[:, None]], dim=1)
        if (input_ids[:, prompt_len:] == eos).any(dim=1).all():
            break
    if mode != "beam":
        finished = [row[prompt_len:] for row in input_ids.tolist()]
    else:  # beams still running at the step limit count too (partial keys are then allowed)
        finished += [row[prompt_len:] for row, s in zip(input_ids.tolist(), beam_scores.tolist()) if math.isfinite(s)]
    return finished


def check(vocab, ref, sequences, max_keys, distinct, require_end):
    term, pad, eos = special(vocab)
    for seq in sequences:
        keys, ended = split_keys(seq, term, eos, pad)
        complete = keys if ended else keys[:-1] if seq and seq[-1] != term else keys
        for body in complete:
            assert body + [term] in ref, f"key {body} of {seq} is not in the schema"
        if ended or require_end:
            assert ended, f"{seq} did not end with EOS"
            assert keys, f"{seq} holds no key"
        if max_keys is not None:
            assert len(keys) <= max_keys, seq
        if distinct:
            assert len({tuple(k) for k in complete}) == len(complete), f"repeated key in {seq}"


def run_case(data, mode, seed, max_keys, distinct=True):
    vocab, keys = data
    trie, ref = build(vocab, keys)
    seqs = simulate(vocab, trie, mode, seed, max_keys=max_keys, distinct=distinct)
    # greedy/sampling always finish within max_keys * max_depth (+ slack); beams may be cut
    check(vocab, ref, seqs, max_keys, distinct, require_end=mode != "beam" and max_keys is not None)


MODES = st.sampled_from(["greedy", "sample", "beam"])
MAX_KEYS = st.sampled_from([1, 2, 3, None])


@settings(max_examples=1000, deadline=None)
@given(data=schemas(), mode=MODES, seed=st.integers(0, 2**31), max_keys=MAX_KEYS, distinct=st.booleans())
def test_every_completed_key_is_in_the_schema(data, mode, seed, max_keys, distinct):
    run_case(data, mode, seed, max_keys, distinct)


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None)
@given(data=schemas(max_vocab=50), mode=MODES, seed=st.integers(0, 2**31), max_keys=MAX_KEYS,
       distinct=st.booleans())
def test_every_completed_key_is_in_the_schema_1e4(data, mode, seed, max_keys, distinct):
    run_case(data, mode, seed, max_keys, distinct)


# ---------------------------------------------------------------------- hand-written masks


def five_token_trie():
    # ids: 0 "a", 1 "b", 2 ",", 3 pad, 4 eos; keys "a", "a b", "b"
    trie = TokenTrie(vocab_size=5)
    for k in ([0, 2], [0, 1, 2], [1, 2]):
        trie.insert(k)
    return trie


def allowed_after(trie, generated, max_keys=None, distinct=True):
    proc = constraint(trie, 1, terminator=2, eos_ids=[4], pad_id=3, max_keys=max_keys, distinct=distinct)
    ids = torch.tensor([[0]])
    out = proc(ids, torch.zeros(1, 5))
    for t in generated:
        ids = torch.cat([ids, torch.tensor([[t]])], dim=1)
        out = proc(ids, torch.zeros(1, 5))
    return torch.isfinite(out[0]).nonzero().flatten().tolist()


def test_hand_written_masks():
    trie = five_token_trie()
    assert allowed_after(trie, []) == [0, 1]  # a key must start; no EOS before the first key
    assert allowed_after(trie, [0]) == [1, 2, 4]  # "a" may continue, end with "," or with EOS
    assert allowed_after(trie, [0], max_keys=1) == [1, 4]  # last key: EOS, not the separator
    assert allowed_after(trie, [0, 2]) == [0, 1]  # "a" is spent but "a b" still starts with "a"
    assert allowed_after(trie, [0, 2, 0]) == [1]  # ...so after "a" only "b": no "," nor EOS ending "a" again
    assert allowed_after(trie, [0, 2, 0], distinct=False) == [1, 2, 4]
    assert allowed_after(trie, [0, 1]) == [2, 4]
    assert allowed_after(trie, [0, 2, 1, 2, 0]) == [1]  # "a" spent: "a" may only continue to "a b"
    assert allowed_after(trie, [0, 2, 1, 2, 0, 1, 2]) == [4]  # every key used: EOS only
    assert allowed_after(trie, [4]) == [3, 4]  # finished rows pad


def test_masking_keeps_the_allowed_scores_untouched():
    trie = five_token_trie()
    proc = constraint(trie, 1, terminator=2, eos_ids=[4], pad_id=3)
    scores = torch.tensor([[0.5, -1.0, 2.0, 3.0, 4.0]])
    out = proc(torch.tensor([[0]]), scores.clone())
    assert out[0, :2].tolist() == [0.5, -1.0] and torch.isinf(out[0, 2:]).all()


def test_empty_schema_and_bad_arguments_raise():
    with pytest.raises(ValueError, match="schema is empty"):
        constraint(TokenTrie(5), 1, terminator=2, eos_ids=[4], pad_id=3)
    with pytest.raises(ValueError, match="max_keys"):
        constraint(five_token_trie(), 1, terminator=2, eos_ids=[4], pad_id=3, max_keys=0)
    proc = constraint(five_token_trie(), 1, terminator=2, eos_ids=[4], pad_id=3)
    with pytest.raises(ValueError, match="vocab_size=5"):
        proc(torch.tensor([[0]]), torch.zeros(1, 7))


def test_a_key_without_terminator_is_an_error_not_a_row_of_minus_inf():
    trie = TokenTrie(vocab_size=5)
    trie.insert([0])  # no terminator: after "a" nothing may follow
    proc = constraint(trie, 1, terminator=2, eos_ids=[4], pad_id=3)
    proc(torch.tensor([[0]]), torch.zeros(1, 5))
    with pytest.raises(ValueError, match="allows no token"):
        proc(torch.tensor([[0, 0]]), torch.zeros(1, 5))


def test_raw_logprobs_are_recorded_per_key():
    trie = five_token_trie()
    proc = constraint(trie, 1, terminator=2, eos_ids=[4], pad_id=3)
    logits = torch.log(torch.tensor([[0.5, 0.1, 0.1, 0.1, 0.2]]))
    ids = torch.tensor([[1]])
    for t in [0, 2, 1]:  # "a , b" then EOS
        proc(ids, logits.clone())
        ids = torch.cat([ids, torch.tensor([[t]])], dim=1)
    proc(ids, logits.clone())
    state, _, eos_lp = proc.tracker.entries[(0, (0, 2, 1))]
    (s, e, lp), = state.keys
    assert (s, e) == (0, 2) and lp == pytest.approx(math.log(0.5) + math.log(0.1))
    assert state.key_logprob == pytest.approx(math.log(0.1)) and eos_lp == pytest.approx(math.log(0.2))


# ---------------------------------------------------------------------- inside transformers' generate


@pytest.fixture(scope="module")
def tiny_lm():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                         bos_token_id=0, eos_token_id=39, pad_token_id=38)
    return LlamaForCausalLM(config).eval()


@settings(max_examples=150, deadline=None)
@given(data=schemas(min_vocab=40, max_vocab=40), mode=MODES, seed=st.integers(0, 2**31), max_keys=MAX_KEYS)
def test_keys_in_schema_inside_transformers_generate(tiny_lm, data, mode, seed, max_keys):
    from transformers import LogitsProcessorList

    vocab, keys = data
    trie, ref = build(vocab, keys)
    term, pad, eos = special(vocab)
    torch.manual_seed(seed)
    prompt = torch.randint(0, term, (2, 4))
    proc = constraint(trie, 4, terminator=term, eos_ids=[eos], pad_id=pad, max_keys=max_keys)
    beams = 3 if mode == "beam" else 1
    max_new = (max_keys or 3) * trie.max_depth
    out = tiny_lm.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=max_new,
                           do_sample=mode == "sample", num_beams=beams, num_return_sequences=beams,
                           logits_processor=LogitsProcessorList([proc]), eos_token_id=eos, pad_token_id=pad,
                           top_k=None, top_p=None, temperature=1.0 if mode == "sample" else None,
                           output_scores=True, return_dict_in_generate=True)
    finite = [True] * out.sequences.shape[0]
    if mode == "beam":
        finite = [math.isfinite(s) for s in out.sequences_scores.tolist()]
    seqs = [row[4:] for row, ok in zip(out.sequences.tolist(), finite) if ok]
    check(vocab, ref, seqs, max_keys, True, require_end=max_keys is not None)


# ---------------------------------------------------------------------- through LLM.generate


def tiny_schema(llm, words=("hiking", "hiking trip", "lake", "camping", "pottery", "art class", "coffee shop")):
    from scgmem.core.schema import CognitiveSchema

    schema = CognitiveSchema(llm.encode, len(llm.tokenizer), forbidden_ids=llm.eos_token_ids)
    for w in words:
        schema.add(w)
    return schema


def test_generate_keys_through_the_backend(tiny_llm):
    from scgmem.core.decoding import generate_keys

    schema = tiny_schema(tiny_llm)
    prompts = [tiny_llm.render(f"Message: {t}", assistant_prefix="Keywords:") for t in ("a lake", "coffee", "art")]
    lists, decoding = generate_keys(tiny_llm, schema, prompts, max_keys=3)
    sampled, _ = generate_keys(tiny_llm, schema, prompts, max_keys=3, temperature=1.0, seeds=[1, 2, 3])
    for row in lists + sampled:
        (kl,) = row
        assert kl.tracked and kl.complete and 1 <= len(kl.keys) <= 3
        assert len({k.concept for k in kl.keys}) == len(kl.keys)  # distinct
        for key in kl.keys:
            assert key.concept in schema and key.text == key.concept  # decoded text is the concept
            assert math.isfinite(key.logprob) and key.logprob < 0 and key.n_tokens == len(key.token_ids) + 1


def test_beam_search_gives_distinct_keys_scored_by_their_logprob(tiny_llm):
    from scgmem.core.beam_search import constrained_beam_search

    schema = tiny_schema(tiny_llm)
    prompts = [tiny_llm.render(f"Question: {q}", assistant_prefix="Keyword:") for q in ("where?", "what art?")]
    beams, lists = constrained_beam_search(tiny_llm, schema, prompts, num_beams=4)
    for found, row in zip(beams, lists):
        assert len(found) == 4 and len({b.concept for b in found}) == 4
        assert all(b.concept in schema for b in found)
        assert [b.logprob for b in found] == sorted((b.logprob for b in found), reverse=True)
        for kl in row:
            if math.isfinite(kl.score) and kl.score > -1e8:  # the tracker's raw log-prob = the beam's score
                assert kl.keys[0].logprob == pytest.approx(kl.score, abs=1e-3)
    # more beams than keys: the fillers are dropped, what remains is the whole schema
    small = tiny_schema(tiny_llm, ("lake", "hiking"))
    (found,), _ = constrained_beam_search(tiny_llm, small, prompts[:1], num_beams=4)
    assert sorted(b.concept for b in found) == ["hiking", "lake"]
