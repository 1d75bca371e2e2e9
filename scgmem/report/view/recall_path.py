"""SCG-Mem's recall path for one question, rebuilt from what the run stored (paper Section 3.6).

A record stores the seeds (`seed_keys`, Eq. 11) and the active concepts in rank order
(`context_keys`: seeds first, then by activation, Eq. 12-13); `memory/<sample_id>.json` stores
the schema's concept -> dia_ids and the graph's edges `[u, v, w_uv]` (Eq. 10). The run stores
neither the seeds' log-probs nor the activations, so the path shows, for each concept reached by
propagation, its strongest link from a concept that could have drawn it (a seed when hops = 1,
any other active concept otherwise): w_uv and P(v | u) = softmax over u's neighbours of w / T,
as `scgmem.core.recall.propagate` draws it. With hops = 1 that P is the concept's activation
whenever the strongest link is the one that drew it.

    >>> memory = {"concepts": {"a": ["D1:1"], "b": ["D1:1", "D1:2"], "c": ["D1:3"]},
    ...           "edges": [["a", "b", 2.0], ["a", "c", 1.0]]}
    >>> graph = Graph(memory)
    >>> path = recall_path({"seed_keys": ["a"], "context_keys": ["a", "b"], "retrieved": ["D1:1"],
    ...                     "evidence": ["D1:2"]}, graph, temperature=1.0, hops=1)
    >>> path["reached"]            # b (position 1) drawn from a (position 0): w_ab = 2, P(b | a) = e^2 / (e^2 + e^1)
    [[1, 0, 2.0, 0.7311]]
    >>> path["turns"], path["evidence"][0]
    ({'D1:1': [0, 1]}, {'dia_id': 'D1:2', 'retrieved': False, 'active': [1], 'other': []})
"""
from __future__ import annotations

import math


class Graph:
    """The exported memory of one conversation as lookups: neighbours with weights, and the
    concepts grounded in each turn (the inverse of concept -> dia_ids)."""

    def __init__(self, memory: dict) -> None:
        self.concepts: dict[str, list[str]] = memory.get("concepts") or {}
        self.adjacent: dict[str, dict[str, float]] = {}
        for u, v, w in memory.get("edges") or []:
            self.adjacent.setdefault(u, {})[v] = float(w)
            self.adjacent.setdefault(v, {})[u] = float(w)
        self.of_turn: dict[str, list[str]] = {}
        for concept, ids in self.concepts.items():
            for d in ids:
                self.of_turn.setdefault(d, []).append(concept)
        self._probs: dict[tuple[str, float], dict[str, float]] = {}

    def probs(self, u: str, temperature: float) -> dict[str, float]:
        """P(v | u) = softmax_v(w_uv / T) over u's neighbours (Eq. 12), cached per (u, T)."""
        key = (u, temperature)
        if key not in self._probs:
            row = self.adjacent.get(u, {})
            top = max(row.values(), default=0.0) / temperature
            exp = {v: math.exp(w / temperature - top) for v, w in row.items()}
            total = sum(exp.values()) or 1.0
            self._probs[key] = {v: e / total for v, e in exp.items()}
        return self._probs[key]


def recall_path(record: dict, graph: Graph, *, temperature: float, hops: int) -> dict:
    """The path of one SCG-Mem record, concepts named by their position in `context_keys` (the
    active concepts, seeds first) to keep the site small: each concept reached by propagation with
    its strongest link, the retrieved turns with the active concepts grounded in each, and every
    evidence turn with where it sits (retrieved or not; the concepts grounding it, active ones apart).

    Returns {"reached": [[v, u or None, w_uv, P(v|u)]], "turns": {dia_id: [positions]},
    "evidence": [{"dia_id", "retrieved", "active": [positions], "other": [names]}],
    "unknown": [active keys not in the memory]}; w rounded to 0.01, P to 1e-4.
    """
    seeds = list(record.get("seed_keys") or [])
    active = list(record.get("context_keys") or seeds)
    position = {c: i for i, c in enumerate(active)}
    seed_set = set(seeds)
    reached = []
    for v in active:
        if v in seed_set:
            continue
        parents = [u for u in seeds if u in position] if hops <= 1 else [u for u in active if u != v]
        links = [(graph.probs(u, temperature)[v], u) for u in parents if v in graph.adjacent.get(u, {})]
        p, u = max(links, default=(None, None))
        reached.append([position[v], None if u is None else position[u],
                        None if u is None else round(graph.adjacent[u][v], 2), None if p is None else round(p, 4)])
    turns = {d: [position[c] for c in graph.of_turn.get(d, []) if c in position] for d in record.get("retrieved") or []}
    evidence = []
    for d in dict.fromkeys(record.get("evidence") or []):
        grounded = graph.of_turn.get(d, [])
        evidence.append({"dia_id": d, "retrieved": d in turns, "active": [position[c] for c in grounded if c in position],
                         "other": [c for c in grounded if c not in position]})
    return {"reached": reached, "turns": turns, "evidence": evidence,
            "unknown": [c for c in active if c not in graph.concepts]}
