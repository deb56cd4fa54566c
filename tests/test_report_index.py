"""`report DIR` (#41): an index page (one row per model: its page's link, verdict, the device-family
matrix, verify per precision) and a page per model; the same files from the result cache and with
--jobs; an unreadable model is a row saying why, and exit 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import conv_model, needs_opencl

from gpulint.model import write


def models(tmp_path: Path) -> Path:
    folder = tmp_path / "zoo"
    (folder / "sub").mkdir(parents=True)
    write(conv_model(4), folder / "a.tflite")
    write(conv_model(6), folder / "sub" / "b.tflite")
    write(conv_model(8), folder / "sub" / "a.tflite")  # a second model named a
    (folder / "broken.tflite").write_bytes(b"not a model")
    return folder


def report(*args: str, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = os.environ.copy()
    if cache is not None:
        env.pop("GPULINT_NO_CACHE", None)
        env["GPULINT_CACHE_DIR"] = str(cache)
    return subprocess.run(
        [sys.executable, "-m", "gpulint", "report", *args], capture_output=True, text=True, env=env, timeout=600
    )


def pages(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.html"))}


@needs_opencl()
def test_folder_report_index_pages_cache_and_jobs(tmp_path: Path) -> None:
    folder = models(tmp_path)
    out = tmp_path / "out"
    args = [str(folder), "-o", str(out), "--verify", "--precision", "fp32", "--precision", "fp16"]
    r = report(*args, cache=tmp_path / "cache")
    assert r.returncode == 2 and "broken.tflite" in r.stderr  # the others are still written
    assert sorted(pages(out)) == [
        "index.html",
        "models/a-2.html",
        "models/a.html",
        "models/b.html",
        "models/broken.html",
    ]
    index = (out / "index.html").read_text()
    rows = re.findall(r"<tr>\s*<td class=\"mono any\">(.*?)</tr>", index, re.S)
    assert len(rows) == 4
    assert 'href="models/a.html"' in index and "not a model" not in index.split("broken")[0]
    assert "<th>verify fp32</th><th>verify fp16</th>" in index
    assert index.count('<td class="PASS"') == 6  # three models at two precisions
    assert "LiteRT GPU accelerator" in index and "iOS" in index  # the device-family matrix's columns
    page = (out / "models" / "b.html").read_text()
    assert "At fp16" in page and str(folder / "sub" / "b.tflite") in page

    first = pages(out)
    again = report(*args, cache=tmp_path / "cache")
    assert again.returncode == 2 and pages(out) == first  # from the cache: the same files

    jobs_out = tmp_path / "jobs"
    jobs = report(
        str(folder),
        "-o",
        str(jobs_out),
        "--verify",
        "--precision",
        "fp32",
        "--precision",
        "fp16",
        "--jobs",
        "2",
        "--no-cache",
    )
    assert jobs.returncode == 2

    def without_times(p: dict[str, bytes]) -> dict[str, str]:
        return {k: re.sub(r"\d+(\.\d+)? s\b", "T", v.decode()) for k, v in p.items()}

    assert without_times(pages(jobs_out)) == without_times(first)


def test_precision_needs_verify(tmp_path: Path) -> None:
    r = report(str(models(tmp_path)), "--precision", "fp16")
    assert r.returncode == 2 and "give --verify too" in r.stderr


@pytest.mark.parametrize("given", ["file", "files"])
def test_files_still_make_one_page(tmp_path: Path, given: str) -> None:
    folder = models(tmp_path)
    names = [folder / "a.tflite"] + ([folder / "sub" / "b.tflite"] if given == "files" else [])
    r = report(*map(str, names), "-o", str(tmp_path / "one.html"), "--no-fix")
    assert r.returncode == 0 and (tmp_path / "one.html").is_file() and not (tmp_path / "gpulint-report").exists()
