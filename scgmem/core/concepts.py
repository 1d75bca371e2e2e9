"""Concept strings: parsing free model output, normalisation and validation (Sections 3.1, 3.4).

A concept is a short keyword or phrase (1-4 words). Its identity is the normalised form:
lowercase, stripped of surrounding punctuation, inner whitespace collapsed. Accommodation
(Eq. 8-9) accepts a freely generated candidate only if it is valid: non-empty, not only
stop words, not only numbers, at most `max_words` words, and *grounded* - each content
word occurs in the turn's text or image caption (so a small model's inventions and
echoes of the instruction are dropped, and counted by reason).

nltk's stop-word corpus needs a download we cannot make here, so the list is inline
(the usual English function words).

Example::

    parse_list("Keywords: 1. LGBTQ support group\\n2. Caroline's talk; the painting.")
    # ['LGBTQ support group', "Caroline's talk", 'the painting']
    normalise("  LGBTQ   Support group! ")   # 'lgbtq support group'
"""
from __future__ import annotations

import re
import string

STOP_WORDS = frozenset("""
a about above after again against all am an and any are aren't as at be because been before being below
between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each
few for from further get gets got had hadn't has hasn't have haven't having he he'd he'll he's her here
here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself
just let's me more most much mustn't my myself no nor not now of off on once only or other ought our ours
ourselves out over own really same shan't she she'd she'll she's should shouldn't so some such than that
that's the their theirs them themselves then there there's these they they'd they'll they're they've this
those through to too under until up us very was wasn't we we'd we'll we're we've were weren't what what's
when when's where where's which while who who's whom why why's will with won't would wouldn't yeah yes you
you'd you'll you're you've your yours yourself yourselves oh ok okay hey hi hello wow thanks thank also
""".split())

# Surrounding characters stripped from a candidate: ASCII punctuation, typographic quotes,
# bullets and dashes (list markers), and whitespace.
_STRIP = string.punctuation + string.whitespace + "\u2018\u2019\u201c\u201d\u2022\u00b7\u2013\u2014"
_WORD = re.compile(r"\w+(?:'\w+)?")
_LIST_MARKER = re.compile(r"^\s*(?:\d+[.)]|[-*\u2022])\s+")
_LABEL = re.compile(r"^\s*(?:key\s+)?(?:concepts?|keywords?)\s*:\s*", re.IGNORECASE)
_SPLIT = re.compile(r"[,;:\n]")  # ":" too: "Painting: a lake at sunrise" gives two candidates


def surface(text: str) -> str:
    """A candidate as the model wrote it, tidied: surrounding punctuation and surrounding
    stop words off ("the transgender stories" -> "transgender stories", "i went" -> "went"),
    inner whitespace collapsed.

    This keeps the case, so it is the form a key is tokenised in (see `CognitiveSchema`).
    """
    parts = text.strip(_STRIP).split()
    while parts and parts[0].lower().strip(_STRIP) in STOP_WORDS:
        parts.pop(0)
    while parts and parts[-1].lower().strip(_STRIP) in STOP_WORDS:
        parts.pop()
    return " ".join(parts).strip(_STRIP)


def normalise(text: str) -> str:
    """The identity of a concept: lowercase `surface` (a stop-word-only text normalises to "")."""
    return surface(text).lower()


def words(text: str) -> list[str]:
    """Lowercase word tokens (letters/digits, with inner apostrophes: "caroline's")."""
    return _WORD.findall(text.lower())


def parse_list(text: str, max_items: int | None = None) -> list[str]:
    """Split a freely generated list into candidate surfaces (order kept, empties dropped).

    Accepts "a, b, c", numbered or bulleted lines, ";" and ":" separators, and a leading
    "Keywords:" label the model may echo.
    """
    out: list[str] = []
    for line in text.split("\n"):
        line = _LABEL.sub("", _LIST_MARKER.sub("", line))
        for part in _SPLIT.split(line):
            part = " ".join(_LIST_MARKER.sub("", part).strip(_STRIP).split())  # stop words stay: counted later
            if part:
                out.append(part)
    return out[:max_items] if max_items is not None else out


def rejection(candidate: str, grounding: set[str] | None, max_words: int = 4) -> str | None:
    """Why a candidate concept is invalid, or None when it is valid.

    Args:
        candidate: a surface or normalised concept.
        grounding: the lowercase words of the turn (text + caption); None skips the check.
        max_words: longest concept, in words.

    Returns one of "empty", "too_long", "stop_words", "number", "ungrounded", or None.
    """
    raw = words(candidate)
    if raw and all(w in STOP_WORDS for w in raw):
        return "stop_words"
    concept = normalise(candidate)
    tokens = words(concept)
    if not concept or not tokens:
        return "empty"
    if len(concept.split()) > max_words:
        return "too_long"
    content = [w for w in tokens if w not in STOP_WORDS]
    if not content:
        return "stop_words"
    if all(w.isdigit() for w in content):
        return "number"
    if grounding is not None and any(_stem(w) not in grounding for w in content):
        return "ungrounded"
    return None


def _stem(word: str) -> str:
    """A crude stem, so that "paintings"/"painting" and "Caroline's"/"Caroline" ground each other."""
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return word


def grounding_words(*texts: str | None) -> set[str]:
    """The (stemmed) word set a candidate must be grounded in (a turn's text and caption)."""
    out: set[str] = set()
    for t in texts:
        if t:
            out.update(_stem(w) for w in words(t))
    return out
