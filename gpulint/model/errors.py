"""The error every reader of a model raises: for read.py, and for litertlm.py, which read.py calls."""


class ModelError(Exception):
    """The input cannot be read as a model. The message is for the user, without the path."""
