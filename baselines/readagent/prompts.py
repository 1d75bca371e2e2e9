"""ReadAgent's prompts (from the authors' demo notebook [R1]) and the parsers of its replies.

What each step does and which fallbacks are counted: `baselines/readagent/method.py` and
docs/methods.md, section ReadAgent.
"""
from __future__ import annotations

import re
from typing import Sequence


# Version of the prompts and rules below; part of the cache key (memory_settings).
PROMPT_VERSION = 1

# [R1] "The prompts we used for QuALITY with PaLM 2-L": pagination (with the demo's preceding
# page, which the QMSum variant also shows).
PAGINATION_PROMPT = """
You are given a passage that is taken from a larger text (a long conversation between two people) and some numbered labels between the paragraphs in the passage.
Numbered label are in angeled brackets. For example, if the label number is 19, it shows as <19> in text.
Please choose one label that it is natural to break reading.
Such point can be scene transition, end of a dialogue, end of an argument, narrative transition, etc.
Please answer the break point label and explain.
For example, if <57> is a good point to break, answer with "Break point: <57>\\n Because ..."

Passage:

{preceding}
{passage}
{end_tag}

"""

# [R1] gisting_prompt_template (QuALITY).
GIST_PROMPT = """
Please shorten the following passage.
Just give me a shortened version. DO NOT explain your reason.

Passage:
{page}

"""

# [R1] parallel_lookup_prompt_template (QuALITY, "1 to 5"); the examples with more pages than
# N are left out so that the prompt never invites more than N.
LOOKUP_PROMPT = """
The following text is what you remembered from reading a long conversation and a question related to it.
You may read 1 to {n} page(s) of the conversation again to refresh your memory to prepare yourself for the question.
Please respond with which page(s) you would like to read again.
{examples}
DO NOT select more pages if you don't need to.
DO NOT answer the question yet.

Text:
{gists}

Question:
{question}

Take a deep breath and tell me: Which page(s) would you like to read again?
"""
LOOKUP_EXAMPLES = [
    (1, 'For example, if you would like to only read Page 8, respond with "I want to look up Page [8] to ...";'),
    (2, 'if you would like to read Page 7 and 12, respond with "I want to look up Page [7, 12] to ...";'),
    (5, 'if you would like to read Page 2, 3, 7, 15 and 18, respond with "I want to look up Page [2, 3, 7, 15, 18] to ...".'),
]

# [R1] sequential_lookup_prompt_template (ReadAgent-S, QuALITY).
SEQUENTIAL_PROMPT = """
The following text is what you remember from reading a long conversation, followed by a question about the conversation.
You may read multiple pages of the conversation again to refresh your memory and prepare to answer the question.
Each page that you re-read can significantly improve your chance of answering the question correctly.
Please specify a SINGLE page you would like to read again or say "STOP".
To read a page again, respond with "Page $PAGE_NUM", replacing $PAGE_NUM with the target page number.
You can only specify a SINGLE page in your response at this time.
DO NOT select more pages if you don't need to.
To stop, simply say "STOP".
DO NOT answer the question in your response.

Text:
{gists}
End of text.

Pages re-read already (DO NOT ask to read them again):
{past}

Question:
{question}

Specify a SINGLE page to read again, or say STOP:
"""

_LABEL = re.compile(r"<(\d+)>")
# "Page 3", "pages 3, 4 and 7", "page #2", "Page [3": integers that follow the word "page".
_PAGE_LIST = re.compile(r"pages?\s*[:#]?\s*\[?\s*(\d+(?:\s*(?:,|and|&|or)\s*\d+)*)", re.IGNORECASE)
_PAGE_ONE = re.compile(r"page\s*\$?#?\s*(\d+)", re.IGNORECASE)
_INT = re.compile(r"\d+")


# ---------------------------------------------------------------------------- parsers
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


def parse_break_point(reply: str) -> int | None:
    """The first `<n>` label in a pagination reply; None if there is none."""
    m = _LABEL.search(reply)
    return int(m.group(1)) if m else None


def parse_lookup_brackets(reply: str, n_pages: int) -> list[int]:
    """In-range integers between the first `[` and the first `]` (the demo's parser [R1]).

    Returns [] when there is no `[...]` or nothing in it names an existing page.
    """
    start, end = reply.find("["), reply.find("]")
    if start == -1 or end == -1 or start >= end:
        return []
    ids = [int(p) for p in reply[start + 1:end].split(",") if p.strip().isdigit()]
    return dedupe([p for p in ids if 0 <= p < n_pages])


def parse_lookup_lenient(reply: str, n_pages: int) -> list[int]:
    """In-range integers that follow the word "page" ("Page 3 and 5", "pages 1, 2"), deduplicated."""
    ids: list[int] = []
    for m in _PAGE_LIST.finditer(reply):
        ids.extend(integers(m.group(1)))
    return dedupe([p for p in ids if 0 <= p < n_pages])


def parse_sequential(reply: str, n_pages: int) -> tuple[str, int | None]:
    """ReadAgent-S reply -> ("stop", None) | ("page", p) | ("lenient", p) | ("fail", None)."""
    m = _PAGE_ONE.search(reply)
    stop_at = reply.upper().find("STOP")
    if stop_at != -1 and (m is None or stop_at < m.start()):
        return "stop", None
    if m and 0 <= int(m.group(1)) < n_pages:
        return "page", int(m.group(1))
    loose = [p for p in integers(reply) if 0 <= p < n_pages]
    if loose:
        return "lenient", loose[0]
    return "fail", None
