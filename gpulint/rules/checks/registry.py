"""The check registry: `@check` functions by name, as target packs name them, and `run`.

A check takes an OpSignature (and the parameters its YAML entry gives) and returns the reason
the delegate refuses the op, or None. A graph check (`@graph_check`) takes a subgraph and its
delegated ops and returns (op, reason) for the first value its backend cannot build.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpulint.rules.signature import OpSignature
from gpulint.text import clean

Check = Callable[..., str | None]
CHECKS: dict[str, Check] = {}


def check(fn: Check) -> Check:
    CHECKS[fn.__name__] = fn
    return fn


GraphCheck = Callable[[Any, set[int]], tuple[int | None, str] | None]
GRAPH_CHECKS: dict[str, GraphCheck] = {}


def graph_check(fn: GraphCheck) -> GraphCheck:
    GRAPH_CHECKS[fn.__name__] = fn
    return fn


def run(name: str, sig: OpSignature, params: dict[str, Any]) -> str | None:
    """A check's verdict. An op whose operands do not fit its definition (too few inputs, shapes
    of the wrong rank in a corrupt or hand-made file) is refused with that reason, not a crash."""
    try:
        reason = CHECKS[name](sig, **params)
        return clean(reason, 400) if reason else None  # reasons quote tensor names from the model
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError) as e:
        return f"the op's operands do not fit the {name} check ({type(e).__name__}: {e})"
