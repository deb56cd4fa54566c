"""The HTML readiness report: content, escaping of hostile names, node data, and a real browser."""

from __future__ import annotations

import html as html_lib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import corpus_file
from helpers import refused_reshape
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import write
from gpulint.model.build import ModelBuilder
from gpulint.sample import sample_model

runner = CliRunner()
EVIL = "<script>document.title='pwned'</script>\"'&<img src=x onerror=alert(1)>"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NO_BROWSER = "Debian's chromium is not installed (`make test` installs it when run as root)"


def hostile_model(tmp_path: Path) -> Path:
    mb = ModelBuilder(description=EVIL)
    g = mb.subgraph(EVIL)
    x = g.input(EVIL + "n" * 10_000, [1, 8, 8, 3])
    w = g.const("w" + EVIL, np.zeros((6, 3, 3, 3), np.float32))
    y = g.op("CONV_2D", [x, w, -1], [1, 8, 8, 6], out_name=EVIL, options=dict(padding="SAME", stride_w=1, stride_h=1))
    g.output(g.op(EVIL, [y], [1, 8, 8, 6], custom_options=b""))  # a custom op named like a script
    path = tmp_path / "hostile.tflite"
    write(mb.build(), path)
    return path


def report(tmp_path: Path, *args: str) -> str:
    out = tmp_path / "report.html"
    r = runner.invoke(app, ["report", *args, "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out.read_text()


def test_report_content(tmp_path: Path) -> None:
    path = tmp_path / "sample.tflite"
    write(sample_model(), path)
    html = report(tmp_path, str(path))
    assert '<div class="word" data-verdict="not-worth-it">Not ready</div>' in html
    assert "GPU402</span> atrous-pattern" in html
    assert "gpulint fix --passes fold-atrous (safe)" in html
    assert "SPACE_TO_BATCH_ND" in html and "<svg" in html
    assert "<td>verdict</td><td>not-worth-it</td><td>ready</td>" in html  # the fix before/after
    # Self-contained: nothing is loaded from anywhere.
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", html)
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_report_escapes_hostile_names(tmp_path: Path) -> None:
    html = report(tmp_path, str(hostile_model(tmp_path)), "--no-fix")
    assert "<script>document.title" not in html and "<img src=x" not in html
    assert "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;" in html
    assert "n" * 10_000 not in html  # bounded, not dropped
    assert html.count("<script>") == 1  # only the report's own pan/zoom script


def test_node_data_for_model_explorer(tmp_path: Path) -> None:
    path = tmp_path / "sample.tflite"
    write(sample_model(), path)
    nd = tmp_path / "node_data.json"
    report(tmp_path, str(path), "--no-fix", "--node-data", str(nd))
    data = json.loads(nd.read_text())
    graph = data["main"]
    assert graph["results"]["atrous/space_to_batch"] == {"value": 2}
    assert graph["results"]["pool/mean"] == {"value": 0}
    assert [t["value"] for t in graph["thresholds"]] == [0, 1, 2]


def test_check_and_fix_write_reports(tmp_path: Path) -> None:
    path = tmp_path / "sample.tflite"
    write(sample_model(), path)
    assert runner.invoke(app, ["check", str(path), "--html", str(tmp_path / "c.html")]).exit_code == 1
    page = (tmp_path / "c.html").read_text()
    assert "Not ready" in page
    # check ran no fix and took no --no-fix: the page says where a fix preview comes from (#40 item 6)
    assert "Not run (<code>gpulint report</code> previews the safe fix passes; its <code>--no-fix</code>" in page
    r = runner.invoke(app, ["fix", str(path), "--dry-run", "--html", str(tmp_path / "f.html")])
    assert r.exit_code == 0
    assert "<td>verdict</td><td>not-worth-it</td><td>ready</td>" in (tmp_path / "f.html").read_text()


def test_report_errors(tmp_path: Path) -> None:
    r = runner.invoke(app, ["report", str(tmp_path / "missing.tflite"), "-o", str(tmp_path / "r.html")])
    assert r.exit_code == 2 and r.stderr.strip().endswith("missing.tflite: no such file")
    assert not (tmp_path / "r.html").exists()


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason=NO_BROWSER)
@pytest.mark.parametrize("name", ["selfie_segmentation.tflite", "unsupported_mix_f32.tflite", "lstm_seq16_f32.tflite"])
def test_reports_render_in_a_real_browser(tmp_path: Path, name: str) -> None:
    html_path = tmp_path / "report.html"
    report(tmp_path, str(corpus_file(name)))
    profile = tmp_path / "profile"
    dom = chromium(f"--user-data-dir={profile}", "--dump-dom", html_path.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = re.sub(r"<[^>]+>", " ", dom.stdout)
    assert re.search(r"(Ready|Partial|Not ready|Refused)", text)
    assert "ops on the GPU" in text and "Findings" in text and "Partitions" in text
    # The pan/zoom script ran: it rewrote each graph's viewBox from the one rendered.
    assert dom.stdout.count("<svg") >= 1
    shot = tmp_path / "report.png"
    png = chromium(f"--user-data-dir={profile}", "--window-size=1280,1600", f"--screenshot={shot}", html_path.as_uri())
    assert png.returncode == 0 and shot.stat().st_size > 20_000  # a page, not a blank
    keep = Path(__file__).resolve().parents[1] / ".pytest_cache" / "screenshots"
    keep.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, keep / f"{name}.png")


@pytest.mark.skipif(CHROMIUM is None, reason=NO_BROWSER)
def test_hostile_names_stay_text_in_a_real_browser(tmp_path: Path) -> None:
    html_path = tmp_path / "report.html"
    html_path.write_text(report(tmp_path, str(hostile_model(tmp_path)), "--no-fix"))
    dom = chromium(f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", html_path.as_uri())
    assert dom.returncode == 0
    title = re.search(r"<title>(.*?)</title>", dom.stdout, re.S)
    assert title and title.group(1).startswith("gpulint report: ")  # the injected script never ran
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom.stdout  # shown, as text
    assert '<img src="x"' not in dom.stdout


def test_verify_section(tmp_path: Path) -> None:
    from helpers import opencl_device

    device, why = opencl_device()
    if device is None:
        pytest.skip(why)
    path = tmp_path / "sample.tflite"
    write(sample_model(), path)
    assert "gpulint report --verify</code> runs" in report(tmp_path, str(path), "--no-fix")
    html = report(tmp_path, str(path), "--no-fix", "--verify")
    assert re.search(r'class="ok">PASS</b>\s+against the LiteRT CPU interpreter', html)
    assert "GPU partition on" in html and "<td>PASS</td>" in html


def refused_model(tmp_path: Path) -> Path:
    """RESHAPE to a shape PACKed from the runtime batch: the interpreter refuses the delegate."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 8])
    y = g.op("RELU", [x], [1, 4, 4, 8])
    g.output(refused_reshape(g, y))
    path = tmp_path / "refused.tflite"
    write(mb.build(), path)
    return path


def test_every_output_carries_a_refused_graph(tmp_path: Path) -> None:
    path = refused_model(tmp_path)
    nd = tmp_path / "nodes.json"
    html = report(tmp_path, str(path), "--no-fix", "--node-data", str(nd))
    assert '<div class="word" data-verdict="refused">Refused</div>' in html
    assert "dynamic-sized after Prepare" in html and 'class="op op-refused"' in html
    values = {r["value"] for g in json.loads(nd.read_text()).values() for r in g["results"].values()}
    assert values == {2}  # every op on the CPU
    for fmt, needle in (
        ("text", "(refused)"),
        ("json", '"verdict": "refused"'),
        ("sarif", "GPU202"),
        ("github", "GPU202"),
    ):
        r = runner.invoke(app, ["check", str(path), "--format", fmt])
        assert r.exit_code == 1 and needle in r.output, (fmt, r.output)


def custom_op_model(tmp_path: Path) -> Path:
    """An atrous block (which the safe fix rewrites) and MediaPipe's Landmarks2TransformMatrix, a
    custom op the LiteRT interpreter cannot run: check knows the model, fix cannot prove its
    rewrite, verify has no reference."""
    rng = np.random.default_rng(2)
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 16, 16, 4])
    block = g.const("block", np.array([2, 2], np.int32))
    y = g.op("SPACE_TO_BATCH_ND", [x, block, g.const("pads", np.full((2, 2), 2, np.int32))], [4, 10, 10, 4])
    w = g.const("w", rng.standard_normal((4, 3, 3, 4)).astype(np.float32))
    opts = dict(padding="VALID", stride_w=1, stride_h=1)
    y = g.op("CONV_2D", [y, w, g.const("b", np.zeros(4, np.float32))], [4, 8, 8, 4], options=opts)
    y = g.op("BATCH_TO_SPACE_ND", [y, block, g.const("crops", np.zeros((2, 2), np.int32))], [1, 16, 16, 4])
    g.output(g.op("Landmarks2TransformMatrix", [y], [1, 4, 4], custom_options=b"", out_name="matrix"))
    path = tmp_path / "landmarks.tflite"
    write(mb.build(), path)
    return path


def test_one_model_cannot_abort_a_report(tmp_path: Path) -> None:
    """Issue 15 item 5: a model whose custom op the interpreter cannot run (and an unreadable file)
    used to end `report` with exit 2 and no HTML. Every model gets its section; what check knows
    is shown, and the fix preview and the verification say why they are missing."""
    good, custom = tmp_path / "sample.tflite", custom_op_model(tmp_path)
    write(sample_model(), good)
    out = tmp_path / "r.html"
    r = runner.invoke(app, ["report", str(good), str(custom), "-o", str(out)])
    assert r.exit_code == 0, r.output
    html = out.read_text()
    first, second = html.split('<section class="model"')[1:]
    assert "<td>verdict</td><td>not-worth-it</td><td>ready</td>" in first  # its fix preview
    assert '<div class="word" data-verdict=' in second and "Landmarks2TransformMatrix" in second  # check's part
    assert "No fix preview: " in second and "unresolved custom op: Landmarks2TransformMatrix" in second
    assert "no fix preview" in r.stderr
    r = runner.invoke(app, ["report", str(good), str(tmp_path / "missing.tflite"), str(custom), "-o", str(out)])
    assert r.exit_code == 2 and "missing.tflite: no such file" in r.stderr
    html = out.read_text()
    assert html.count('<section class="model"') == 3 and "Not reported: no such file" in html


def test_report_verify_degrades_per_model(tmp_path: Path) -> None:
    from helpers import opencl_device

    device, why = opencl_device()
    if device is None:
        pytest.skip(why)
    good, custom = tmp_path / "sample.tflite", custom_op_model(tmp_path)
    write(sample_model(), good)
    out = tmp_path / "r.html"
    r = runner.invoke(app, ["report", str(good), str(custom), "--verify", "-o", str(out)])
    assert r.exit_code == 0, r.output
    html = out.read_text()
    first, second = html.split('<section class="model"')[1:3]
    assert re.search(r'class="ok">PASS</b>', first)
    assert "Not verified: " in second and "unresolved custom op" in second and "not verified" in r.stderr


def test_report_settings_mean_what_they_mean_in_check(tmp_path: Path) -> None:
    """`report` resolves its settings as `check` does: gpulint.toml first (it used to be ignored),
    then the same flags, with the same errors."""
    import os

    path = tmp_path / "sample.tflite"
    write(sample_model(), path)
    (tmp_path / "gpulint.toml").write_text('target = "mediapipe"\nquantized = false\nignore = ["GPU4"]\n')
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        html = report(tmp_path, str(path), "--no-fix")
        assert "target <b>mediapipe</b> · quantized-models flag <b>off</b>" in html
        assert "GPU402</span>" not in html and "GPU101</span>" in html
        html = report(tmp_path, str(path), "--no-fix", "--target", "classic", "--select", "GPU402", "--quantized")
        assert "target <b>classic</b> · quantized-models flag <b>on</b>" in html
        assert "GPU402</span>" in html and "GPU101</span>" not in html
        for args, error in (
            (["--target", "nope"], "unknown target `nope`; known: classic, mediapipe"),
            (["--select", "GPU9"], "--select: `GPU9` matches no rule code or name"),
            (["--target", "coreml", "--backend", "opengl"], "backend `opengl` does not apply to target `coreml`"),
        ):
            r = runner.invoke(app, ["report", str(path), *args, "-o", str(tmp_path / "x.html")])
            assert r.exit_code == 2 and error in r.stderr and not (tmp_path / "x.html").exists()
    finally:
        os.chdir(old)


def test_the_stat_card_counts_ops_as_check_does(tmp_path: Path) -> None:
    """An op that fails the OpenGL backend's init (TRANSPOSE) is still in the delegated partition:
    the page says '2 / 2 ops on the GPU' as check says '2 of 2', and counts the init failure apart
    (#40 item 4: YOLO's card said 346 / 368 where check said 368 of 368)."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    y = g.op("RELU", [g.input("x", [1, 4, 4, 8])], [1, 4, 4, 8])
    g.output(g.op("TRANSPOSE", [y, g.const("perm", np.array([0, 2, 1, 3], np.int32))], [1, 4, 4, 8]))
    path, html = tmp_path / "t.tflite", tmp_path / "t.html"
    write(mb.build(), path)
    r = runner.invoke(app, ["check", str(path), "--html", str(html)])
    assert "subgraph 0: 2 of 2 ops on the GPU" in r.stdout and "opengl: init-failure" in r.stdout
    page = html.read_text()
    assert '<div class="stat"><b>2 / 2</b>ops on the GPU</div>' in page
    assert "<b>1</b>of them fail the delegate's init on a backend" in page


# Measures, in the rendered page, every word of the verdict, of each op name (the table view's
# name column and the fix preview's op column) and of every table header: a word whose text
# Range has more than one client rect is split across lines. Then whether the page scrolls
# sideways (keeping words whole must not push tables past the window).
MEASURE = """<script>
(function () {
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  var groups = {verdict: ".verdict .word", op: "details table td:nth-child(3), td.mono.op", header: "th"};
  var out = {split: [], words: {}, overflow: 0};
  Object.keys(groups).forEach(function (group) {
    out.words[group] = 0;
    document.querySelectorAll(groups[group]).forEach(function (el) {
      var walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT), node, m;
      while ((node = walk.nextNode())) {
        var re = /\\S+/g;
        while ((m = re.exec(node.data))) {
          var r = document.createRange();
          r.setStart(node, m.index);
          r.setEnd(node, m.index + m[0].length);
          var lines = Array.prototype.filter.call(r.getClientRects(), function (q) { return q.width > 0; }).length;
          out.words[group] += 1;
          if (lines > 1) out.split.push(group + " " + m[0] + " (" + lines + " lines)");
        }
      }
    });
  });
  out.overflow = document.documentElement.scrollWidth - document.documentElement.clientWidth;
  var pre = document.createElement("pre");
  pre.id = "gpulint-measure";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def measure_words(tmp_path: Path, page: str, width: int) -> dict[str, Any]:
    """The page at a window `width` px wide in headless Chromium: MEASURE's findings."""
    probe = tmp_path / f"measure-{width}.html"
    probe.write_text(page.replace("</body>", MEASURE + "</body>"))
    dom = chromium(
        f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},1000", "--dump-dom", probe.as_uri()
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="gpulint-measure">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stdout[-2000:]
    result: dict[str, Any] = json.loads(html_lib.unescape(found.group(1)))
    return result


@pytest.mark.skipif(CHROMIUM is None, reason=NO_BROWSER)
@pytest.mark.parametrize(
    "name", ["sample", "refused", "unsupported_mix_f32.tflite", "lstm_seq16_f32.tflite", "selfie_segmentation.tflite"]
)
def test_words_stay_whole_in_a_real_browser(tmp_path: Path, name: str) -> None:
    """#40 item 1: `body { overflow-wrap: anywhere }` let flex items and table columns shrink to
    one letter: at 1400 px the verdict read "Ref / used", the headers "subgr|aph", "placem|ent";
    at 800 px op names broke ("FULLY_|CONNEC|TED"). At 800 and 1400 px no word of the verdict, an
    op name or a table header is split, and the page does not scroll sideways."""
    if name == "sample":
        path = tmp_path / "sample.tflite"
        write(sample_model(), path)
        page = report(tmp_path, str(path))  # with the fix preview and its op table
    elif name == "refused":
        page = report(tmp_path, str(refused_model(tmp_path)), "--no-fix")
    else:
        page = report(tmp_path, str(corpus_file(name)), "--no-fix")
    for width in (800, 1400):
        seen = measure_words(tmp_path, page, width)
        assert seen["words"]["verdict"] >= 1 and seen["words"]["op"] >= 2 and seen["words"]["header"] >= 10, seen
        assert seen["split"] == [], (width, seen["split"])
        assert seen["overflow"] <= 0, (width, seen["overflow"])
