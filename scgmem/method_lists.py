"""Which methods there are, and Table 1's order, said once.

Table 1's methods and their order are the sweep of configs/experiment/table1.yaml (what
`make reproduce-table1` runs); the report's rows, the claims' baselines and the benchmarks read them
from here, so a method added to the sweep shows everywhere. The methods outside the paper follow in
`EXTRA_METHODS`' order.
"""
from __future__ import annotations

from functools import lru_cache

from omegaconf import OmegaConf

from scgmem.config_resolvers import CONFIG_DIR

TABLE1_CONFIG = CONFIG_DIR / "experiment" / "table1.yaml"
# The harness's methods that are not in the paper, in the order reports show them.
EXTRA_METHODS = ("rag", "rag_locomo", "last_turns")


@lru_cache(maxsize=1)
def table1_methods() -> tuple[str, ...]:
    """Table 1's methods in the paper's row order: the `method` sweep of configs/experiment/table1.yaml."""
    value = OmegaConf.select(OmegaConf.load(TABLE1_CONFIG), "hydra.sweeper.params.method")
    methods = tuple(m.strip() for m in str(value or "").split(",") if m.strip())
    if not methods or "scgmem" not in methods:
        raise ValueError(f"{TABLE1_CONFIG}: field 'hydra.sweeper.params.method': {value!r}: must list Table 1's "
                         "methods, scgmem among them")
    return methods


def table1_baselines() -> tuple[str, ...]:
    """Table 1's rows other than SCG-Mem, in order."""
    return tuple(m for m in table1_methods() if m != "scgmem")


def all_methods() -> tuple[str, ...]:
    """Every method config of the harness: Table 1's, then the others (configs/method/<name>.yaml)."""
    return table1_methods() + tuple(m for m in EXTRA_METHODS if m not in table1_methods())


def served_methods() -> tuple[str, ...]:
    """The methods a served Table 1 compares (every method but the last-turns smoke method)."""
    return tuple(m for m in all_methods() if m != "last_turns")
