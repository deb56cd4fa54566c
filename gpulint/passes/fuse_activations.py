"""Fold a standalone activation into the op that produces its input.

    RELU / RELU6 / RELU_N1_TO_1 (CONV_2D | DEPTHWISE_CONV_2D | FULLY_CONNECTED | ADD | SUB | MUL)
        -> the producer with fused_activation_function set

when the producer has no fused activation yet, nothing else reads the intermediate tensor,
and (for quantized tensors) the activation keeps its input's scale and zero point.

TANH is not folded, though the GPU delegate would accept it: the LiteRT CPU interpreter
(ai-edge-litert 2.3.0) refuses a CONV_2D with a fused TANH ("Node number 0 (CONV_2D) failed
to prepare"), so the rewritten model would no longer load on the CPU.
"""

from __future__ import annotations

from gpulint.model.ir import Model
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import consumers, only_reader, producers, prune

ACTIVATIONS = {"RELU": "RELU", "RELU6": "RELU6", "RELU_N1_TO_1": "RELU_N1_TO_1"}
PRODUCERS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL")


def run(model: Model, options: PassOptions) -> PassResult:
    changes: list[str] = []
    for si, sg in enumerate(model.subgraphs):
        fused = True
        while fused:
            fused = False
            readers, made_by = consumers(sg), producers(sg)
            for ai, act in enumerate(sg.operators):
                kind = ACTIVATIONS.get(model.op_name(act))
                if kind is None or not act.inputs or act.inputs[0] < 0:
                    continue
                x = act.inputs[0]
                pi = made_by.get(x)
                if pi is None or only_reader(sg, x, readers) != ai:
                    continue
                prod = sg.operators[pi]
                opts = prod.builtin_options
                if model.op_name(prod) not in PRODUCERS or opts is None or len(prod.outputs) != 1:
                    continue
                if opts.values.get("fused_activation_function") != "NONE":
                    continue
                qx, qy = sg.tensors[x].quantization, sg.tensors[act.outputs[0]].quantization
                if sg.tensors[x].type != "FLOAT32" and (
                    qx is None or qy is None or (qx.scale, qx.zero_point) != (qy.scale, qy.zero_point)
                ):
                    continue
                opts.values["fused_activation_function"] = kind
                prod.outputs = [act.outputs[0]]
                del sg.operators[ai]
                changes.append(f"subgraph {si}: fused {kind} (op {ai}) into {model.op_name(prod)} (op {pi})")
                fused = True
                break
    if changes:
        prune(model)
    return PassResult(changes)


PASS = Pass("fuse-activations", True, "fold RELU/RELU6/RELU_N1_TO_1 into the producing conv, FC or ADD/SUB/MUL", run)
