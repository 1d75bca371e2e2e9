"""Test support above the library: the whole harness on the test doubles (scgmem/llm/doubles), for
the tests, the batching benchmark and the prediction-identity check. Nothing in the library imports
it (tests/test_import_boundaries.py)."""
