"""--bisect on an engine that keeps no intermediates (LiteRT's GPU accelerator): the graph cut at
a tensor and run whole, as Google's culprit_finder cuts it on a device, and --export-repro.

A prefix is the ops a tensor depends on, with that tensor as the only output. Its value on the
engine is judged against the CPU interpreter's tensor of the same name, with the tensor's own
CPU noise (the reference run again on inputs one ulp away), by the one comparator. The first
failing prefix is found by bisection over the ops in execution order: an error, once made,
reaches every later tensor that depends on it, so the failing prefixes form a suffix of the
order (where that does not hold, bisection names a failing op, if not the first; the compiles
it saves are the point: each prefix is a model of its own on the engine, shaders and all).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gpulint import compare, reference
from gpulint.engines import EngineError, open_engine
from gpulint.executor import Device
from gpulint.model.ir import Model, clone
from gpulint.model.write import write
from gpulint.passes.edit import prune
from gpulint.text import clean
from gpulint.verify.divergence import half_range, judge_tensor
from gpulint.verify.half import HALF_MAX, as_float
from gpulint.verify.npz import save_reference
from gpulint.verify.request import Request


def sub_model(model: Model, ops: list[int], inputs: list[int], output: int) -> Model:
    """The main subgraph's `ops` (in order) as a model reading `inputs` and giving `output`."""
    sub = clone(model)
    ssg = sub.subgraphs[0]
    ssg.operators = [ssg.operators[i] for i in sorted(ops)]
    ssg.inputs, ssg.outputs = list(inputs), [output]
    sub.signature_defs = []
    prune(sub)
    return sub


def ancestors(model: Model, tensor: int) -> list[int]:
    """The ops `tensor` depends on, itself included, in execution order."""
    sg = model.subgraphs[0]
    made = {t: i for i, op in enumerate(sg.operators) for t in op.outputs}
    need, seen, todo = set(), set(), [tensor]
    while todo:
        t = todo.pop()
        if t in seen or t not in made:
            continue
        seen.add(t)
        i = made[t]
        if i not in need:
            need.add(i)
            todo.extend(x for x in sg.operators[i].inputs if x >= 0)
    return sorted(need)


def prefix(model: Model, tensor: int) -> tuple[Model, list[int]]:
    """The graph cut at `tensor`, and the positions of the graph inputs it reads."""
    sg = model.subgraphs[0]
    ops = ancestors(model, tensor)
    read = {x for i in ops for x in sg.operators[i].inputs}
    keep = [k for k, t in enumerate(sg.inputs) if t in read]
    return sub_model(model, ops, [sg.inputs[k] for k in keep], tensor), keep


class _Judge:
    """Runs cut models on the request's engine and judges their one output against the CPU."""

    def __init__(
        self, req: Request, model: Model, cpu_path: Path, feed: list[np.ndarray], tmp: str, device: Device | None
    ) -> None:
        self.req, self.model, self.feed, self.tmp, self.device = req, model, feed, tmp, device
        self.expected, self.second = reference.run_all_tensors_with_noise(cpu_path, feed)
        self.quant = {t.name: t.quantization for t in model.subgraphs[0].tensors}
        self.got: dict[str, np.ndarray] = {}  # the engine's value of each tensor cut at
        self.runs = 0

    def verdict(self, sub: Model, feed: list[np.ndarray], name: str) -> compare.Verdict | str:
        """The verdict on one cut model, or the engine's error (a crash, a refusal) as text."""
        path = Path(self.tmp, f"prefix{self.runs}.tflite")
        self.runs += 1
        write(sub, path, allow_loss=True)
        r = self.req
        try:
            engine = open_engine(r.engine, sub, path, r.precision, r.target, self.device)
            try:
                got = engine.run(feed)[0]
            finally:
                engine.close()
        except EngineError as e:
            return str(e)
        self.got[name] = got
        q = self.quant.get(name)
        v = judge_tensor(
            name, self.expected[name], self.second.get(name), got, q, compare.EXECUTOR_VS_CPU, self.req.precision
        )
        return "not comparable with the CPU's tensor (another shape, or not a number)" if v is None else v


def bisect_prefixes(
    req: Request, model: Model, cpu_path: Path, feed: list[np.ndarray], tmp: str
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The first op whose output, the graph cut there, FAILs on the engine; and with
    req.export_repro, what was written there (the smallest failing sub-model)."""
    sg = model.subgraphs[0]
    judge = _Judge(req, model, cpu_path, feed, tmp, None)
    # Cut points: each op's first output that the CPU kept, as a float or quantized tensor.
    points = []
    for index, op in enumerate(sg.operators):
        for t in op.outputs[:1]:
            name = sg.tensors[t].name or ""
            if name in judge.expected and as_float(judge.expected[name], judge.quant.get(name)) is not None:
                points.append((index, t, name))
    found: tuple[int, compare.Verdict | str] | None = None
    lo, hi = 0, len(points) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        index, t, name = points[mid]
        sub, keep = prefix(model, t)
        v = judge.verdict(sub, [feed[k] for k in keep], name)
        if isinstance(v, str) or not v.passed:
            found, hi = (mid, v), mid - 1
        else:
            lo = mid + 1
    base = {"comparison": req.engine, "method": "prefixes of the graph, each run whole", "compared": judge.runs}
    if found is None:
        return {**base, "op": None, "note": "every prefix PASSes on its own: the error needs the whole graph"}, None
    index, t, name = points[found[0]]
    v = found[1]
    out = {
        **base,
        "op": clean(model.op_name(sg.operators[index]), 60),
        "op_index": index,
        "tensor": clean(name, 200),
    }
    if isinstance(v, str):
        out["reason"] = f"the engine cannot run the graph cut here: {clean(v, 300)}"
    else:
        m = v.metrics
        out |= {"max_abs_error": m.get("max_abs_error"), "tolerance": v.tolerance.atol, "rtol": v.tolerance.rtol}
        out |= {k: m[k] for k in ("cosine_similarity", "snr_db", "psnr_db") if k in m}
        reason = v.reason
        if m.get("nonfinite_in_candidate"):
            out["first_nonfinite"] = m["nonfinite_in_candidate"]
        if req.precision != "fp32" and _left_half(judge, name, m):  # the value, as the executor's bisect says it
            out.update(half_range(judge.expected[name], judge.quant.get(name)))
            reason += f"; {out['range']}"
        out["reason"] = reason
    repro = export_repro(req, model, judge, index, t, name) if req.export_repro is not None else None
    return out, repro


def _left_half(judge: _Judge, name: str, metrics: dict[str, Any]) -> bool:
    """Whether the tensor's half result left half's range: NaN/Inf or |x| > 65504 on the engine
    where the CPU has numbers, or the CPU's float values past 65504."""
    q = judge.quant.get(name)
    cpu, got = as_float(judge.expected[name], q), as_float(np.asarray(judge.got[name]), q)
    past = [v for v in (cpu, got) if v is not None and float(np.abs(v[np.isfinite(v)]).max(initial=0.0)) > HALF_MAX]
    return bool(metrics.get("nonfinite_in_candidate")) or bool(past)


def repro_at(
    req: Request, model: Model, cpu_path: Path, feed: list[np.ndarray], tmp: str, device: Device | None, index: int
) -> dict[str, Any]:
    """--export-repro for an op another bisection named (the executor's, which reads every tensor)."""
    judge = _Judge(req, model, cpu_path, feed, tmp, device)
    t = model.subgraphs[0].operators[index].outputs[0]
    return export_repro(req, model, judge, index, t, model.subgraphs[0].tensors[t].name or "")


def export_repro(req: Request, model: Model, judge: _Judge, index: int, t: int, name: str) -> dict[str, Any]:
    """The smallest failing sub-model found: the op alone, fed the CPU's values of what it reads,
    where that FAILs on the engine too; else the graph cut at its output. Written to
    req.export_repro as repro.tflite and repro.npz (the inputs and the CPU's output, in
    `--save-reference` form: `gpulint verify repro.tflite --reference repro.npz` runs it again)."""
    assert req.export_repro is not None
    sg = model.subgraphs[0]
    op = sg.operators[index]
    made = {x for o in sg.operators for x in o.outputs}
    reads = [x for x in dict.fromkeys(op.inputs) if x >= 0 and (x in made or x in sg.inputs)]
    alone_feed = [judge.expected.get(sg.tensors[x].name or "") for x in reads]
    what = "the graph cut at the op's output"
    sub, feed = None, None
    if all(f is not None for f in alone_feed):
        single = sub_model(model, [index], reads, t)
        fed = [np.asarray(f) for f in alone_feed if f is not None]
        v = judge.verdict(single, fed, name)
        if isinstance(v, str) or not v.passed:
            sub, feed, what = single, fed, "the op alone, fed the CPU's values of what it reads"
    if sub is None:
        sub, keep = prefix(model, t)
        feed = [judge.feed[k] for k in keep]
    assert feed is not None
    out_dir = req.export_repro
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write(sub, out_dir / "repro.tflite", allow_loss=True)
    except OSError as e:
        return {"error": f"{out_dir}: cannot write the repro ({e.strerror or e})"}
    save_reference(out_dir / "repro.npz", [feed], [[judge.expected[name]]])
    return {
        "dir": str(out_dir),
        "model": str(out_dir / "repro.tflite"),
        "reference": str(out_dir / "repro.npz"),
        "ops": len(sub.subgraphs[0].operators),
        "what": what,
        "rerun": f"gpulint verify {out_dir / 'repro.tflite'} --reference {out_dir / 'repro.npz'} "
        f"--engine {req.engine} --precision {req.precision}",
    }
