"""The executor's errors, in a module of their own so that every part of the executor (layout,
program, lowering) can raise them without importing another part."""

from __future__ import annotations


class ExecutorError(RuntimeError):
    """The executor cannot run this model here; the message names device and op where it can."""


class DeviceError(ExecutorError):
    """The device refused (memory, resources), as opposed to an op the executor lacks."""


class Unlowered(ExecutorError):
    """Ops the executor has no lowering for: `ops` names each by its output tensors' names
    (which survive the preparing passes, where op indices do not), with its op and reason."""

    def __init__(self, message: str, ops: list[tuple[list[str], str, str]]) -> None:
        super().__init__(message)
        self.ops = ops
