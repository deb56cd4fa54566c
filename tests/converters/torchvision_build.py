"""Build torchvision's own architectures the way litert-torch users export them (issue #49).

Run by tests/converters/setup_torch.sh inside .torch-venv (torch, litert-torch, torchvision; not gpulint's venv):

    .torch-venv/bin/python tests/converters/torchvision_build.py CACHE     # prints the folder it built or found

The look-alike families of torch_build.py do not reproduce what the issue measured on real architectures, so
these are torchvision 0.28's own definitions (torchvision.models): EfficientNet-B0, ResNet-18 and a ViT-small
(torchvision's VisionTransformer at timm's vit_small_patch16_224 size: patch 16, depth 12, width 384, 6 heads,
MLP 1536). torchvision has no U-Net; "unet" is the standard U-Net of Ronneberger et al. as the common PyTorch
implementation writes it (double 3x3 conv + BatchNorm + ReLU, four max-pool downs, four transposed-conv ups with
skip concats, a 1x1 head), at base width 32. Random weights (torch seed 0, BatchNorm statistics randomised so
folding them is exercised), eval mode, NHWC input and output (litert_torch.to_channel_last_io, as a GPU user
exports them: the delegate's layout), 224x224 images (U-Net 128x128).

torchvision's wheel on PyPI is built against CUDA torch: its C++ ops (nms, roi_align) do not load beside the CPU
torch wheel, and `import torchvision` fails registering their meta kernels. The models are pure Python and use
none of those ops, so the build imports torchvision.models without running torchvision/__init__.py (an empty
package object over the installed folder): the architectures are torchvision's code, unchanged.

Each model in each of torch_build.py's recipes (the same litert-torch calls, imported from there):

    f32   float (the control)
    f16   fp16 weights behind DEQUANTIZE       quant_recipes.full_fp16_recipe
    wo8   weight-only int8 behind DEQUANTIZE    quant_recipes.full_weight_only_recipe
    dr8   dynamic-range int8 (hybrid kernels)   quant_recipes.full_dynamic_recipe

A model the converter refuses is recorded in manifest.json with the converter's own words, and the tests skip it
saying so. This file is also imported (without torch) by the tests, for the corpus's names and its cache key.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

if __package__:
    from converters import corpus, torch_build  # torch_build: the recipes, one definition of how a corpus converts
else:  # run as a script from tests/converters
    import corpus  # type: ignore[no-redef]
    import torch_build  # type: ignore[no-redef]

MODELS = ("efficientnet_b0", "resnet18", "unet", "vit_small")
SCHEMES = ("f32", "f16", "wo8", "dr8")
PACKAGES = (*torch_build.PACKAGES, "torchvision")
TORCHVISION = "torchvision==0.28.0"  # the release built for torch 2.13.0


def corpus_names() -> list[str]:
    """Every file of the corpus, by name: {model}_{scheme}.tflite."""
    return [f"{m}_{s}.tflite" for m in MODELS for s in SCHEMES]


def versions() -> dict[str, str]:
    return corpus.versions(PACKAGES)


def cache_key(vers: dict[str, str]) -> str:
    """Package versions + this script + torch_build.py (whose recipes it uses)."""
    return corpus.cache_key(vers, __file__, torch_build.__file__)


# ---------------------------------------------------------------- models (torch imported only when building)


def torchvision_models() -> Any:
    """torchvision.models, imported without torchvision/__init__.py (whose C++ ops need CUDA torch here)."""
    if "torchvision" not in sys.modules:
        spec = importlib.util.find_spec("torchvision")
        if spec is None or spec.submodule_search_locations is None:
            raise ImportError(f"torchvision is not installed ({TORCHVISION})")
        package = types.ModuleType("torchvision")
        package.__path__ = list(spec.submodule_search_locations)
        package.__version__ = metadata.version("torchvision")  # type: ignore[attr-defined]
        sys.modules["torchvision"] = package
    import torchvision.models

    return torchvision.models


def models() -> dict[str, tuple[Any, tuple[Any, ...]]]:
    """name -> (eval-mode module with NHWC input and output, NHWC sample args)."""
    import litert_torch
    import torch
    from torch import nn

    tv = torchvision_models()

    def double(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        )

    class UNet(nn.Module):  # Ronneberger et al. 2015, with BatchNorm and padded convs as PyTorch ports have it
        def __init__(self, channels: int = 3, classes: int = 2, base: int = 32) -> None:
            super().__init__()
            widths = [base * 2**i for i in range(5)]
            self.inc = double(channels, widths[0])
            self.downs = nn.ModuleList(
                nn.Sequential(nn.MaxPool2d(2), double(widths[i], widths[i + 1])) for i in range(4)
            )
            self.ups = nn.ModuleList(nn.ConvTranspose2d(widths[i + 1], widths[i], 2, 2) for i in reversed(range(4)))
            self.convs = nn.ModuleList(double(widths[i + 1], widths[i]) for i in reversed(range(4)))
            self.outc = nn.Conv2d(widths[0], classes, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            skips = [self.inc(x)]
            for down in self.downs:
                skips.append(down(skips[-1]))
            x = skips.pop()
            for up, conv in zip(self.ups, self.convs, strict=True):
                x = conv(torch.cat([skips.pop(), up(x)], 1))
            return self.outc(x)

    torch.manual_seed(0)
    nets: dict[str, tuple[nn.Module, tuple[int, int], bool]] = {
        "efficientnet_b0": (tv.efficientnet_b0(), (224, 224), False),
        "resnet18": (tv.resnet18(), (224, 224), False),
        "unet": (UNet(), (128, 128), True),
        "vit_small": (
            tv.VisionTransformer(
                image_size=224, patch_size=16, num_layers=12, num_heads=6, hidden_dim=384, mlp_dim=1536
            ),
            (224, 224),
            False,
        ),
    }
    out = {}
    for name, (module, (h, w), image_out) in nets.items():
        module.eval()
        for m in module.modules():  # non-trivial BatchNorm statistics, so folding them is exercised
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        wrapped = litert_torch.to_channel_last_io(module, args=[0], outputs=[0] if image_out else [])
        out[name] = (wrapped.eval(), (torch.randn(1, h, w, 3),))
    return out


def build(folder: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = {"versions": versions(), "models": {}}
    for model, (module, args) in models().items():
        for scheme in SCHEMES:
            entry = {"model": model, "scheme": scheme}
            make = partial(torch_build.convert, module, args, scheme)
            corpus.convert_into(manifest, folder, f"{model}_{scheme}.tflite", entry, make)
    return manifest


def main(argv: list[str]) -> int:
    return corpus.main(argv, "torchvision_build.py", cache_key(versions()), build)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
