"""Rule packs: the target packs (`targets/*.yaml`); the rule catalog's names (catalog.py) are
imported from here too.

Loaded with `yaml.safe_load` semantics and validated on load (loader.py): a bad pack is a
PackError that names the file, the line, the key and what was expected. Target packs may name a
`base` pack whose ops they extend or override, and keys starting with `x-` hold YAML anchors only.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cache, partial
from importlib import resources
from pathlib import Path
from typing import Any

from gpulint.model import schema
from gpulint.rules import packcache
from gpulint.rules.catalog import SEVERITIES, SEVERITY_RANK, Rule, builtin_rules, parse_rules
from gpulint.rules.checks import CHECKS, GRAPH_CHECKS
from gpulint.rules.loader import LineMap, PackError, Validator, load_yaml

__all__ = [
    "BUILTIN_TARGETS",
    "SEVERITIES",
    "SEVERITY_RANK",
    "Backend",
    "CheckCall",
    "OpSupport",
    "PackError",
    "Rule",
    "Target",
    "Targets",
    "builtin_rules",
    "configure",
    "load_targets",
    "parse_rules",
    "parse_target",
]


@dataclass(frozen=True)
class CheckCall:
    name: str
    params: tuple[tuple[str, Any], ...] = ()


@dataclass
class OpSupport:
    max_version: int | None = None
    checks: list[CheckCall] = field(default_factory=list)
    init_checks: list[CheckCall] = field(default_factory=list)
    extra_input_types: list[str] = field(default_factory=list)
    extra_output_types: list[str] = field(default_factory=list)
    quantized_only: bool = False
    source: str = ""


@dataclass
class Backend:
    """What one GPU backend of the delegate cannot build: ops it has no kernel for, per-op
    constraints of its kernels, and checks over the whole delegated partition. A failure here is
    an init failure on that backend only (the op was delegated, then the backend fails to build)."""

    name: str
    title: str
    source: str = ""
    no_kernel: dict[str, str] = field(default_factory=dict)  # op -> the backend's name for its operation
    init_checks: dict[str, list[CheckCall]] = field(default_factory=dict)
    graph_checks: list[str] = field(default_factory=list)


@dataclass
class Target:
    name: str
    title: str
    source: str
    runtime_types: list[str]
    quantized_types: list[str]
    max_rank: int
    max_partitions: int
    ops: dict[str, OpSupport]
    custom_ops: dict[str, OpSupport]
    path: str = ""
    backends: dict[str, Backend] = field(default_factory=dict)
    min_partition_nodes: int = 1  # partitions smaller than this stay on the CPU (Core ML: 2)
    tensor_gate: bool = True  # the builder's IsAllAllowedTensors type/rank gate (Core ML has none)
    settings: dict[str, Any] = field(default_factory=dict)  # options a user may set (--coreml-version)
    device_gate: str = ""  # on which devices the delegate is created at all, unless settings say all
    runtime: str = ""  # the runtime release whose behaviour the pack was measured against (not inherited)
    # litert_version setting -> the release the pack then models (`--litert-version`; GPU111 names it)
    releases: dict[str, str] = field(default_factory=dict)


def configure(target: Target, values: Mapping[str, Any]) -> Target:
    """The target with its settings changed: every check parameter named like a setting takes
    the new value (`coreml_reshape: {coreml_version: 3}` -> 2). Unknown settings are an error."""
    unknown = sorted(set(values) - set(target.settings))
    if unknown:
        raise PackError(f"target `{target.name}` has no setting {', '.join(unknown)}")
    if all(target.settings[k] == v for k, v in values.items()):
        return target
    settings = {**target.settings, **values}

    def calls(cs: list[CheckCall]) -> list[CheckCall]:
        return [CheckCall(c.name, tuple((k, settings.get(k, v)) for k, v in c.params)) for c in cs]

    def table(ops: dict[str, OpSupport]) -> dict[str, OpSupport]:
        out = {}
        for op, s in ops.items():
            s = _copy(s)
            s.checks, s.init_checks = calls(s.checks), calls(s.init_checks)
            out[op] = s
        return out

    runtime = target.releases.get(str(settings.get("litert_version")), target.runtime)
    return replace(
        target, ops=table(target.ops), custom_ops=table(target.custom_ops), settings=settings, runtime=runtime
    )


_TARGET_KEYS = ("target",)
_TARGET_OPTIONAL = (
    "title",
    "source",
    "base",
    "runtime_types",
    "quantized_types",
    "max_rank",
    "max_partitions",
    "only_listed",
    "ops",
    "custom_ops",
    "backends",
    "min_partition_nodes",
    "tensor_gate",
    "settings",
    "device_gate",
    "runtime",
    "releases",
)
_BACKEND_KEYS = ("title",)
_BACKEND_OPTIONAL = ("source", "no_kernel", "init_checks", "graph_checks")
_OP_KEYS = (
    "max_version",
    "checks",
    "init_checks",
    "extra_input_types",
    "extra_output_types",
    "quantized_only",
    "source",
)


def parse_target(text: str, where: str, known: Mapping[str, Target]) -> Target:
    v = Validator(where)
    doc = v.mapping(load_yaml(text, where), None)
    v.keys(doc, _TARGET_KEYS, _TARGET_OPTIONAL)
    name = v.typed(doc, "target", str, "a target name")
    base_name = v.typed(doc, "base", str, "the name of a target pack")
    base = None
    if base_name is not None:
        base = known.get(base_name)
        if base is None:
            raise v.fail(doc, "base", "one of the known targets: " + ", ".join(sorted(known)))
    types = set(schema.enum_members("TensorType"))

    def inherited(key: str, default: Any) -> Any:
        if key in doc:
            return doc[key]
        return getattr(base, key) if base is not None else default

    for key in ("max_rank", "max_partitions", "min_partition_nodes"):
        v.typed(doc, key, int, "an integer")
    for key in ("only_listed", "tensor_gate"):
        v.typed(doc, key, bool, "true or false")
    release = v.typed(doc, "runtime", str, "the runtime release the pack models, as text") or ""
    settings = dict(v.mapping(doc["settings"], "settings", doc)) if "settings" in doc else inherited("settings", {})
    releases = (
        {str(k): " ".join(str(r).split()) for k, r in v.mapping(doc["releases"], "releases", doc).items()}
        if "releases" in doc
        else {}
    )
    runtime = v.str_list(doc, "runtime_types", types) if "runtime_types" in doc else inherited("runtime_types", [])
    quant = v.str_list(doc, "quantized_types", types) if "quantized_types" in doc else inherited("quantized_types", [])

    def op_table(key: str, builtin: bool) -> dict[str, OpSupport]:
        table = doc.get(key) or LineMap()
        v.mapping(table, key, doc)
        start = {} if base is None or doc.get("only_listed") else dict(getattr(base, key))
        ops = {k: _copy(s) for k, s in start.items()}
        members = schema.enum_members("BuiltinOperator")
        for op, entry in table.items():
            if builtin and op not in members:
                raise v.fail(table, op, "a builtin op name from the schema (custom ops go under custom_ops)")
            e = v.mapping(entry, op, table)
            v.keys(e, (), _OP_KEYS)
            inherit = base is not None and op in getattr(base, key)
            support = _copy(getattr(base, key)[op]) if inherit and base is not None else OpSupport()
            if "max_version" in e:
                support.max_version = v.typed(e, "max_version", int, "an integer op version")
            for ck in ("checks", "init_checks"):
                if ck in e:
                    setattr(support, ck, [_check_call(v, e, ck, c) for c in (e[ck] or [])])
            for tk in ("extra_input_types", "extra_output_types"):
                if tk in e:
                    setattr(support, tk, v.str_list(e, tk, types))
            if "quantized_only" in e:
                support.quantized_only = bool(v.typed(e, "quantized_only", bool, "true or false"))
            if "source" in e:
                support.source = str(e["source"])
            ops[str(op)] = support
        return ops

    def backend_table() -> dict[str, Backend]:
        table = doc.get("backends")
        if table is None:
            return dict(base.backends) if base is not None else {}
        v.mapping(table, "backends", doc)
        out: dict[str, Backend] = {}
        for bname, entry in table.items():
            e = v.mapping(entry, bname, table)
            v.keys(e, _BACKEND_KEYS, _BACKEND_OPTIONAL)
            no_kernel = e.get("no_kernel") or LineMap()
            v.mapping(no_kernel, "no_kernel", e)
            checks_by_op = e.get("init_checks") or LineMap()
            v.mapping(checks_by_op, "init_checks", e)
            graph = v.str_list(e, "graph_checks", set(GRAPH_CHECKS))
            out[str(bname)] = Backend(
                str(bname),
                str(e["title"]),
                str(e.get("source", "")),
                {str(k): str(x) for k, x in no_kernel.items()},
                {
                    str(op): [_check_call(v, checks_by_op, str(op), c) for c in (calls or [])]
                    for op, calls in checks_by_op.items()
                },
                graph,
            )
        return out

    return Target(
        name=name,
        title=str(doc.get("title", name)),
        source=str(doc.get("source", "")),
        runtime_types=runtime,
        quantized_types=quant,
        max_rank=inherited("max_rank", 4),
        max_partitions=inherited("max_partitions", 1),
        ops=op_table("ops", True),
        custom_ops=op_table("custom_ops", False),
        path=where,
        backends=backend_table(),
        min_partition_nodes=inherited("min_partition_nodes", 1),
        tensor_gate=inherited("tensor_gate", True),
        settings=settings,
        device_gate=" ".join(str(inherited("device_gate", "")).split()),
        runtime=" ".join(release.split()),
        releases=releases,
    )


def _copy(s: OpSupport) -> OpSupport:
    return OpSupport(
        s.max_version,
        list(s.checks),
        list(s.init_checks),
        list(s.extra_input_types),
        list(s.extra_output_types),
        s.quantized_only,
        s.source,
    )


def _check_call(v: Validator, entry: LineMap, key: str, item: Any) -> CheckCall:
    params: dict[str, Any]
    if isinstance(item, str):
        name, params = item, {}
    elif isinstance(item, LineMap) and len(item) == 1:
        name, params = next(iter(item.items()))
        if not isinstance(params, dict):
            raise v.fail(item, name, "a mapping of the check's parameters")
    else:
        raise v.fail(entry, key, "a list of check names or {check: {param: value}} mappings")
    fn = CHECKS.get(name)
    if fn is None:
        raise v.fail(
            entry, key, "checks from gpulint.rules.checks; `" + str(name) + "` is not one: " + ", ".join(sorted(CHECKS))
        )
    try:
        inspect.signature(fn).bind(None, **params)
    except TypeError as e:
        raise v.fail(entry, key, f"parameters that `{name}` takes ({e})") from None
    return CheckCall(name, tuple(sorted(params.items())))


BUILTIN_TARGETS = ("classic", "mediapipe", "docs-2019", "litert-gpu", "metal", "coreml")


def load_targets(extra: list[Path] | None = None) -> Targets:
    """The built-in targets, then any user packs (which may use the built-ins as `base`)."""
    known = Targets()
    for path in extra or []:
        try:
            text = path.read_text("utf-8")
        except OSError as e:
            raise PackError(f"{path}: {e.strerror or e}") from None
        except UnicodeDecodeError:
            raise PackError(f"{path}: not a UTF-8 text file") from None
        t = parse_target(text, str(path), known)
        if t.name in known:
            raise PackError(f"{path}: target `{t.name}` is already defined ({known[t.name].path})")
        known.extra[t.name] = t
    return known


class Targets(Mapping[str, Target]):
    """Targets by name. A built-in pack is parsed on first use (its base first), so a `check` run
    pays only for the targets it reads, not for every pack shipped."""

    def __init__(self) -> None:
        self.extra: dict[str, Target] = {}

    def __getitem__(self, name: str) -> Target:
        if name in self.extra:
            return self.extra[name]
        if name not in BUILTIN_TARGETS:
            raise KeyError(name)
        return _builtin_target(name)

    def __iter__(self) -> Iterator[str]:
        return iter((*BUILTIN_TARGETS, *self.extra))

    def __len__(self) -> int:
        return len(BUILTIN_TARGETS) + len(self.extra)


@cache
def _builtin_target(name: str) -> Target:
    texts = _builtin_texts()
    parse = partial(parse_target, texts[name], f"gpulint/rules/targets/{name}.yaml", _BUILTINS)
    # Every built-in pack's text is in the key: a pack's `base` is parsed into it.
    return packcache.cached(f"target {name}", [texts[t] for t in BUILTIN_TARGETS], parse)


@cache
def _builtin_texts() -> dict[str, str]:
    folder = resources.files("gpulint.rules").joinpath("targets")
    return {name: folder.joinpath(f"{name}.yaml").read_text("utf-8") for name in BUILTIN_TARGETS}


_BUILTINS = Targets()  # no user packs: what a built-in pack's `base` is looked up in
