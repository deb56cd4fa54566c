"""The built-in sample model that `gpulint demo` runs on, made with the project's builder.

A small image classifier with the habits that cost mobile GPUs: a 3-channel image input,
fp16 weights behind DEQUANTIZE, an atrous SPACE_TO_BATCH_ND -> CONV_2D -> BATCH_TO_SPACE_ND
block, and 6-channel tensors (not a multiple of 4).
"""

from __future__ import annotations

import numpy as np

from gpulint.model.build import ModelBuilder
from gpulint.model.ir import Model


def sample_model(seed: int = 0) -> Model:
    rng = np.random.default_rng(seed)

    def weights(*shape: int) -> np.ndarray:
        fan_in = int(np.prod(shape[1:]))
        w: np.ndarray = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
        return w

    mb = ModelBuilder(description="gpulint sample classifier")
    g = mb.subgraph("main")
    image = g.input("image", [1, 64, 64, 3])

    w16 = g.const("stem/weights_fp16", weights(8, 3, 3, 3).astype(np.float16))
    w = g.op("DEQUANTIZE", [w16], [8, 3, 3, 3], out_name="stem/weights")
    x = g.op(
        "CONV_2D",
        [image, w, g.const("stem/bias", np.zeros(8, np.float32))],
        [1, 32, 32, 8],
        options=dict(padding="SAME", stride_w=2, stride_h=2, fused_activation_function="RELU6"),
        out_name="stem/relu6",
    )
    x = g.op(
        "DEPTHWISE_CONV_2D",
        [x, g.const("dw/weights", weights(1, 3, 3, 8)), g.const("dw/bias", np.zeros(8, np.float32))],
        [1, 32, 32, 8],
        options=dict(padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1, fused_activation_function="RELU"),
        out_name="dw/relu",
    )

    # An atrous (dilation 2) 3x3 conv the way older converters wrote it.
    block = g.const("atrous/block", np.array([2, 2], np.int32))
    x = g.op(
        "SPACE_TO_BATCH_ND",
        [x, block, g.const("atrous/paddings", np.array([[2, 2], [2, 2]], np.int32))],
        [4, 18, 18, 8],
        out_name="atrous/space_to_batch",
    )
    x = g.op(
        "CONV_2D",
        [x, g.const("atrous/weights", weights(6, 3, 3, 8)), g.const("atrous/bias", np.zeros(6, np.float32))],
        [4, 16, 16, 6],
        options=dict(padding="VALID", stride_w=1, stride_h=1),
        out_name="atrous/conv",
    )
    x = g.op(
        "BATCH_TO_SPACE_ND",
        [x, block, g.const("atrous/crops", np.zeros((2, 2), np.int32))],
        [1, 32, 32, 6],
        out_name="atrous/batch_to_space",
    )

    x = g.op(
        "MEAN",
        [x, g.const("pool/axes", np.array([1, 2], np.int32))],
        [1, 6],
        options=dict(keep_dims=False),
        out_name="pool/mean",
    )
    x = g.op(
        "FULLY_CONNECTED",
        [x, g.const("head/weights", weights(10, 6)), g.const("head/bias", np.zeros(10, np.float32))],
        [1, 10],
        out_name="head/logits",
    )
    probs = g.op("SOFTMAX", [x], [1, 10], options=dict(beta=1.0), out_name="probabilities")
    g.output(probs)
    mb.signature("serving_default", 0, inputs={"image": image}, outputs={"probabilities": probs})
    mb.metadata("min_runtime_version", b"1.14.0\0\0\0\0\0\0\0\0\0\0")
    return mb.build()
