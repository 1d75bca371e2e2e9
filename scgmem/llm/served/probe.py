"""What a server can do for SCG-Mem, learned before the first conversation (`probe_engine`).

A run whose server lacks a feature used to fail mid-run, after the embedder had loaded and the
first session's calls had gone out (vLLM's default `--max-logprobs 20`, a grammar backend that
reads our Lark as GBNF). The probe asks each server of the pool the three engine questions once,
on a two-token prompt, and checks the answers:

* grammar: a continuation under a two-token grammar returns exactly those tokens;
* next-token log-probs: the widest request a beam expansion makes (`ids_per_request` ids, or the
  dialect's top-n cap) is accepted and, for named ids, every one comes back;
* scores: a given continuation's raw log-prob is returned, and equals the next-token route's value
  for the same token (both are raw: before the grammar mask, temperature and penalties). An engine
  whose continuations carry their log-probs (llama.cpp) is not asked to score; the log-prob of the
  token its grammar forced must then equal the next-token value instead (a renormalised one is 0).

Every missing feature is named in one line with the server flag that fixes it (the dialect's
`fixes`); the caller raises it before any model loads.
"""
from __future__ import annotations

import math

from scgmem.llm.served.engines.dialect import EngineDialect, Unsupported
from scgmem.llm.served.http_client import ServerError
from scgmem.llm.served.transport import HttpTransport, ServerPool

RAW_TOLERANCE = 1e-3  # the two routes run different kernels (prefill vs decode): equal to float noise


class EngineProbeFailed(Unsupported):
    """The server cannot serve SCG-Mem's constrained calls; str(e) is one line naming the fixes. An
    `Unsupported`: `scgmem-run` shows it as one line and exits 2, as every engine refusal."""


def _first_line(e: Exception) -> str:
    """The error's first line; a server that cannot be reached is that, not a missing feature."""
    if isinstance(e, ServerError) and "unreachable" in str(e):
        raise e
    return str(e).splitlines()[0][:200] if str(e) else type(e).__name__


def probe_server(transport: HttpTransport, dialect: EngineDialect, *, vocab_size: int) -> list[str]:
    """The problems of one server (empty: it can serve SCG-Mem)."""
    fix = lambda check: dialect.fixes.get(check, "see docs/reproduce.md, section 9")  # noqa: E731
    a = min(1000, vocab_size - 2)
    b = a + 1
    problems, needs_score, replied_b = [], True, None
    try:
        cont = transport.continue_([a], f"%llguidance {{}}\nstart: <[{b}]> <[{a}]>\n", max_tokens=3,
                                   temperature=0.0, seed=0)
        got, needs_score = cont.token_ids, cont.raw_logprobs is None  # raw in the reply: no scoring route
        if not needs_score and got[:1] == [b] and cont.raw_logprobs:
            replied_b = cont.raw_logprobs[0]  # the grammar forced b: a renormalised value would be 0
        if got[:2] != [b, a]:
            problems.append(f"a grammar-constrained continuation returned ids {got[:4]}, not the grammar's "
                            f"[{b}, {a}]: {fix('grammar')}")
    except (ServerError, Unsupported, ValueError) as e:
        problems.append(f"a grammar-constrained continuation failed ({_first_line(e)}): {fix('grammar')}")
    width = dialect.ids_per_request or 2
    allowed = list(range(a, min(vocab_size, a + width)))
    next_b = None
    try:
        got = transport.next_one([a], allowed, dialect.max_top_n or 64)
        if dialect.ids_per_request and not got.complete:
            problems.append(f"next-token log-probs of {len(allowed)} named ids came back incomplete: {fix('ids')}")
        next_b = got.logprobs.get(b)
    except Unsupported as e:
        problems.append(f"{_first_line(e)}: {fix('ids')}")
    except (ServerError, ValueError) as e:
        check = "ids" if dialect.ids_per_request else "top_n"
        problems.append(f"next-token log-probs ({len(allowed) if dialect.ids_per_request else dialect.max_top_n} "
                        f"{'ids' if dialect.ids_per_request else 'listed'}) failed ({_first_line(e)}): {fix(check)}")
    if not needs_score:  # the continuation's own log-probs are what the keys are ranked on: raw, checked
        if next_b is not None and replied_b is not None and not abs(replied_b - next_b) <= RAW_TOLERANCE:
            problems.append(f"a continuation's log-prob {replied_b:.4f} differs from the next-token {next_b:.4f} for "
                            f"the same token (not raw): {fix('raw')}")
        return problems
    try:
        scored = transport.score([a], [b])[0]
        if next_b is not None and math.isfinite(scored) and abs(scored - next_b) > RAW_TOLERANCE:
            problems.append(f"next-token log-prob {next_b:.4f} differs from the scored {scored:.4f} for the same "
                            f"token (not raw): {fix('raw')}")
    except (ServerError, Unsupported, ValueError) as e:
        problems.append(f"scoring a given continuation failed ({_first_line(e)}): {fix('score')}")
    return problems


def probe_engine(pool: ServerPool, dialect: EngineDialect, *, vocab_size: int) -> None:
    """Probe every server of `pool`; raise `EngineProbeFailed` (one line) naming each problem."""
    for i, url in enumerate(pool.urls):
        problems = probe_server(HttpTransport(pool, dialect, affinity=i), dialect, vocab_size=vocab_size)
        if problems:
            raise EngineProbeFailed(f"model.engine={dialect.name}: {url} cannot serve SCG-Mem's constrained "
                                    f"calls: " + "; ".join(problems))
