"""The generative corpus against both real runtimes and gpulint, one row per model (issue #47's table in
docs/how-we-know/generative.md).

    .venv/bin/python bench/generative_table.py [--generate N] > table.md

Per model of the corpus (tests/converters/generative_build.py, built by `make converters`):
- the classic GPU delegate (GL oracle, OpenGL backend, quantized ops off as its default is): per signature
  (each made the main subgraph), the nodes it takes and how its init ends; and `gpulint check --target classic
  --backend opengl --no-quantized`'s count and verdict for the same;
- LiteRT 2.3's accelerator (ai-edge-litert 2.3.0, WebGPU on lavapipe): how the compile ends, and after
  `gpulint fix --passes inline-composites,dequantize-constants` the ops it runs on its GPU per signature
  (its own summary lines);
- for each float decoder, `gpulint verify --generate N` on the executor (the model as it is) and on the
  accelerator (the inlined model), as "tokens agreeing / N".
Every number is measured when the script runs; it prints the machine and date it ran on.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from oracle import gl_oracle  # noqa: E402
from oracle.litert import litert_oracle  # noqa: E402
from test_corpus_generative import corpus  # noqa: E402

from gpulint.check import check_file  # noqa: E402
from gpulint.model import read, write  # noqa: E402
from gpulint.model.signatures import as_main, keys  # noqa: E402
from gpulint.settings import Settings  # noqa: E402

GPULINT = Path(sys.executable).with_name("gpulint")


def cpu() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "?")


def generate(model: Path, candidate: Path, engine: str, steps: int) -> str:
    command = [str(GPULINT), "verify", str(model), "--candidate", str(candidate), "--generate", str(steps)]
    out = subprocess.run(
        [*command, "--engine", engine, "--format", "json"], capture_output=True, text=True, timeout=1200
    )
    if out.returncode == 2:
        return f"error: {(out.stderr.strip().splitlines() or ['?'])[-1][:80]}"
    body = json.loads(out.stdout)
    agree = sum(1 for s in body["steps"] if s["agrees"] or s["tie"])
    died = f" (died at step {body['error_step']})" if body["status"] == "ERROR" else ""
    return f"{agree}/{len(body['steps'])}{died}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--generate", type=int, default=8, help="decode steps for verify --generate")
    args = ap.parse_args()
    folder, manifest, why = corpus()
    if folder is None:
        raise SystemExit(why)
    models = sorted(folder / n for n, e in manifest["models"].items() if n.endswith(".tflite") and "error" not in e)
    with tempfile.TemporaryDirectory(prefix="gpulint-generative-table-") as tmp:
        sig_files: dict[tuple[str, str], Path] = {}
        inlined: dict[str, Path] = {}
        unfixed: dict[str, str] = {}
        for path in models:
            model = read(path)
            for key in keys(model):
                sig_files[(path.stem, key)] = Path(tmp, f"{path.stem}__{key}.tflite")
                write(as_main(model, key), sig_files[(path.stem, key)], allow_loss=True)
            out = Path(tmp, f"{path.stem}__inlined.tflite")
            command = [
                str(GPULINT),
                "fix",
                str(path),
                "-o",
                str(out),
                "--passes",
                "inline-composites,dequantize-constants",
                "--skip-proof",
            ]
            done = subprocess.run(command, capture_output=True, text=True, timeout=600)
            if done.returncode == 0:
                inlined[path.stem] = out
            else:  # e.g. int4 blockwise quantization the installed schema does not know: fix will not drop it
                unfixed[path.stem] = (done.stderr.strip().splitlines() or ["?"])[-1]
        gl = gl_oracle(list(sig_files.values()))
        acc = litert_oracle(models + list(inlined.values()))
        print(f"Measured {datetime.date.today()} on {cpu()} ({platform.machine()}), `bench/generative_table.py`.\n")
        print(
            "| model | signature | GL delegate: nodes, init | check (classic, OpenGL) | accelerator | "
            "accelerator after fix --passes inline-composites,dequantize-constants | "
            f"generate {args.generate}: executor | accelerator (fixed) |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for path in models:
            stem = path.stem
            res = acc[str(path)]
            fixed = acc[str(inlined[stem])] if stem in inlined else None
            float_decoder = stem.endswith("_f32") and "decode" in keys(read(path))
            gen_exec = generate(path, path, "opencl", args.generate) if float_decoder else ""
            gen_acc = generate(path, inlined[stem], "litert-gpu", args.generate) if float_decoder and fixed else ""
            for i, key in enumerate(keys(read(path))):
                q = sig_files[(stem, key)]
                o = gl[str(q)]
                r = check_file(str(q), Settings(target="classic", backend="opengl", quantized=False))
                plan = r.plans[0]
                ops = len(as_main(read(inlined[stem]), key).subgraphs[0].operators) if stem in inlined else 0
                if fixed is None:
                    after = "fix cannot write it: " + (
                        "int4 blockwise quantization"
                        if "quantization details" in unfixed[stem]
                        else unfixed[stem][-60:]
                    )
                else:
                    # the accelerator logs a summary only for a subgraph it does not take whole
                    taken = next((t for t, n in fixed.summaries if n == ops), ops)
                    after = f"{fixed.outcome}, {taken} of {ops} ops" if fixed.outcome == "ok" else fixed.outcome
                print(
                    f"| {stem if i == 0 else ''} | {key} | {len(o.primary())}, {o.outcome} | "
                    f"{len(plan.delegated)}, {r.verdict} | {res.outcome if i == 0 else ''} | {after} | "
                    f"{gen_exec if i == 0 else ''} | {gen_acc if i == 0 else ''} |"
                )


if __name__ == "__main__":
    main()
