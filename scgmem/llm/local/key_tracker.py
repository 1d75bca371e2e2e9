"""Where each generated row of a local constrained call stands, per generated prefix (paper
Section 3.3, Eq. 4-5).

A row writes keys as " k1, k2, k3"; which token may come next and how a row's `RowState` moves
are the key-list rule (`scgmem.llm.key_rule`). `KeyTracker` is that rule plus what the local
logits processor needs across the steps of one call: the state of every (prompt, generated
prefix), the row that held it, and the raw log-probs read back after generation.

Beam search reorders rows between steps, so a row's state is a function of its *generated
prefix*, not of its row index: each step looks up the parent prefix's state and extends it by one
trie edge (no walk from the root, no re-tokenisation). The state also carries the *raw* log-prob
of the current and the completed keys (under the model's own distribution, before the mask, see
`schema_processor.RawLogprobs`): the length-normalised raw log-prob of an assimilated key is the
paper's "perplexity" signal (Section 3.4).

Example::

    tracker = KeyTracker(trie, terminator=sep, eos_ids=[eos], max_keys=3)
    state = tracker.step(RowState(TokenTrie.ROOT), token, logprob=-1.2, position=0)
"""
from __future__ import annotations

from typing import Sequence

from scgmem.llm.constraint_spec import TrieView
from scgmem.llm.key_rule import KeyRule, RowState

# What the tracker keeps per (prompt id, generated prefix): the state, the row that held the
# prefix at that step (its parent's row at the next step), and the raw log-prob of EOS next.
Entry = tuple[RowState, int, float]


def prompt_key(ids: Sequence[int], pad_id: int) -> tuple[int, ...]:
    """A prompt's identity in the tracker: its ids without pad tokens. The backend pads on the
    left, or between a cached shared prefix and the row's suffix (`scgmem.llm.local.prefix_cache`),
    so pads are dropped wherever they are; both sides of the lookup drop them alike."""
    return tuple(t for t in ids if t != pad_id)


class KeyTracker(KeyRule):
    """The key-list rule of one constrained generate call, with the state of every (prompt,
    generated prefix) of that call.

    Shared by the processors built for each batch of that call, and read after generation
    by `token_logprobs`.

    Args:
        trie: the schema's token trie (keys end with `terminator`); fixed during the call.
        terminator / eos_ids / max_keys / distinct: the rule's (`KeyRule`).
    """

    def __init__(self, trie: TrieView, *, terminator: int, eos_ids: Sequence[int], max_keys: int | None = None,
                 distinct: bool = True) -> None:
        super().__init__(trie, terminator=terminator, eos_ids=eos_ids, max_keys=max_keys, distinct=distinct)
        if trie.num_children(trie.ROOT) == 0:
            raise ValueError("the schema is empty: constrained decoding has no key to generate")
        self.prompt_ids: dict[tuple[int, ...], int] = {}
        self.entries: dict[tuple[int, tuple[int, ...]], Entry] = {}
        # (prompt id, prefix) -> raw log-prob of the prefix's last token: what a sequence's
        # `Generation.token_logprobs` is read from after the call
        self.token_lp: dict[tuple[int, tuple[int, ...]], float] = {}

    def prompt_id(self, prompt: tuple[int, ...]) -> int:
        return self.prompt_ids.setdefault(prompt, len(self.prompt_ids))

    def lookup(self, prompt: tuple[int, ...], generated: Sequence[int]) -> Entry | None:
        """The entry of a generated sequence (None when it was not tracked)."""
        pid = self.prompt_ids.get(prompt)
        return None if pid is None else self.entries.get((pid, tuple(generated)))

    def parents(self, pids: Sequence[int], generated: list[list[int]]) -> list[Entry]:
        """Each row's parent entry: its prefix without the last token."""
        return [self.entries[(pid, tuple(row[:-1]))] for pid, row in zip(pids, generated)]

    def remember(self, pids: Sequence[int], generated: list[list[int]], states: list[RowState],
                 eos_logprobs: list[float], token_logprobs: Sequence[float] | None = None) -> None:
        # dict.update over zips: the per-row loop runs in C (a step's host time, issue 40 item 7)
        keys = [(pid, tuple(prefix)) for pid, prefix in zip(pids, generated)]  # tuple() of a tuple is itself
        self.entries.update(zip(keys, zip(states, range(len(keys)), eos_logprobs)))
        if token_logprobs is not None and keys and keys[0][1]:  # the rows' prefixes have one length
            self.token_lp.update(zip(keys, token_logprobs))

    def token_logprobs(self, prompt: tuple[int, ...], generated: Sequence[int]) -> tuple[list[float] | None, float | None]:
        """(raw log-prob of each generated token, raw log-prob of EOS after them) of a tracked
        sequence; (None, None) when it was not tracked to its end (a sequence cut at
        `max_new_tokens` has no step after its last token)."""
        pid = self.prompt_ids.get(prompt)
        entry = None if pid is None else self.entries.get((pid, tuple(generated)))
        if entry is None:
            return None, None
        lps = [self.token_lp.get((pid, tuple(generated[:i + 1]))) for i in range(len(generated))]
        return (None, None) if None in lps else (lps, entry[2])
