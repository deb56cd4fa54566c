"""Converter corpora of our own, each built in a venv of its own (issues #15, #22)."""
