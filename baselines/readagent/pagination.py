"""ReadAgent's pagination: `quality_pagination` of the authors' demo notebook [R1].

From paragraph i, paragraphs are added while the word count is below `word_limit`; once it
reaches `start_threshold` a label `<j>` is put before each further paragraph, and the passage
ends with `<j>`. The model names the label where pausing is most natural. If fewer than
`last_page_words` words remain they become the last page without a call. docs/methods.md,
section ReadAgent.
"""
from __future__ import annotations

from typing import Callable

from scgmem.baselines.readagent.prompts import PAGINATION_PROMPT


def count_words(text: str) -> int:
    """Whitespace word count, as ReadAgent's `count_words` [R1]."""
    return len(text.split())


def paginate(texts: list[str], *, word_limit: int, start_threshold: int, last_page_words: int,
             break_point: Callable[[str, int, int], int]) -> list[tuple[int, int]]:
    """Page ranges [start, end) over the paragraphs `texts`.

    `break_point(prompt, i, j)` asks the model where the page that starts at paragraph i ends;
    the labels shown run up to j, and it returns a paragraph index in (i, j].
    """
    words = [count_words(t) for t in texts]
    n = len(texts)
    pages: list[tuple[int, int]] = []
    i = 0
    while i < n:
        preceding = "" if i == 0 else "...\n" + "\n".join(texts[pages[-1][0]:pages[-1][1]])
        passage = [texts[i]]
        wcount = words[i]
        j = i + 1
        while wcount < word_limit and j < n:
            wcount += words[j]
            if wcount >= start_threshold:
                passage.append(f"<{j}>")
            passage.append(texts[j])
            j += 1
        passage.append(f"<{j}>")
        end_tag = "" if j == n else texts[j] + "\n..."
        if wcount < last_page_words:
            # Fewer than `last_page_words` words remain (the loop only stops below
            # word_limit at the end of the text): the rest is the last page, no call.
            pause = n
        else:
            pause = break_point(PAGINATION_PROMPT.format(preceding=preceding, passage="\n".join(passage),
                                                         end_tag=end_tag).strip(), i, j)
        pages.append((i, pause))
        i = pause
    return pages
