"""The decoder the signature and generation tests use: gpulint.sample's, with litert-torch's interface."""

from gpulint.sample import CACHE, DIM, PREFILL, VOCAB
from gpulint.sample import sample_decoder as decoder

__all__ = ["CACHE", "DIM", "PREFILL", "VOCAB", "decoder"]
