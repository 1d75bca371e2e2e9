"""`python -m scgmem.run` (same as `scgmem-run`); the runner itself is scgmem/harness/run.py."""
from scgmem.harness.run import main

if __name__ == "__main__":
    main()
