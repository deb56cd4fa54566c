"""Build the generative corpus (issue #47): litert-torch's generative examples -> multi-signature .tflite.

Run by tests/converters/setup_generative.sh inside .generative-venv (torch, litert-torch, tensorflow-cpu; not
gpulint's venv):

    .generative-venv/bin/python tests/converters/generative_build.py CACHE    # prints the folder it built or found

Each family is a model class of litert_torch.generative.examples with the example's own fake (tiny) config,
shrunk further where that config keeps the real model's width (TinyLlama, Qwen 3, Phi-2, SigLIP: 1-3k wide,
tens of MB), and random weights of our own (seeded, every parameter: see randomize): no checkpoint is read.
Decoders are converted as the examples' convert_to_tflite scripts do (utilities.converter.convert_to_tflite:
signatures `prefill_8` and `decode`, an external KV cache of 32 entries; Gemma 3 with the mask as an input and
the transposed KV cache, as its script's defaults have it); the non-decoders with litert_torch.signature(...).
Each model in each recipe:

    f32   quantize=none
    fp16  quantize=fp16                 fp16 weights behind DEQUANTIZE
    dr8   quantize=dynamic_int8         dynamic-range int8 (hybrid kernels)
    wo8   quantize=weight_only_int8     int8 weights behind DEQUANTIZE
    dr4   quantize=dynamic_int4_block32 dynamic-range int4, blocks of 32

The float model is converted once; each other recipe is the converter's own quantization step on those bytes
(litert_torch's converter does exactly translate_recipe.quantize_model(float bytes, recipe) after conversion,
with the recipe converter.get_quant_recipe_from_flag makes), so four conversions are not spent on it again.
.litertlm bundles of some of them are made with litert-torch's own builder (utilities.litertlm_builder, the
LiteRT-LM builder package) and a tiny SentencePiece tokenizer trained here. A model the converter refuses is
recorded in manifest.json with the converter's own words, and the tests skip it saying so. This file is also
imported (without torch) by the tests, for the corpus's names and its cache key.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

if __package__:
    from converters import corpus
else:  # run as a script from tests/converters
    import corpus  # type: ignore[no-redef]

DECODERS = ("smollm", "tinyllama", "gemma3", "qwen3", "phi2")
ENCODERS = ("clip", "siglip")  # Stable Diffusion's CLIP text encoder, Gemma 3's SigLIP image encoder
FAMILIES = DECODERS + ENCODERS
RECIPES = ("f32", "fp16", "dr8", "wo8", "dr4")
QUANTIZE = {
    "f32": "none",
    "fp16": "fp16",
    "dr8": "dynamic_int8",
    "wo8": "weight_only_int8",
    "dr4": "dynamic_int4_block32",
}
BUNDLES = (("smollm", "f32"), ("qwen3", "dr8"), ("gemma3", "fp16"))  # .litertlm: (family, recipe)
PREFILL, KV_LEN = 8, 32
PACKAGES = (
    "torch",
    "litert-torch",
    "ai-edge-quantizer",
    "ai-edge-litert",
    "litert-converter",
    "litert-lm-builder",
    "tensorflow-cpu",
    "protobuf",
    "sentencepiece",
)


def corpus_names() -> list[str]:
    """Every file of the corpus, by name: {family}_{recipe}.tflite, then the bundles."""
    models = [f"{f}_{r}.tflite" for f in FAMILIES for r in RECIPES]
    return models + [f"{f}_{r}.litertlm" for f, r in BUNDLES]


def versions() -> dict[str, str]:
    return corpus.versions(PACKAGES)


def cache_key(vers: dict[str, str]) -> str:
    """Package versions + this script (which holds every definition and setting)."""
    return corpus.cache_key(vers, __file__)


# ---------------------------------------------------------------- models (torch imported only when building)


def narrow(config: Any, dim: int, heads: int, head_dim: int, groups: int) -> Any:
    """A fake config that kept the real model's width, narrowed (every block config alike)."""
    config.embedding_dim = dim
    blocks = config.block_configs if isinstance(config.block_configs, list) else [config.block_configs]
    for block in blocks:
        block.attn_config.num_heads = heads
        block.attn_config.head_dim = head_dim
        block.attn_config.num_query_groups = groups
    return config


def decoder(family: str) -> tuple[Any, Any, Any]:
    """family -> (eval-mode model, its config, the ExportConfig its example's script uses)."""
    from litert_torch.generative.layers import kv_cache
    from litert_torch.generative.utilities import export_config

    ec = export_config.ExportConfig()
    mask_cache = KV_LEN
    if family == "smollm":  # SmolLM2 135M: GQA 9/3 heads, 576 wide (the fake config keeps it: ~2M params)
        from litert_torch.generative.examples.smollm import smollm

        config = smollm.get_fake_model_config_v2()
        cls: Any = smollm.SmolLM2
    elif family == "tinyllama":
        from litert_torch.generative.examples.tiny_llama import tiny_llama

        config = narrow(tiny_llama.get_fake_model_config(), 256, 4, 64, 2)
        cls = tiny_llama.TinyLlama
    elif family == "gemma3":  # Gemma 3 1B decoder: sliding-window and global layers, QK norm
        from litert_torch.generative.examples.gemma3 import decoder as gemma3

        config = gemma3.get_fake_decoder_config_1b()
        cls = gemma3.Decoder
        ec.mask_as_input = True  # convert_gemma3_to_tflite.py's defaults
        ec.kvcache_layout = kv_cache.KV_LAYOUT_TRANSPOSED
        mask_cache = 0
    elif family == "qwen3":  # Qwen 3: QK norm, GQA
        from litert_torch.generative.examples.qwen import qwen3

        config = narrow(qwen3.get_fake_model_config(), 256, 4, 64, 2)
        cls = qwen3.Qwen3
    elif family == "phi2":  # Phi-2: LayerNorm, parallel residual, partial rotary (0.4 of the head), biases
        from litert_torch.generative.examples.phi import phi2

        config = narrow(phi2.get_fake_model_config(), 320, 4, 80, 4)
        cls = phi2.Phi2
    else:
        raise ValueError(family)
    return cls(config, mask_cache_size=mask_cache).eval(), config, ec


def encoder(family: str) -> tuple[Any, str, dict[str, Any]]:
    """family -> (eval-mode model, signature name, sample kwargs)."""
    import torch

    if family == "clip":
        from litert_torch.generative.examples.stable_diffusion import clip

        config = clip.get_fake_model_config()
        tokens = torch.arange(1, config.max_seq_len + 1, dtype=torch.int32).unsqueeze(0)
        return clip.CLIP(config).eval(), "encode", {"tokens": tokens}
    if family == "siglip":
        from litert_torch.generative.examples.gemma3 import image_encoder

        config = narrow(image_encoder.get_fake_image_encoder_config(), 128, 4, 32, 4)
        model = image_encoder.SiglipVisionEncoderWithExit(config).eval()
        size = config.image_embedding.image_size
        return model, "encode", {"pixel_values": torch.zeros(1, 3, size, size)}
    raise ValueError(family)


def randomize(model: Any) -> Any:
    """Random weights of our own, seeded: litert-torch's layers leave some parameters as torch.empty (its
    LayerNorm's weight and bias: uninitialized memory, NaN in CLIP, SigLIP and Phi-2, measured), since its
    models expect a checkpoint. Norm scales near 1 and shifts near 0; every other weight ~ N(0, 1/fan_in)."""
    import torch

    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32).to(p.dtype)
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * noise)
            elif "norm" in name or p.dim() < 2:
                p.copy_(0.1 * noise)
            else:
                p.copy_(noise / p.shape[-1] ** 0.5)
    return model


def quantize(float_bytes: bytes, recipe: str, config: Any) -> bytes:
    """The converter's own post-conversion quantization step (litert_converter.py) on the float model."""
    from litert_torch.generative.utilities import converter
    from litert_torch.quantize import translate_recipe

    quant = converter.get_quant_recipe_from_flag(QUANTIZE[recipe], config)
    ai_edge = translate_recipe.translate_to_ai_edge_recipe(quant.generative_recipe)
    return bytes(translate_recipe.quantize_model(float_bytes, ai_edge))


def convert_float(family: str) -> tuple[bytes, Any]:
    import litert_torch
    import torch
    from litert_torch.generative.utilities import converter

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        if family in DECODERS:
            model, config, ec = decoder(family)
            randomize(model)
            path = converter.convert_to_tflite(
                model,
                output_path=tmp,
                output_name_prefix=family,
                prefill_seq_len=PREFILL,
                kv_cache_max_len=KV_LEN,
                quantize="none",
                config=config,
                export_config=ec,
            )
            return Path(path).read_bytes(), config
        model, signature, kwargs = encoder(family)
        randomize(model)
        edge = litert_torch.signature(signature, model, sample_kwargs=kwargs).convert()
        edge.export(os.path.join(tmp, "m.tflite"))
        return Path(tmp, "m.tflite").read_bytes(), getattr(model, "config", None)


def tokenizer(folder: Path) -> Path:
    """A tiny SentencePiece model (the bundles need a tokenizer; none is downloaded)."""
    import sentencepiece as spm

    text = [
        "the quick brown fox jumps over the lazy dog",
        "a tiny model of our own, with random weights, for the GPU delegate",
        "prefill eight tokens then decode one token at a time into the cache",
    ] * 20
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_writer=out,
        vocab_size=64,
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
    )
    path = folder / "tokenizer.model"
    path.write_bytes(out.getvalue())
    return path


def bundle(tflite: Path, family: str, out: Path, workdir: Path, spm: Path) -> None:
    from litert_torch.generative.utilities import litertlm_builder

    kinds = {"qwen3": "qwen3", "gemma3": "gemma3"}
    litertlm_builder.build_litertlm(
        tflite_model_path=str(tflite),
        workdir=str(workdir),
        output_path=str(workdir),
        context_length=KV_LEN,
        tokenizer_model_path=str(spm),
        start_token_id=1,
        stop_token_ids=[2],
        llm_model_type=kinds.get(family, "generic"),
    )
    shutil.move(workdir / (tflite.stem + ".litertlm"), out)


def describe(data: bytes) -> dict[str, Any]:
    """Signatures, subgraphs and each signature's op histogram, read with the TFLite schema."""
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(data, 0)
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}

    def opname(code: Any) -> str:
        op = max(code.builtinCode, code.deprecatedBuiltinCode)
        return names.get(op, str(op)) if op != schema.BuiltinOperator.CUSTOM else f"CUSTOM:{code.customCode}"

    sigs = {}
    for sig in model.signatureDefs or []:
        sub = model.subgraphs[sig.subgraphIndex]
        hist = Counter(opname(model.operatorCodes[op.opcodeIndex]) for op in sub.operators or [])
        key = sig.signatureKey.decode() if isinstance(sig.signatureKey, bytes) else sig.signatureKey
        sigs[key] = {
            "subgraph": sig.subgraphIndex,
            "inputs": len(sig.inputs or []),
            "outputs": len(sig.outputs or []),
            "ops": len(sub.operators or []),
            "histogram": dict(hist.most_common()),
        }
    return {"subgraphs": len(model.subgraphs), "signatures": sigs}


def build(folder: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = {"versions": versions(), "models": {}}

    def record(name: str, entry: dict[str, Any], t: float) -> None:
        if "error" not in entry:
            entry["size"] = (folder / name).stat().st_size
        corpus.record(manifest, name, entry, t)

    for family in FAMILIES:
        t = time.monotonic()
        try:
            float_bytes, config = convert_float(family)
            failed = ""
        except Exception as e:  # the converter's refusal is data: the tests skip with it
            float_bytes, config, failed = b"", None, corpus.error_words(e)
            traceback.print_exc()
        for recipe in RECIPES:
            name = f"{family}_{recipe}.tflite"
            kind = "decoder" if family in DECODERS else "encoder"
            entry: dict[str, Any] = {"file": name, "family": family, "recipe": recipe, "kind": kind}
            if recipe != "f32":
                t = time.monotonic()
            try:
                if failed:
                    raise RuntimeError(f"the float conversion failed: {failed}")
                data = float_bytes if recipe == "f32" else quantize(float_bytes, recipe, config)
                (folder / name).write_bytes(data)
                entry.update(describe(data))
            except Exception as e:
                entry["error"] = corpus.error_words(e)
            record(name, entry, t)

    work = Path(tempfile.mkdtemp(prefix="litertlm-", dir=folder))
    try:
        spm = tokenizer(work)
        for family, recipe in BUNDLES:
            name, source = f"{family}_{recipe}.litertlm", folder / f"{family}_{recipe}.tflite"
            entry = {"file": name, "family": family, "recipe": recipe, "kind": "litertlm", "source": source.name}
            t = time.monotonic()
            try:
                if not source.is_file():
                    raise RuntimeError(f"{source.name} was not converted")
                bundle(source, family, folder / name, work, spm)
            except Exception as e:
                entry["error"] = corpus.error_words(e)
            record(name, entry, t)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return manifest


def main(argv: list[str]) -> int:
    return corpus.main(argv, "generative_build.py", cache_key(versions()), build)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
