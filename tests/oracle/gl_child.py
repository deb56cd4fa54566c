"""The oracle's child: run Google's GPU delegate on many .tflite files, one process.

Runs in the oracle venv (`make oracle`: mediapipe==1.2.2 and numpy), never in ours, and is
started by tests/oracle/client.py; it imports nothing from gpulint or the tests.

Adapted from ../shared/oracle/gl_delegate.py (the project's first oracle, one model per process):
it drives the TFLite runtime and the classic GPU delegate `TfLiteGpuDelegate` (OpenGL ES
compute shaders, tensorflow/lite/delegates/gpu/gl_delegate.cc) statically linked into the
mediapipe wheel's libmediapipe.so, through ctypes on symbols that are present but not
exported, on Mesa llvmpipe through surfaceless EGL. Changes from the original: many models a
process, no invoke, the node indices the delegate asked for (captured inside its Prepare, so
they are known even when the backend then fails to initialize), every subgraph, and the
interpreter and delegate freed after each model.

Protocol: model paths come one a line on stdin. For each, the child writes to fd 2 (where the
C++ code logs) "@@ORACLE BEGIN <n>" and "@@ORACLE END <n>" around that model's work, and to
stdout one line "@@ORACLE RESULT <n> <json>". A model that kills the process leaves a BEGIN
without an END; the parent records it as a crash and goes on in a new child.

Pinned: mediapipe==1.2.2. The struct offsets below are checked at run time where they can be
(tensor count, context back pointer); a mismatch is an error for that model, not a wrong answer.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import traceback

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
# MemoryAllocation(const void*, size_t, ErrorReporter*): the model's bytes as its Allocation, as an
# app's loader gives one; without it the buffers stored after the flatbuffer (the quantizer's layout
# for weights of 1 KiB or more) are never loaded (interpreter_builder.cc 756-776), and the delegate
# sees them as runtime tensors (docs/how-we-know/torchvision-exports.md).
S_MEMORY_ALLOCATION = "_ZN6tflite16MemoryAllocationC1EPKvmPNS_13ErrorReporterE"
S_BUILDER_DTOR = "_ZN6tflite4impl18InterpreterBuilderD1Ev"
S_BUILD = "_ZN6tflite4impl18InterpreterBuilderclEPNSt3__u10unique_ptrINS0_11InterpreterENS2_14default_deleteIS4_EEEE"
S_MODIFY = "_ZN6tflite4impl11Interpreter23ModifyGraphWithDelegateEP14TfLiteDelegate"
S_INTERP_DTOR = "_ZN6tflite4impl11InterpreterD1Ev"
S_GETPLAN = "_ZN6tflite8Subgraph16GetExecutionPlanEP13TfLiteContextPP14TfLiteIntArray"
S_GETNODE = "_ZN6tflite8Subgraph22GetNodeAndRegistrationEP13TfLiteContextiPP10TfLiteNodePP18TfLiteRegistration"
# The guard of a function-local `static bool s_logged = ...` (TFLITE_LOG_PROD_ONCE): the
# refusal message ("Attempting to use a delegate that only supports static-sized tensors ...")
# is logged once per process; zeroing the guard before each model makes it log for every model.
S_ONCE_GUARDS = ["_ZGVZN6tflite8Subgraph27ModifyGraphWithDelegateImplEP14TfLiteDelegateE8s_logged"]
BUILTIN_DELEGATE = 51
STATUS = {0: "kTfLiteOk", 1: "kTfLiteError", 2: "kTfLiteDelegateError", 3: "kTfLiteApplicationError"}


def _libmediapipe() -> str:
    import importlib.util

    spec = importlib.util.find_spec("mediapipe")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the oracle child needs the mediapipe==1.2.2 wheel in this Python")
    return os.path.join(next(iter(spec.submodule_search_locations)), "tasks", "c", "libmediapipe.so")


NEEDED = [
    *S_MINLOG,
    *S_ONCE_GUARDS,
    S_ERR,
    S_MP_RESOLVER,
    S_BUILDER,
    S_MEMORY_ALLOCATION,
    S_BUILDER_DTOR,
    S_BUILD,
    S_MODIFY,
    S_INTERP_DTOR,
    S_GETPLAN,
    S_GETNODE,
    "MpErrorFree",
    "TfLiteGpuDelegateCreate",
    "TfLiteGpuDelegateDelete",
]


def _symbols(so: str) -> dict[str, int]:
    """The offsets of the symbols we call, from `nm` (about a second on this 120 MB library),
    kept beside the venv for the next child, keyed by the library's size and mtime."""
    st = os.stat(so)
    key = f"{so}:{st.st_size}:{st.st_mtime_ns}:{','.join(sorted(NEEDED))}"  # a symbol added: nm again
    saved = os.path.join(sys.prefix, "oracle-symbols.json")
    try:
        with open(saved) as f:
            cached = json.load(f)
        if cached.get("key") == key:
            return {k: int(v) for k, v in cached["symbols"].items()}
    except (OSError, ValueError, KeyError):
        pass
    want = set(NEEDED)
    syms: dict[str, int] = {}
    out = subprocess.run(["nm", so], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        p = line.split()
        if len(p) == 3 and p[2] in want:
            syms[p[2]] = int(p[0], 16)
    tmp = f"{saved}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump({"key": key, "symbols": syms}, f)
        os.replace(tmp, saved)
    except OSError:
        pass  # a read-only venv: nm again next time
    return syms


def _schema():
    """The wheel's flatbuffer schema module, loaded by path: importing the mediapipe package
    costs most of a second and brings nothing the child needs."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(_libmediapipe()))), "tasks", "metadata")
    spec = importlib.util.spec_from_file_location("_oracle_schema", os.path.join(path, "schema_py_generated.py"))
    if spec is None or spec.loader is None:
        raise SystemExit(f"no schema_py_generated.py in {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fd2(text: str) -> None:
    sys.stderr.flush()
    os.write(2, text.encode())


class Runtime:
    """libmediapipe.so's TFLite and GL delegate, loaded once per child."""

    def __init__(self) -> None:
        so = _libmediapipe()
        syms = _symbols(so)
        lib = ctypes.CDLL(so)
        base = ctypes.cast(lib.MpErrorFree, VP).value - syms["MpErrorFree"]
        self.base, self.syms = base, syms

        def fn(name, restype, *argtypes):
            return ctypes.CFUNCTYPE(restype, *argtypes)(base + syms[name])

        self.minlog = [base + syms[s] for s in S_MINLOG if s in syms]
        self.once_guards = [base + syms[s] for s in S_ONCE_GUARDS if s in syms]
        self.set_log_level(0)  # TFLITE_LOG_VERBOSE: shows "Replacing N out of M node(s) ..."
        self.err_reporter = fn(S_ERR, VP)()
        self.mk_resolver = fn(S_MP_RESOLVER, None, VP)
        self.mk_builder = fn(S_BUILDER, None, VP, VP, VP, VP, VP, VP)
        self.mk_allocation = fn(S_MEMORY_ALLOCATION, None, VP, VP, ctypes.c_size_t, VP)
        self.builder_dtor = fn(S_BUILDER_DTOR, None, VP) if S_BUILDER_DTOR in syms else None
        self.build = fn(S_BUILD, ctypes.c_int, VP, VP)
        self.modify = fn(S_MODIFY, ctypes.c_int, VP, VP)
        self.interp_dtor = fn(S_INTERP_DTOR, None, VP)
        self.getplan = fn(S_GETPLAN, ctypes.c_int, VP, ctypes.POINTER(VP))
        self.getnode = fn(S_GETNODE, ctypes.c_int, VP, ctypes.c_int, ctypes.POINTER(VP), ctypes.POINTER(VP))
        self.gpu_create = fn("TfLiteGpuDelegateCreate", VP, VP)
        self.gpu_delete = fn("TfLiteGpuDelegateDelete", None, VP)
        self.sch = _schema()

    def set_log_level(self, level: int) -> None:
        for addr in self.minlog:
            ctypes.c_int.from_address(addr).value = level

    # -- helpers over TFLite structs ----------------------------------------------------------

    @staticmethod
    def int_array(addr: int) -> list[int]:
        n = ctypes.c_int.from_address(addr).value
        return list((ctypes.c_int * n).from_address(addr + 4))

    def plan(self, ctx: int) -> list[int]:
        arr = VP()
        self.getplan(ctx, ctypes.byref(arr))
        return self.int_array(arr.value)

    def node_info(self, ctx: int, idx: int) -> tuple[int, int]:
        node, reg = VP(), VP()
        self.getnode(ctx, idx, ctypes.byref(node), ctypes.byref(reg))
        return node.value, ctypes.c_int.from_address(reg.value + 40).value  # builtin_code

    def delegated(self, ctx: int, delegate: int) -> list[list[int]]:
        """The nodes each of `delegate`'s kernel nodes in the plan replaces."""
        parts = []
        for idx in self.plan(ctx):
            node, code = self.node_info(ctx, idx)
            if code != BUILTIN_DELEGATE:
                continue
            params = VP.from_address(node + 40).value  # TfLiteNode.builtin_data: TfLiteDelegateParams*
            if params and VP.from_address(params).value == delegate:
                parts.append(self.int_array(VP.from_address(params + 8).value))  # nodes_to_replace
        return parts

    # -- one model ----------------------------------------------------------------------------

    def run(self, path: str) -> dict:
        for addr in self.once_guards:
            ctypes.c_uint64.from_address(addr).value = 0
        with open(path, "rb") as f:
            data = f.read()
        m = self.sch.Model.GetRootAsModel(data, 0)
        n_sub = m.SubgraphsLength()
        n_tensors = m.Subgraphs(0).TensorsLength() if n_sub else 0
        buf = ctypes.create_string_buffer(data, len(data))
        resolver = ctypes.create_string_buffer(1 << 16)  # larger than MediaPipeBuiltinOpResolver
        builder = ctypes.create_string_buffer(1 << 14)
        allocation = ctypes.create_string_buffer(256)  # larger than MemoryAllocation (5 words)
        self.mk_resolver(ctypes.addressof(resolver))
        self.mk_allocation(ctypes.addressof(allocation), ctypes.addressof(buf), len(data), self.err_reporter)
        model = ctypes.addressof(buf) + int.from_bytes(data[:4], "little")
        self.mk_builder(
            ctypes.addressof(builder),
            model,
            ctypes.addressof(resolver),
            self.err_reporter,
            None,
            ctypes.addressof(allocation),
        )
        slot = VP()
        st = self.build(ctypes.addressof(builder), ctypes.byref(slot))
        if self.builder_dtor is not None:
            self.builder_dtor(ctypes.addressof(builder))
        if st != 0 or not slot.value:
            return {"outcome": "build-failure", "build_status": st}
        interp = slot.value
        delegate = None
        try:
            ctxs = self.contexts(interp, n_tensors, n_sub)
            res: dict = {"subgraphs": n_sub, "total_nodes": [len(self.plan(c)) for c in ctxs]}
            delegate = self.gpu_create(None)
            asked: dict[int, list[list[int]]] = {}
            prepare_t = ctypes.CFUNCTYPE(ctypes.c_int, VP, VP)
            real_prepare = prepare_t(VP.from_address(delegate + 8).value)  # TfLiteDelegate.Prepare

            def prepare(ctx: int, dlg: int) -> int:
                # Right after the delegate's own Prepare, its kernel nodes are in the plan, each
                # with the nodes it replaces; the backend's build (which can fail) comes later,
                # in AllocateTensors, and then the interpreter restores the original plan.
                sub = ctxs.index(ctx) if ctx in ctxs else -1
                _fd2(f"@@ORACLE PREPARE subgraph {sub}\n")
                st = real_prepare(ctx, dlg)
                asked[sub] = self.delegated(ctx, dlg)
                return st

            hook = prepare_t(prepare)
            VP.from_address(delegate + 8).value = ctypes.cast(hook, VP).value
            st = self.modify(interp, delegate)
            res["modify_status"] = STATUS.get(st, st)
            res["asked"] = {str(k): v for k, v in sorted(asked.items())}
            final = {str(k): self.delegated(ctx, delegate) for k, ctx in enumerate(ctxs)}
            res["final"] = final
            return res
        finally:
            self.interp_dtor(interp)  # the object's own bytes leak; its tensors and kernels do not
            if delegate is not None:
                self.gpu_delete(delegate)
            del buf, resolver, allocation

    def contexts(self, interp: int, n_tensors: int, n_sub: int) -> list[int]:
        """The TfLiteContext of every subgraph: the primary one found in the Interpreter by its
        tensor count and back pointer (as gl_delegate.py does), the others through the
        Interpreter's list of subgraphs (an array of Subgraph* whose first is the primary's
        `impl_`), each context at the primary's offset inside its Subgraph."""
        maps = []
        with open("/proc/self/maps") as f:
            for line in f:
                a, perm = line.split()[:2]
                if perm.startswith("r"):
                    lo, hi = (int(x, 16) for x in a.split("-"))
                    maps.append((lo, hi))

        def readable(a: int, n: int = 16) -> bool:
            return any(lo <= a and a + n <= hi for lo, hi in maps)

        ctx0 = impl0 = 0
        for off in range(0, 1024, 8):
            p = VP.from_address(interp + off).value
            # ops may add tensors of their own when they are built (LSTM's scratch tensors)
            if p and readable(p, 32) and n_tensors <= ctypes.c_size_t.from_address(p).value <= n_tensors + 256:
                impl = VP.from_address(p + 24).value  # TfLiteContext.impl_ = the Subgraph
                if impl and impl <= p < impl + 8192:
                    ctx0, impl0 = p, impl
                    break
        if not ctx0:
            raise RuntimeError("could not find the primary subgraph's TfLiteContext")
        if n_sub <= 1:
            return [ctx0]
        for off in range(0, 1024, 8):
            begin = VP.from_address(interp + off).value or 0
            end = VP.from_address(interp + off + 8).value or 0
            # a (begin, end, cap) vector, or (data, size, capacity) as this build lays it out
            sized = bool(begin) and (end - begin == 8 * n_sub or end == n_sub)
            if sized and readable(begin, 8 * n_sub) and VP.from_address(begin).value == impl0:
                subs = [VP.from_address(begin + 8 * k).value for k in range(n_sub)]
                return [s + (ctx0 - impl0) for s in subs]
        raise RuntimeError("could not find the Interpreter's subgraph list")


def main() -> None:
    os.environ.setdefault("EGL_PLATFORM", "surfaceless")
    rt = Runtime()
    _fd2("@@ORACLE READY\n")
    for n, line in enumerate(sys.stdin):
        path = line.rstrip("\n")
        if not path:
            continue
        _fd2(f"@@ORACLE BEGIN {n}\n")
        crash = os.environ.get("GPULINT_ORACLE_TEST_CRASH")  # the crash-isolation test's hook
        if crash and os.path.basename(path) == crash:
            ctypes.string_at(0)  # a segfault, as a model that kills the delegate would
        try:
            res = rt.run(path)
        except Exception as e:  # a model the harness cannot read: say so, go on
            res = {"outcome": "harness-error", "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
        _fd2(f"@@ORACLE END {n}\n")
        sys.stdout.write(f"@@ORACLE RESULT {n} {json.dumps(res)}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
