"""How the delegate splits a subgraph into GPU and CPU partitions, and what that costs.

The split copies TFLite's PartitionGraphIntoIndependentNodeSubsets (tflite/graph_info.cc):
repeatedly sweep the ops in execution order, adding every op whose inputs are ready to the
current subset; the first ready op sets the subset's kind (supported or not), and a subset
closes when no more ops of its kind are ready. The delegate then takes the
`max_delegated_partitions` largest supported subsets (GraphPartitionHelper::
GetFirstNLargestPartitions; default 1).

fp16-constant DEQUANTIZE ops follow FP16GraphPartitionHelper (tflite/delegates/utils.cc:202-265):
it calls them unsupported (with no words) and re-points the taken nodes' inputs at the fp16
constants. When every other node is supported it takes the whole graph, the DEQUANTIZEs too
("Scenario 1: Full Delegation"); otherwise it takes the largest subsets of supported nodes,
split with the DEQUANTIZEs in the graph as CPU nodes, and leaves every DEQUANTIZE on the CPU
("Scenario 2"), where a constant DEQUANTIZE runs once, at Prepare (kernels/dequantize.cc:79-82).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpulint.model.ir import NUMPY_DTYPES
from gpulint.rules.placement import Placement
from gpulint.rules.signature import Graph, OpSignature, TensorSpec


@dataclass
class Partition:
    kind: str  # "gpu" (ops the delegate supports) or "cpu"
    ops: list[int]
    delegated: bool = False
    macs: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "ops": self.ops, "delegated": self.delegated, "macs": self.macs}


@dataclass
class Transfer:
    tensor: str
    direction: str  # "to-gpu" | "to-cpu"
    bytes: int


@dataclass
class SubgraphPlan:
    subgraph: int
    partitions: list[Partition] = field(default_factory=list)
    delegated: set[int] = field(default_factory=set)
    transfers: list[Transfer] = field(default_factory=list)
    op_count: int = 0
    cpu_ops: list[int] = field(default_factory=list)
    total_macs: int = 0
    gpu_macs: int = 0
    verdict: str = "ready"
    reason: str = ""
    common_failure: str = ""  # an init failure on every backend (a [Parse] constraint)
    backend_failures: dict[str, str] = field(default_factory=dict)  # backend -> its init failure

    # The nodes the delegate replaces, as its partition helper picks them: `delegated` plus the
    # folded constant DEQUANTIZEs it takes along (all fp16 ones only when it takes the whole graph).
    delegated_nodes: set[int] = field(default_factory=set)
    final_partitions: int = 0  # node subsets once the delegate splits the graph by the nodes it took
    cpu_subsets: int = 0  # of the run-time ops, the subsets left on the CPU around the delegated partitions

    @property
    def gpu_partitions(self) -> list[Partition]:
        return [p for p in self.partitions if p.kind == "gpu"]

    @property
    def cpu_partitions(self) -> list[Partition]:
        return [p for p in self.partitions if p.kind == "cpu"]

    @property
    def delegated_partitions(self) -> list[Partition]:
        return [p for p in self.partitions if p.delegated]

    @property
    def gpu_mac_share(self) -> float:
        return self.gpu_macs / self.total_macs if self.total_macs else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "subgraph": self.subgraph,
            "ops": self.op_count,
            "gpu_ops": len(self.delegated),
            "cpu_ops": len(self.cpu_ops),
            "partitions": [p.to_json() for p in self.partitions],
            "transfers": [{"tensor": t.tensor, "direction": t.direction, "bytes": t.bytes} for t in self.transfers],
            "estimated_macs": self.total_macs,
            "gpu_mac_share": round(self.gpu_mac_share, 4),
            "verdict": self.verdict,
            "reason": self.reason,
            "init_failures": self.backend_failures,
        }


def split(
    graph: Graph, nodes: list[int], supported: set[int], remapped: frozenset[int] = frozenset()
) -> list[Partition]:
    """TFLite's PartitionGraphIntoIndependentNodeSubsets over `nodes` (execution order).
    `remapped`: tensors a supported node no longer reads (an fp16 DEQUANTIZE's output, once the
    helper has pointed the node at the fp16 constant instead)."""
    sg = graph.subgraph
    produced = {t for n in nodes for t in sg.operators[n].outputs}
    ready = {t for t in range(len(sg.tensors)) if t not in produced}

    def waits(n: int) -> bool:
        free = remapped if n in supported else frozenset()
        return any(t >= 0 and t not in ready and t not in free for t in sg.operators[n].inputs)

    done: set[int] = set()
    out: list[Partition] = []
    while len(done) < len(nodes):
        kind: str | None = None
        current: list[int] = []
        progress = True
        while progress:
            progress = False
            for n in nodes:
                if n in done or waits(n):
                    continue
                node_kind = "gpu" if n in supported else "cpu"
                kind = kind or node_kind
                if node_kind != kind:
                    continue
                done.add(n)
                current.append(n)
                ready.update(sg.operators[n].outputs)
                progress = True
        if not current:  # a cycle or a missing producer: the rest cannot be scheduled
            rest = [n for n in nodes if n not in done]
            out.append(Partition("cpu", rest))
            break
        out.append(Partition(kind or "cpu", sorted(current)))
    return out


T = TypeVar("T")


def libcxx_sort(items: list[T], less: Callable[[T, T], bool]) -> list[T]:
    """`std::sort(items, less)` as libc++ does it (LLVM 16 and later: __introsort with the pdqsort ideas,
    libcxx/include/__algorithm/sort.h), for a comparator that is not a plain std::less on an arithmetic type (so
    no branchless or bitset variant). The order of equal elements is this algorithm's, which is what the
    delegate's GetFirstNLargestPartitions (tflite/delegates/utils.cc 104-130) leaves among subsets of equal
    size; libmediapipe.so, the GL oracle's build, has these functions (`std::__u::__introsort<..., Lb0>`,
    `__partition_with_equals_on_left`, `__insertion_sort_incomplete` for GetFirstNLargestPartitions' lambda).
    Returns a new list."""
    a = list(items)

    def swap(i: int, j: int) -> None:
        a[i], a[j] = a[j], a[i]

    def sort3(x: int, y: int, z: int) -> None:
        if not less(a[y], a[x]):
            if not less(a[z], a[y]):
                return
            swap(y, z)
            if less(a[y], a[x]):
                swap(x, y)
            return
        if less(a[z], a[y]):
            swap(x, z)
            return
        swap(x, y)
        if less(a[z], a[y]):
            swap(y, z)

    def sort4(x1: int, x2: int, x3: int, x4: int) -> None:
        sort3(x1, x2, x3)
        if less(a[x4], a[x3]):
            swap(x3, x4)
            if less(a[x3], a[x2]):
                swap(x2, x3)
                if less(a[x2], a[x1]):
                    swap(x1, x2)

    def sort5(x1: int, x2: int, x3: int, x4: int, x5: int) -> None:
        sort4(x1, x2, x3, x4)
        if less(a[x5], a[x4]):
            swap(x4, x5)
            if less(a[x4], a[x3]):
                swap(x3, x4)
                if less(a[x3], a[x2]):
                    swap(x2, x3)
                    if less(a[x2], a[x1]):
                        swap(x1, x2)

    def small(first: int, last: int) -> bool:
        """The cases of 0-5 elements, done in place; False for longer ranges."""
        n = last - first
        if n == 2 and less(a[last - 1], a[first]):
            swap(first, last - 1)
        elif n == 3:
            sort3(first, first + 1, last - 1)
        elif n == 4:
            sort4(first, first + 1, first + 2, last - 1)
        elif n == 5:
            sort5(first, first + 1, first + 2, first + 3, last - 1)
        return n <= 5

    def insertion_sort(first: int, last: int, guarded: bool = True) -> None:
        for i in range(first + 1, last):
            j = i - 1
            if less(a[i], a[j]):
                t, k, j = a[i], j, i
                while True:
                    a[j] = a[k]
                    j = k
                    if (guarded and j == first) or not less(t, a[k - 1]):
                        break
                    k -= 1
                a[j] = t

    def insertion_sort_incomplete(first: int, last: int) -> bool:
        if small(first, last) or last - first < 2:
            return True
        j = first + 2
        sort3(first, first + 1, j)
        count = 0
        i = j + 1
        while i != last:
            if less(a[i], a[j]):
                t, k, j = a[i], j, i
                while True:
                    a[j] = a[k]
                    j = k
                    if j == first or not less(t, a[k - 1]):
                        break
                    k -= 1
                a[j] = t
                count += 1
                if count == 8:
                    return i + 1 == last
            j = i
            i += 1
        return True

    def partition_right(first: int, last: int) -> tuple[int, bool]:
        begin, pivot = first, a[first]
        first += 1
        while less(a[first], pivot):
            first += 1
        if begin == first - 1:
            while first < last:
                last -= 1
                if less(a[last], pivot):
                    break
        else:
            last -= 1
            while not less(a[last], pivot):
                last -= 1
        already = first >= last
        while first < last:
            swap(first, last)
            first += 1
            while less(a[first], pivot):
                first += 1
            last -= 1
            while not less(a[last], pivot):
                last -= 1
        pos = first - 1
        if begin != pos:
            a[begin] = a[pos]
        a[pos] = pivot
        return pos, already

    def partition_left(first: int, last: int) -> int:
        begin, pivot = first, a[first]
        if less(pivot, a[last - 1]):
            first += 1
            while not less(pivot, a[first]):
                first += 1
        else:
            first += 1
            while first < last and not less(pivot, a[first]):
                first += 1
        if first < last:
            last -= 1
            while less(pivot, a[last]):
                last -= 1
        while first < last:
            swap(first, last)
            first += 1
            while not less(pivot, a[first]):
                first += 1
            last -= 1
            while less(pivot, a[last]):
                last -= 1
        pos = first - 1
        if begin != pos:
            a[begin] = a[pos]
        a[pos] = pivot
        return first

    def heap_sort(first: int, last: int) -> None:
        """__partial_sort(first, last, last): make_heap, then sort_heap (Floyd's pop), the depth limit's fallback."""
        n = last - first

        def sift_down(start: int, length: int) -> None:
            child = start - first
            if length < 2 or (length - 2) // 2 < child:
                return
            child = 2 * child + 1
            ci = first + child
            if child + 1 < length and less(a[ci], a[ci + 1]):
                ci, child = ci + 1, child + 1
            if less(a[ci], a[start]):
                return
            top = a[start]
            while True:
                a[start] = a[ci]
                start = ci
                if (length - 2) // 2 < child:
                    break
                child = 2 * child + 1
                ci = first + child
                if child + 1 < length and less(a[ci], a[ci + 1]):
                    ci, child = ci + 1, child + 1
                if less(a[ci], top):
                    break
            a[start] = top

        for start in range((n - 2) // 2, -1, -1):
            sift_down(first + start, n)
        end = last
        for length in range(n, 1, -1):
            top, hole, child = a[first], first, 0
            while True:  # __floyd_sift_down
                ci = first + 2 * child + 1
                child = 2 * child + 1
                if child + 1 < length and less(a[ci], a[ci + 1]):
                    ci, child = ci + 1, child + 1
                a[hole] = a[ci]
                hole = ci
                if child > (length - 2) // 2:
                    break
            end -= 1
            if hole == end:
                a[hole] = top
                continue
            a[hole] = a[end]
            a[end] = top
            hole += 1
            up = hole - first  # __sift_up(first, hole, up)
            if up > 1:
                up = (up - 2) // 2
                ptr, tail = first + up, hole - 1
                if less(a[ptr], a[tail]):
                    t = a[tail]
                    while True:
                        a[tail] = a[ptr]
                        tail = ptr
                        if up == 0:
                            break
                        up = (up - 1) // 2
                        ptr = first + up
                        if not less(a[ptr], t):
                            break
                    a[tail] = t

    def introsort(first: int, last: int, depth: int, leftmost: bool = True) -> None:
        while True:
            if small(first, last) or last - first < 2:
                return
            n = last - first
            if n < 24:
                insertion_sort(first, last, guarded=leftmost)
                return
            if depth == 0:
                heap_sort(first, last)
                return
            depth -= 1
            half = n // 2
            if n > 128:  # Tukey's ninther
                sort3(first, first + half, last - 1)
                sort3(first + 1, first + half - 1, last - 2)
                sort3(first + 2, first + half + 1, last - 3)
                sort3(first + half - 1, first + half, first + half + 1)
                swap(first, first + half)
            else:
                sort3(first + half, first, last - 1)
            if not leftmost and not less(a[first - 1], a[first]):
                first = partition_left(first, last)
                continue
            i, already = partition_right(first, last)
            if already:
                left_sorted = insertion_sort_incomplete(first, i)
                if insertion_sort_incomplete(i + 1, last):
                    if left_sorted:
                        return
                    last = i
                    continue
                if left_sorted:
                    first = i + 1
                    continue
            introsort(first, i, depth, leftmost)
            leftmost = False
            first = i + 1

    introsort(0, len(a), 2 * (len(a).bit_length() - 1) if a else 0)
    return a


# Estimates saturate here: an absurd shape (a fuzzed or hostile file: dims of 2**31 at rank 600)
# would otherwise make an integer too large to print (Python's 4300-digit limit, which killed
# `check --format json` and `report`) or slow to multiply. Real models are far below it.
MAX_ESTIMATE = 10**18


def capped_product(factors: Iterable[int]) -> int:
    """The product of `factors` (a negative one counts as 0), saturating at MAX_ESTIMATE."""
    n = 1
    for f in factors:
        n = min(n * max(f, 0), MAX_ESTIMATE)
    return n


def elements(t: TensorSpec) -> int:
    """t.elements (a dim below 1 counts as 1), saturating at MAX_ESTIMATE."""
    return capped_product(max(d, 1) for d in t.shape)


def macs(sig: OpSignature) -> int:
    """A rough multiply-accumulate count, to weigh partitions; 1 per output element otherwise.
    At most MAX_ESTIMATE."""
    out = min(sum(elements(t) for t in sig.outputs), MAX_ESTIMATE)
    w = sig.input(1)
    x = sig.input(0)
    if sig.op == "CONV_2D" and w is not None and w.rank == 4:
        return capped_product((out, *w.shape[1:]))
    if sig.op == "DEPTHWISE_CONV_2D" and w is not None and w.rank == 4:
        return capped_product((out, w.shape[1], w.shape[2]))
    if sig.op == "FULLY_CONNECTED" and w is not None and w.rank == 2:
        return capped_product((out, w.shape[1]))
    if sig.op == "BATCH_MATMUL" and x is not None and x.rank >= 2:
        k = x.shape[-2] if sig.options.get("adj_x") else x.shape[-1]
        return capped_product((out, k))
    if sig.op in ("TRANSPOSE_CONV", "Convolution2DTransposeBias"):
        src = sig.input(2) if sig.op == "TRANSPOSE_CONV" else x
        weights = w if sig.op == "TRANSPOSE_CONV" else sig.input(1)
        if src is not None and weights is not None and weights.rank == 4:
            return capped_product((elements(src), *weights.shape[:3]))
    if sig.op in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        window = capped_product((sig.options.get("filter_height", 1), sig.options.get("filter_width", 1)))
        return capped_product((out, max(1, window)))
    if sig.op in ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "SOFTMAX") and x is not None:
        return max(out, elements(x))
    return out


def _bytes(graph: Graph, t: int) -> int:
    """A tensor's bytes, saturating at MAX_ESTIMATE."""
    tensor = graph.subgraph.tensors[t]
    dtype = NUMPY_DTYPES.get(tensor.type) if isinstance(tensor.type, str) else None
    return capped_product((*(max(d, 1) for d in tensor.shape), dtype.itemsize if dtype is not None else 4))


def plan_subgraph(
    graph: Graph, sigs: list[OpSignature], placed: list[Placement], max_partitions: int, min_nodes: int = 1
) -> SubgraphPlan:
    """`max_partitions` 0: no limit; `min_nodes`: GetFirstNLargestPartitions stops at the first
    (largest remaining) subset smaller than that (tflite/delegates/utils.cc 104-130)."""
    everything = [p.index for p in placed]
    fp16 = {p.index for p in placed if p.index in graph.folded_fp16}
    folded = {p.index for p in placed if p.folded}  # constant DEQUANTIZEs: no run-time cost
    nodes = [n for n in everything if n not in folded]  # the ops that compute at run time
    supported = {p.index for p in placed if p.index not in fp16 and p.placement in ("gpu", "init-failure")}
    plan = SubgraphPlan(graph.index, op_count=len(nodes))
    cost = {s.index: 0 if s.index in folded else macs(s) for s in sigs}
    if len(supported) + len(fp16) == len(everything):
        # Scenario 1: the helper takes every node, the fp16 DEQUANTIZEs with them.
        parts = [Partition("gpu", list(everything), delegated=True)]
        taken = set(everything)
    else:
        # Scenario 2: the largest subsets of supported nodes, split with the DEQUANTIZEs as CPU nodes.
        parts = split(graph, everything, supported)
        # GetFirstNLargestPartitions orders the subsets by size with std::sort, which is not stable: among
        # subsets of equal size, the one it takes is the one libc++'s sort puts first, not the earliest.
        largest = libcxx_sort([p for p in parts if p.kind == "gpu"], lambda a, b: len(a.ops) > len(b.ops))
        for part in largest[: max_partitions or None]:
            if len(part.ops) < min_nodes:
                break
            part.delegated = True
        taken = {n for p in parts if p.delegated for n in p.ops}
        for p in placed:
            if p.index in fp16:
                p.placement = "cpu"  # still folded: no run-time cost
                p.reasons = [
                    "fp16 constant DEQUANTIZE: left on the CPU, computed once at Prepare (FP16GraphPartitionHelper "
                    "takes these only with the whole graph); the ops it delegates read the fp16 constant directly"
                ]
    # What is shown and costed: the subsets of run-time ops (a folded DEQUANTIZE costs nothing at run time).
    for part in parts:
        part.ops = [n for n in part.ops if n not in folded]
        part.macs = min(sum(cost[n] for n in part.ops), MAX_ESTIMATE)
    plan.partitions = [p for p in parts if p.ops]
    plan.delegated_nodes = taken
    plan.delegated = taken - folded
    # The delegate splits the whole graph again by the nodes it replaces (ReplaceNodeSubsetsWithDelegateKernels),
    # after pointing them at the fp16 constants.
    remapped = frozenset(t for n in fp16 for t in graph.subgraph.operators[n].outputs)
    plan.final_partitions = len(split(graph, everything, taken, remapped)) if taken else 0
    if not nodes:
        plan.reason = "no ops"
        return plan
    plan.cpu_ops = [n for n in nodes if n not in plan.delegated]
    plan.cpu_subsets = sum(p.kind == "cpu" for p in split(graph, nodes, plan.delegated)) if plan.delegated else 0
    plan.total_macs = min(sum(cost[n] for n in nodes), MAX_ESTIMATE)
    plan.gpu_macs = min(sum(cost[n] for n in plan.delegated), MAX_ESTIMATE)
    plan.transfers = _transfers(graph, taken)
    refresh_verdict(plan, placed)
    return plan


def _transfers(graph: Graph, delegated: set[int]) -> list[Transfer]:
    """Tensors that cross into or out of the delegated partition (graph inputs and outputs too)."""
    sg = graph.subgraph
    out: list[Transfer] = []
    into: set[int] = set()
    for n in sorted(delegated):
        for t in sg.operators[n].inputs:
            if t < 0 or t in into or graph.is_const(t):
                continue
            producer = graph.producer.get(t)
            if producer is None or producer not in delegated:
                into.add(t)
                out.append(Transfer(sg.tensors[t].name or str(t), "to-gpu", _bytes(graph, t)))
    for n in sorted(delegated):
        for t in sg.operators[n].outputs:
            readers = graph.consumers.get(t, [])
            if t in graph.graph_outputs or any(r not in delegated for r in readers):
                out.append(Transfer(sg.tensors[t].name or str(t), "to-cpu", _bytes(graph, t)))
    return out


# How a check says the runtime's process dies (checks/litert.py, builder.py, composite.py, mediapipe.py).
KILLS = ("process dies", "aborts the whole process")


def refresh_verdict(plan: SubgraphPlan, placed: list[Placement], backends: dict[str, str] | None = None) -> None:
    """The subgraph's verdict; called again once each backend's failures are known (`backends`:
    name -> title of the backends asked about; None before any backend was checked)."""
    common = [
        p for p in placed if p.index in plan.delegated and p.placement == "init-failure" and not p.backend_failures
    ]
    # An op that kills the runtime's process is the outcome, wherever it stands: measured on LiteRT's
    # accelerator, whose parsers crash before a failure found later in the graph's build is reported
    # (an int8 DEQUANTIZE's shape mismatch ahead of the EMBEDDING_LOOKUP that reads it).
    common.sort(key=lambda p: not any(kills in r for r in p.reasons[-1:] for kills in KILLS))
    failing = {b: why for b, why in plan.backend_failures.items() if backends is None or b in backends}
    if common:
        f = common[0]
        plan.verdict = "init-failure"
        plan.common_failure = f"`{f.op}` (op {f.index}): {f.reasons[-1]}"
        plan.reason = f"the delegate fails to initialize on {plan.common_failure}"
    elif failing:
        titles = backends or {}
        plan.verdict = "init-failure"
        fails = "; ".join(f"on the {titles.get(b, b)}: {why}" for b, why in failing.items())
        ok = [titles.get(b, b) for b in titles if b not in failing]
        plan.reason = (f"initializes on the {' and '.join(ok)} but fails " if ok else "fails to initialize ") + fails
    elif not plan.delegated:
        plan.verdict = "not-worth-it"
        plan.reason = f"none of its {plan.op_count} ops can run on the GPU"
    elif len(plan.delegated) == plan.op_count:
        plan.verdict = "ready"
        plan.reason = f"all {plan.op_count} ops run on the GPU in one partition"
    else:
        share = plan.gpu_mac_share
        detail = (
            f"{share:.0%} of the estimated MACs in the delegated partition ({len(plan.delegated)} of "
            f"{plan.op_count} ops), {len(plan.cpu_ops)} ops on the CPU, {len(plan.transfers)} CPU<->GPU transfers"
        )
        plan.verdict = "not-worth-it" if share < 0.5 else "partial"
        plan.reason = ("only " if share < 0.5 else "") + detail
