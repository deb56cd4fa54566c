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

import hashlib
import importlib.util
import json
import shutil
import sys
import tempfile
import time
import traceback
import types
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_build  # the recipes: one definition of how the corpus converts

MODELS = ("efficientnet_b0", "resnet18", "unet", "vit_small")
SCHEMES = ("f32", "f16", "wo8", "dr8")
PACKAGES = (*torch_build.PACKAGES, "torchvision")
TORCHVISION = "torchvision==0.28.0"  # the release built for torch 2.13.0


def corpus_names() -> list[str]:
    """Every file of the corpus, by name: {model}_{scheme}.tflite."""
    return [f"{m}_{s}.tflite" for m in MODELS for s in SCHEMES]


def versions() -> dict[str, str]:
    out = {}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "absent"
    return out


def cache_key(vers: dict[str, str]) -> str:
    """Package versions + this script + torch_build.py (whose recipes it uses)."""
    scripts = [Path(__file__), Path(torch_build.__file__)]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in scripts)).hexdigest()
    text = json.dumps({"versions": vers, "script": digest}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
    start = time.monotonic()
    for model, (module, args) in models().items():
        for scheme in SCHEMES:
            name = f"{model}_{scheme}.tflite"
            t = time.monotonic()
            entry: dict[str, Any] = {"model": model, "scheme": scheme}
            try:
                (folder / name).write_bytes(torch_build.convert(module, args, scheme))
            except Exception as e:  # the converter's refusal is data: the tests skip with it
                where = traceback.extract_tb(e.__traceback__)[-1]
                words = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
                entry["error"] = f"{type(e).__name__}: {words} (in {Path(where.filename).name}:{where.name})"
            entry["seconds"] = round(time.monotonic() - t, 2)
            manifest["models"][name] = entry
            print(f"{name}: {entry.get('error', 'ok')} ({entry['seconds']} s)", file=sys.stderr, flush=True)
    manifest["build_seconds"] = round(time.monotonic() - start, 1)
    return manifest


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: torchvision_build.py CACHE  |  torchvision_build.py --key", file=sys.stderr)
        return 2
    key = cache_key(versions())
    if argv[0] == "--key":
        print(key)
        return 0
    cache = Path(argv[0])
    final = cache / key
    if not (final / "manifest.json").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache))
        try:
            manifest = build(tmp)
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)  # a half-built corpus is never taken for a built one
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(final)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
