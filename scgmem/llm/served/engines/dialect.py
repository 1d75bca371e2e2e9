"""What the client asks of a serving engine, in engine-neutral terms, and how each engine is told.

Every request is made of token ids (never text), so the server sees exactly the prompt and the
continuation the local backend would feed, whatever its tokenizer would do with the text.
An `EngineDialect` turns three questions into that engine's request body and reads its reply:

* `continue_body` / `read_continue`: continue `prompt_ids` under an llguidance grammar (Lark
  with token-id terminals, `lark_trie`), greedy or seeded; the reply gives the generated ids and,
  where the engine returns them *raw* (before the grammar mask), their log-probs.
* `next_body` / `read_next`: the raw log-probs, at the position after `prompt_ids`, of the
  tokens `allowed` (a beam expansion). An engine may return only its top-n list: the caller
  decides whether what came back is enough to rank exactly, and refuses otherwise.
* `score_body` / `read_score`: the raw log-probs of a given continuation (teacher forcing),
  for engines whose generation log-probs are renormalised over the grammar's tokens.

An engine that cannot do one of these raises `Unsupported` with a one-line reason naming the
missing feature; nothing is approximated silently. `route` names, per engine, where raw
log-probs come from; it goes into summary.json.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral
from typing import Sequence


class Unsupported(ValueError):
    """The engine lacks a feature the request needs; str(e) is one line naming it."""


class BadReply(ValueError):
    """A reply that does not have the shape the dialect documents; str(e) names the field."""


@dataclass
class Continuation:
    """What a constrained continuation returned.

    Attributes:
        token_ids: the generated ids, in order (an end-of-sequence id included when generated).
        raw_logprobs: the raw log-prob of each generated id (None when the engine's are not raw).
        finish: "stop" (grammar or EOS ended it) or "length" (max tokens reached).
    """

    token_ids: list[int]
    raw_logprobs: list[float] | None = None
    finish: str = "stop"


@dataclass
class NextTokens:
    """Raw log-probs at one position: `logprobs` maps token id -> raw log-prob for the allowed
    tokens the engine returned. `complete` is True when every allowed token is in it;
    otherwise `floor` is the lowest log-prob the engine listed, so that any allowed token it
    left out scores at most `floor` (a top-n list ranks the rest exactly above it)."""

    logprobs: dict[int, float] = field(default_factory=dict)
    complete: bool = False
    floor: float = float("-inf")
    listed: tuple[int, ...] = ()  # every id the reply listed, allowed or not: the client checks them


class EngineDialect:
    """Base of the engine dialects (one file per engine, registered by name in `engines`).

    The public methods check the caller's arguments once, for every engine (a bad one is a
    `ValueError` naming it: the caller's error, not the server's), and that a reply is a JSON
    object; they then hand plain lists of ints to the `build_*` / `parse_*` hooks, which a subclass
    overrides for what its engine can do. A hook left alone raises `Unsupported`.

    Attributes:
        name: the engine's name (`model.engine`), which is its module's file name.
        route: where raw log-probs come from on this engine (recorded in summary.json).
        max_top_n: the largest top-n list the engine returns per position (None = no cap known).
        first_top_n: the list length a beam expansion asks for first (None = the client's default).
        ids_per_request: the most allowed ids one next-token request may name (None = no cap); the
            transport asks a wider trie node in chunks.
        fixes: what the user changes when the probe (`probe.py`) finds a feature missing, by check
            ("grammar", "ids", "top_n", "raw", "score"): one phrase each, naming the server flag.
    """

    name = "base"
    route = "none"
    max_top_n: int | None = None
    first_top_n: int | None = None
    ids_per_request: int | None = None
    fixes: dict[str, str] = {}

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id

    # -- the three questions: arguments checked here, bodies and replies in the hooks ---------------

    def continue_body(self, prompt_ids: Sequence[int], grammar: str, *, max_tokens: int, temperature: float,
                      seed: int) -> tuple[str, dict]:
        """(path, body) of a continuation of `prompt_ids` under the llguidance `grammar`."""
        if not isinstance(grammar, str) or not grammar:
            raise ValueError(f"grammar must be a non-empty string, got {grammar!r:.40}")
        return self.build_continue(caller_ids(prompt_ids, "prompt_ids"), grammar,
                                   max_tokens=positive(max_tokens, "max_tokens"),
                                   temperature=temperature, seed=seed)

    def read_continue(self, reply: dict) -> Continuation:
        return self.parse_continue(self.reply_object(reply))

    def next_body(self, prompt_ids: Sequence[int], allowed: Sequence[int], top_n: int) -> tuple[str, dict]:
        """(path, body) asking for the raw log-probs of `allowed` after `prompt_ids`; `top_n` (capped
        at `max_top_n`) is the list length for an engine that returns only its top list."""
        allowed = caller_ids(allowed, "allowed")
        if not allowed:
            raise ValueError("allowed must name at least one token id")
        top_n = positive(top_n, "top_n")
        return self.build_next(caller_ids(prompt_ids, "prompt_ids"), allowed,
                               top_n if self.max_top_n is None else min(top_n, self.max_top_n))

    def read_next(self, reply: dict, allowed: Sequence[int]) -> NextTokens:
        return self.parse_next(self.reply_object(reply), caller_ids(allowed, "allowed"))

    def score_body(self, prompt_ids: Sequence[int], continuation: Sequence[int]) -> tuple[str, dict]:
        """(path, body) asking for the raw log-probs of `continuation` after `prompt_ids`."""
        prompt_ids, continuation = caller_ids(prompt_ids, "prompt_ids"), caller_ids(continuation, "continuation")
        if not prompt_ids or not continuation:
            raise ValueError("scoring needs a non-empty prompt (position 0 has no log-prob) and continuation")
        return self.build_score(prompt_ids, continuation)

    def read_score(self, reply: dict, prompt_len: int, continuation: Sequence[int]) -> list[float]:
        return self.parse_score(self.reply_object(reply), prompt_len, caller_ids(continuation, "continuation"))

    # -- what a subclass writes --------------------------------------------------------------------

    def build_continue(self, prompt_ids: list[int], grammar: str, *, max_tokens: int, temperature: float,
                       seed: int) -> tuple[str, dict]:
        raise Unsupported(f"{self.name}: grammar-constrained continuation is not available")

    def parse_continue(self, reply: dict) -> Continuation:
        raise Unsupported(f"{self.name}: grammar-constrained continuation is not available")

    def build_next(self, prompt_ids: list[int], allowed: list[int], top_n: int) -> tuple[str, dict]:
        raise Unsupported(f"{self.name}: next-token log-probs are not available")

    def parse_next(self, reply: dict, allowed: list[int]) -> NextTokens:
        raise Unsupported(f"{self.name}: next-token log-probs are not available")

    def build_score(self, prompt_ids: list[int], continuation: list[int]) -> tuple[str, dict]:
        raise Unsupported(f"{self.name}: scoring a given continuation is not available")

    def parse_score(self, reply: dict, prompt_len: int, continuation: list[int]) -> list[float]:
        raise Unsupported(f"{self.name}: scoring a given continuation is not available")

    # -- reading replies: every BadReply names the engine and the field ----------------------------

    def reply_object(self, reply) -> dict:
        if not isinstance(reply, dict):
            raise BadReply(f"{self.name}: reply is {type(reply).__name__}, expected an object")
        return reply

    def agreed_ids(self, ids: list[int] | None, other: list[int] | None, ids_field: str, other_field: str) -> list[int]:
        """The generated ids of a reply that names them twice (an id list and the ids of its log-prob
        entries, each None where the reply leaves it out): they must agree, and one must be there."""
        if ids is not None and other is not None and ids != other:
            raise BadReply(f"{self.name}: {ids_field} {repr(ids)[:60]} disagree with {other_field} {repr(other)[:60]}")
        if ids is None and other is None:
            raise BadReply(f"{self.name}: the reply has neither {ids_field} nor {other_field}")
        return ids if ids is not None else other

    def required(self, obj, key: str, where: str):
        """`obj[key]` of a reply, or a BadReply naming the field."""
        if not isinstance(obj, dict) or key not in obj:
            raise BadReply(f"{self.name}: {where}.{key} is missing")
        return obj[key]

    def listed(self, value, where: str) -> list:
        """A reply's value that must be a list."""
        if not isinstance(value, list):
            raise BadReply(f"{self.name}: {where} is {type(value).__name__}, expected a list")
        return value


def number(value, where: str) -> float:
    """A finite-or--inf log-prob read from a reply (a log-prob is <= 0; NaN, +inf, > 1e-4 or a
    non-number is a bad reply)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadReply(f"{where}: expected a number, got {type(value).__name__}")
    value = float(value)
    if value != value or value > 1e-4:
        raise BadReply(f"{where}: {value!r} is not a log-probability")
    return value


def top_list(pairs, where: str, *, ranked: bool) -> dict[int, float]:
    """{id: log-prob} of a reply's listed (id, log-prob) pairs: each id once, and (`ranked`: a top-n
    list) in order of non-increasing log-prob, as every engine sorts its top list. A duplicate or an
    out-of-order entry is a bad reply: the floor below which unlisted tokens fall reads the order."""
    out: dict[int, float] = {}
    previous = float("inf")
    for i, (tok, lp) in enumerate(pairs):
        if tok in out:
            raise BadReply(f"{where}[{i}]: token id {tok} listed twice")
        if ranked and lp > previous:
            raise BadReply(f"{where}[{i}]: log-prob {lp!r} above the entry before it ({previous!r}): not a ranked list")
        out[tok], previous = lp, lp
    return out


def token_id(value, where: str, vocab_size: int | None = None) -> int:
    """A token id read from a reply: an int in [0, vocab_size)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (vocab_size and value >= vocab_size):
        raise BadReply(f"{where}: {value!r} is not a token id")
    return value


def caller_ids(values: Sequence[int], what: str) -> list[int]:
    """A caller's token ids as a plain list of ints (a bad one is the caller's error, not the server's)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{what}: expected a sequence of token ids, got {type(values).__name__}")
    out = list(values)
    for v in out:
        if isinstance(v, bool) or not isinstance(v, Integral) or v < 0:
            raise ValueError(f"{what}: {v!r} is not a token id")
    return [int(v) for v in out]


def positive(value, what: str) -> int:
    """A caller's count that must be a positive int."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(f"{what} must be a positive int, got {value!r}")
    return int(value)
