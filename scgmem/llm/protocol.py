"""What the memory methods may ask of a language model: `LanguageModel`.

The methods (SCG-Mem's core and the baselines) see a model through this interface only:
text in and out, token ids, and the few facts about the vocabulary that constrained
decoding needs. `scgmem.llm.LLM` (a real causal LM) and `scgmem.llm.doubles.fake.ScriptedLLM`
(a scripted stand-in for tests) both implement it; neither has to inherit from it.

Example::

    def first_key_token(llm: LanguageModel, text: str) -> int:
        return llm.encode(" " + text)[0]

    isinstance(llm, LanguageModel)  # checks that every member is there, not their types

The rules every backend shares live here too, once: what a `generate` call may ask
(`check_generate_args`), and what a method needs of its model (`Needs`) with the one question the
core and the harness ask about it (`unmet`, the backend's own answer when it has one) and the one
readiness step the harness runs before the first conversation (`make_ready`: a served backend
reaches its servers there, never while it is built).
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


@dataclass(frozen=True)
class Needs:
    """What a memory method asks of its model beyond free text.

    Attributes:
        constraints: token-level constrained decoding (the schema trie) with the raw log-probs of
            what it generates: SCG-Mem's key lists and its recall beam search.
        by: who needs it, as refusals name it (e.g. "method=scgmem").
    """

    constraints: bool = False
    by: str = "this method"


class NotReady(ValueError):
    """A model that cannot serve a method's `Needs`, or whose servers refused the readiness step: its
    message is the one line the user sees (the harness exits 2 with it)."""


def unmet(llm, needs: Needs) -> str | None:
    """Why `llm` cannot serve `needs`, in one line, or None. Asks the backend's own
    `unmet_needs(needs)` where it has one (a server knows which setting is missing); otherwise reads
    the protocol's `applies_constraints`. Never reaches a server."""
    own = getattr(llm, "unmet_needs", None)
    if own is not None:
        return own(needs)
    if needs.constraints and not llm.applies_constraints:
        return (f"{type(llm).__name__} does not apply constraints, and SCG-Mem's schema-constrained decoding "
                "needs a model that does (the local backend, or a server with model.engine)")
    return None


def make_ready(llm, needs: Needs) -> None:
    """The one readiness step before the first conversation: refuse what `llm` cannot serve, then let
    the backend reach whatever it needs (`ready(needs)`: a server's model list, its tokenizer
    endpoint, its engine probe). Every refusal is a `NotReady` with one line."""
    problem = unmet(llm, needs)
    if problem:
        raise NotReady(problem)
    ready = getattr(llm, "ready", None)
    if ready is not None:
        ready(needs)


def check_generate_args(n_prompts: int, *, temperature: float, seeds: Sequence[int] | None, num_beams: int = 1,
                        num_return_sequences: int = 1) -> None:
    """The decoding settings a `generate` call may combine, on every backend alike: sampling draws from
    one seed per prompt (so a prediction does not depend on its batch), and beam search is greedy."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if num_return_sequences > max(1, num_beams):
        raise ValueError(f"num_return_sequences={num_return_sequences} > num_beams={num_beams}")
    if temperature > 0 and num_beams > 1:
        raise ValueError("sampling with beam search is not supported: use temperature=0")
    if temperature > 0 and (seeds is None or len(seeds) != n_prompts):
        raise ValueError("sampling needs one seed per prompt (seeds=...)")


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
