"""SCG-Mem and the harness around it. `scgmem.baselines` is the repository's top-level
`baselines/` folder (the design card keeps it there; setup.py maps it into this namespace when
installed). Run from a source tree (an editable install, or `PYTHONPATH=.` on a machine where
nothing is installed, as scripts/device_check.sh does), the finder below maps the same name to the
folder beside this package, so both ways import the same files."""
import importlib.abc
import importlib.util
import sys
from pathlib import Path

_SOURCE_BASELINES = Path(__file__).resolve().parent.parent / "baselines"


class _SourceBaselinesFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "scgmem.baselines":
            return None  # submodules are found through the package's __path__
        return importlib.util.spec_from_file_location(
            fullname, _SOURCE_BASELINES / "__init__.py", submodule_search_locations=[str(_SOURCE_BASELINES)])


if (_SOURCE_BASELINES / "__init__.py").is_file() and (_SOURCE_BASELINES.parent / "pyproject.toml").is_file() and not any(
        isinstance(finder, _SourceBaselinesFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _SourceBaselinesFinder())

# `${cap:...}` in the method and protocol configs (scgmem/config_resolvers.py): registered on import,
# before any config that holds one is resolved.
from scgmem.config_resolvers import register as _register_config_resolvers  # noqa: E402

_register_config_resolvers()
