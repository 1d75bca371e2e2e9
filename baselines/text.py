"""Text helpers shared by the ReadAgent and MemoryBank baselines.

Turn rendering and date parsing follow shared/specs/baselines.md section 0
("Turn rendering": `{speaker}: {text}` plus ` [shares {blip_caption}]`; dates parsed with
`"%I:%M %p on %d %B, %Y"`). The rest handles what tiny models emit: repeated lines,
empty replies, over-long prompts.
"""
from __future__ import annotations

import datetime as dt
import re
from typing import Sequence

from scgmem.data.locomo import Turn

LOCOMO_DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"


def render_turn_line(turn: Turn) -> str:
    """`{speaker}: {text}` plus ` [shares {caption}]` for image turns (spec section 0)."""
    shares = f" [shares {turn.caption}]" if turn.caption else ""
    return f"{turn.speaker}: {turn.text}{shares}"


def count_words(text: str) -> int:
    """Whitespace word count, as ReadAgent's `count_words` [R1]."""
    return len(text.split())


def first_words(text: str, n: int) -> str:
    """The first `n` whitespace-separated words of `text`."""
    return " ".join(text.split()[:n])


def parse_locomo_date(date_time: str) -> dt.datetime | None:
    """Parse a LoCoMo session date ("1:56 pm on 8 May, 2023"); None when it does not parse."""
    try:
        return dt.datetime.strptime(date_time.strip(), LOCOMO_DATE_FORMAT)
    except ValueError:
        return None


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


_INT = re.compile(r"\d+")


def integers(text: str) -> list[int]:
    """Every run of digits in `text`, in order."""
    return [int(m) for m in _INT.findall(text)]


def dedupe(values: Sequence[int]) -> list[int]:
    """Keep the first occurrence of each value, in order."""
    out: list[int] = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def greedy_generations(llm, prompts: list[str], max_new_tokens: int) -> list:
    """One greedy (temperature 0) `Generation` per rendered prompt, in a single `generate` call.

    Memory-management calls are greedy in both baselines (the ReadAgent demo uses T=0 [R1];
    spec section 0 "Decoding"). One call for the whole list lets the backend batch them.
    """
    if not prompts:
        return []
    outs = llm.generate(prompts, max_new_tokens=max_new_tokens, temperature=0.0)
    return [gens[0] for gens in outs]


def greedy_texts(llm, prompts: list[str], max_new_tokens: int) -> list[str]:
    """The texts of `greedy_generations`."""
    return [g.text for g in greedy_generations(llm, prompts, max_new_tokens)]
