"""MemoryBank's memory units and their same-date merging (SiliconFriend [M1], the LoCoMo port [M2]),
and where our settings depart from the authors' code (docs/methods.md, section MemoryBank)."""
from __future__ import annotations

from scgmem.api import Session

def pair_turns(session: Session) -> list[list]:
    """Consecutive turns by different speakers form a pair; a leftover turn stays alone ([M2])."""
    turns, groups, i = session.turns, [], 0
    while i < len(turns):
        if i + 1 < len(turns) and turns[i + 1].speaker != turns[i].speaker:
            groups.append([turns[i], turns[i + 1]])
            i += 2
        else:
            groups.append([turns[i]])
            i += 1
    return groups


def merge_neighbours(units: list[dict], uid: int, alive_ids: list[int], position: dict, taken: set,
                     merge_chars: int) -> list[int]:
    """Same-date neighbours (i+1, i-1, i+2, ...) of hit `uid` while the total stays <= merge_chars.

    The patched `similarity_search_with_score_by_vector` of forget_memory.py [M1] (CHUNK_SIZE);
    `alive_ids` is the index order, `position` maps a unit id to its place in it, and `taken`
    (updated) holds the units already in the context.
    """
    length = len(units[uid]["text"])
    date, i, merged = units[uid]["date"], position[uid], []
    for step in range(1, len(alive_ids)):
        grew = False
        for j in (i + step, i - step):
            if not 0 <= j < len(alive_ids) or alive_ids[j] in taken:
                continue
            other = units[alive_ids[j]]
            if other["date"] != date or length + len(other["text"]) > merge_chars:
                continue
            length += len(other["text"])
            merged.append(other["id"])
            taken.add(other["id"])
            grew = True
        if not grew:
            break
    return merged


def settings_deviations(forgetting: str, simulate_recall: bool) -> dict[str, str]:
    """Where a run's settings differ from the authors' code [M1], in words (stats -> summary.json)."""
    out = {"decoding": "greedy summaries (authors: gpt-3.5-turbo at T=0.7)",
           "recall_lookup": "a recalled unit is found by its id (the code looks it up by date)"}
    if forgetting != "stochastic":
        out["forgetting"] = f"{forgetting} (authors: units deleted by the curve's draws)"
    if not simulate_recall:
        out["simulate_recall"] = "off (SiliconFriend searches memory for every user utterance)"
    return out
