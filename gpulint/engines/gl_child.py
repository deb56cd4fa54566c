"""The child process of the gl engine: `PYTHON gl_child.py MODEL LOSS SYMBOLS_JSON`.

It runs MODEL on the classic TFLite GPU delegate, `TfLiteGpuDelegate` (the OpenGL ES compute-shader
backend, tensorflow/lite/delegates/gpu/gl_delegate.cc), statically linked into the mediapipe
wheel's libmediapipe.so, by calling the library's non-exported symbols with ctypes (adapted from
the project's oracle, ../shared/oracle/gl_delegate.py). It is run by path with the Python that has
the wheel (GPULINT_GL_PYTHON), so it imports nothing but the standard library and numpy.

Protocol, one line on stdout per step:
- at start, "@@READY <json>" (ModifyGraphWithDelegate's status, the delegated node indices, the
  node count) or "@@ERROR <text>";
- for each "IN.npz OUT.npz" line on stdin: the inputs (arr_0.. in the subgraph's input order)
  written into the interpreter's tensors, Invoke, the outputs saved; "@@DONE" or "@@ERROR <text>".
The delegate and TFLite log to fd 2, which the parent keeps in a file. A crash ends this process only.

Pinned: mediapipe==PIN. The symbol names and struct offsets below were read from that build; the
tensor layout is checked against the tensors' names and sizes at run time.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from typing import Any

PIN = "1.2.2"
VP = ctypes.c_void_p
S_MINLOG = [
    "_ZN6tflite16logging_internal13MinimalLogger21minimum_log_severity_E",
    "_ZN12_GLOBAL__N_113MinimalLogger21minimum_log_severity_E",
]
S_ERR = "_ZN6tflite20DefaultErrorReporterEv"
S_MP_RESOLVER = "_ZN9mediapipe5tasks4core26MediaPipeBuiltinOpResolverC1Ev"
S_BUILDER = (
    "_ZN6tflite4impl18InterpreterBuilderC1EPKNS_5ModelERKNS_10OpResolverEPNS_13"
    "ErrorReporterEPKNS_18InterpreterOptionsEPKNS_10AllocationE"
)
S_BUILD = "_ZN6tflite4impl18InterpreterBuilderclEPNSt3__u10unique_ptrINS0_11InterpreterENS2_14default_deleteIS4_EEEE"
# MemoryAllocation(const void* ptr, size_t bytes, ErrorReporter*): the model's bytes as its Allocation,
# as every app's loader (BuildFromFile, BuildFromBuffer) gives one. Without it the interpreter never
# loads buffers stored after the flatbuffer (interpreter_builder.cc 756-776: offset > 1 && allocation_),
# the quantizer's layout for every weight of 1 KiB or more: they become empty runtime tensors.
S_MEMORY_ALLOCATION = "_ZN6tflite16MemoryAllocationC1EPKvmPNS_13ErrorReporterE"
S_MODIFY = "_ZN6tflite4impl11Interpreter23ModifyGraphWithDelegateEP14TfLiteDelegate"
S_ALLOC = "_ZN6tflite4impl11Interpreter15AllocateTensorsEv"
S_INVOKE = "_ZN6tflite4impl11Interpreter6InvokeEv"
S_GETPLAN = "_ZN6tflite8Subgraph16GetExecutionPlanEP13TfLiteContextPP14TfLiteIntArray"
S_GETNODE = "_ZN6tflite8Subgraph22GetNodeAndRegistrationEP13TfLiteContextiPP10TfLiteNodePP18TfLiteRegistration"
NEEDED = [
    *S_MINLOG,
    S_ERR,
    S_MP_RESOLVER,
    S_BUILDER,
    S_BUILD,
    S_MEMORY_ALLOCATION,
    S_MODIFY,
    S_ALLOC,
    S_INVOKE,
    S_GETPLAN,
    S_GETNODE,
]
NEEDED += ["MpErrorFree", "TfLiteGpuDelegateCreate"]
BUILTIN_DELEGATE = 51
STATUS = {0: "kTfLiteOk", 1: "kTfLiteError", 2: "kTfLiteDelegateError", 3: "kTfLiteApplicationError"}
# TfLiteTensor (sizeof 112 in this build): type, data, dims, ..., bytes, ..., name
TENSOR_SIZE, T_TYPE, T_DATA, T_DIMS, T_BYTES, T_NAME = 112, 0, 8, 16, 40, 56
# TfLiteType -> numpy dtype name
TYPES = {1: "float32", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8", 10: "float16"}


def _ptr(addr: int) -> int:
    """The pointer stored at `addr` (0 for NULL)."""
    return VP.from_address(addr).value or 0


def _answer(line: str) -> None:
    sys.stdout.write(line.replace("\n", " ") + "\n")
    sys.stdout.flush()


def _mediapipe() -> str:
    """libmediapipe.so of the pinned wheel, or SystemExit with the one line the parent shows."""
    from importlib import metadata
    from importlib.util import find_spec

    try:
        have = metadata.version("mediapipe")
    except metadata.PackageNotFoundError:
        raise SystemExit(f"@@MISSING no mediapipe wheel in {sys.executable}") from None
    if have != PIN:
        raise SystemExit(f"@@MISSING mediapipe {have} in {sys.executable}, not {PIN}")
    spec = find_spec("mediapipe")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"@@MISSING the mediapipe package of {sys.executable} has no folder")
    return os.path.join(next(iter(spec.submodule_search_locations)), "tasks", "c", "libmediapipe.so")


def elf_symbols(so: str, wanted: list[str]) -> dict[str, int]:
    """The .symtab values of `wanted`, read from the ELF file itself (no binutils needed)."""
    import numpy as np

    with open(so, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise RuntimeError(f"{so} is not a little-endian 64-bit ELF file")
    shoff = int.from_bytes(data[0x28:0x30], "little")
    shnum = int.from_bytes(data[0x3C:0x3E], "little")
    sh = np.frombuffer(data, np.dtype("<u4,<u4,<u8,<u8,<u8,<u8,<u4,<u4,<u8,<u8"), shnum, shoff)
    symtab = next((s for s in sh if int(s[1]) == 2), None)  # SHT_SYMTAB
    if symtab is None:
        raise RuntimeError(f"{so} has no symbol table")
    strtab = sh[int(symtab[6])]
    strings = data[int(strtab[4]) : int(strtab[4]) + int(strtab[5])]
    syms = np.frombuffer(data, np.dtype("<u4,u1,u1,<u2,<u8,<u8"), int(symtab[5]) // 24, int(symtab[4]))
    out: dict[str, int] = {}
    for name in wanted:
        key, at = b"\0" + name.encode() + b"\0", 0
        offsets = []
        while (at := strings.find(key, at)) >= 0:
            offsets.append(at + 1)
            at += 1
        hit = np.flatnonzero(np.isin(syms["f0"], offsets) & (syms["f4"] != 0))
        if hit.size:
            out[name] = int(syms["f4"][hit[0]])
    return out


def symbols(so: str, saved: str) -> dict[str, int]:
    """The symbols' offsets, kept in `saved` (the parent's cache) for the next run: reading a
    120 MB symbol table takes a second or two."""
    st = os.stat(so)
    key = f"{so}:{st.st_size}:{st.st_mtime_ns}:{','.join(NEEDED)}"
    try:
        with open(saved) as f:
            kept = json.load(f)
        if kept.get("key") == key:
            return {k: int(v) for k, v in kept["symbols"].items()}
    except (OSError, ValueError, KeyError):
        pass
    found = elf_symbols(so, NEEDED)
    try:
        os.makedirs(os.path.dirname(saved), exist_ok=True)
        with open(f"{saved}.{os.getpid()}", "w") as f:
            json.dump({"key": key, "symbols": found}, f)
        os.replace(f"{saved}.{os.getpid()}", saved)
    except OSError:
        pass  # a read-only cache: read the table again next time
    return found


class Interpreter:
    """One model on libmediapipe.so's TFLite interpreter with the GL delegate applied."""

    def __init__(self, path: str, precision_loss: bool, saved: str) -> None:
        so = _mediapipe()
        syms = symbols(so, saved)
        missing = [s for s in NEEDED if s not in syms and s not in S_MINLOG]
        if missing:
            raise RuntimeError(f"libmediapipe.so lacks {', '.join(missing)}: not the mediapipe {PIN} build")
        lib = ctypes.CDLL(so)
        base = (ctypes.cast(lib.MpErrorFree, VP).value or 0) - syms["MpErrorFree"]

        def fn(name: str, restype: Any, *argtypes: Any) -> Any:
            return ctypes.CFUNCTYPE(restype, *argtypes)(base + syms[name])

        for s in S_MINLOG:  # TFLITE_LOG_VERBOSE: the delegate's "Replacing N out of M node(s)"
            if s in syms:
                ctypes.c_int.from_address(base + syms[s]).value = 0
        self._getplan = fn(S_GETPLAN, ctypes.c_int, VP, ctypes.POINTER(VP))
        self._getnode = fn(S_GETNODE, ctypes.c_int, VP, ctypes.c_int, ctypes.POINTER(VP), ctypes.POINTER(VP))
        self._invoke = fn(S_INVOKE, ctypes.c_int, VP)
        with open(path, "rb") as f:
            data = f.read()
        self._keep: list[Any] = [
            ctypes.create_string_buffer(data, len(data))
        ]  # the interpreter reads the model in place
        resolver = ctypes.create_string_buffer(1 << 16)  # larger than MediaPipeBuiltinOpResolver
        builder = ctypes.create_string_buffer(1 << 14)
        allocation = ctypes.create_string_buffer(256)  # larger than MemoryAllocation (5 words)
        self._keep += [resolver, builder, allocation]
        fn(S_MP_RESOLVER, None, VP)(ctypes.addressof(resolver))
        model = ctypes.addressof(self._keep[0]) + int.from_bytes(data[:4], "little")
        err = fn(S_ERR, VP)()
        fn(S_MEMORY_ALLOCATION, None, VP, VP, ctypes.c_size_t, VP)(
            ctypes.addressof(allocation), ctypes.addressof(self._keep[0]), len(data), err
        )
        fn(S_BUILDER, None, VP, VP, VP, VP, VP, VP)(
            ctypes.addressof(builder), model, ctypes.addressof(resolver), err, None, ctypes.addressof(allocation)
        )
        slot = VP()
        st = fn(S_BUILD, ctypes.c_int, VP, VP)(ctypes.addressof(builder), ctypes.byref(slot))
        if st != 0 or not slot.value:
            raise RuntimeError(f"the interpreter could not be built from the model (status {st})")
        self.interp = slot.value
        self.inputs, self.outputs, n_tensors, self.names = _io(data)
        self.ctx = self._context(n_tensors)
        total = len(self._plan())
        # TfLiteGpuDelegateOptions: metadata, then TfLiteGlCompileOptions {precision_loss_allowed,
        # preferred_gl_object_type (0: fastest), dynamic_batch_enabled, inline_parameters}
        options = (ctypes.c_int64 * 3)()
        ctypes.c_int32.from_address(ctypes.addressof(options) + 8).value = int(precision_loss)
        self._keep.append(options)
        delegate = fn("TfLiteGpuDelegateCreate", VP, VP)(ctypes.addressof(options))
        status = fn(S_MODIFY, ctypes.c_int, VP, VP)(self.interp, delegate)
        alloc = fn(S_ALLOC, ctypes.c_int, VP)(self.interp)
        self.ready = {
            "modify_status": STATUS.get(status, str(status)),
            "allocate_status": STATUS.get(alloc, str(alloc)),
            "total_nodes": total,
            "delegated": self._delegated(delegate),
        }
        self.ready.update(_renderer())
        if alloc != 0:
            raise RuntimeError(f"AllocateTensors failed ({STATUS.get(alloc, alloc)})")
        for ti in self.inputs + self.outputs:
            self._check(ti)

    def _context(self, n_tensors: int) -> int:
        """The primary subgraph's TfLiteContext, found inside the Interpreter by its tensor count
        and its back pointer to the Subgraph (`impl_`), as the oracle does."""
        maps = []
        with open("/proc/self/maps") as f:
            for line in f:
                a, perm = line.split()[:2]
                if perm.startswith("r"):
                    lo, hi = (int(x, 16) for x in a.split("-"))
                    maps.append((lo, hi))
        for off in range(0, 1024, 8):
            p = _ptr(self.interp + off)
            # ops may add tensors of their own when they are built (LSTM's scratch tensors)
            readable = p and any(lo <= p and p + 32 <= hi for lo, hi in maps)
            if readable and n_tensors <= ctypes.c_size_t.from_address(p).value <= n_tensors + 256:
                impl = _ptr(p + 24)
                if impl and impl <= p < impl + 8192:
                    return p
        raise RuntimeError("could not find the primary subgraph's TfLiteContext")

    def _plan(self) -> list[int]:
        arr = VP()
        self._getplan(self.ctx, ctypes.byref(arr))
        at = arr.value or 0
        n = ctypes.c_int.from_address(at).value
        return list((ctypes.c_int * n).from_address(at + 4))

    def _delegated(self, delegate: int) -> list[int]:
        """The nodes the delegate's kernel nodes in the execution plan replace."""
        out: list[int] = []
        for idx in self._plan():
            node, reg = VP(), VP()
            self._getnode(self.ctx, idx, ctypes.byref(node), ctypes.byref(reg))
            if ctypes.c_int.from_address((reg.value or 0) + 40).value != BUILTIN_DELEGATE:
                continue
            params = _ptr((node.value or 0) + 40)  # TfLiteNode.builtin_data: TfLiteDelegateParams*
            if params and _ptr(params) == delegate:
                arr = _ptr(params + 8)  # nodes_to_replace
                n = ctypes.c_int.from_address(arr).value
                out += list((ctypes.c_int * n).from_address(arr + 4))
        return sorted(out)

    def _tensor(self, ti: int) -> int:
        return int(_ptr(self.ctx + 16)) + ti * TENSOR_SIZE

    def _check(self, ti: int) -> None:
        """The struct layout this file assumes, checked on the tensor's name."""
        name = _ptr(self._tensor(ti) + T_NAME)
        want = self.names.get(ti)
        if want is not None and (not name or ctypes.string_at(name).decode(errors="replace") != want):
            raise RuntimeError(f"tensor {ti} is not named {want!r} where this build keeps names: not mediapipe {PIN}")

    def run(self, feed: list[Any]) -> list[Any]:
        import numpy as np

        if len(feed) != len(self.inputs):
            raise RuntimeError(f"{len(feed)} inputs given, the model has {len(self.inputs)}")
        for ti, x in zip(self.inputs, feed, strict=True):
            t = self._tensor(ti)
            raw = np.ascontiguousarray(x).tobytes()
            have = ctypes.c_size_t.from_address(t + T_BYTES).value
            if have != len(raw):
                raise RuntimeError(f"input tensor {ti} holds {have} bytes, the input given {len(raw)}")
            ctypes.memmove(_ptr(t + T_DATA), raw, have)
        st = self._invoke(self.interp)
        if st != 0:
            raise RuntimeError(f"Invoke failed ({STATUS.get(st, st)})")
        got = []
        for ti in self.outputs:
            t = self._tensor(ti)
            kind = ctypes.c_int.from_address(t + T_TYPE).value
            if kind not in TYPES:
                raise RuntimeError(f"output tensor {ti} has TfLiteType {kind}, which this engine does not read")
            dims = _ptr(t + T_DIMS)
            n = ctypes.c_int.from_address(dims).value
            shape = list((ctypes.c_int * n).from_address(dims + 4))
            nbytes = ctypes.c_size_t.from_address(t + T_BYTES).value
            raw = ctypes.string_at(_ptr(t + T_DATA), nbytes)
            got.append(np.frombuffer(raw, TYPES[kind]).reshape(shape).copy())
        return got


def _renderer() -> dict[str, str]:
    """GL_RENDERER and GL_VERSION of the context the delegate made current on this thread (none
    where it made none: a model it did not take)."""
    try:
        gl = ctypes.CDLL("libGLESv2.so.2")
    except OSError:
        return {}
    gl.glGetString.restype = ctypes.c_char_p
    words = {"renderer": gl.glGetString(0x1F01), "version": gl.glGetString(0x1F02)}  # GL_RENDERER, GL_VERSION
    return {k: v.decode(errors="replace")[:200] for k, v in words.items() if v}


def _io(data: bytes) -> tuple[list[int], list[int], int, dict[int, str]]:
    """The main subgraph's input and output tensor indices, its tensor count and names, from the
    flatbuffer read by hand (vtable offsets of the schema: Model.subgraphs = field 2, SubGraph
    tensors/inputs/outputs = fields 0/1/2, Tensor.name = field 3)."""

    def u32(at: int) -> int:
        return int.from_bytes(data[at : at + 4], "little")

    def field(table: int, n: int) -> int | None:
        vt = table - int.from_bytes(data[table : table + 4], "little", signed=True)
        if 4 + 2 * n >= int.from_bytes(data[vt : vt + 2], "little"):
            return None
        off = int.from_bytes(data[vt + 4 + 2 * n : vt + 6 + 2 * n], "little")
        return table + off if off else None

    def vector(at: int | None) -> tuple[int, int]:
        if at is None:
            return 0, 0
        start = at + u32(at)
        return start + 4, u32(start)

    def ints(at: int | None) -> list[int]:
        start, n = vector(at)
        return [int.from_bytes(data[start + 4 * k : start + 4 * k + 4], "little", signed=True) for k in range(n)]

    root = u32(0)
    subs, n_subs = vector(field(root, 2))
    if not n_subs:
        raise RuntimeError("the model has no subgraph")
    sg = subs + u32(subs)
    tensors, n_tensors = vector(field(sg, 0))
    names: dict[int, str] = {}
    for ti in range(n_tensors):
        t = tensors + 4 * ti + u32(tensors + 4 * ti)
        at = field(t, 3)
        if at is not None:
            s = at + u32(at)
            names[ti] = data[s + 4 : s + 4 + u32(s)].decode(errors="replace")
    return ints(field(sg, 1)), ints(field(sg, 2)), n_tensors, names


def main(path: str, precision_loss: bool, saved: str) -> None:
    os.environ.setdefault("EGL_PLATFORM", "surfaceless")
    try:
        interp = Interpreter(path, precision_loss, saved)
    except SystemExit as e:
        _answer(str(e.code))
        return
    except Exception as e:
        _answer(f"@@ERROR {type(e).__name__}: {e}")
        return
    _answer("@@READY " + json.dumps(interp.ready))
    import numpy as np  # after the wheel's check: a Python without the wheel is told so, not "no numpy"

    for line in sys.stdin:
        src, dst = line.split()
        try:
            with np.load(src) as z:
                feed = [z[f"arr_{i}"] for i in range(len(z.files))]
            np.savez(dst, *interp.run(feed))
            _answer("@@DONE")
        except Exception as e:
            _answer(f"@@ERROR {type(e).__name__}: {e}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "1", sys.argv[3])
