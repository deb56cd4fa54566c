"""Run a model's main subgraph on OpenCL the way the GPU delegate lays it out.

Everything but the run happens once, when the Executor is made, in this order:
1. prepare.py: the executor's copy of the model, rewritten by named steps (constants
   densified and dequantized, int8 ops made float, shape math folded, binary operands hoisted
   for fusion), and the int8 interface the host converts.
2. graph.py: a read-only view of that model; fusion.py: the fusion plan (elementwise ops run
   in their producer conv's epilogue, zero PADs merged into convs), decided from the view.
3. buffers.py: device buffers in the sliced layout (layout.py), reused by tensor lifetime.
4. lowering.py: each op through the one table in ops/ (one module per op family) becomes
   launches (launch.py) of gpulint's kernels (program.py builds them, opcodes.py numbers
   their ops).
A run uploads the inputs, enqueues every launch with no host round trip in between, and
waits once. Quantized models run as the delegate runs them: in float, with weights
dequantized once and the int8 interface converted at the edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpulint.executor import fusion, launch, layout, warmup
from gpulint.executor.buffers import BufferPool, Buffers
from gpulint.executor.context import LowerContext
from gpulint.executor.device import Device, select_device
from gpulint.executor.errors import DeviceError, ExecutorError
from gpulint.executor.fusion import FusionPlan
from gpulint.executor.graph import GraphView
from gpulint.executor.launch import Launch, Timing
from gpulint.executor.lowering import lower
from gpulint.executor.precision import Precision, precision
from gpulint.executor.prepare import INT_TYPES, NUMPY, prepare
from gpulint.model.ir import Model
from gpulint.text import clean


@dataclass
class Executor:
    """`Executor(model).run(inputs)` -> outputs, in the order of the main subgraph's outputs."""

    source: Model
    device: Device | None = None
    precision: str = "fp32"  # fp32, fp32-fp16 or fp16 (precision.py)
    keep_intermediates: bool = False  # one buffer per tensor, so `intermediates()` can read them all
    launches: list[Launch] = field(default_factory=list)
    timings: list[Timing] = field(default_factory=list)

    def __post_init__(self) -> None:
        mode = precision(self.precision)
        device = self.device = self.device or select_device()
        early = warmup.early_start(device)  # at a cold start, the compiling gets ready while lowering runs
        try:
            self._lower(device, mode, early)
        finally:
            warmup.dismiss(early)  # compile_ahead has, unless lowering failed

    def _lower(self, device: Device, mode: Precision, early: warmup.Early | None) -> None:
        self.dtype = np.dtype(np.float16 if mode.half_storage else np.float32)
        keep = self.keep_intermediates  # then no op fuses and no buffer is reused
        prepared = prepare(self.source, fusing=not keep)
        self.model = prepared.model
        self.sg = self.model.subgraphs[0]
        self.edges_in = prepared.edges_in  # graph input -> (float tensor, quantization)
        self.edges_out = prepared.edges_out  # graph output -> (float tensor, quantization)
        view = GraphView(self.model)
        plan = FusionPlan() if keep else fusion.plan(view)
        self.pool = None  # buffers reused by tensor lifetime
        if not keep:
            self.pool = BufferPool(view, prepared.host_side)
            for oi, (pad, _, _) in plan.pad_merges.items():  # the PAD's input is now read by the conv, later
                self.pool.reads_later(self.sg.operators[pad].inputs[0], oi)
            for oi, chain in plan.chains.items():  # and a merged channel PAD's by the kernel its ADD runs in
                for pad in (plan.padded_operands[ri] for ri in chain if ri in plan.padded_operands):
                    self.pool.reads_later(self.sg.operators[pad].inputs[0], oi)
        self.buffers = Buffers(device, self.dtype, view, self.pool)
        lowered = lower(prepared, LowerContext(view, plan, self.buffers, device, mode.half_storage, mode.half_accum))
        self.input_launches = lowered.input_launches  # raw input -> slices, before `launches`
        self.launches = lowered.launches
        self.raw_inputs = lowered.raw_inputs  # graph input -> its buffer as given (float, BHWC)
        launch.bind_all(device, mode, self.input_launches + self.launches, early)

    def run(self, inputs: list[np.ndarray], profile: bool = False) -> list[np.ndarray]:
        """One inference. A device failure (out of memory, a lost device) is an ExecutorError
        that names the device and, for a kernel launch, the op."""
        import pyopencl as cl

        assert self.device is not None
        try:
            return self._run(inputs, profile)
        except cl.Error as e:
            raise ExecutorError(f"{self.device.describe()}: {e}") from None

    def _run(self, inputs: list[np.ndarray], profile: bool) -> list[np.ndarray]:
        import pyopencl as cl

        assert self.device is not None
        # One queue for the whole run (uploads, launches, reads), which ends with the queue finished.
        queue = self.device.profiling if profile else self.device.queue
        if len(inputs) != len(self.sg.inputs):
            raise ExecutorError(f"the model takes {len(self.sg.inputs)} inputs, got {len(inputs)}")
        for t, x in zip(self.sg.inputs, inputs, strict=True):
            target, q = self.edges_in.get(t, (t, None))
            value = np.asarray(x, np.float32)
            if q is not None:  # an int8 interface: dequantized here, as the delegate does at the edge
                value = (value - q.zero_point[0]) * q.scale[0]
            shape = self.sg.tensors[target].shape
            if value.size != int(np.prod(shape)):
                raise ExecutorError(f"input {self.sg.tensors[t].name} has {value.size} values, not shape {shape}")
            cl.enqueue_copy(queue, self.raw_inputs[target], np.ascontiguousarray(value, np.float32))
        events = launch.enqueue(self.device, self.input_launches + self.launches, queue)
        outputs = []
        for t in self.sg.outputs:
            source, q = self.edges_out.get(t, (t, None))
            shape = self.sg.tensors[source].shape
            try:
                host = np.empty(layout.size(shape), self.dtype)
                cl.enqueue_copy(queue, host, self.buffers.tensor(source))
                value = layout.from_slices(host.astype(np.float32), shape)
            except MemoryError:  # an output the device holds but this process cannot (its memory limit)
                raise DeviceError(f"the host has no memory left for output {clean(self.sg.tensors[t].name)}") from None
            kind = str(self.sg.tensors[t].type)
            if kind == "BOOL":
                value = value != 0
            elif kind in ("INT32", "INT64"):
                value = np.rint(value).astype(NUMPY[kind])
            if q is not None:
                int_type = INT_TYPES[str(self.sg.tensors[t].type)]
                info = np.iinfo(int_type)
                with np.errstate(all="ignore"):  # a damaged scale (0, inf): clipped, as the GPU's cast saturates
                    value = np.clip(np.round(value / q.scale[0]) + q.zero_point[0], info.min, info.max)
                    value = value.astype(int_type)
            outputs.append(value)
        queue.finish()
        if profile:
            self.timings = launch.timings(self.input_launches + self.launches, events)
        return outputs

    def intermediates(self) -> dict[str, np.ndarray]:
        """After a run: every tensor an op wrote, by name, as float. Needs keep_intermediates
        (each tensor a buffer of its own, nothing overwritten). For finding the first op that diverges."""
        import pyopencl as cl

        assert self.device is not None
        if not self.keep_intermediates:
            raise ExecutorError("intermediates() needs an Executor made with keep_intermediates=True")
        out: dict[str, np.ndarray] = {}
        for op in self.sg.operators:
            for t in op.outputs:
                name = self.sg.tensors[t].name or f"tensor {t}"
                if t not in self.buffers.tensors or name in out:
                    continue
                shape = self.sg.tensors[t].shape
                host = np.empty(layout.size(shape), self.dtype)
                cl.enqueue_copy(self.device.queue, host, self.buffers.tensors[t])
                out[name] = layout.from_slices(host.astype(np.float32), shape)
        return out
