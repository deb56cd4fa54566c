"""Build the YOLO corpus the way Ultralytics users build it (issue #22): PyTorch -> ONNX -> onnx2tf -> TFLite.

Run by tests/converters/setup_yolo.sh inside .yolo-venv (ultralytics, onnx2tf, tensorflow; not gpulint's venv):

    .yolo-venv/bin/python tests/converters/yolo_build.py OUT [--bench]

Models come from Ultralytics' own YAML configs with random weights (torch seed 0; nothing is downloaded) and are
exported offline with `YOLO.export(format="tflite")`, so the files are what the exporter writes, metadata zip
included. A float export gives `_float32` and `_float16` (fp16 weights behind DEQUANTIZE, with onnx2tf's
BATCH_MATMUL unfold on, as Ultralytics asks for float exports); an int8 export, calibrated on a local folder of
random images, gives the dynamic-range file (Ultralytics' `_int8`), `_integer_quant` (int8 inside, float I/O) and
`_full_integer_quant` (int8 I/O). OUT gets the files and manifest.json; `--bench` builds the 640 detectors instead;
`--load FILE...` prints, as JSON, what Ultralytics reads from each file (task, class names, keypoint shape).

This file is also imported (without ultralytics) by the tests, for the corpus's names and its cache key.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

IMGSZ = 160  # small, so that the corpus builds and tests quickly; the bench set is at 640
ARCHS = ("yolov8n", "yolo11n")
TASKS = {"detect": "", "segment": "-seg", "pose": "-pose", "classify": "-cls"}
# onnx2tf's output suffix -> our scheme name (the tfconv corpus's names)
FLOAT_SCHEMES = {"_float32": "f32", "_float16": "f16"}
INT8_SCHEMES = {"_int8": "dr8", "_integer_quant": "int8io32", "_full_integer_quant": "int8"}
BENCH = (("yolov8n", 640), ("yolo11n", 640))  # detect, float32 only
CALIBRATION_SAMPLE = "calibration_image_sample_data_20x128x128x3_float32.npy"
RECIPE = 1  # how the files are made: seed, calibration data, export arguments
PACKAGES = ("ultralytics", "onnx2tf", "tensorflow", "tf_keras", "torch", "onnx", "onnxslim", "ai-edge-litert")


def stem(arch: str, task: str) -> str:
    return arch + TASKS[task]


def corpus_names() -> list[str]:
    """Every file of the test corpus, by name: {arch}{-task}_{imgsz}_{scheme}.tflite."""
    schemes = [*FLOAT_SCHEMES.values(), *INT8_SCHEMES.values()]
    return [f"{stem(a, t)}_{IMGSZ}_{s}.tflite" for a in ARCHS for t in TASKS for s in schemes]


def bench_names() -> list[str]:
    return [f"{a}_{n}_f32.tflite" for a, n in BENCH]


def config_hash() -> str:
    """What the corpus is made of; RECIPE counts changes to how it is made (bump it with such a change)."""
    config = [RECIPE, IMGSZ, ARCHS, TASKS, FLOAT_SCHEMES, INT8_SCHEMES, BENCH, CALIBRATION_SAMPLE]
    return hashlib.sha256(json.dumps(config).encode()).hexdigest()[:16]


def cache_key(versions: dict[str, str], bench: bool) -> str:
    """Package versions + the config + which set."""
    text = json.dumps({"versions": versions, "config": config_hash(), "bench": bench}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def installed_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for p in PACKAGES:
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = "missing"
    return out


def random_datasets(root: Path, imgsz: int) -> dict[str, str]:
    """Local calibration data instead of coco8 / imagenette: 4 random images, no labels needed."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    images = root / "images"
    for split in ("train", "val"):
        (images / split).mkdir(parents=True, exist_ok=True)
        for i in range(4):
            a = rng.integers(0, 256, (imgsz, imgsz, 3), dtype=np.uint8)
            Image.fromarray(a).save(images / split / f"{i}.jpg")
    names = "\n".join(f"  {i}: class{i}" for i in range(80))
    det = root / "det.yaml"
    det.write_text(f"path: {root}\ntrain: images/train\nval: images/val\nnames:\n{names}\n")
    pose = root / "pose.yaml"
    pose.write_text(
        f"path: {root}\ntrain: images/train\nval: images/val\nkpt_shape: [17, 3]\n"
        "flip_idx: [0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15]\nnames:\n  0: person\n"
    )
    cls = root / "cls"  # ImageFolder layout: split/class/image
    for split in ("train", "val"):
        for c in ("a", "b"):
            (cls / split / c).mkdir(parents=True, exist_ok=True)
            for i in range(2):
                a = rng.integers(0, 256, (imgsz, imgsz, 3), dtype=np.uint8)
                Image.fromarray(a).save(cls / split / c / f"{i}.jpg")
    return {"detect": str(det), "segment": str(det), "pose": str(pose), "classify": str(cls)}


def export(arch: str, task: str, imgsz: int, int8: bool, data: str | None, work: Path) -> Path:
    """One `YOLO(yaml).export(format="tflite")` in `work`; returns its saved_model folder."""
    import torch
    from ultralytics import YOLO

    torch.manual_seed(0)
    name = stem(arch, task)
    model = YOLO(f"{name}.yaml", task=task)
    cwd = Path.cwd()
    os.chdir(work)  # the exporter writes next to the model's name and reads the calibration sample from cwd
    try:
        fmt = "saved_model"  # since 8.4.83 "tflite" means litert-torch; the onnx2tf TFLite files come with this
        model.export(format=fmt, imgsz=imgsz, quantize=8 if int8 else None, data=data, batch=1, device="cpu")
    finally:
        os.chdir(cwd)
    return work / f"{name}_saved_model"


def build(out: Path, bench: bool) -> dict[str, object]:
    import numpy as np

    work = Path(tempfile.mkdtemp(prefix="yolo-build-"))
    # Ultralytics downloads onnx2tf's calibration sample even for float exports; a random stand-in, same shape.
    sample = np.random.default_rng(0).random((20, 128, 128, 3), dtype=np.float32)
    np.save(work / CALIBRATION_SAMPLE, sample)
    files: dict[str, dict[str, object]] = {}
    timings: dict[str, float] = {}

    def take(folder: Path, name: str, task: str, schemes: dict[str, str], size: int) -> None:
        for suffix, scheme in schemes.items():
            src = folder / f"{name}{suffix}.tflite"
            if not src.is_file():
                raise SystemExit(
                    f"the exporter wrote no {src.name} (it wrote {sorted(p.name for p in folder.glob('*'))})"
                )
            dst = out / f"{name}_{size}_{scheme}.tflite"
            shutil.copyfile(src, dst)
            files[dst.name] = {"arch": name.split("-")[0], "task": task, "scheme": scheme, "imgsz": size}

    try:
        if bench:
            for arch, size in BENCH:
                task = "detect"
                t = time.perf_counter()
                take(export(arch, task, size, False, None, work), arch, task, {"_float32": "f32"}, size)
                timings[f"{arch}_{size}"] = round(time.perf_counter() - t, 1)
        else:
            data = random_datasets(work / "data", IMGSZ)
            for arch in ARCHS:
                for task in TASKS:
                    name = stem(arch, task)
                    for int8, schemes in ((False, FLOAT_SCHEMES), (True, INT8_SCHEMES)):
                        t = time.perf_counter()
                        folder = export(arch, task, IMGSZ, int8, data[task] if int8 else None, work)
                        take(folder, name, task, schemes, IMGSZ)
                        shutil.rmtree(folder)
                        timings[f"{name}_{'int8' if int8 else 'float'}"] = round(time.perf_counter() - t, 1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"files": files, "export_seconds": timings}


def load(paths: list[str]) -> dict[str, dict[str, object]]:
    """What Ultralytics makes of each file: `YOLO(path)` and one prediction on a black image, as a user would."""
    import numpy as np
    from ultralytics import YOLO

    out: dict[str, dict[str, object]] = {}
    for p in paths:
        try:
            model = YOLO(p)
            result = model.predict(np.zeros((IMGSZ, IMGSZ, 3), np.uint8), imgsz=IMGSZ, verbose=False)[0]
            meta = getattr(model.predictor.model, "metadata", None) or {}
            out[p] = {
                "task": model.task,
                "names": {str(k): v for k, v in result.names.items()},
                "kpt_shape": list(meta.get("kpt_shape") or []),
                "imgsz": list(meta.get("imgsz") or []),
            }
        except Exception as e:  # what the user would see, for the test's message
            out[p] = {"error": f"{type(e).__name__}: {e}"}
    return out


def prune(root: Path, keep: str, bench: bool) -> None:
    """Older builds of the same set (other versions or an older script) go."""
    for m in root.glob("*/manifest.json"):
        if m.parent.name != keep and json.loads(m.read_text()).get("bench") == bench:
            shutil.rmtree(m.parent, ignore_errors=True)


def main() -> int:
    # Offline, and nothing installed behind our back; Ultralytics' settings file stays out of ~/.config.
    os.environ.update(YOLO_OFFLINE="1", ULTRALYTICS_SKIP_REQUIREMENTS_CHECKS="1", TF_CPP_MIN_LOG_LEVEL="3")
    os.environ.setdefault("YOLO_CONFIG_DIR", tempfile.mkdtemp(prefix="yolo-config-"))
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    args = sys.argv[1:]
    if args[:1] == ["--load"]:
        print(json.dumps(load(args[1:])))
        return 0
    bench = "--bench" in args
    paths = [a for a in args if not a.startswith("--")]
    if len(paths) != 1:
        print(__doc__.strip().splitlines()[4].strip(), file=sys.stderr)
        return 2
    versions = installed_versions()
    root = Path(paths[0])
    key = cache_key(versions, bench)
    final = root / key
    if (final / "manifest.json").is_file():
        print(final)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
    t0 = time.perf_counter()
    manifest = build(tmp, bench)
    manifest.update(key=key, config=config_hash(), versions=versions, bench=bench, imgsz=IMGSZ)
    manifest["build_seconds"] = round(time.perf_counter() - t0, 1)
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)  # the cache appears whole or not at all
    prune(root, key, bench)
    print(final)
    return 0


if __name__ == "__main__":
    sys.exit(main())
