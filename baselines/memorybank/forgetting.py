"""MemoryBank's forgetting curve, in the two versions its authors published [M1].

A memory unit carries `anchor` (the day it was stored or last recalled) and `level` (how many
times it was recalled). At every login (each time the clock reaches a new date) each unit
survives with probability R(t, S), t = days since its anchor; a recall adds one to the level
and moves the anchor to today (`update_memory_when_searched`).

- `paper`: the first code (forget_memory.py @ 0cc7111) and the paper's equation.
  R = exp(-t/S), S = level + 1, the level capped at `max_level` (`memory_level=3`: S = 1, 2, 3);
  a unit with t >= `total_days` (`total_date=30`) is deleted whatever the draw. Day summaries are
  units like the others.
- `code`: the authors' later commit 3869efc ("update memory forgetting mechanism"), the code's
  final state. `memory_strength` starts at 1 and grows by 1 per recall with no cap; the curve is
  written `math.exp(-t / 5*S)`, which Python reads as exp(-t*S/5): a recall resets t to 0 but
  makes the unit fade *faster* afterwards (the paper meant the opposite; we compute what the
  code computes). There is no age cutoff. Day summaries get no draw of their own: a day's
  summary is dropped only when all of that day's dialog units are gone, and a recall cannot
  strengthen it (the code looks a hit up among the day's dialogs by id).

The randomness is one `rng.random()` draw per alive unit that gets a draw, in unit order, so a
seed reproduces the surviving memory.
"""
from __future__ import annotations

import math

from scgmem.api.settings import check_choice

CURVES = ("paper", "code")
CODE_DAYS = 5.0  # the 5 in `exp(-t / 5*S)` (forget_memory.py @ 3869efc)


class ForgettingCurve:
    """One of MemoryBank's two forgetting curves (see the module docstring).

    Args:
        curve: "paper" or "code".
        total_days: `paper` only: age (days since the anchor) at which a unit is deleted.
        max_level: `paper` only: highest recall level (S = level + 1).
    """

    def __init__(self, curve: str = "paper", total_days: int = 30, max_level: int = 2) -> None:
        check_choice("forgetting_curve", curve, CURVES)
        self.curve = curve
        self.total_days = total_days
        self.max_level = max_level

    def retention(self, t: float, level: int) -> float:
        """Probability that a unit `t` days past its anchor, recalled `level` times, survives a pass."""
        strength = level + 1
        if self.curve == "paper":
            return math.exp(-t / strength)
        return math.exp(-t / CODE_DAYS * strength)  # the code's `exp(-t / 5*S)`: (-t/5)*S

    def draws_for(self, unit: dict) -> bool:
        """Whether the unit is forgotten by its own draw (`code`: day summaries follow their day)."""
        return self.curve == "paper" or unit["kind"] != "summary"

    def strengthen(self, unit: dict, day: int) -> bool:
        """A recall of `unit` on `day`; returns whether it changed anything."""
        if not self.draws_for(unit):
            return False
        unit["level"] = min(unit["level"] + 1, self.max_level) if self.curve == "paper" else unit["level"] + 1
        unit["anchor"] = day
        return True

    def forgetting_pass(self, units: list[dict], day: int, rng) -> int:
        """One login-time pass over the alive units at `day`; returns how many were forgotten."""
        forgotten = 0
        for u in units:
            if not u["alive"] or not self.draws_for(u):
                continue
            t = day - u["anchor"]
            too_old = self.curve == "paper" and t >= self.total_days
            if too_old or rng.random() >= self.retention(t, u["level"]):
                forget(u, day)
                forgotten += 1
        if self.curve == "code":
            forgotten += self._drop_orphaned_summaries(units, day)
        return forgotten

    @staticmethod
    def _drop_orphaned_summaries(units: list[dict], day: int) -> int:
        """`code`: a day's summary goes when none of that day's dialog units is left."""
        days_alive = {u["day"] for u in units if u["alive"] and u["kind"] != "summary"}
        dropped = 0
        for u in units:
            if u["alive"] and u["kind"] == "summary" and u["day"] not in days_alive:
                forget(u, day)
                dropped += 1
        return dropped


def forget(unit: dict, day: int) -> None:
    unit["alive"] = False
    unit["forgotten_day"] = day
