"""Build the PyTorch corpus the way litert-torch users build it (issue #15): torch.nn -> litert_torch.convert.

Run by tests/converters/setup_torch.sh inside .torch-venv (torch, litert-torch; not gpulint's venv):

    .torch-venv/bin/python tests/converters/torch_build.py CACHE      # prints the folder it built or found

The families are small plain torch.nn stand-ins for what the issue converted from torchvision and friends
(torchvision does not install beside the CPU torch wheel here): a ResNet-like CNN, a ResNeXt-like grouped-conv
block, a ShuffleNet-like channel shuffle, a depthwise conv with a channel multiplier, the issue's one-op grouped
conv, a small ViT (LayerNorm, GELU, attention), a U-Net-like segmentation head (bilinear upsample, transposed
conv, skip concats), an EfficientNet-like net (MBConv blocks: depthwise, squeeze-excite, SiLU; #38 asked for
it) and GRU/LSTM text models behind an embedding lookup. Random weights (torch seed 0), NCHW
inputs as PyTorch has them (litert-torch adds the TRANSPOSEs). Each family in each scheme:

    f32   float
    f16   fp16 weights behind DEQUANTIZE       litert-torch's quant_recipes.full_fp16_recipe (ai-edge-quantizer)
    wo8   weight-only int8 behind DEQUANTIZE    quant_recipes.full_weight_only_recipe
    dr8   dynamic-range int8 (hybrid kernels)   quant_recipes.full_dynamic_recipe
    int8  PT2E static int8 (QDQ)               torchao prepare_pt2e/convert_pt2e with litert-torch's PT2EQuantizer

A model the converter refuses is recorded in manifest.json with the converter's own words, and the tests skip it
saying so. This file is also imported (without torch) by the tests, for the corpus's names and its cache key.
"""

from __future__ import annotations

import os
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

if __package__:
    from converters import corpus
else:  # run as a script from tests/converters
    import corpus  # type: ignore[no-redef]

FAMILIES = ("resnet", "resnext", "shufflenet", "dwmult", "gconv", "effnet", "vit", "unet", "gru", "lstm")
SCHEMES = ("f32", "f16", "wo8", "dr8", "int8")
TEXT = ("gru", "lstm")  # token-id inputs
VOCAB, SEQ = 1000, 16
PACKAGES = ("torch", "litert-torch", "ai-edge-quantizer", "ai-edge-litert", "torchao")


def corpus_names() -> list[str]:
    """Every file of the corpus, by name: {family}_{scheme}.tflite."""
    return [f"{f}_{s}.tflite" for f in FAMILIES for s in SCHEMES]


def versions() -> dict[str, str]:
    return corpus.versions(PACKAGES)


def cache_key(vers: dict[str, str]) -> str:
    """Package versions + this script (which holds every definition and setting)."""
    return corpus.cache_key(vers, __file__)


# ---------------------------------------------------------------- models (torch imported only when building)


def families() -> dict[str, tuple[Any, tuple[Any, ...]]]:
    """name -> (eval-mode module, sample args)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    def cbr(cin: int, cout: int, k: int = 3, s: int = 1, groups: int = 1) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), nn.ReLU()
        )

    class Basic(nn.Module):  # ResNet basic block
        def __init__(self, cin: int, cout: int, s: int) -> None:
            super().__init__()
            self.a, self.b = cbr(cin, cout, s=s), nn.Sequential(nn.Conv2d(cout, cout, 3, 1, 1), nn.BatchNorm2d(cout))
            self.down = nn.Sequential() if s == 1 and cin == cout else nn.Conv2d(cin, cout, 1, s)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.relu(self.b(self.a(x)) + self.down(x))

    class Head(nn.Module):  # global average pool + classifier
        def __init__(self, c: int, n: int = 10) -> None:
            super().__init__()
            self.fc = nn.Linear(c, n)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x.mean((2, 3)))

    class ResNeXt(nn.Module):  # bottleneck with a grouped 3x3 (cardinality 4), as ResNeXt/RegNet have
        def __init__(self) -> None:
            super().__init__()
            self.stem = cbr(3, 32, s=2)
            self.block = nn.Sequential(cbr(32, 32, 1), cbr(32, 32, 3, groups=4), nn.Conv2d(32, 32, 1))
            self.head = Head(32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.stem(x)
            return self.head(F.relu(self.block(x) + x))

    class Shuffle(nn.Module):  # ShuffleNetV2 unit: split, branch, concat, channel shuffle
        def __init__(self) -> None:
            super().__init__()
            self.stem = cbr(3, 24, s=2)
            self.branch = nn.Sequential(cbr(12, 12, 1), nn.Conv2d(12, 12, 3, 1, 1, groups=12), cbr(12, 12, 1))
            self.head = Head(24)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.stem(x)
            a, b = x.chunk(2, dim=1)
            x = torch.cat([a, self.branch(b)], 1)
            n, c, h, w = x.shape
            x = x.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
            return self.head(x)

    class ViT(nn.Module):  # patch embedding, 2 pre-norm blocks (attention, GELU MLP), mean pool
        def __init__(self, d: int = 32, heads: int = 4) -> None:
            super().__init__()
            self.patch = nn.Conv2d(3, d, 4, 4)
            self.pos = nn.Parameter(torch.randn(1, 64, d) * 0.02)
            self.blocks = nn.ModuleList(
                nn.ModuleDict(
                    dict(
                        n1=nn.LayerNorm(d),
                        attn=nn.MultiheadAttention(d, heads, batch_first=True),
                        n2=nn.LayerNorm(d),
                        mlp=nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d)),
                    )
                )
                for _ in range(2)
            )
            self.norm, self.fc = nn.LayerNorm(d), nn.Linear(d, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
            for b in self.blocks:
                h = b["n1"](x)
                x = x + b["attn"](h, h, h, need_weights=False)[0]
                x = x + b["mlp"](b["n2"](x))
            return self.fc(self.norm(x).mean(1))

    class UNet(nn.Module):  # two downs, a bilinear up and a transposed-conv up, skip concats, 3-class head
        def __init__(self) -> None:
            super().__init__()
            self.e1, self.e2, self.mid = cbr(3, 8), cbr(8, 16), cbr(16, 32)
            self.up2 = nn.ConvTranspose2d(32, 16, 2, 2)
            self.d2, self.d1 = cbr(32, 16), cbr(24, 8)
            self.head = nn.Conv2d(8, 3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            e1 = self.e1(x)
            e2 = self.e2(F.max_pool2d(e1, 2))
            m = self.mid(F.max_pool2d(e2, 2))
            d2 = self.d2(torch.cat([self.up2(m), e2], 1))
            up = F.interpolate(d2, scale_factor=2, mode="bilinear", align_corners=False)
            return self.head(self.d1(torch.cat([up, e1], 1)))

    class MBConv(nn.Module):  # EfficientNet's block: expand, depthwise, squeeze-excite, project (SiLU)
        def __init__(self, cin: int, cout: int, s: int, expand: int = 4) -> None:
            super().__init__()
            mid, squeeze = cin * expand, max(1, cin // 4)
            self.expand = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.SiLU())
            self.dw = nn.Sequential(
                nn.Conv2d(mid, mid, 3, s, 1, groups=mid, bias=False), nn.BatchNorm2d(mid), nn.SiLU()
            )
            self.se = nn.Sequential(nn.Conv2d(mid, squeeze, 1), nn.SiLU(), nn.Conv2d(squeeze, mid, 1), nn.Sigmoid())
            self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.residual = s == 1 and cin == cout

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.dw(self.expand(x))
            h = self.project(h * self.se(h.mean((2, 3), keepdim=True)))
            return x + h if self.residual else h

    class EffNet(nn.Module):  # an EfficientNet-B0-like stem, three MBConv blocks, a 1x1 head
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.SiLU())
            self.blocks = nn.Sequential(MBConv(16, 16, 1), MBConv(16, 24, 2), MBConv(24, 24, 1))
            self.top = nn.Sequential(nn.Conv2d(24, 64, 1, bias=False), nn.BatchNorm2d(64), nn.SiLU())
            self.head = Head(64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.top(self.blocks(self.stem(x))))

    class Text(nn.Module):  # embedding lookup -> GRU/LSTM -> [mean of outputs, last state] -> classifier
        def __init__(self, cell: type[nn.Module]) -> None:
            super().__init__()
            self.emb = nn.Embedding(VOCAB, 32)
            self.rnn = cell(32, 32, batch_first=True)
            self.fc = nn.Linear(64, 4)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            x = self.emb(ids)
            h0 = torch.zeros(1, x.shape[0], 32)
            # An explicit initial state and both outputs used: litert-torch 0.10's PT2E GRU annotator
            # (pt2e_quantizer_utils._annotate_gru_io_only) fails on a GRU without them.
            out, h = self.rnn(x, h0 if isinstance(self.rnn, nn.GRU) else (h0, h0))
            last = h if isinstance(self.rnn, nn.GRU) else h[0]
            return self.fc(torch.cat([out.mean(1), last[-1]], 1))

    torch.manual_seed(0)
    image = (torch.randn(1, 3, 32, 32),)
    tokens = (torch.randint(0, VOCAB, (1, SEQ), dtype=torch.int32),)
    nets = {
        "resnet": (nn.Sequential(cbr(3, 16, s=2), Basic(16, 16, 1), Basic(16, 32, 2), Head(32)), image),
        "resnext": (ResNeXt(), image),
        "shufflenet": (Shuffle(), image),
        # depthwise with channel multiplier 2 (groups == in_channels, out = 2 x in), then pointwise
        "dwmult": (
            nn.Sequential(cbr(3, 8), nn.Conv2d(8, 16, 3, 1, 1, groups=8), nn.ReLU(), nn.Conv2d(16, 8, 1)),
            image,
        ),
        # the one-op repro of item 1
        "gconv": (nn.Conv2d(32, 32, 3, 1, 1, groups=2), (torch.randn(1, 32, 16, 16),)),
        "vit": (ViT(), image),
        "unet": (UNet(), image),
        "gru": (Text(nn.GRU), tokens),
        "lstm": (Text(nn.LSTM), tokens),
        # built last: the random weights of the families before it stay what they were before it came
        "effnet": (EffNet(), image),
    }
    for module, _ in nets.values():
        module.eval()
        for m in module.modules():  # non-trivial BatchNorm statistics, so folding them is exercised
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return nets


def convert(module: Any, args: tuple[Any, ...], scheme: str) -> bytes:
    import litert_torch
    import torch
    from litert_torch.generative.quantize import quant_recipes

    if scheme == "int8":
        from litert_torch.quantize import pt2e_quantizer
        from litert_torch.quantize.quant_config import QuantConfig
        from torchao.quantization.pt2e import quantize_pt2e

        quantizer = pt2e_quantizer.PT2EQuantizer().set_global(
            pt2e_quantizer.get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False)
        )
        exported = torch.export.export(module, args).module()
        prepared = quantize_pt2e.prepare_pt2e(exported, quantizer)
        g = torch.Generator().manual_seed(1)
        for _ in range(8):  # calibration on random inputs of the sample's kind
            sample = args[0]
            if sample.dtype.is_floating_point:
                prepared(torch.randn(sample.shape, generator=g))
            else:
                prepared(torch.randint(0, VOCAB, sample.shape, generator=g, dtype=sample.dtype))
        quantized = quantize_pt2e.convert_pt2e(prepared, fold_quantize=False)
        edge = litert_torch.convert(quantized, args, quant_config=QuantConfig(pt2e_quantizer=quantizer))
    else:
        recipe = {
            "f32": None,
            "f16": quant_recipes.full_fp16_recipe,
            "wo8": quant_recipes.full_weight_only_recipe,
            "dr8": quant_recipes.full_dynamic_recipe,
        }[scheme]
        edge = litert_torch.convert(module, args, quant_config=recipe() if recipe else None)
    with tempfile.TemporaryDirectory() as tmp:
        edge.export(os.path.join(tmp, "m.tflite"))
        return Path(tmp, "m.tflite").read_bytes()


def build(folder: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = {"versions": versions(), "models": {}}
    for family, (module, args) in families().items():
        for scheme in SCHEMES:
            entry = {"family": family, "scheme": scheme}
            make = partial(convert, module, args, scheme)
            corpus.convert_into(manifest, folder, f"{family}_{scheme}.tflite", entry, make)
    return manifest


def main(argv: list[str]) -> int:
    return corpus.main(argv, "torch_build.py", cache_key(versions()), build)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
