"""scgmem-run, with one conversation memory file used wherever the memory cache misses.

Every point of a sweep over recall settings (k, hops, constraint) must answer from the same
memory. The cache key also covers the chat template and the method's ingestion settings, and
other work on the shared tree changed them while these runs went on, which would have made
each point rebuild the memory (~1 h for conv-26 on this CPU). With SCGMEM_FIXED_MEMORY set to
a cache entry, a miss for that conversation loads that entry instead, so every point reads the
memory built once. Use it only for runs whose ingestion settings match the entry's.

    SCGMEM_FIXED_MEMORY=<cache entry .json> python run_with_memory.py <scgmem-run overrides>
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from scgmem.harness import cache
from scgmem.harness.cache_entry import check_entry
from scgmem.harness.safe_files import read_json_file

FIXED = Path(os.environ["SCGMEM_FIXED_MEMORY"])
FIXED_SAMPLE = FIXED.stem  # the entry's file name is <sample_id>.json
_load = cache.MemoryCache.load


def load(self, path, conv=None, settings=None, partial=False):
    entry = _load(self, path, conv, settings, partial)
    if entry is None and path is not None and path.name == FIXED.name and not partial:
        # read as the cache reads an entry (issue 42), but outside the cache root and without
        # comparing the method's settings: the user vouches for this entry's ingestion settings
        entry = read_json_file(FIXED, 1 << 30)
        if conv is not None:
            check_entry(entry, FIXED, conv, cache_format=cache.CACHE_FORMAT, settings=None, partial=False)
        print(f"memory of {FIXED_SAMPLE} read from {FIXED} (cache miss at {path}); settings "
              f"{json.dumps(entry.get('settings'), sort_keys=True)[:200]}", flush=True)
    return entry


cache.MemoryCache.load = load

if __name__ == "__main__":
    from scgmem.run import main

    main()
