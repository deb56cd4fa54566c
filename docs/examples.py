"""Run every console example of README.md and docs/ and compare what it prints with what the page shows.

A console example is a ```console block: lines starting with `$ ` are commands (a trailing `\\` continues
one), the lines after each are what it prints (stdout and stderr together). Each page's examples run in
order, in a fresh folder of their own, so one example may use a file an earlier one wrote. The folder
starts with the models the examples name:

- `demo-out/sample.tflite`: the sample model `make demo` (`gpulint demo`) writes (gpulint/sample.py);
- `models/*.tflite`: small models made with gpulint.model.build (`MODELS` below);
- `llm/decoder.tflite`: a tiny decoder with an LLM export's interface (gpulint.sample.sample_decoder).

What varies between machines and runs is marked in the page, never normalised silently: `[...]` in a
line matches any text within that line, and a line that is only `...` matches any number of lines
(zero or more). Everything else must match exactly (trailing spaces aside).

    python docs/examples.py                 # check every example; exit 1 if one is stale
    python docs/examples.py --update        # rewrite the stale ones from what they print now
    python docs/examples.py --models DIR    # write the example models into DIR, to run them by hand

tests/test_docs.py runs the check in `make test`.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpulint.model import write
from gpulint.model.build import ModelBuilder
from gpulint.model.ir import Model
from gpulint.sample import sample_decoder, sample_model

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\S*)\s*$")
WIDTH = "100"  # the terminal width the examples are rendered at (typer's help boxes, progress)


def softmax_by_hand() -> Model:
    """A softmax spelt out, EXP -> SUM -> DIV, as a converter leaves it: EXP overflows in half (GPU702)."""
    mb = ModelBuilder(description="softmax written out")
    g = mb.subgraph("main")
    x = g.input("logits", [1, 256])
    e = g.op("EXP", [x], [1, 256], out_name="exp")
    s = g.op("SUM", [e, g.const("axis", np.array([1], np.int32))], [1, 1], options=dict(keep_dims=True), out_name="sum")
    y = g.op("DIV", [e, s], [1, 256], out_name="probabilities")
    g.output(y)
    return mb.build()


# The models the examples use besides the sample, under models/ in each page's folder.
MODELS: dict[str, Callable[[], Model]] = {"softmax_by_hand.tflite": softmax_by_hand}
# A decoder with an LLM export's interface, in a folder of its own (the folder examples of models/ stay as they are).
LLM_MODELS: dict[str, Callable[[], Model]] = {"decoder.tflite": sample_decoder}


def write_models(folder: Path) -> None:
    (folder / "demo-out").mkdir(parents=True, exist_ok=True)
    write(sample_model(), folder / "demo-out" / "sample.tflite")
    (folder / "models").mkdir(exist_ok=True)
    for name, make in MODELS.items():
        write(make(), folder / "models" / name)
    (folder / "llm").mkdir(exist_ok=True)
    for name, make in LLM_MODELS.items():
        write(make(), folder / "llm" / name)


@dataclass
class Command:
    line: int  # 1-based line of the `$ ` in the page
    text: str  # the command as the shell gets it
    expected: list[str] = field(default_factory=list)


@dataclass
class Example:
    path: Path
    start: int  # 0-based index of the first line inside the fence
    end: int  # 0-based index of the closing fence
    commands: list[Command]


def fenced_blocks(text: str) -> Iterator[tuple[str, int, int]]:
    """(info string, first line inside, closing line) of every fenced block, 0-based."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            yield m.group(1), i + 1, j
            i = j
        i += 1


def examples(path: Path) -> list[Example]:
    text = path.read_text()
    lines = text.split("\n")
    out = []
    for info, start, end in fenced_blocks(text):
        if info != "console":
            continue
        commands: list[Command] = []
        i = start
        while i < end:
            line = lines[i]
            if line.startswith("$ "):
                cmd, first = line[2:], i
                while cmd.endswith("\\") and i + 1 < end:
                    i += 1
                    cmd = cmd[:-1] + lines[i]
                commands.append(Command(first + 1, cmd))
            elif commands:
                commands[-1].expected.append(line)
            else:
                raise ValueError(f"{path}:{i + 1}: a console block must start with a `$ ` command")
            i += 1
        out.append(Example(path, start, end, commands))
    return out


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def matches(expected: list[str], actual: list[str]) -> bool:
    """`expected` with its `[...]` and `...` marks against `actual`, line by line."""
    pattern = []
    for line in expected:
        if line.strip() == "...":
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            pattern.append(".*?".join(re.escape(part) for part in line.rstrip().split("[...]")) + r"\n")
    return re.fullmatch("".join(pattern), "".join(a + "\n" for a in actual), re.DOTALL) is not None


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",  # this Python's gpulint
        COLUMNS=WIDTH,
        TERM="dumb",
        NO_COLOR="1",
        GPULINT_NO_CACHE="1",  # results computed, never read back from a cache
    )
    env.pop("FORCE_COLOR", None)
    return env


def run(command: str, folder: Path, env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command] if "|" in command else ["bash", "-c", command],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    lines = [line.rstrip() for line in done.stdout.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


@dataclass
class Stale:
    path: Path
    command: Command
    actual: list[str]

    def __str__(self) -> str:
        shown = "\n".join(f"    {line}" for line in self.actual)
        where = self.path.relative_to(ROOT)
        return f"{where}:{self.command.line}: `$ {self.command.text}` now prints:\n{shown}"


def check_page(path: Path, cache: Path) -> list[Stale]:
    """Run the page's examples in order in a fresh folder; the commands whose output does not match."""
    found = examples(path)
    if not found:
        return []
    env = environment()
    env["GPULINT_CACHE_DIR"] = str(cache)  # compiled kernels, shared by the pages of one run
    stale = []
    with tempfile.TemporaryDirectory(prefix="gpulint-example-") as tmp:
        folder = Path(tmp)
        write_models(folder)
        for example in found:
            for command in example.commands:
                actual = run(command.text, folder, env)
                if not matches(command.expected, actual):
                    stale.append(Stale(path, command, actual))
    return stale


def update(stale: list[Stale]) -> None:
    """Write each stale command's new output under it (marks for what varies are the author's to add)."""
    by_path: dict[Path, list[Stale]] = {}
    for s in stale:
        by_path.setdefault(s.path, []).append(s)
    for path, items in by_path.items():
        lines = path.read_text().split("\n")
        for s in sorted(items, key=lambda s: -s.command.line):
            start = s.command.line  # 0-based index of the first line after the command
            while lines[start - 1].endswith("\\"):
                start += 1
            end = start + len(s.command.expected)
            lines[start:end] = s.actual
        path.write_text("\n".join(lines))


def command_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Every `gpulint ...` command a page shows, in console or sh blocks: (1-based line, command)."""
    lines = path.read_text().split("\n")
    for info, start, end in fenced_blocks(path.read_text()):
        if info not in ("console", "sh", "bash", "shell"):
            continue
        for i in range(start, end):
            line = lines[i][2:] if info == "console" and lines[i].startswith("$ ") else lines[i]
            if info == "console" and not lines[i].startswith("$ "):
                continue
            for part in re.split(r"\s*(?:\|\||&&|;|\|)\s*", line.split(" #")[0]):
                if part.startswith("gpulint "):
                    yield i + 1, part


def unknown_options(command: str, known: dict[str, set[str]]) -> list[str]:
    """The options of a `gpulint NAME ...` line that `gpulint NAME` does not have."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    name = next((w for w in words[1:] if not w.startswith("-")), None)
    if name is None:
        return [w for w in words[1:] if w.split("=")[0] not in {"--version", "--help"}]
    if name not in known:
        return [name]
    return [w for w in words[1:] if w.startswith("-") and w.split("=")[0] not in known[name]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="pages to check (default: README.md and docs/)")
    parser.add_argument("--update", action="store_true", help="rewrite stale examples with today's output")
    parser.add_argument("--models", type=Path, metavar="DIR", help="write the example models into DIR and exit")
    args = parser.parse_args()
    if args.models:
        write_models(args.models)
        made = [f"models/{m}" for m in MODELS] + [f"llm/{m}" for m in LLM_MODELS]
        print(f"wrote {args.models}/demo-out/sample.tflite and {', '.join(made)}")
        return 0
    stale: list[Stale] = []
    with tempfile.TemporaryDirectory(prefix="gpulint-example-cache-") as cache:
        for path in [p.resolve() for p in args.files] or pages():
            stale += check_page(path, Path(cache))
    for s in stale:
        print(s)
    if args.update:
        update(stale)
        print(f"updated {len(stale)} example(s)")
        return 0
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
