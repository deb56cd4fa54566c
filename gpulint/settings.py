"""Which rules apply: the settings of a run, from gpulint.toml (or pyproject.toml's [tool.gpulint])
and the command line, resolved in one place for every command (check, report, fix, verify).

`resolve(Overrides(...))` is ruff's `resolve()`: the configuration file first, then each flag
the command line gave on top, then every value checked (target, backend, selectors, a target's
own settings) so that a bad one is one clear error before any model is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulint.rules import pack


class SettingsError(Exception):
    """A bad flag value or configuration file; the message says which and why."""


@dataclass
class Settings:
    select: list[str] = field(default_factory=lambda: ["GPU"])
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    per_op_ignores: dict[str, list[str]] = field(default_factory=dict)
    target: str = "classic"
    quantized: bool = True
    # opencl | opengl (classic) | metal | webgpu (litert-gpu) | both or all: which of the target's
    # backends must build the graph (both and all: every one it has)
    backend: str = "both"
    rules: list[Path] = field(default_factory=list)
    config: Path | None = None
    target_settings: dict[str, Any] = field(default_factory=dict)  # a target's own options (--coreml-version)


CONFIG_KEYS = {
    "select",
    "extend-select",
    "ignore",
    "per-file-ignores",
    "per-op-ignores",
    "target",
    "quantized",
    "backend",
    "rules",
    "coreml-version",
    "coreml-all-devices",
    "litert-version",
}
EVERY_BACKEND = ("both", "all")  # every backend of the target (both: the classic delegate's name for it)
BACKENDS = ("opencl", "opengl", "metal", "webgpu", *EVERY_BACKEND)
COREML_VERSIONS = (2, 3)
LITERT_VERSIONS = ("2.3", "2.4")  # litert-gpu.yaml `releases`: the LiteRT releases the accelerator's rules model


def find_config(start: Path) -> Path | None:
    """gpulint.toml, or a pyproject.toml with [tool.gpulint], in `start` or a parent folder."""
    for folder in (start, *start.parents):
        own = folder / "gpulint.toml"
        if own.is_file():
            return own
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "gpulint" in _read_toml(pyproject).get("tool", {}):
            return pyproject
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    import tomllib  # only where a configuration file is there to read

    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise SettingsError(f"{path}: {e}") from None


def load_config(path: Path) -> dict[str, Any]:
    """The configuration file's values as Settings keyword arguments."""
    data = _read_toml(path)
    table = data.get("tool", {}).get("gpulint", {}) if path.name == "pyproject.toml" else data
    if not isinstance(table, dict):
        raise SettingsError(f"{path}: [tool.gpulint] must be a table")
    unknown = sorted(set(table) - CONFIG_KEYS)
    if unknown:
        raise SettingsError(f"{path}: unknown key {', '.join(unknown)} (known: {', '.join(sorted(CONFIG_KEYS))})")

    def strings(key: str) -> list[str]:
        v = table.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise SettingsError(f"{path}: `{key}` must be a list of strings")
        return v

    def mapping(key: str) -> dict[str, list[str]]:
        v = table.get(key, {})
        if not isinstance(v, dict) or not all(
            isinstance(x, list) and all(isinstance(c, str) for c in x) for x in v.values()
        ):
            raise SettingsError(f"{path}: `{key}` must map names to lists of rule codes")
        return v

    def boolean(key: str) -> bool:
        v = table[key]
        if not isinstance(v, bool):
            raise SettingsError(f"{path}: `{key}` must be true or false")
        return v

    out: dict[str, Any] = {}
    for key in ("select", "extend-select", "ignore", "rules"):
        if key in table:
            out[key.replace("-", "_")] = strings(key)
    for key in ("per-file-ignores", "per-op-ignores"):
        if key in table:
            out[key.replace("-", "_")] = mapping(key)
    if "target" in table:
        if not isinstance(table["target"], str):
            raise SettingsError(f"{path}: `target` must be a string")
        out["target"] = table["target"]
    if "backend" in table:
        if table["backend"] not in BACKENDS:
            raise SettingsError(f"{path}: `backend` must be one of {', '.join(BACKENDS)}")
        out["backend"] = table["backend"]
    if "quantized" in table:
        out["quantized"] = boolean("quantized")
    # A target's own settings, as its flags name them; each applies only to the target that has it
    # (Core ML's to --target coreml and the matrix's Core ML column).
    own: dict[str, Any] = {}
    if "coreml-version" in table:
        v = table["coreml-version"]
        if isinstance(v, bool) or v not in COREML_VERSIONS:
            raise SettingsError(f"{path}: `coreml-version` must be 2 or 3")
        own["coreml_version"] = v
    if "coreml-all-devices" in table:
        own["all_devices"] = boolean("coreml-all-devices")
    if "litert-version" in table:
        lv = str(table["litert-version"])
        if lv not in LITERT_VERSIONS:
            raise SettingsError(f"{path}: `litert-version` must be one of {', '.join(LITERT_VERSIONS)} (a string)")
        own["litert_version"] = lv
    if own:
        out["target_settings"] = own
    if "rules" in out:  # relative to the configuration file
        out["rules"] = [(path.parent / p) for p in out["rules"]]
    return out


def validate_selectors(selectors: list[str], rules: dict[str, pack.Rule], what: str) -> None:
    names = {r.name for r in rules.values()}
    for s in selectors:
        if s != "ALL" and s not in names and not any(code.startswith(s) for code in rules):
            raise SettingsError(f"{what}: `{s}` matches no rule code or name (see `gpulint rules`)")


@dataclass
class Overrides:
    """What the command line gave; None (or empty) where it gave nothing, so the configuration
    file's value, or the default, stands."""

    config: Path | None = None  # None: found from the current folder up
    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    rules: list[Path] = field(default_factory=list)
    target: str | None = None
    quantized: bool | None = None
    backend: str | None = None
    coreml_version: int | None = None
    coreml_all_devices: bool | None = None
    litert_version: str | None = None


def resolve(given: Overrides, cwd: Path | None = None, matrix: bool = False) -> Settings:
    """The settings of one run: the configuration file, then the command line on top, checked.

    `matrix`: the run is `check --matrix`, whose columns are targets of their own, so the target's
    own settings (--coreml-version) may be given without --target coreml. Raises SettingsError
    (a bad value) or PackError (a rule pack that cannot be read, built-in ones included)."""
    cfg_path = given.config if given.config is not None else find_config(cwd or Path.cwd())
    if given.config is not None and not given.config.is_file():
        raise SettingsError(f"{given.config}: no such configuration file")
    settings = Settings(**load_config(cfg_path)) if cfg_path is not None else Settings()
    settings.config = cfg_path
    if given.select is not None:
        settings.select = list(given.select)
    settings.extend_select += given.extend_select
    settings.ignore += given.ignore
    settings.rules += given.rules
    targets = pack.load_targets(settings.rules)
    if given.target is not None:
        settings.target = given.target
    elif given.rules:
        settings.target = list(targets)[-1]  # the last pack given on the command line
    if given.quantized is not None:
        settings.quantized = given.quantized
    if given.backend is not None:
        settings.backend = given.backend
    if settings.backend not in BACKENDS:
        raise SettingsError(f"unknown backend `{settings.backend}`; known: {', '.join(BACKENDS)}")
    if settings.target not in targets:
        raise SettingsError(f"unknown target `{settings.target}`; known: {', '.join(targets)}")
    if given.coreml_version is not None and given.coreml_version not in COREML_VERSIONS:
        raise SettingsError(f"--coreml-version must be 2 or 3, not {given.coreml_version}")
    flags = given.coreml_version is not None or given.coreml_all_devices is not None
    if flags and settings.target != "coreml" and not matrix:
        raise SettingsError("--coreml-version and --coreml-all-devices apply to --target coreml (or --matrix)")
    if given.coreml_version is not None:
        settings.target_settings["coreml_version"] = given.coreml_version
    if given.coreml_all_devices is not None:
        settings.target_settings["all_devices"] = given.coreml_all_devices
    if given.litert_version is not None:
        if given.litert_version not in LITERT_VERSIONS:
            known = ", ".join(LITERT_VERSIONS)
            raise SettingsError(f"--litert-version must be one of {known}, not {given.litert_version}")
        if "litert_version" not in targets[settings.target].settings and not matrix:
            raise SettingsError("--litert-version applies to --target litert-gpu (or a pack based on it, or --matrix)")
        settings.target_settings["litert_version"] = given.litert_version
    # The target's pack is read here, not at the first model: a pack that cannot be read (a
    # built-in one too) is one error before any work, never a traceback halfway.
    target = targets[settings.target]
    if settings.backend not in EVERY_BACKEND and settings.backend not in target.backends and not matrix:
        # --backend picks one of the target's backends (the classic delegate's OpenCL/OpenGL ES,
        # LiteRT's accelerator's OpenCL/Metal/WebGPU); a target without it would otherwise be
        # checked with none of its own backends (Metal's, Core ML's boundary checks).
        raise SettingsError(
            f"backend `{settings.backend}` does not apply to target `{settings.target}` "
            f"(its backends: {', '.join(target.backends) or 'none'}); give --backend both"
        )
    catalog = pack.builtin_rules()
    for what, values in (
        ("--select", settings.select),
        ("--extend-select", settings.extend_select),
        ("--ignore", settings.ignore),
    ):
        validate_selectors(values, catalog, what)
    return settings
