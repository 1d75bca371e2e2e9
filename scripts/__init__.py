"""Tools wired into make and the device check. Each runs from the repository root as a module,
`python -m scripts.<name>`, so it imports scgmem and its sibling tools without touching
sys.path, installed or not (scripts/device_check.sh runs on a GPU machine without installing)."""
