"""gpulint as a Model Explorer node-data-provider extension (gpulint/explorer, issue #40), run the way its
users run it: the real `ai-edge-model-explorer` server on 127.0.0.1 with `--extensions=gpulint.explorer`, the
extension listed, its run dialog's editors and its node data asked for through the server's API, and the graph
drawn by the real UI in headless Chromium with that node data, its pixels in the placement colours.

Model Explorer lives in a venv of its own, `.explorer-venv` (tests/explorer/setup.sh makes it); where it is
absent these tests skip and say so. The one test that needs no venv checks that gpulint's own commands never
import the extension.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import conv_model
from typer.testing import CliRunner

from gpulint.check import check_file
from gpulint.cli import app
from gpulint.model import Model, read, write
from gpulint.model.build import ModelBuilder
from gpulint.report import PLACEMENT_COLORS
from gpulint.sample import sample_model
from gpulint.settings import Settings

REPO = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("GPULINT_EXPLORER_VENV", REPO / ".explorer-venv"))
PYTHON = VENV / "bin" / "python"
SETUP = "tests/explorer/setup.sh (makes .explorer-venv: ai-edge-model-explorer 0.1.34 and gpulint from this checkout)"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def unavailable() -> str:
    """Why the Model Explorer venv cannot be used here, or ''."""
    if not PYTHON.exists():
        return f"no Model Explorer venv at {VENV}: run {SETUP}"
    r = subprocess.run(
        [str(PYTHON), "-c", "import model_explorer, gpulint.explorer.main, gpulint; print(gpulint.__file__)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if r.returncode != 0:
        return f"{VENV} does not import model_explorer and gpulint.explorer.main: {r.stderr.strip()[-300:]}"
    if Path(r.stdout.strip()).resolve().parent != REPO / "gpulint":
        return f"{VENV} has a gpulint other than this checkout's ({r.stdout.strip()}): rerun {SETUP}"
    return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port if port != 8080 else free_port()  # 8080: Model Explorer would pick a port of its own


class Server:
    def __init__(self, proc: subprocess.Popen[str], port: int, log: Path) -> None:
        self.proc, self.base, self.log = proc, f"http://127.0.0.1:{port}", log

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=60) as r:
            return json.loads(r.read())

    def command(self, cmd: dict[str, Any]) -> Any:
        req = urllib.request.Request(
            self.base + "/apipost/v1/send_command",
            data=json.dumps(cmd).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())

    def run(self, model: Path, graph_id: str = "main", **config: Any) -> Any:
        return self.command(
            {
                "extensionId": "gpulint",
                "cmdId": "run",
                "modelPath": str(model),
                "graphId": graph_id,
                "configValues": config,
            }
        )


def start_server(tmp: Path, *args: str) -> Server:
    """`model-explorer ARGS --extensions=gpulint.explorer` on 127.0.0.1, ready to answer."""
    port = free_port()
    log = tmp / f"server-{port}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HOME": str(tmp)}  # (no browser to open, no ~ of ours touched)
    exe = VENV / "bin" / "model-explorer"
    cmd = [str(exe), *args, "--host=127.0.0.1", f"--port={port}", "--extensions=gpulint.explorer"]
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*cmd, "--no_open_in_browser"], stdout=out, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp
        )
    server = Server(proc, port, log)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"model-explorer exited {proc.returncode}:\n{log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(server.base + "/check_health", timeout=5).read()
            if "Starting Model Explorer server at" in log.read_text():
                return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.3)
    proc.kill()
    pytest.fail(f"model-explorer did not answer on {server.base} in 90 s:\n{log.read_text()[-2000:]}")


def stop(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


def mixed_model() -> Model:
    """image -> CONV_2D (the GPU) -> SPACE_TO_BATCH_ND (the CPU: classic's delegate has no kernel for it),
    both at the graph's top level (names without a "/", so Model Explorer draws no layer around them)."""
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("image", [1, 8, 8, 3])
    w = g.const("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32))
    y = g.op(
        "CONV_2D",
        [x, w, g.const("b", np.zeros(8, np.float32))],
        [1, 8, 8, 8],
        options=dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU"),
        out_name="conv",
    )
    block, pads = g.const("block", np.array([2, 2], np.int32)), g.const("pads", np.zeros((2, 2), np.int32))
    g.output(g.op("SPACE_TO_BATCH_ND", [y, block, pads], [4, 4, 4, 8], out_name="space_to_batch"))
    return mb.build()


def refused_model() -> Model:
    """The interpreter refuses the delegate for the whole graph: RESHAPE's shape is PACKed at run time from the
    batch (tests/test_refusal.py), so the CONV_2D the delegate would run is `refused`."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 8])
    shape = g.op("SHAPE", [x], [4], dtype="INT32", out_name="shape")
    ends = [g.const(n, np.array([v], np.int32)) for n, v in (("b", 0), ("e", 1), ("s", 1))]
    batch = g.op("STRIDED_SLICE", [shape, *ends], [], dtype="INT32", out_name="batch", options=dict(shrink_axis_mask=1))
    target = g.op(
        "PACK", [batch, g.const("n", np.array(128, np.int32))], [2], dtype="INT32", options=dict(values_count=2)
    )
    w = g.const("w", np.ones((8, 1, 1, 8), np.float32))
    y = g.op(
        "CONV_2D",
        [x, w, g.const("bias", np.zeros(8, np.float32))],
        [1, 4, 4, 8],
        options=dict(padding="SAME", stride_w=1, stride_h=1),
        out_name="conv",
    )
    g.output(g.op("RESHAPE", [y, target], [1, 128], out_name="flat"))
    return mb.build()


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("explorer-models")
    paths = {"conv": folder / "conv.tflite", "sample": folder / "sample.tflite", "mixed": folder / "mixed.tflite"}
    write(mixed_model(), paths["mixed"])
    paths["refused"] = folder / "refused.tflite"
    write(refused_model(), paths["refused"])
    write(conv_model(), paths["conv"])
    write(sample_model(), paths["sample"])
    return paths


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    why = unavailable()
    if why:
        pytest.skip(why)
    s = start_server(tmp_path_factory.mktemp("explorer-server"))
    yield s
    stop(s)


def test_gpulint_commands_never_import_the_extension(tmp_path: Path) -> None:
    """Model Explorer is an optional extra: check, report --node-data and rules run without it."""
    path = tmp_path / "conv.tflite"
    write(conv_model(), path)
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from gpulint.cli import app\n"
        f"p = {str(path)!r}\n"
        "r = CliRunner()\n"
        "for args in (['check', p], ['report', p, '--no-fix', '-o', p + '.html', '--node-data', p + '.json'], ['rules']):\n"
        "    assert r.invoke(app, args).exit_code in (0, 1), args\n"
        "print(sorted(m for m in sys.modules if m.startswith(('gpulint.explorer', 'model_explorer'))))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
    assert json.loads(Path(str(path) + ".json").read_text())["main"]["results"] == {"conv_2d_0": {"value": 0}}


def test_the_server_lists_gpulint_as_a_node_data_provider(server: Server) -> None:
    listed = [e for e in server.get("/api/v1/get_extensions") if e["id"] == "gpulint"]
    assert len(listed) == 1, server.log.read_text()[-2000:]
    ext = listed[0]
    assert ext["type"] == "node_data_provider" and ext["name"] == "gpulint"
    assert ext["filter"]["modelFileExts"] == ["tflite"]  # offered on TFLite models only
    assert "1 node data provider" in server.log.read_text()


def test_the_run_dialog_offers_the_targets(server: Server) -> None:
    editors = server.command({"extensionId": "gpulint", "cmdId": "get_config_editors"})
    assert editors["error"] == ""
    target, no_quantized = editors["configEditors"]
    assert target["id"] == "target" and target["type"] == "drop_down" and target["defaultValue"] == ""
    values = [o["value"] for o in target["options"]]
    assert values[0] == "" and {"classic", "litert-gpu"} <= set(values)
    assert no_quantized["id"] == "no_quantized" and no_quantized["type"] == "slide_toggle"


def test_run_colours_a_conv_model_gpu(server: Server, models: dict[str, Path]) -> None:
    r = server.run(models["conv"])
    assert r["error"] == ""
    data = r["result"]
    assert data["results"] == {"conv_2d_0": {"value": 0, "bgColor": None, "textColor": None}}
    assert [(t["value"], t["bgColor"]) for t in data["thresholds"]] == [
        (0, PLACEMENT_COLORS["gpu"]),
        (1, PLACEMENT_COLORS["init-failure"]),
        (2, PLACEMENT_COLORS["cpu"]),
    ]
    assert data["name"].endswith(" · classic")


def test_run_matches_the_node_data_file(server: Server, models: dict[str, Path], tmp_path: Path) -> None:
    """What the extension returns is what `gpulint report --node-data` writes: one writer."""
    nd = tmp_path / "nd.json"
    r = CliRunner().invoke(
        app, ["report", str(models["sample"]), "--no-fix", "-o", str(tmp_path / "r.html"), "--node-data", str(nd)]
    )
    assert r.exit_code == 0, r.output
    written = json.loads(nd.read_text())["main"]
    got = server.run(models["sample"])
    assert got["error"] == ""
    assert {k: v["value"] for k, v in got["result"]["results"].items()} == {
        k: v["value"] for k, v in written["results"].items()
    }
    assert got["result"]["results"]["atrous/space_to_batch"]["value"] == 2  # CPU
    assert got["result"]["results"]["pool/mean"]["value"] == 0  # GPU


def test_refused_ops_have_their_own_colour(server: Server, models: dict[str, Path]) -> None:
    """CPU's value (as in the node-data file), the report's `refused` colour on the node itself."""
    result = check_file(str(models["refused"]), Settings())
    assert result.verdict == "refused"
    model = read(str(models["refused"]))
    ops = model.subgraphs[0].operators
    placement = {model.subgraphs[0].tensors[ops[p.index].outputs[0]].name: p.placement for p in result.ops}
    assert "refused" in placement.values()
    got = server.run(models["refused"])["result"]["results"]
    assert set(got) == set(placement)
    for name, where in placement.items():
        assert got[name]["value"] == (0 if where == "gpu" else 1 if where == "init-failure" else 2), name
        assert got[name]["bgColor"] == (PLACEMENT_COLORS["refused"] if where == "refused" else None), name


def test_run_takes_the_dialogs_target(server: Server, models: dict[str, Path]) -> None:
    r = server.run(models["sample"], target="litert-gpu", no_quantized=True)
    assert r["error"] == "" and r["result"]["name"].endswith(" · litert-gpu")


def test_run_errors_are_one_line_in_the_ui(server: Server, models: dict[str, Path], tmp_path: Path) -> None:
    r = server.run(models["conv"], graph_id="nope")
    assert r["error"] == f"gpulint: graph 'nope' is not a subgraph of {models['conv']} (its subgraphs: main)"
    bad = tmp_path / "text.tflite"
    bad.write_text("not a model")
    r = server.run(bad)
    assert r["result"] is None and r["error"].startswith(f"gpulint: {bad}") and "\n" not in r["error"]
    r = server.run(models["conv"], target="no-such-target")
    assert r["error"].startswith("gpulint: unknown target `no-such-target`")


def node_with_websocket() -> str | None:
    """node (>= 20: a WebSocket client with --experimental-websocket, built in from 22), or None."""
    node = shutil.which("node")
    if node is None:
        return None
    probe = "process.exit(typeof WebSocket === 'function' ? 0 : 1)"
    r = subprocess.run([node, "--experimental-websocket", "-e", probe], capture_output=True, timeout=30)
    return node if r.returncode == 0 else None


NODE = node_with_websocket()


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit, non-interlaced RGB or RGBA PNG (Chromium's screenshots)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = channels = 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = line
        rows.append(bytes(v for i, v in enumerate(line) if channels == 3 or i % 4 != 3))
    return width, height, rows


def count_color(rows: list[bytes], hex_color: str, x_max: int) -> int:
    """Pixels within 2 of `hex_color` left of x = `x_max` (Model Explorer's graph; its side panel is on the right)."""
    rgb = bytes.fromhex(hex_color.lstrip("#"))
    return sum(
        1
        for row in rows
        for x in range(0, min(len(row), 3 * x_max), 3)
        if all(abs(row[x + k] - rgb[k]) <= 2 for k in range(3))
    )


def click_step(selector: str, text: str | None = None, child: str = "") -> dict[str, Any]:
    """A step of tests/explorer/cdp.js: click the element matching `selector` (whose `child`, or itself, reads
    `text`); true once clicked."""
    match = (
        "true"
        if text is None
        else f"(e.querySelector({child!r}) || e).innerText.trim() === {text!r}"
        if child
        else f"e.innerText.trim() === {text!r}"
    )
    return {
        "js": f"(() => {{ const e = [...document.querySelectorAll({selector!r})].find(e => {match}); if (!e || e.disabled) return false; e.click(); return true; }})()"
    }


@pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (`make test` installs it when run as root)"
)
@pytest.mark.skipif(
    NODE is None, reason="no node (>= 20) to drive Chromium's DevTools protocol with (tests/explorer/cdp.js)"
)
@pytest.mark.parametrize(
    ("name", "painted"),
    [("mixed", {"gpu", "cpu"}), ("refused", {"refused", "cpu"})],  # conv_2d GPU; refused: conv_2d dark red
)
def test_a_user_picks_gpulint_in_the_ui(
    server: Server, models: dict[str, Path], tmp_path: Path, name: str, painted: set[str]
) -> None:
    """In the real UI in headless Chromium: open a model, "Add per-node data", pick the extension "gpulint",
    Run; the side panel names the run, and the graph (a screenshot's pixels) has nodes painted in exactly the
    placement colours of its ops: GPU and CPU on a model with one of each, refused and CPU on a graph the
    interpreter refuses the delegate for."""
    assert CHROMIUM is not None and NODE is not None
    data = json.dumps({"models": [{"url": str(models[name])}]})
    url = f"{server.base}/?data={urllib.parse.quote(data)}"
    port = free_port()
    steps = [
        {
            "js": "[...document.querySelectorAll('span.label')].some(e => e.innerText.trim() === 'Add per-node data')",
            "timeout_ms": 60000,
        },
        {"js": "new Promise(r => setTimeout(() => r(true), 1000))"},
        {
            "js": "(() => { const e = [...document.querySelectorAll('span.label')].find(e => e.innerText.trim() === 'Add per-node data'); if (!e) return false; e.parentElement.click(); return true; })()"
        },
        click_step("ndp-extensions-panel .extension-container", "gpulint", ".name"),
        click_step(".cdk-overlay-container button.btn-run"),
        {
            "js": "document.body.innerText.includes('gpulint placement (0 GPU, 1 init failure, 2 CPU) · classic')",
            "timeout_ms": 60000,
        },
        {"js": "new Promise(r => setTimeout(() => r(true), 1500))"},
    ]
    (tmp_path / "steps.json").write_text(json.dumps(steps))
    shot = tmp_path / "explorer.png"
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,900",
    ]
    browser = subprocess.Popen(
        [CHROMIUM, *flags, f"--user-data-dir={tmp_path / 'profile'}", f"--remote-debugging-port={port}", url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        r = subprocess.run(
            [
                NODE,
                "--experimental-websocket",
                str(REPO / "tests" / "explorer" / "cdp.js"),
                str(port),
                str(tmp_path / "steps.json"),
                str(shot),
            ],
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        browser.terminate()
        browser.wait(20)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\nserver log:\n{server.log.read_text()[-2000:]}"
    width, _, rows = png_pixels(shot.read_bytes())
    graph = int(width * 0.7)  # the graph's pane; the side panel (its node data table is coloured too) is right of it
    counts = {k: count_color(rows, c, graph) for k, c in PLACEMENT_COLORS.items()}
    # each op a filled box of about 120 x 36 px at the zoom that fits the graph (smaller on the longer graph)
    assert all(counts[k] > 800 for k in painted), (counts, shot)
    assert all(counts[k] == 0 for k in ("gpu", "cpu", "init-failure", "refused") if k not in painted), (counts, shot)
