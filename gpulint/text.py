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


def op_ranges(indices: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7"."""
    out: list[str] = []
    for i in sorted(set(indices)):
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = out[-1].split("-")[0] + f"-{i}"
        else:
            out.append(str(i))
    return ", ".join(out)
