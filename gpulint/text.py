"""Model-provided strings made safe to show."""

from __future__ import annotations

MAX_TEXT = 200


def clean(text: str | None, limit: int = MAX_TEXT) -> str | None:
    """A model-provided string made safe to print: printable, one line, bounded.

    Names in a model are untrusted: they may hold control characters, terminal escapes, lone
    surrogates (kept by the reader so they round-trip) or megabytes of text.
    """
    if text is None:
        return None
    text = text.encode("utf-8", "replace").decode("utf-8", "replace")  # lone surrogates -> "?"
    s = "".join(ch if ch.isprintable() else "\ufffd" for ch in text)
    return s if len(s) <= limit else s[: limit - 1] + "…"
