"""One-op and two-op models on both sides of the conditions where the backends of LiteRT's GPU
accelerator (ML Drift on OpenCL, Metal and WebGPU) build differently (#38), shared by
tests/test_litert_backends.py (check on each backend) and tests/test_oracle_litert.py (the WebGPU
side against the real accelerator).

A dynamic-range FULLY_CONNECTED: a float input, constant INT8 weights with their own scales and no
DEQUANTIZE between (what ai-edge-quantizer's dynamic_wi8_afp32 and the TF converter's dynamic range
quantization write). ML Drift's parser makes a FULLY_CONNECTED_INT8 node of it
(ml_drift_delegate/tflite/model_builder.cc 3395-3410 at google-ai-edge/LiteRT@f67457790c9c);
on a rank-3 or rank-4 input its OpenCL and Metal kernels fail ("Unable to parse bc coord for BATCH
axis", google-ai-edge/LiteRT#9277) while WebGPU builds it (measured here on every case below).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpulint.model import Model
from gpulint.model.build import ModelBuilder

F32, I8 = np.float32, np.int8
K, N = 16, 16


@dataclass(frozen=True)
class FcCase:
    shape: tuple[int, ...]  # the FULLY_CONNECTED's input
    weights: str  # INT8 (dynamic range) | FLOAT32 | DEQUANTIZE (int8 behind an explicit DEQUANTIZE)
    add: bool  # an ADD of the input reads the output (a residual, as in google-ai-edge/LiteRT#9277)

    @property
    def id(self) -> str:
        return f"fc-{'x'.join(map(str, self.shape))}-{self.weights.lower()}{'-add' if self.add else ''}"

    @property
    def fails_on_opencl_and_metal(self) -> bool:
        return self.weights == "INT8" and len(self.shape) >= 3

    def model(self) -> Model:
        mb = ModelBuilder()
        g = mb.subgraph("main")
        x = g.input("x", list(self.shape))
        scales = (np.full(N, 0.01, F32), np.zeros(N, np.int64))
        if self.weights == "INT8":
            w = g.const("w", np.ones((N, K), I8), quant=scales)
        elif self.weights == "DEQUANTIZE":
            # int8 behind an explicit DEQUANTIZE is not dynamic range: the FULLY_CONNECTED reads a
            # float tensor. A rank-2 constant DEQUANTIZE whose first dimension is not 1 fails on every
            # backend alike ("Shape mismatch", md_const_dequantize_layout, google-ai-edge/LiteRT#9523)
            q = g.const("wq", np.ones((N, K), I8), quant=scales)
            w = g.op("DEQUANTIZE", [q], [N, K])
        else:
            w = g.const("w", np.ones((N, K), F32))
        rank3 = len(self.shape) > 2
        out = [*self.shape[:-1], N] if rank3 else [int(np.prod(self.shape[:-1])), N]
        y = g.op("FULLY_CONNECTED", [x, w, -1], out, options={"keep_num_dims": rank3})
        if self.add:
            y = g.op("ADD", [y, x], out)
        g.output(y)
        return mb.build()


FC_CASES = [
    FcCase(shape, weights, add)
    for shape in ((1, K), (8, K), (1, 8, K), (2, 8, K), (1, 2, 8, K))
    for weights in ("INT8", "FLOAT32")
    for add in (False, True)
]
