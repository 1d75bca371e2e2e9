"""A-MEM's plain-text protocol: the prompts and the JSON-first parsers of its robust layer.

docs/methods.md, section A-MEM; after the authors' `llm_text_parsers.py` (used by
`memory_layer_robust.py` and `test_advanced_robust.py`, A-mem repository [A1]). Every
parser tries JSON first (the shared `clean_json`), then the section
markers (``KEYWORDS:`` / ``CONTEXT:`` / ``TAGS:``, ``DECISION:``, ``CONNECTIONS:``,
``NEIGHBOR i:``), and reports *how* it parsed so the method can count it.

The prompts are the authors' robust prompts, kept verbatim (their wording is part of the
method); the parsers are our own code.
"""
from __future__ import annotations

import re
from typing import Any

from scgmem.baselines.json_repair import clean_json

# The robust controllers send this system message before every prompt.
SYSTEM_MESSAGE = "Follow the format specified in the prompt exactly. Do not add extra commentary."

ANALYZE_PROMPT = """Analyze the following content and provide:
1. KEYWORDS: The most important keywords (nouns, verbs, key concepts). Order from most to least important. At least three keywords. Do not include speaker names or time references.
2. CONTEXT: One sentence summarizing the main topic, key points, and purpose.
3. TAGS: Broad categories/themes for classification (domain, format, type). At least three tags.

Respond using EXACTLY this format (one section per header):

KEYWORDS: keyword1, keyword2, keyword3, ...
CONTEXT: A single sentence summarizing the content.
TAGS: tag1, tag2, tag3, ...

Content for analysis:
{content}"""

FOCUSED_KEYWORDS_PROMPT = """List exactly 5 keywords that capture the main concepts of the following text. Output only the keywords, comma-separated, nothing else.

Text: {content}"""

DECISION_PROMPT = """You are an AI memory evolution agent. Analyze the new memory note and its nearest neighbors to decide if evolution is needed.

New memory:
- Context: {context}
- Content: {content}
- Keywords: {keywords}

Nearest neighbor memories:
{neighbours}

Based on the relationships between the new memory and its neighbors, decide:
- NO_EVOLUTION: The memory stands alone, no changes needed.
- STRENGTHEN: The new memory should be linked to some neighbors and its tags updated.
- UPDATE_NEIGHBOR: The neighbors' context/tags should be updated based on new understanding.
- STRENGTHEN_AND_UPDATE: Both strengthen and update neighbors.

Respond using EXACTLY this format:
DECISION: <one of NO_EVOLUTION, STRENGTHEN, UPDATE_NEIGHBOR, STRENGTHEN_AND_UPDATE>
REASON: <brief explanation>"""

STRENGTHEN_PROMPT = """Given the new memory and its neighbors, provide updated connections and tags.

New memory:
- Content: {content}
- Keywords: {keywords}

Neighbor memories:
{neighbours}

Which neighbor indices should the new memory connect to? What tags best describe this memory?

Respond using EXACTLY this format:
CONNECTIONS: 0, 2, 3
TAGS: tag1, tag2, tag3, ..."""

UPDATE_PROMPT = """Given the new memory and its neighbor memories, update each neighbor's context and tags based on a holistic understanding of all these memories together.

New memory:
- Content: {content}
- Context: {context}

Neighbor memories:
{neighbours}

For each neighbor (indexed 0 to {max_index}), provide updated context and tags. If no change is needed, repeat the original values.

Respond using EXACTLY this format (one block per neighbor):

NEIGHBOR 0:
CONTEXT: updated context sentence
TAGS: tag1, tag2, tag3

NEIGHBOR 1:
CONTEXT: updated context sentence
TAGS: tag1, tag2, tag3

(continue for all {count} neighbors)"""

# test_advanced_robust.py::generate_query_llm
QUERY_PROMPT = """Given the following question, generate several keywords separated by commas.

Question: {question}

Keywords:"""

DECISIONS = ("NO_EVOLUTION", "STRENGTHEN", "UPDATE_NEIGHBOR", "STRENGTHEN_AND_UPDATE")

# The heuristic keyword extractor's stop list (llm_text_parsers.py::_heuristic_keywords).
STOP_WORDS = frozenset("""
the a an is are was were be been being have has had do does did will would could should may
might shall can need dare ought used to of in for on with at by from as into through during
before after above below between out off over under again further then once here there when
where why how all both each few more most other some such no nor not only own same so than
too very just because but and or if while about up it its i me my you your he she they we
this that these those what which who whom says said speaker
""".split())


# ----------------------------------------------------------------------------- helpers
def parse_list_items(text: str) -> list[str]:
    """Bullets, numbered lines, one item per line, or comma-separated values -> items."""
    items: list[str] = []
    for line in (text or "").strip().splitlines():
        line = re.sub(r"^\s*[-*\u2022]\s*", "", line.strip())
        line = re.sub(r"^\d+[.)]\s*", "", line).strip().strip("\"'").strip()
        if not line:
            continue
        for part in line.split(",") if "," in line else [line]:
            part = part.strip().strip("\"'[]").strip()
            if part:
                items.append(part)
    return items


def extract_section(text: str, marker: str, next_markers: tuple[str, ...] = ()) -> str:
    """Text after `MARKER:` (same line and following lines) up to the next known marker."""
    match = re.search(rf"^\s*{re.escape(marker)}\s*:\s*(.*)$", text, re.IGNORECASE | re.MULTILINE)
    if not match:
        return ""
    end = len(text)
    for nm in next_markers:
        nxt = re.compile(rf"^\s*{re.escape(nm)}\s*:", re.IGNORECASE | re.MULTILINE).search(text, match.end())
        if nxt and nxt.start() < end:
            end = nxt.start()
    first, rest = match.group(1).strip(), text[match.end():end].strip()
    return f"{first}\n{rest}" if first and rest else first or rest


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return parse_list_items(value)
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    return []


def _as_text(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value).strip()
    return str(value).strip() if value is not None else ""


def _as_index(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return None


# ----------------------------------------------------------------------------- parsers
def parse_analysis(response: str) -> tuple[dict[str, Any], str]:
    """-> ({"keywords", "context", "tags"}, how) with how in {"json", "sections", "none"}.

    No repair here: the caller decides on the focused retry and the heuristics (and counts them).
    """
    data = clean_json(response)
    if data is not None and any(k in data for k in ("keywords", "context", "tags")):
        return {"keywords": _as_list(data.get("keywords")), "context": _as_text(data.get("context")),
                "tags": _as_list(data.get("tags"))}, "json"
    markers = ("KEYWORDS", "CONTEXT", "TAGS")
    result = {
        "keywords": parse_list_items(extract_section(response, "KEYWORDS", ("CONTEXT", "TAGS"))),
        "context": extract_section(response, "CONTEXT", ("TAGS", "KEYWORDS")).strip(),
        "tags": parse_list_items(extract_section(response, "TAGS", ("KEYWORDS", "CONTEXT"))),
    }
    found = any(re.search(rf"^\s*{m}\s*:", response, re.IGNORECASE | re.MULTILINE) for m in markers)
    return result, "sections" if found else "none"


def heuristic_keywords(content: str, max_keywords: int = 5) -> list[str]:
    """Capitalised words first, then other non-stop-words of >= 3 letters (the authors' fallback)."""
    scored, seen = [], set()
    for word in re.findall(r"\b[a-zA-Z]{3,}\b", content):
        low = word.lower()
        if low in STOP_WORDS or low in seen:
            continue
        seen.add(low)
        scored.append((low, 2 if word[0].isupper() else 1))
    scored.sort(key=lambda x: -x[1])  # stable: text order within a score
    return [w for w, _ in scored[:max_keywords]]


def heuristic_context(content: str) -> str:
    """The first sentence, else the first 200 characters."""
    match = re.match(r"(.+?[.!?])\s", content)
    return match.group(1).strip() if match else content[:200].strip()


def parse_decision(response: str) -> tuple[str, str]:
    """-> (decision, how); how in {"json", "section", "inferred", "unparsed"}.

    "inferred" is the authors' keyword inference (STRENGTHEN/UPDATE anywhere in the reply);
    "unparsed" means no evolution (a parse failure means no evolution).
    """
    data = clean_json(response)
    if data is not None and ("should_evolve" in data or "decision" in data):
        if "decision" in data and str(data["decision"]).strip().upper().replace(" ", "_") in DECISIONS:
            return str(data["decision"]).strip().upper().replace(" ", "_"), "json"
        flag = data.get("should_evolve")
        should = flag is True or (isinstance(flag, str) and flag.strip().lower() == "true")
        actions = {str(a).strip().lower() for a in data.get("actions", []) or []} if isinstance(
            data.get("actions"), list) else set()
        if not should:
            return "NO_EVOLUTION", "json"
        return _decision("strengthen" in actions, "update_neighbor" in actions) or "NO_EVOLUTION", "json"
    section = extract_section(response, "DECISION", ("REASON",)).strip().upper().replace(" ", "_")
    section = section.split("\n")[0].strip(" .<>")
    if section in DECISIONS:
        return section, "section"
    upper = (response or "").upper()
    if "NO_EVOLUTION" in upper and "STRENGTHEN" not in upper and "UPDATE" not in upper:
        return "NO_EVOLUTION", "section"
    inferred = _decision("STRENGTHEN" in upper, "UPDATE" in upper)
    return (inferred, "inferred") if inferred else ("NO_EVOLUTION", "unparsed")


def _decision(strengthen: bool, update: bool) -> str | None:
    """The evolution decision that the two actions name, or None when neither is named."""
    if strengthen and update:
        return "STRENGTHEN_AND_UPDATE"
    if strengthen:
        return "STRENGTHEN"
    if update:
        return "UPDATE_NEIGHBOR"
    return None


def parse_strengthen(response: str) -> tuple[list[int], list[str], str]:
    """-> (connections as ints, tags, how); how in {"json", "sections", "none"}. Not bounds-checked."""
    data = clean_json(response)
    if data is not None and any(k in data for k in ("connections", "suggested_connections", "tags",
                                                     "tags_to_update")):
        raw = data.get("connections", data.get("suggested_connections", []))
        raw = raw if isinstance(raw, list) else parse_list_items(str(raw))
        connections = [i for i in (_as_index(x) for x in raw) if i is not None]
        return connections, _as_list(data.get("tags", data.get("tags_to_update", []))), "json"
    conn_text = extract_section(response, "CONNECTIONS", ("TAGS",))
    connections = [i for i in (_as_index(x) for x in parse_list_items(conn_text)) if i is not None]
    tags = parse_list_items(extract_section(response, "TAGS", ("CONNECTIONS",)))
    return connections, tags, "sections" if (connections or tags) else "none"


def parse_neighbour_updates(response: str, count: int) -> tuple[list[dict[str, Any]], str]:
    """-> one {"context", "tags"} per neighbour (empty where missing), and how it parsed."""
    data = clean_json(response)
    if data is not None and ("new_context_neighborhood" in data or "new_tags_neighborhood" in data):
        contexts = data.get("new_context_neighborhood") or []
        tags = data.get("new_tags_neighborhood") or []
        contexts = contexts if isinstance(contexts, list) else []
        tags = tags if isinstance(tags, list) else []
        return [{"context": _as_text(contexts[i]) if i < len(contexts) else "",
                 "tags": _as_list(tags[i]) if i < len(tags) else []} for i in range(count)], "json"
    out, found = [], False
    for i in range(count):
        match = re.search(rf"NEIGHBOU?R\s+{i}\s*:", response, re.IGNORECASE)
        if not match:
            out.append({"context": "", "tags": []})
            continue
        found = True
        # The block ends at the next NEIGHBOR marker, whatever its number (the authors' parser
        # looks only for i+1, so a skipped block leaked its successor into this one).
        nxt = re.compile(r"NEIGHBOU?R\s+\d+\s*:", re.IGNORECASE).search(response, match.end())
        block = response[match.end():nxt.start() if nxt else len(response)]
        out.append({"context": extract_section(block, "CONTEXT", ("TAGS",)).strip(),
                    "tags": parse_list_items(extract_section(block, "TAGS", ("CONTEXT",)))})
    return out, "sections" if found else "none"


def parse_query_keywords(response: str) -> str:
    """JSON {"keywords": ...} if present, else the reply as it is (stripped)."""
    data = clean_json(response)
    if data is not None and "keywords" in data:
        value = data["keywords"]
        return ", ".join(map(str, value)) if isinstance(value, list) else str(value).strip()
    return (response or "").strip()
