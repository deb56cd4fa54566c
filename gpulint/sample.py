"""The built-in sample models, made with the project's builder: the classifier `gpulint demo` runs on,
and a tiny decoder with an LLM export's interface (`sample_decoder`).

A small image classifier with the habits that cost mobile GPUs: a 3-channel image input,
fp16 weights behind DEQUANTIZE, an atrous SPACE_TO_BATCH_ND -> CONV_2D -> BATCH_TO_SPACE_ND
block, and 6-channel tensors (not a multiple of 4).
"""

from __future__ import annotations

import numpy as np

from gpulint.model.build import ModelBuilder, SubgraphBuilder
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


# The decoder: signatures `prefill_4` and `decode` over an external KV cache, as litert-torch's generative
# converter writes them (`tokens`, `input_pos`, `kv_cache_k_0` in; `kv_cache_k_0` and, for decode,
# `logits` out). Each step writes its tokens' embeddings into the cache at their positions
# (DYNAMIC_UPDATE_SLICE) and the logits read the sum of the whole cache, so each step's answer depends
# on every step before it.
VOCAB, DIM, CACHE, PREFILL = 32, 8, 16, 4


def sample_decoder(head_scale: dict[int, float] | None = None, seed: int = 0) -> Model:
    """The decoder; `head_scale`: rows of the LM head multiplied (a broken candidate)."""
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((VOCAB, DIM)).astype(np.float32)
    head = rng.standard_normal((VOCAB, DIM)).astype(np.float32)
    for row, factor in (head_scale or {}).items():
        head[row] *= factor
    mb = ModelBuilder()
    for key, seq in (("prefill_4", PREFILL), ("decode", 1)):
        g = mb.subgraph(key)
        ins, outs = _signature(g, seq, table, head, logits=key == "decode")
        mb.signature(key, len(mb.model.subgraphs) - 1, ins, outs)
    return mb.build()


def _signature(
    g: SubgraphBuilder, seq: int, table: np.ndarray, head: np.ndarray, logits: bool
) -> tuple[dict[str, int], dict[str, int]]:
    tokens = g.input("tokens", [1, seq], "INT32")
    pos = g.input("input_pos", [seq], "INT32")
    cache = g.input("kv_cache_k_0", [1, CACHE, DIM])
    ids = g.op("RESHAPE", [tokens, g.const("ids_shape", np.array([seq], np.int32))], [seq], dtype="INT32")
    emb = g.op("EMBEDDING_LOOKUP", [ids, g.const("table", table)], [seq, DIM])
    emb = g.op("RESHAPE", [emb, g.const("emb_shape", np.array([1, seq, DIM], np.int32))], [1, seq, DIM])
    one = np.array([1], np.int32)
    start = g.op("SLICE", [pos, g.const("b", np.array([0], np.int32)), g.const("n", one)], [1], dtype="INT32")
    zero = g.const("zero", np.array([0], np.int32))
    starts = g.op("CONCATENATION", [zero, start, zero], [3], dtype="INT32", options=dict(axis=0))
    kv = g.op("DYNAMIC_UPDATE_SLICE", [cache, emb, starts], [1, CACHE, DIM], out_name="kv_cache_k_0_out")
    outs = {"kv_cache_k_0": kv}
    if logits:
        ctx = g.op("SUM", [kv, g.const("axis", one)], [1, DIM], options=dict(keep_dims=False))
        outs["logits"] = g.op("FULLY_CONNECTED", [ctx, g.const("head", head), -1], [1, VOCAB], out_name="logits")
    g.output(*outs.values())
    return {"tokens": tokens, "input_pos": pos, "kv_cache_k_0": cache}, outs
