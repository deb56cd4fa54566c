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

Cached by key (package versions + this script) like the PyTorch corpus; a model the converter refuses is recorded
in manifest.json with the converter's words. Imported without torch by the tests for its names and key.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

if __package__:
    from converters.torch_build import cache_key, convert, versions
else:  # run as a script from tests/converters
    sys.path.insert(0, str(Path(__file__).parent))
    from torch_build import cache_key, convert, versions  # type: ignore[no-redef]

NAMES = ("layernorm", "log_softmax", "masked_mean")


def key(vers: dict[str, str]) -> str:
    """The PyTorch corpus's key (package versions, torch_build.py) with this script's text: either changing
    rebuilds."""
    script = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    return cache_key({**vers, "torch_half_build": script})


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
    manifest: dict[str, Any] = {"versions": versions(), "models": {}}
    for name, (module, args) in modules().items():
        entry: dict[str, Any] = {}
        try:
            (folder / f"{name}.tflite").write_bytes(convert(module.eval(), args, "f32"))
        except Exception as e:  # the converter's refusal is data: the tests skip with it
            where = traceback.extract_tb(e.__traceback__)[-1]
            words = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
            entry["error"] = f"{type(e).__name__}: {words} (in {Path(where.filename).name}:{where.name})"
        manifest["models"][f"{name}.tflite"] = entry
        print(f"{name}.tflite: {entry.get('error', 'ok')}", file=sys.stderr, flush=True)
    return manifest


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: torch_half_build.py CACHE  |  torch_half_build.py --key", file=sys.stderr)
        return 2
    k = key(versions())
    if argv[0] == "--key":
        print(k)
        return 0
    cache = Path(argv[0])
    final = cache / k
    if not (final / "manifest.json").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{k}-", dir=cache))
        try:
            (tmp / "manifest.json").write_text(json.dumps(build(tmp), indent=1, sort_keys=True))
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)  # a half-built corpus is never taken for a built one
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(final)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
