"""What the memory methods may ask of a language model: `LanguageModel`.

The methods (SCG-Mem's core and the baselines) see a model through this interface only:
text in and out, token ids, and the few facts about the vocabulary that constrained
decoding needs. `scgmem.llm.LLM` (a real causal LM) and `scgmem.llm.doubles.fake.ScriptedLLM`
(a scripted stand-in for tests) both implement it; neither has to inherit from it.

Example::

    def first_key_token(llm: LanguageModel, text: str) -> int:
        return llm.encode(" " + text)[0]

    isinstance(llm, LanguageModel)  # checks that every member is there, not their types
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from scgmem.llm.constraint_spec import KeyConstraint

# A callable that builds the extra logits processors for one batch. It gets the batch's
# prompt length (in tokens, after left padding) and the number of rows
# (batch * num_beams). Processors that track per-row state need a fresh copy per batch.
ProcessorFactory = Callable[[int, int], Sequence]


@dataclass
class Generation:
    """One generated continuation.

    Attributes:
        text: decoded continuation, special tokens removed, cut at the first stop string.
        token_ids: generated token ids (without padding and without the final EOS).
        logprob: sum of log-probabilities of `token_ids` under the *processed* distribution
            (after constraints, before temperature/sampling noise); for beam search the
            beam's cumulative score.
        n_prompt_tokens: tokens of the prompt.
        cut: True when generation stopped at `max_new_tokens`, before EOS or a stop string.
        token_logprobs: constrained calls only: the *raw* log-prob of each of `token_ids` under
            the model's own distribution (before the constraint's mask); None when unknown.
        end_logprob: constrained calls only: the raw log-prob of the constraint's end id right
            after `token_ids` (whether or not it was generated); None when unknown.
    """

    text: str
    token_ids: list[int] = field(default_factory=list)
    logprob: float = 0.0
    n_prompt_tokens: int = 0
    cut: bool = False
    token_logprobs: list[float] | None = None
    end_logprob: float | None = None

    @property
    def mean_logprob(self) -> float:
        """Length-normalised log-probability (0.0 for an empty continuation)."""
        return self.logprob / max(1, len(self.token_ids))


@runtime_checkable
class LanguageModel(Protocol):
    """A tokenizer and a generator behind one object.

    Attributes:
        name: short name used in outputs (e.g. "smollm2-135m").
        context_window: usable window in tokens (prompt + generation).
        vocab_size: width of the model's scores (the columns a logits processor sees).
        pad_id: the padding token.
        eos_ids: every id that ends a generation, sorted.
        eos_id: the tokenizer's own end-of-sequence token (for chat models, the end of a turn).
        dtype: the weights' dtype as torch names it (e.g. "torch.float32"); part of the key of
            a cached memory.
        applies_constraints: whether `generate` honours a `constraint` (a scripted stand-in
            does not, so SCG-Mem cannot run on it).
    """

    name: str
    context_window: int

    @property
    def vocab_size(self) -> int: ...

    @property
    def pad_id(self) -> int: ...

    @property
    def eos_ids(self) -> list[int]: ...

    @property
    def eos_id(self) -> int: ...

    @property
    def dtype(self) -> str: ...

    @property
    def applies_constraints(self) -> bool: ...

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without special tokens."""

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids, special tokens kept."""

    def count_tokens(self, text: str) -> int: ...

    def render(self, messages: str | list[dict], *, add_generation_prompt: bool = True,
               assistant_prefix: str = "") -> str:
        """Chat messages (or one user string) as the model's prompt text."""

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64, temperature: float = 0.0,
                 seeds: Sequence[int] | None = None, constraint: KeyConstraint | None = None,
                 num_beams: int = 1, num_return_sequences: int = 1, length_penalty: float = 0.0,
                 stop: Sequence[str] = ()) -> list[list[Generation]]:
        """`num_return_sequences` generations per prompt (see `scgmem.llm.LLM.generate`).

        `constraint` (data, `scgmem.llm.constraint_spec`): generate only lists of keys of its
        trie, and fill each Generation's raw `token_logprobs` / `end_logprob`. With
        `num_beams=b` it is the constrained beam search over those lists (b sequences per
        prompt, ranked by cumulative raw log-prob, transformers' beam search semantics)."""


class TokenizerFacts:
    """The `LanguageModel` members a transformers-backed model reads off its `tokenizer` and
    `model` (`scgmem.llm.LLM` inherits them), so that callers never reach into either."""

    tokenizer: PreTrainedTokenizerBase
    model: PreTrainedModel
    eos_token_ids: list[int]

    @property
    def vocab_size(self) -> int:
        """Width of the model's scores: the config's vocab_size (a multimodal config keeps it
        in its text config), else the tokenizer's size."""
        config = self.model.config
        size = getattr(config, "vocab_size", None)
        if size is None and hasattr(config, "get_text_config"):
            size = getattr(config.get_text_config(), "vocab_size", None)
        return int(size) if size else len(self.tokenizer)

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id

    @property
    def eos_ids(self) -> list[int]:
        return list(self.eos_token_ids)

    @property
    def eos_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def dtype(self) -> str:
        return str(self.model.dtype)

    applies_constraints = True

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids)
