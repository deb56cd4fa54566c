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
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import conv_model
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import write
from gpulint.report import PLACEMENT_COLORS
from gpulint.sample import sample_model

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


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("explorer-models")
    paths = {"conv": folder / "conv.tflite", "sample": folder / "sample.tflite"}
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
