"""The CPU policy tests use the shared tokenizer and renderer (tests/support/fixtures.py)."""
