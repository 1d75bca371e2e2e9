"""Greedy memory-management calls of the summarising baselines (MemoryBank, ReadAgent), and the
clean-up of what tiny models emit in them.

Memory calls decode greedily in every baseline (docs/methods.md, "Decoding"), so that methods
differ by their memory and not by sampling noise, and a rerun builds the same memory.
"""
from __future__ import annotations


def greedy_generations(llm, prompts: list[str], max_new_tokens: int) -> list:
    """One greedy (temperature 0) `Generation` per rendered prompt, in a single `generate` call.

    One call for the whole list lets the backend batch the prompts.
    """
    if not prompts:
        return []
    outs = llm.generate(prompts, max_new_tokens=max_new_tokens, temperature=0.0)
    return [gens[0] for gens in outs]


def greedy_texts(llm, prompts: list[str], max_new_tokens: int) -> list[str]:
    """The texts of `greedy_generations`."""
    return [g.text for g in greedy_generations(llm, prompts, max_new_tokens)]


def strip_repeated_lines(text: str) -> tuple[str, int]:
    """Drop every line that repeats an earlier one (whitespace- and case-insensitive).

    Tiny models decoding greedily loop on a sentence until the token cap; the summary
    then holds the same line many times. Returns (cleaned text, number of lines dropped).
    Blank lines are dropped too but not counted.
    """
    seen: set[str] = set()
    kept: list[str] = []
    dropped = 0
    for line in text.splitlines():
        key = " ".join(line.split()).lower()
        if not key:
            continue
        if key in seen:
            dropped += 1
            continue
        seen.add(key)
        kept.append(line.rstrip())
    return "\n".join(kept).strip(), dropped
