"""The one error of the reference."""


class ReferenceError(RuntimeError):
    """The interpreter refused or crashed on the model."""
