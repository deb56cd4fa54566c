"""Turn a quantized (int8/uint8) model into a float model (unsafe: changes the precision).

    int8/uint8 runtime tensors            -> float32, quantization dropped
    int8/uint8 constant weights, int32 bias -> float32 constants, dequantized (per tensor or channel)
    QUANTIZE / DEQUANTIZE between them    -> removed (they became float -> float)
    model inputs and outputs               -> unchanged: an int8 input gets a DEQUANTIZE after
                                               it, an int8 output a QUANTIZE before it

The GPU delegate computes int8 models in float anyway (shared/research/gpu_delegate_rules.md
§6); the float model it gets this way has no fake-quant nodes and no version bumps. Outputs
move by the quantization error of the original, which is why the pass is unsafe. Ops go
back to version 1 (2 for a dilated DEPTHWISE_CONV_2D), the float versions of op_version.cc.
"""

from __future__ import annotations

from gpulint.model.ir import Model, Operator, Options, Subgraph, Tensor
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import dequantize, prune, replace_uses, set_const

QUANT_TYPES = ("INT8", "UINT8")


def _float_twin(t: Tensor) -> Tensor:
    return Tensor(f"{t.name}/float", list(t.shape), "FLOAT32", 0, None, shape_signature=t.shape_signature)


def run(model: Model, options: PassOptions) -> PassResult:
    result = PassResult()
    for si, sg in enumerate(model.subgraphs):
        runtime = {
            i
            for i, t in enumerate(sg.tensors)
            if t.type in QUANT_TYPES and not len(model.buffers[t.buffer].data) and t.quantization
        }
        runtime -= _edges(model, sg)
        if not runtime:
            continue
        if any(
            t.quantization and t.quantization.scale and len(t.quantization.scale) > 1
            for i, t in enumerate(sg.tensors)
            if i in runtime
        ):
            result.skipped.append(f"subgraph {si}: a runtime tensor is quantized per channel")
            continue
        # The interface stays: int8 inputs are dequantized, int8 outputs quantized, at the edges.
        edges_in = [t for t in sg.inputs if t in runtime]
        edges_out = [t for t in sg.outputs if t in runtime]
        new_ops_front: list[Operator] = []
        new_ops_back: list[Operator] = []
        for t in edges_in:
            twin = _rename(sg, t)
            new_ops_front.append(Operator(model.opcode_index("DEQUANTIZE", 1), [t], [twin]))
        for t in edges_out:
            twin = _rename(sg, t)
            new_ops_back.append(Operator(model.opcode_index("QUANTIZE", 1), [twin], [t]))
        for i in runtime - set(edges_in) - set(edges_out):
            tensor = sg.tensors[i]
            tensor.type, tensor.quantization = "FLOAT32", None
        # Constants read by the converted ops: weights and biases to float32.
        converted = 0
        for op in sg.operators:
            for t in op.inputs:
                const = sg.tensors[t] if t >= 0 else None
                if const is None or const.type not in (*QUANT_TYPES, "INT32") or not const.quantization:
                    continue
                if not const.quantization.scale or not len(model.buffers[const.buffer].data):
                    continue
                values = dequantize(model, const)
                if values is None:
                    continue
                set_const(model, sg, t, values)
                const.quantization = None
                converted += 1
        # QUANTIZE / DEQUANTIZE that now map float to float are gone; the rest go to version 1.
        keep: list[Operator] = []
        removed = 0
        for op in sg.operators:
            name = model.op_name(op)
            if name in ("QUANTIZE", "DEQUANTIZE") and len(op.inputs) == 1 and op.inputs[0] >= 0:
                src, dst = op.inputs[0], op.outputs[0]
                if sg.tensors[src].type == sg.tensors[dst].type == "FLOAT32":
                    if dst not in sg.outputs:
                        replace_uses(sg, dst, src)
                    else:  # a model output: its producer writes it directly
                        for other in sg.operators:
                            other.outputs = [dst if o == src else o for o in other.outputs]
                            other.inputs = [dst if i == src else i for i in other.inputs]
                    removed += 1
                    continue
            version = 2 if name == "DEPTHWISE_CONV_2D" and _dilated(op.builtin_options) else 1
            op.opcode_index = model.opcode_index(name, version)
            keep.append(op)
        sg.operators = new_ops_front + keep + new_ops_back
        result.changes.append(
            f"subgraph {si}: {len(runtime)} int8/uint8 tensors to float32, {converted} constants dequantized, "
            f"{removed} QUANTIZE/DEQUANTIZE removed, {len(edges_in) + len(edges_out)} kept at the interface"
        )
    if result.changes:
        prune(model)
    return result


def _edges(model: Model, sg: Subgraph) -> set[int]:
    """Quantized interface tensors already converted at the edge (read only by DEQUANTIZE, or
    written by a QUANTIZE of a float tensor): what a second run of the pass must leave alone."""
    readers: dict[int, set[str]] = {}
    writer: dict[int, tuple[str, list[int]]] = {}
    for op in sg.operators:
        for t in op.inputs:
            readers.setdefault(t, set()).add(model.op_name(op))
        for t in op.outputs:
            writer[t] = (model.op_name(op), op.inputs)
    done = {t for t in sg.inputs if readers.get(t) == {"DEQUANTIZE"}}
    for t in sg.outputs:
        name, inputs = writer.get(t, ("", []))
        if name == "QUANTIZE" and all(i >= 0 and sg.tensors[i].type == "FLOAT32" for i in inputs):
            done.add(t)
    return done


def _rename(sg: Subgraph, t: int) -> int:
    """Ops inside the graph use a new float32 twin of interface tensor `t` instead of it."""
    sg.tensors.append(_float_twin(sg.tensors[t]))
    twin = len(sg.tensors) - 1
    for op in sg.operators:
        op.outputs = [twin if o == t else o for o in op.outputs]
        op.inputs = [twin if i == t else i for i in op.inputs]
    return twin


def _dilated(opts: Options | None) -> bool:
    return opts is not None and (opts.get("dilation_h_factor", 1) != 1 or opts.get("dilation_w_factor", 1) != 1)


PASS = Pass("quantized-to-float", False, "turn an int8/uint8 model into a float model, keeping its interface", run)
