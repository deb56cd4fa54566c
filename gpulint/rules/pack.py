"""Rule packs: the rule catalog (`rules.yaml`) and the target packs (`targets/*.yaml`).

Loaded with `yaml.safe_load` semantics and validated on load: a bad pack is a PackError that
names the file, the line, the key and what was expected. Target packs may name a `base` pack
whose ops they extend or override, and keys starting with `x-` hold YAML anchors only.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpulint.model import schema
from gpulint.rules.checks import CHECKS, GRAPH_CHECKS
from gpulint.rules.detectors import DETECTORS

SEVERITIES = ("error", "warning", "info")
SEVERITY_RANK = {s: i for i, s in enumerate(reversed(SEVERITIES))}  # info 0 < warning 1 < error 2


class PackError(Exception):
    """A rule pack that does not validate; the message names file, line and key."""


# -- YAML with line numbers --------------------------------------------------------------------


class _Map(dict[str, Any]):
    """A mapping that remembers the line of each key (1-based)."""

    line: int = 0
    lines: dict[str, int]


_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when present: 5x faster


class _Loader(_SafeLoader):  # type: ignore[misc]
    """yaml's safe loader whose mappings carry line numbers."""


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> _Map:
    out = _Map({str(k): v for k, v in loader.construct_mapping(node, deep=True).items()})
    out.line = node.start_mark.line + 1
    out.lines = {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}
    return out


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)


def _load(text: str, where: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise PackError(f"{where}{line}: not valid YAML: {getattr(e, 'problem', None) or e}") from None


class _Validator:
    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, node: Any, key: str | None, expected: str) -> PackError:
        line = (
            node.lines.get(key, node.line) if isinstance(node, _Map) and key is not None else getattr(node, "line", 0)
        )
        at = f":{line}" if line else ""
        what = f" `{key}`" if key is not None else ""
        return PackError(f"{self.where}{at}:{what}: expected {expected}")

    def mapping(self, node: Any, key: str | None, parent: Any = None) -> _Map:
        if not isinstance(node, _Map):
            raise self.fail(parent if parent is not None else node, key, "a mapping")
        return node

    def keys(self, node: _Map, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
        for k in required:
            if k not in node:
                raise self.fail(node, None, f"key `{k}`")
        for k in node:
            if k not in required and k not in optional and not str(k).startswith("x-"):
                raise self.fail(node, k, "one of: " + ", ".join(required + optional) + " (unknown key)")

    def typed(self, node: _Map, key: str, kind: type | tuple[type, ...], expected: str) -> Any:
        v = node.get(key)
        if v is not None and (not isinstance(v, kind) or (kind is int and isinstance(v, bool))):
            raise self.fail(node, key, expected)
        return v

    def str_list(self, node: _Map, key: str, allowed: set[str] | None = None) -> list[str]:
        v = node.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.fail(node, key, "a list of strings")
        if allowed is not None:
            for x in v:
                if x not in allowed:
                    raise self.fail(node, key, f"tensor types from the schema; `{x}` is not one")
        return v


# -- the rule catalog ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: str
    category: str
    found_by: str  # where code decides the rule applies: one of FOUND_BY
    message: str
    summary: str
    rationale: str
    example: str = ""
    use_instead: str = ""
    fix_pass: str | None = None
    fix_safety: str | None = None
    references: tuple[str, ...] = ()

    def render(self, **values: Any) -> str:
        return self.message.format(**values)


_RULE_KEYS = ("code", "name", "severity", "category", "found_by", "message", "summary", "rationale")
# `detector`: the function registered under the rule's code (detectors/); the others are the
# engine's own steps: the placer with the target pack, the partition step, the refusal.
FOUND_BY = ("detector", "target-pack", "partition", "refusal")
_RULE_OPTIONAL = ("example", "use_instead", "fix", "references")
_PLACEHOLDER = re.compile(r"{(\w+)")


def parse_rules(text: str, where: str) -> dict[str, Rule]:
    v = _Validator(where)
    doc = v.mapping(_load(text, where), None)
    v.keys(doc, ("rules",), ())
    entries = doc["rules"]
    if not isinstance(entries, list):
        raise v.fail(doc, "rules", "a list of rules")
    out: dict[str, Rule] = {}
    names: set[str] = set()
    for entry in entries:
        e = v.mapping(entry, None, doc)
        v.keys(e, _RULE_KEYS, _RULE_OPTIONAL)
        for k in (*_RULE_KEYS, "example", "use_instead"):
            v.typed(e, k, str, "a string")
        if not re.fullmatch(r"[A-Z]+[0-9]{3}", e["code"]):
            raise v.fail(e, "code", "a code like GPU101 (letters, then three digits)")
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", e["name"]):
            raise v.fail(e, "name", "a kebab-case name")
        if e["severity"] not in SEVERITIES:
            raise v.fail(e, "severity", "one of " + ", ".join(SEVERITIES))
        if e["code"] in out or e["name"] in names:
            raise v.fail(e, "code", f"a unique code and name; {e['code']} / {e['name']} is defined twice")
        if e["found_by"] not in FOUND_BY:
            raise v.fail(e, "found_by", "one of " + ", ".join(FOUND_BY))
        found = DETECTORS.get(e["code"])
        if e["found_by"] == "detector" and found is None:
            raise v.fail(
                e,
                "found_by",
                f'a detector for {e["code"]}: @detector("{e["code"]}", scope) in gpulint/rules/detectors/',
            )
        if e["found_by"] != "detector" and found is not None:
            raise v.fail(e, "found_by", f"`detector`: {e['code']} has one, {found.where}")
        fix = e.get("fix")
        fix_pass = fix_safety = None
        if fix is not None:
            f = v.mapping(fix, "fix", e)
            v.keys(f, ("pass", "safety"), ())
            if f["safety"] not in ("safe", "unsafe"):
                raise v.fail(f, "safety", "safe or unsafe")
            fix_pass, fix_safety = str(f["pass"]), f["safety"]
        refs = v.str_list(e, "references")
        out[e["code"]] = Rule(
            e["code"],
            e["name"],
            e["severity"],
            e["category"],
            e["found_by"],
            e["message"],
            e["summary"].strip(),
            " ".join(e["rationale"].split()),
            e.get("example", ""),
            e.get("use_instead", ""),
            fix_pass,
            fix_safety,
            tuple(refs),
        )
        names.add(e["name"])
    unknown = sorted(set(DETECTORS) - set(out))
    if unknown:
        d = DETECTORS[unknown[0]]
        raise PackError(f"{where}: no rule {d.code}, for which {d.where} is registered as the detector")
    return out


@cache
def builtin_rules() -> dict[str, Rule]:
    text = resources.files("gpulint.rules").joinpath("rules.yaml").read_text("utf-8")
    return parse_rules(text, "gpulint/rules/rules.yaml")


# -- target packs --------------------------------------------------------------------------------


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

    return replace(target, ops=table(target.ops), custom_ops=table(target.custom_ops), settings=settings)


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
    v = _Validator(where)
    doc = v.mapping(_load(text, where), None)
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
    settings = dict(v.mapping(doc["settings"], "settings", doc)) if "settings" in doc else inherited("settings", {})
    runtime = v.str_list(doc, "runtime_types", types) if "runtime_types" in doc else inherited("runtime_types", [])
    quant = v.str_list(doc, "quantized_types", types) if "quantized_types" in doc else inherited("quantized_types", [])

    def op_table(key: str, builtin: bool) -> dict[str, OpSupport]:
        table = doc.get(key) or _Map()
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
            no_kernel = e.get("no_kernel") or _Map()
            v.mapping(no_kernel, "no_kernel", e)
            checks_by_op = e.get("init_checks") or _Map()
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


def _check_call(v: _Validator, entry: _Map, key: str, item: Any) -> CheckCall:
    params: dict[str, Any]
    if isinstance(item, str):
        name, params = item, {}
    elif isinstance(item, _Map) and len(item) == 1:
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
    text = resources.files("gpulint.rules").joinpath("targets", f"{name}.yaml").read_text("utf-8")
    return parse_target(text, f"gpulint/rules/targets/{name}.yaml", _BUILTINS)


_BUILTINS = Targets()  # no user packs: what a built-in pack's `base` is looked up in
