"""A decoder with the interface of litert-torch's generative exports, small enough for a unit test:
signatures `prefill_4` and `decode` over an external KV cache (`tokens`, `input_pos`,
`kv_cache_k_0` in; `kv_cache_k_0` and, for decode, `logits` out). Each step writes its tokens'
embeddings into the cache at their positions (DYNAMIC_UPDATE_SLICE) and the logits read the sum of
the whole cache, so each step's answer depends on every step before it."""

from __future__ import annotations

import numpy as np

from gpulint.model import Model
from gpulint.model.build import ModelBuilder, SubgraphBuilder

VOCAB, DIM, CACHE, PREFILL = 32, 8, 16, 4


def decoder(head_scale: dict[int, float] | None = None, seed: int = 0) -> Model:
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
