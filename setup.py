"""Package list for setuptools: the top-level `baselines/` folder (the design card fixes it there)
installs as `scgmem.baselines`, so `scgmem` is the only top-level package in site-packages.
Everything else about the project is in pyproject.toml."""
from setuptools import find_packages, setup

BASELINES = ["scgmem." + name for name in find_packages(include=["baselines", "baselines.*"])]

setup(
    packages=find_packages(include=["scgmem", "scgmem.*"]) + BASELINES,
    package_dir={"scgmem.baselines": "baselines"},
)
