"""Build the half-precision corpus of issue #39: small torch.nn modules with the patterns that overflow in fp16,
converted by litert-torch (float32 only), the way tests/converters/torch_build.py builds the PyTorch corpus.

    .torch-venv/bin/python tests/converters/torch_half_build.py CACHE   # prints the folder it built or found
    .torch-venv/bin/python tests/converters/torch_half_build.py --key

Each model is the pattern as a PyTorch user writes it; what litert-torch 0.10 makes of it decides which pass
applies (it fuses exp / sum into SOFTMAX and sum / n into MEAN, so those spellings reach no pass):

    layernorm         nn.LayerNorm(768) over a transformer's hidden states (the tests feed activations with
                      outlier channels in +-400, as large language models have): litert-torch writes
                      SQUARED_DIFFERENCE -> MEAN -> ADD eps -> RSQRT (scaled-variance, GPU701/703)
    log_softmax       x - log(exp(x).sum(-1)) over 1000 logits, spelled out: EXP -> SUM -> LOG -> SUB
                      (stable-softmax, GPU702)
    masked_mean       the mean colour under a mask: (image * mask).sum((2, 3)) / mask.sum((2, 3)) over a
                      64 x 64 image in [0, 255]: MUL -> SUM -> DIV by a SUM (split-reduction)

Cached by key (package versions + this script + torch_build.py) like the PyTorch corpus; a model the converter refuses is recorded
in manifest.json with the converter's words. Imported without torch by the tests for its names and key.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

if __package__:
    from converters import corpus, torch_build
else:  # run as a script from tests/converters
    import corpus  # type: ignore[no-redef]
    import torch_build  # type: ignore[no-redef]

NAMES = ("layernorm", "log_softmax", "masked_mean")


def key(vers: dict[str, str]) -> str:
    """Package versions, this script and torch_build.py (whose recipe it uses): any changing rebuilds."""
    return corpus.cache_key(vers, __file__, torch_build.__file__)


def modules() -> dict[str, tuple[Any, tuple[Any, ...]]]:
    import torch
    from torch import nn

    class LogSoftmax(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x - torch.log(torch.exp(x).sum(-1, keepdim=True))

    class MaskedMean(nn.Module):
        def forward(self, image: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return (image * mask).sum((2, 3)) / mask.sum((2, 3))

    torch.manual_seed(0)
    norm = nn.LayerNorm(768)
    with torch.no_grad():  # trained-looking affine parameters
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.1, 0.1)
    return {
        "layernorm": (norm, (torch.randn(1, 64, 768) * 20,)),
        "log_softmax": (LogSoftmax(), (torch.randn(1, 8, 1000),)),
        "masked_mean": (MaskedMean(), (torch.rand(1, 3, 64, 64) * 255, torch.ones(1, 1, 64, 64))),
    }


def build(folder: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = {"versions": torch_build.versions(), "models": {}}
    for name, (module, args) in modules().items():
        make = partial(torch_build.convert, module.eval(), args, "f32")
        corpus.convert_into(manifest, folder, f"{name}.tflite", {}, make)
    return manifest


def main(argv: list[str]) -> int:
    return corpus.main(argv, "torch_half_build.py", key(torch_build.versions()), build)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
