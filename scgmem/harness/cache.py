"""On-disk cache of ingested memories, so sweeps over recall knobs never rebuild them.

Layout: <cache_dir>/memory/<method>/<key>/<sample_id>.json, where key hashes exactly what
changes the built memory: the method class and its `memory_settings()`, the model (name,
weights source, dtype), how its chat template renders prompts (`prompt_fingerprint`), the seed,
and the conversation's content (so `data.max_sessions` changes it). Files are JSON (never pickle),
written atomically with a checksum, and checked fully when read (scgmem/harness/cache_entry.py):
an entry that fails a check is rebuilt with a warning, never trusted. A symlink below the cache
root (a folder, an entry, a lock) is refused in one line (scgmem/harness/safe_files.py).

Concurrent jobs (a k sweep on the joblib launcher) need the same memory at the same time: a file
lock per key (`<entry>.json.lock`, an OS lock, so a killed job releases it) lets one job build it
while the others wait and then load it. A job waits with its whole process (the batching front's
other conversations included); jobs take their conversations' locks in data order, so two jobs
over the same `data.samples` list cannot wait on each other.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from pathlib import Path

from scgmem.api import Conversation
from scgmem.api.paths import path_under
from scgmem.harness.cache_entry import check_entry, checksum, max_file_bytes
from scgmem.harness.safe_files import UnsafeLink, check_below, read_bounded, write_json_atomic
from scgmem.harness.untrusted import StoredFileError, parse_json
from scgmem.llm.loading import held_lock

log = logging.getLogger(__name__)

CACHE_FORMAT = 1  # bump when the layout of a cached state changes


def conversation_fingerprint(conv: Conversation) -> str:
    payload = [(t.dia_id, t.speaker, t.text, t.caption, t.date_time) for t in conv.turns]
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False).encode()).hexdigest()[:16]


def _score_dtype(llm) -> list[str]:
    """The score dtype when it is not the weights' (a bf16 model scoring in float32 builds other
    memories than one scoring in bf16); nothing otherwise, so float32 models keep their keys."""
    score = getattr(llm, "score_dtype", None)
    return [score] if isinstance(score, str) and not str(llm.dtype).endswith(score) else []


# The key names the method's class by the path it had when its memories were first cached. The
# baselines moved from a top-level package `baselines` into scgmem.baselines (issue 27) without a
# change to what they build, so they keep their old paths here and existing memories stay valid
# (tests/harness/test_memory_keys.py pins each key). A class that moves later adds its line.
KEYED_AS = {
    "scgmem.baselines.amem.method.AMem": "baselines.amem.AMem",
    "scgmem.baselines.full_context.FullContext": "baselines.full_context.FullContext",
    "scgmem.baselines.memgpt.method.MemGPT": "baselines.memgpt.MemGPT",
    "scgmem.baselines.memorybank.method.MemoryBank": "baselines.memorybank.MemoryBank",
    "scgmem.baselines.rag.dense.DenseRAG": "baselines.rag.DenseRAG",
    "scgmem.baselines.rag.dense.LastTurns": "baselines.rag.LastTurns",
    "scgmem.baselines.rag.locomo.LoCoMoRAG": "baselines.rag_locomo.LoCoMoRAG",
    "scgmem.baselines.readagent.method.ReadAgent": "baselines.readagent.ReadAgent",
}


def keyed_class(method) -> str:
    """The class path `memory_key` hashes: today's, or the one its cached memories were keyed on."""
    path = f"{type(method).__module__}.{type(method).__qualname__}"
    return KEYED_AS.get(path, path)


def memory_key(method, llm, seed: int, conv: Conversation) -> str:
    spec = {
        "format": CACHE_FORMAT,
        "method": keyed_class(method),
        "settings": method.memory_settings(),
        "model": [getattr(llm, "name", None), getattr(llm, "source", None), llm.dtype,
                  *_score_dtype(llm)],
        "seed": seed,
        "prompts": getattr(llm, "prompt_fingerprint", None),  # chat template under the chat policy
        "conversation": conversation_fingerprint(conv),
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:20]


class MemoryCache:
    def __init__(self, root: Path, enabled: bool = True) -> None:
        self.base = Path(root)  # the user's run.cache_dir: it may be a link, nothing below it may
        self.root = self.base / "memory"
        self.enabled = enabled

    def path(self, method, key: str, sample_id: str) -> Path:
        return path_under(self.root, method.name, key, f"{sample_id}.json")  # sample_id comes from the data file

    def load(self, path: Path, conv: Conversation | None = None, settings: dict | None = None,
             partial: bool = False) -> dict | None:
        """The entry at `path` if it passes every check of `cache_entry.check_entry` against `conv`
        (and the method's memory `settings`); None (rebuild, with a warning) otherwise. A symlink
        below the cache root is refused (`UnsafeLink`, exit 2)."""
        if not self.enabled:
            return None
        check_below(self.base, path)
        if not path.is_file():
            return None
        try:
            data = read_bounded(path, max_file_bytes(conv) if conv is not None else 1 << 30)
            entry = parse_json(data, path, max_depth=64)
            if conv is not None:
                check_entry(entry, path, conv, cache_format=CACHE_FORMAT, settings=settings, partial=partial)
            elif not isinstance(entry, dict) or entry.get("format") != CACHE_FORMAT or "state" not in entry:
                raise StoredFileError(path, "format", entry.get("format") if isinstance(entry, dict) else entry,
                                      "unknown format")
            return entry
        except UnsafeLink:
            raise
        except (StoredFileError, OSError) as e:
            log.warning("memory cache %s unusable (%s): rebuilding it", path, e)
            return None

    def save(self, path: Path, entry: dict) -> None:
        if self.enabled:
            entry = {"format": CACHE_FORMAT, **entry}
            entry["checksum"] = checksum(json.loads(json.dumps(entry)))  # over the entry as JSON reads it back
            write_json_atomic(path, entry, root=self.base)

    @contextlib.contextmanager
    def lock(self, path: Path | None):
        """Hold the lock of the memory at `path` (None or a disabled cache: no lock) while it is
        loaded or built, so concurrent jobs build each memory once. A lock file that is a symlink is
        refused (opening it would truncate whatever it points at)."""
        if path is None or not self.enabled:
            yield
            return
        check_below(self.base, path.parent)
        path.parent.mkdir(parents=True, exist_ok=True)
        check_below(self.base, Path(f"{path}.lock"))
        with held_lock(f"{path}.lock", f"memory {path} is being built by another job: waiting for it"):
            yield
