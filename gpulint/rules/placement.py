"""Where the delegate puts one operator and why: the engine's answer per op, read by the
partition planner and every renderer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_NAME = 80  # the longest model-provided name quoted in a message
MAX_REASON = 400  # the longest reason quoted in a message


@dataclass
class Placement:
    """One operator: where the delegate puts it and why."""

    subgraph: int
    index: int
    op: str
    version: int
    placement: str  # "gpu" | "cpu" | "init-failure" | "refused"
    reasons: list[str] = field(default_factory=list)
    folded: bool = False  # a constant DEQUANTIZE the delegate folds into its consumers
    codes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    backend_failures: dict[str, str] = field(default_factory=dict)  # backend -> why it fails to build the op

    def to_json(self) -> dict[str, Any]:
        return {
            "subgraph": self.subgraph,
            "index": self.index,
            "op": self.op,
            "version": self.version,
            "placement": self.placement,
            "reasons": self.reasons,
            "init_failures": self.backend_failures,
        }
