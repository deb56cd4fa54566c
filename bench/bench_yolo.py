"""YOLOv8n and YOLO11n detect at 640 (issue #22, Done means): the executor within 2x of the CPU interpreter.

    .venv/bin/python bench/bench_yolo.py [--runs 20] [--precision fp32]
    .venv/bin/python bench/bench_yolo.py --table     README's model x command table on the test corpus

The two detectors are Ultralytics' own float32 exports (onnx2tf) with random weights, built once by
tests/converters/setup_yolo.sh --bench into .converter-cache/yolo (a few minutes the first time, and the
.yolo-venv toolchain if it is missing). Each is timed by `gpulint bench` in its own process: warm median latency of
the LiteRT CPU interpreter (all cores) and of the OpenCL executor, and their ratio. Prints one line per model.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from converters import yolo_build as yb

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".converter-cache" / "yolo"
SETUP = REPO / "tests" / "converters" / "setup_yolo.sh"


def bench_set() -> Path:
    """The folder of the 640 detectors, built when missing."""
    for _ in range(2):
        for m in CACHE.glob("*/manifest.json"):
            manifest = json.loads(m.read_text())
            if manifest.get("bench") and manifest.get("config") == yb.config_hash():
                return m.parent
        subprocess.run(["bash", str(SETUP), str(REPO / ".yolo-venv"), str(CACHE), "--bench"], check=False)
    raise SystemExit(f"the 640 detectors could not be built ({CACHE}/build.log)")


def gpulint(*args: object) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-m", "gpulint", *map(str, args)], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if "error" in ln.lower()] or err.splitlines()[-1:] or ["?"]
    return lines[-1].split(": error: ")[-1][:60]


def verdict(path: Path, *flags: str) -> str:
    code, out, err = gpulint("check", "--format", "json", "--exit-zero", *flags, path)
    if code:
        return f"error: {error_line(err)}"
    f = json.loads(out)["files"][0]
    if f["verdict"] != "init-failure":
        return str(f["verdict"])
    failing = [b for b, v in f["backends"].items() if v["init"] != "ok"]
    return f"init-failure ({', '.join(failing)})"


def verify_cell(path: Path, precision: str) -> str:
    code, out, err = gpulint("verify", path, "--runs", 5, "--precision", precision, "--format", "json")
    try:
        r = json.loads(out)
    except json.JSONDecodeError:
        return f"exit {code}: {error_line(err)}"
    nan = any(o.get("nonfinite_in_candidate") for o in r.get("outputs", []))
    return str(r["status"]) + (" (NaN)" if nan else "")


def table() -> None:
    """One row per test-corpus file, one column per command; each cell is what the command said."""
    sys.path.insert(0, str(REPO / "tests"))
    from test_corpus_yolo import corpus

    folder, why = corpus()
    if folder is None:
        raise SystemExit(why)
    head = ["file", "inspect", "check", "check --backend opengl", "check --target litert-gpu", "fix", "fix --verify"]
    head += ["verify fp32 x5", "verify fp16 x5", "bench (executor/CPU)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    tmp = Path(tempfile.mkdtemp(prefix="yolo-table-"))
    for name in yb.corpus_names():
        path = folder / name
        row = [name, "ok" if gpulint("inspect", path)[0] == 0 else "error"]
        row += [verdict(path), verdict(path, "--backend", "opengl"), verdict(path, "--target", "litert-gpu")]
        code, out, err = gpulint("fix", path, "-o", tmp / name)
        kept = "metadata kept" if (tmp / name).is_file() and zipfile.is_zipfile(tmp / name) else "metadata lost"
        row.append(f"written, {kept}" if code == 0 else f"exit {code}: {error_line(err)}")
        code, out, err = gpulint("fix", "--verify", path, "-o", tmp / f"v-{name}")
        row.append("written" if code == 0 else ("verify FAIL" if code == 1 else f"exit {code}: {error_line(err)}"))
        row += [verify_cell(path, "fp32"), verify_cell(path, "fp16")]
        code, out, err = gpulint("bench", path, "--runs", 5, "--no-start", "--format", "json")
        row.append(f"{json.loads(out)['ratio']:.2f}x" if code == 0 else f"exit {code}: {error_line(err)}")
        print("| " + " | ".join(row) + " |", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "fp32-fp16"])
    ap.add_argument("--table", action="store_true", help="the model x command table instead")
    args = ap.parse_args()
    if args.table:
        return table()
    folder = bench_set()
    for name in yb.bench_names():
        argv = [sys.executable, "-m", "gpulint", "bench", str(folder / name), "--runs", str(args.runs)]
        argv += ["--precision", args.precision, "--no-start", "--format", "json"]
        p = subprocess.run(argv, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"{name}: bench exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(p.stdout)
        within = "within 2x" if r["ratio"] <= 2 else "NOT within 2x"
        print(
            f"{name} ({args.precision}, {r['device']}): CPU interpreter {r['cpu_interpreter_ms']:.1f} ms "
            f"({r['cpu_threads']} threads), executor {r['executor_ms']:.1f} ms, ratio {r['ratio']:.2f}: {within}"
        )


if __name__ == "__main__":
    main()
