"""Device buffers for one executor, in the sliced layout: a tensor's buffer (a constant's data,
else zeroed, else one a tensor no longer needed left behind), uploads, scratch and index
arrays. Knows the device and the graph, not the executor."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpulint.executor import layout, movement
from gpulint.executor.device import Device, opencl
from gpulint.executor.errors import DeviceError
from gpulint.executor.graph import GraphView


class BufferPool:
    """Buffers planned by tensor lifetime: after the op that last reads a tensor is lowered, its
    buffer may serve a tensor produced later. Only tensors without padding lanes (channels a
    multiple of 4) take part, because kernels rely on padding lanes being zero; graph inputs and
    outputs, the float tensors of an int8 interface (`host_side`), and outputs of data-movement
    ops never do."""

    def __init__(self, view: GraphView, host_side: set[int]) -> None:
        self.view = view
        sg = view.sg
        self.last_use: dict[int, int] = {}
        for i, op in enumerate(sg.operators):
            for t in op.inputs:
                if t >= 0:
                    self.last_use[t] = i
        self.pinned = set(sg.inputs) | set(sg.outputs) | host_side
        # Data-movement copies leave the cells they do not copy (PAD's border) as they were: their
        # outputs need buffers that start at zero.
        for op in sg.operators:
            if view.name(op) in movement.MOVEMENT_OPS:
                self.pinned.update(op.outputs)
        self.extra_reads: dict[int, list[int]] = {}  # op -> tensors it reads besides its inputs
        self.free: list[tuple[int, Any]] = []  # (size in elements, buffer)
        self.allocated = 0  # elements in buffers made for runtime tensors
        self.requested = 0  # elements those tensors would need with one buffer each

    def poolable(self, t: int) -> bool:
        shape = self.view.shape(t)
        return t not in self.pinned and (not shape or shape[-1] % 4 == 0)

    def take(self, t: int) -> Any:
        size = layout.size(self.view.shape(t))
        self.requested += size
        if not self.poolable(t):
            self.allocated += size
            return None
        fits = [i for i, (n, _) in enumerate(self.free) if n >= size]
        if not fits:
            self.allocated += size
            return None
        best = min(fits, key=lambda i: self.free[i][0])
        return self.free.pop(best)[1]

    def reads_later(self, t: int, oi: int) -> None:
        """Op `oi` reads `t` too, though `t` is not among its inputs (a merged PAD's input)."""
        self.last_use[t] = max(self.last_use.get(t, oi), oi)
        self.extra_reads.setdefault(oi, []).append(t)

    def release_after(self, oi: int, buffers: dict[int, Any]) -> None:
        """Op `oi` is lowered: the buffers of the runtime tensors it read last are free."""
        for t in set(self.view.sg.operators[oi].inputs) | set(self.extra_reads.get(oi, [])):
            if t < 0 or self.last_use.get(t) != oi or t not in buffers or not self.poolable(t):
                continue
            if self.view.const(t) is None:  # constants stay
                self.free.append((layout.size(self.view.shape(t)), buffers[t]))


class Buffers:
    """The buffers of one executor's tensors (`tensors`), and the others lowering makes.
    `pool`: reuse by lifetime, or None for a buffer per tensor."""

    def __init__(self, device: Device, dtype: np.dtype[Any], view: GraphView, pool: BufferPool | None) -> None:
        self.device, self.dtype, self.view, self.pool = device, dtype, view, pool
        self.tensors: dict[int, Any] = {}
        self._placeholder: Any = None

    def upload(self, host: np.ndarray, writable: bool = True, dtype: Any = None) -> Any:
        cl = opencl()
        with np.errstate(over="ignore"):  # a value past half's range is inf in half storage, as on the GPU
            data = np.ascontiguousarray(host, dtype=dtype or self.dtype)
        access = cl.mem_flags.READ_WRITE if writable else cl.mem_flags.READ_ONLY
        try:
            return cl.Buffer(
                self.device.context,
                access | cl.mem_flags.COPY_HOST_PTR,
                hostbuf=data if data.size else np.zeros(1, self.dtype),
            )
        except Exception as e:
            raise DeviceError(f"{self.device.describe()}: cannot allocate {data.nbytes} bytes: {e}") from None

    def weights(self, host: np.ndarray | None = None, size: int = 0) -> Any:
        """A conv's weights (`host`), or `size` zeros a copy fills: float at either precision
        (WLOAD4 in the kernels), holding the values half storage would hold at fp16."""
        values = self.host_zeros(size, np.float32) if host is None else np.asarray(host, np.float32)
        if self.dtype == np.float16:
            with np.errstate(over="ignore"):  # inf, as half storage holds it
                values = values.astype(np.float16).astype(np.float32)
        return self.upload(values, writable=host is None, dtype=np.float32)

    def raw(self, nbytes: int) -> Any:
        """An uninitialized device buffer the host writes (a graph input as given)."""
        cl = opencl()
        try:
            return cl.Buffer(self.device.context, cl.mem_flags.READ_ONLY, size=max(4, nbytes))
        except Exception as e:
            raise DeviceError(f"{self.device.describe()}: cannot allocate {nbytes} bytes: {e}") from None

    def tensor(self, t: int) -> Any:
        """The device buffer of tensor `t`: a constant's data, or zeroed so padding lanes start at
        0, or a buffer a tensor no longer needed left behind (see BufferPool)."""
        if t not in self.tensors:
            shape = self.view.shape(t)
            value = self.view.const(t)
            reused = self.pool.take(t) if self.pool is not None and value is None else None
            if reused is not None:
                self.tensors[t] = reused
            elif value is not None:
                self.tensors[t] = self.upload(layout.to_slices(value, shape), writable=False)
            else:
                self.tensors[t] = self.upload(self.host_zeros(layout.size(shape), self.dtype))
        return self.tensors[t]

    def scratch(self, shape: list[int]) -> Any:
        return self.upload(self.host_zeros(layout.size(shape), self.dtype))

    def host_zeros(self, n: int, dtype: Any) -> np.ndarray:
        """`n` zeros to upload, once the buffer is known to fit: a damaged file's shape can claim
        terabytes, which numpy would otherwise be asked for (a MemoryError, not a message)."""
        nbytes = n * np.dtype(dtype).itemsize
        largest = int(self.device.device.max_mem_alloc_size)
        if nbytes > largest:
            raise DeviceError(
                f"{self.device.describe()}: a buffer of {nbytes:,} bytes is more than the device's largest "
                f"({largest:,} bytes)"
            )
        try:
            return np.zeros(n, dtype)
        except MemoryError:
            raise DeviceError(f"{self.device.describe()}: cannot allocate {nbytes:,} bytes on the host") from None

    def placeholder(self) -> Any:
        """Four zeros, read-only: what an unused kernel argument points at (never read), and what
        a conv reads for an input column outside the input (conv.cl.j2's conv_o)."""
        if self._placeholder is None:
            self._placeholder = self.upload(np.zeros(4), writable=False)
        return self._placeholder

    def index(self, values: np.ndarray) -> Any:
        """An int32 index array (a copy's offsets)."""
        cl = opencl()
        data = np.ascontiguousarray(values, np.int32)
        return cl.Buffer(self.device.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=data)

    def release_after(self, oi: int) -> None:
        if self.pool is not None:
            self.pool.release_after(oi, self.tensors)
