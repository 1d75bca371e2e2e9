"""Counting LLM calls and tokens per phase ("ingest", "answer", ...), and the settings each kind of
call ran with (`SettingsLog`), for the run summary; every backend keeps both."""
from __future__ import annotations

import contextlib
from collections import defaultdict


class UsageMeter:
    """Accumulates calls, prompt tokens and generated tokens under the current phase.

    A *call* is one prompt sent to the model (a batch of 8 prompts counts 8 calls), so the
    numbers are comparable between batched and unbatched runs.
    """

    def __init__(self) -> None:
        self.phase = "other"
        self._counts: dict[str, dict[str, int]] = defaultdict(
            lambda: {"calls": 0, "prompt_tokens": 0, "generated_tokens": 0, "truncated_prompts": 0,
                     "cached_prompt_tokens": 0, "memo_hits": 0, "cut_at_cap": 0}
        )

    def add(self, prompt_tokens: int, generated_tokens: int, calls: int = 1, truncated: int = 0,
            cached: int = 0, memo_hits: int = 0, cut: int = 0) -> None:
        """`cached`: prompt tokens (already in `prompt_tokens`) whose states came from the prefix
        cache; `memo_hits`: calls (already in `calls`) answered from the backend's memo; `cut`:
        outputs that reached their `max_new_tokens` cap before EOS or a stop string."""
        c = self._counts[self.phase]
        c["calls"] += calls
        c["prompt_tokens"] += prompt_tokens
        c["generated_tokens"] += generated_tokens
        c["truncated_prompts"] += truncated
        c["cached_prompt_tokens"] += cached
        c["memo_hits"] += memo_hits
        c["cut_at_cap"] += cut

    @contextlib.contextmanager
    def under(self, phase: str):
        """Count everything inside the block under `phase`; restores the previous phase after."""
        previous, self.phase = self.phase, phase
        try:
            yield self
        finally:
            self.phase = previous

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {phase: dict(c) for phase, c in self._counts.items()}

    def merge(self, other: dict[str, dict[str, int]]) -> None:
        """Add counts from a snapshot (e.g. the usage recorded when a cached memory was built)."""
        for phase, c in other.items():
            mine = self._counts[phase]
            for key, value in c.items():
                mine[key] = mine.get(key, 0) + int(value)


class SettingsLog:
    """Effective settings per kind of call, e.g. "answer/sampled" or "ingest/greedy+SchemaConstraint".

    A kind keeps its settings, the caps (`max_new_tokens`) and temperatures it was called with,
    its stop strings and its number of calls. Settings that differ between calls of one kind
    (they should not) are kept as a list of the variants.
    """

    def __init__(self) -> None:
        self.kinds: dict[str, dict] = {}
        self._caps: dict[str, set] = defaultdict(set)
        self._temperatures: dict[str, set] = defaultdict(set)
        self._stops: dict[str, set] = defaultdict(set)

    @staticmethod
    def kind(phase: str, *, temperature: float, num_beams: int, processors: list[str]) -> str:
        mode = "beam" if num_beams > 1 else ("sampled" if temperature > 0 else "greedy")
        return "+".join([f"{phase}/{mode}", *sorted(set(processors))])

    def record(self, kind: str, settings: dict, *, calls: int, max_new_tokens: int, temperature: float,
               stop: tuple[str, ...]) -> None:
        entry = self.kinds.setdefault(kind, {"settings": settings, "calls": 0})
        if entry["settings"] != settings and settings not in entry.setdefault("other_settings", []):
            entry["other_settings"].append(settings)
        entry["calls"] += calls
        self._caps[kind].add(max_new_tokens)
        self._temperatures[kind].add(float(temperature))
        self._stops[kind].update(stop)

    def report(self) -> dict:
        return {kind: {**entry, "max_new_tokens": sorted(self._caps[kind]),
                       "temperature": sorted(self._temperatures[kind]), "stop": sorted(self._stops[kind])}
                for kind, entry in sorted(self.kinds.items())}
