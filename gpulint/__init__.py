"""gpulint: make TensorFlow Lite / LiteRT models ready for the GPU delegate, and prove it."""

__version__ = "0.1.0"
