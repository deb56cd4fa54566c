"""Models on both sides of the conditions where the backends of LiteRT's GPU accelerator (ML Drift on
OpenCL, Metal and WebGPU) build differently (#38), shared by tests/test_litert_backends.py (check on
each backend) and tests/test_oracle_litert.py (the WebGPU side against the real accelerator).

A dynamic-range FULLY_CONNECTED: a float input, constant INT8 weights with their own scales and no
DEQUANTIZE between (what ai-edge-quantizer's dynamic_wi8_afp32 and the TF converter's dynamic range
quantization write). ML Drift's parser makes a FULLY_CONNECTED_INT8 node of it without the output
RESHAPE of the float path (ml_drift_delegate/tflite/model_builder.cc 3395-3410 and 3460-3465 at
google-ai-edge/LiteRT@f67457790c9c), so an input [1, N, K] whose output is [N, C] (keep_num_dims
false) puts N rows on the BATCH axis, and the kernel fails: "Unable to parse bc coord for BATCH
axis" (google-ai-edge/LiteRT#9277 on OpenCL; issue #38's op matrix on Metal). WebGPU, measured here
(ai-edge-litert 2.3.0 on lavapipe), builds it up to 16 rows and fails from 17.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpulint.model import Model
from gpulint.model.build import ModelBuilder

F32, I8 = np.float32, np.int8
K, N = 16, 16
WEBGPU_MIN_ROWS = 17  # measured here: 16 rows build on WebGPU, 17 fail


@dataclass(frozen=True)
class FcCase:
    shape: tuple[int, ...]  # the FULLY_CONNECTED's input
    keep: bool  # keep_num_dims: the output keeps the input's rank (no reshape), else it is [rows, N]
    weights: str = "INT8"  # INT8 (dynamic range) | FLOAT32 | DEQUANTIZE (int8 behind an explicit DEQUANTIZE)
    add: bool = False  # an ADD reads the output (x + Linear(x), as in google-ai-edge/LiteRT#9277)

    @property
    def id(self) -> str:
        shape = "x".join(map(str, self.shape))
        return f"fc-{shape}-{'keep' if self.keep else 'flat'}-{self.weights.lower()}{'-add' if self.add else ''}"

    @property
    def rows(self) -> int:
        """The input's H*W in ML Drift's BHWC (ExtractTensorShape: [B, W, C], [B, H, W, C])."""
        return int(np.prod(self.shape[1:-1])) if len(self.shape) >= 3 else 1

    def fails_on(self, backend: str) -> bool:
        if self.weights != "INT8" or self.keep or len(self.shape) < 3 or self.shape[0] != 1:
            return False
        return self.rows >= (WEBGPU_MIN_ROWS if backend == "webgpu" else 2)

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
        out = [*self.shape[:-1], N] if self.keep else [int(np.prod(self.shape[:-1])), N]
        y = g.op("FULLY_CONNECTED", [x, w, -1], out, options={"keep_num_dims": self.keep})
        if self.add:
            y = g.op("ADD", [y, g.input("r", out)], out)
        g.output(y)
        return mb.build()


FC_CASES = [
    FcCase((1, K), True),  # rank 2, one row
    FcCase((8, K), True),  # rank 2 (#9277: "the rank-2 variant compiles")
    FcCase((1, 8, K), True),  # keep_num_dims: no reshape, nothing on the BATCH axis
    FcCase((1, 64, K), True),
    FcCase((1, 8, K), False),  # OpenCL and Metal fail, WebGPU builds (8 rows)
    FcCase((1, 8, K), False, add=True),
    FcCase((1, 16, K), False),  # WebGPU's last size that builds
    FcCase((1, 17, K), False),  # and its first that fails: every backend fails
    FcCase((1, 64, K), False, add=True),
    FcCase((1, 2, 16, K), False),  # rank 4: 32 rows
    FcCase((2, 17, K), False),  # batch 2: a kernel with a batch coordinate, every backend builds
    FcCase((1, 1, K), False),  # one row: nothing on the BATCH axis
    FcCase((1, 8, K), False, "FLOAT32"),  # float weights: the float path reshapes its output
    FcCase((1, 64, K), False, "FLOAT32", add=True),
]


@dataclass(frozen=True)
class DepthToSpaceCase:
    """DEPTH_TO_SPACE (block 2) on a batch: ML Drift's OpenCL backend generates a kernel its driver's
    compiler rejects for a batch above 1 (google-ai-edge/LiteRT#8459); WebGPU builds both (measured)."""

    batch: int

    @property
    def id(self) -> str:
        return f"depth-to-space-batch-{self.batch}"

    def fails_on(self, backend: str) -> bool:
        return backend == "opencl" and self.batch > 1

    def model(self) -> Model:
        mb = ModelBuilder()
        g = mb.subgraph("main")
        x = g.input("x", [self.batch, 4, 4, 16])
        g.output(g.op("DEPTH_TO_SPACE", [x], [self.batch, 8, 8, 4], options={"block_size": 2}))
        return mb.build()


D2S_CASES = [DepthToSpaceCase(1), DepthToSpaceCase(2)]
CASES: list[FcCase | DepthToSpaceCase] = [*FC_CASES, *D2S_CASES]
