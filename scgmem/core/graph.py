"""The associative graph over the schema (paper Section 3.5, Eq. 10).

Vertices are the concepts of S. Every pair of concepts grounded in the same turn
co-occurs once. The edge weight is (Eq. 10)

    w_uv = sum over turns t grounding both u and v of IDF(u) * IDF(v),
    IDF(k) = log(N / df(k)),

with N the number of turns ingested so far and df(k) the number of turns grounded in k.
IDF is the same for every turn in the sum, so w_uv = count_uv * IDF(u) * IDF(v): the
graph stores the counts (and df, N) and computes weights from the *current* N and df when
they are read, which matches Eq. 10 exactly at any point of the stream - storing weights
at insert time would freeze stale IDFs.

Example::

    g = AssociativeGraph()
    g.add_turn(["hiking", "lake"]); g.add_turn(["hiking", "camping"]); g.add_turn(["pottery"])
    g.weight("hiking", "lake")      # 1 * log(3/2) * log(3/1)
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Iterable

import numpy as np


class AssociativeGraph:
    """Co-occurrence counts, document frequencies and N; weights by Eq. 10 on read."""

    def __init__(self) -> None:
        self.n_turns = 0  # N
        self.df: Counter[str] = Counter()
        self._cooc: dict[str, Counter[str]] = defaultdict(Counter)  # symmetric: u -> {v: count_uv}

    def add_turn(self, concepts: Iterable[str]) -> None:
        """Count one ingested turn (N grows even when the turn has no concept)."""
        unique = sorted(set(concepts))
        self.n_turns += 1
        for c in unique:
            self.df[c] += 1
        for i, u in enumerate(unique):
            for v in unique[i + 1:]:
                self._cooc[u][v] += 1
                self._cooc[v][u] += 1

    def idf(self, concept: str) -> float:
        """log(N / df(k)); 0 for a concept grounded in no turn (it has no edge either)."""
        df = self.df.get(concept, 0)
        return math.log(self.n_turns / df) if df else 0.0

    def count(self, u: str, v: str) -> int:
        return self._cooc.get(u, {}).get(v, 0)

    def weight(self, u: str, v: str) -> float:
        """w_uv by Eq. 10 under the current N and df."""
        c = self.count(u, v)
        return c * self.idf(u) * self.idf(v) if c else 0.0

    def neighbours(self, u: str) -> tuple[list[str], np.ndarray]:
        """Neighbours of u (sorted, for reproducibility) and their weights w_uv, shape (n,)."""
        row = self._cooc.get(u)
        if not row:
            return [], np.zeros(0)
        names = sorted(row)
        idf_u = self.idf(u)
        weights = np.array([row[v] * idf_u * self.idf(v) for v in names], dtype=np.float64)
        return names, weights

    def edges(self) -> list[list]:
        """[[u, v, w_uv], ...] for every co-occurring pair (u < v), weights by Eq. 10 now."""
        return [[u, v, self.weight(u, v)] for u in sorted(self._cooc) for v in sorted(self._cooc[u]) if u < v]

    @property
    def num_edges(self) -> int:
        return sum(len(row) for row in self._cooc.values()) // 2

    # ------------------------------------------------------------------ (de)serialisation
    def state_dict(self) -> dict:
        pairs = [[u, v, c] for u in sorted(self._cooc) for v, c in sorted(self._cooc[u].items()) if u < v]
        return {"n_turns": self.n_turns, "df": dict(sorted(self.df.items())), "cooc": pairs}

    def load_state_dict(self, state: dict) -> None:
        self.n_turns = int(state["n_turns"])
        self.df = Counter({k: int(v) for k, v in state["df"].items()})
        self._cooc = defaultdict(Counter)
        for u, v, c in state["cooc"]:
            self._cooc[u][v] = int(c)
            self._cooc[v][u] = int(c)
