"""--ray (#41): a two-node Ray cluster on 127.0.0.1 (a head and a second node started by `ray start`,
as on two machines) gives the same results as a local run; a worker killed during a run loses and
duplicates nothing (Ray runs its task again). Skipped, saying why, where Ray is not installed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import conv_model, needs_opencl

from gpulint.model import write

RAY = shutil.which("ray", path=str(Path(sys.executable).parent))
pytestmark = pytest.mark.skipif(RAY is None, reason="Ray is not installed (pip install 'gpulint[ray]')")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A head and a second node, one CPU each, on 127.0.0.1; `ray stop` after (CI runs no other Ray)."""
    assert RAY is not None
    port = free_port()
    address = f"127.0.0.1:{port}"
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
    env = os.environ | {"RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--num-cpus", "1", "--temp-dir", temp, "--disable-usage-stats"]
    head = [RAY, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port), "--include-dashboard=false"]
    node = [RAY, "start", "--address", address, "--node-ip-address", "127.0.0.1"]
    try:
        for command in (head + common, node + common):
            r = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
            if r.returncode != 0:
                pytest.skip(f"`{' '.join(command[:3])}` failed here: {r.stderr.strip()[-300:]}")
        yield address
    finally:
        subprocess.run([RAY, "stop", "--force"], capture_output=True, env=env, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def models(tmp_path: Path, n: int) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    for i in range(n):
        write(conv_model(4 + i), folder / f"m{i}.tflite")
    return folder


def gpulint(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpulint", *args], capture_output=True, text=True, timeout=600)


def without_seconds(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if k != "seconds"} for m in out["models"]]


@needs_opencl()
def test_two_nodes_give_what_one_process_gives(cluster: str, tmp_path: Path) -> None:
    folder = models(tmp_path, 4)
    local = gpulint("verify", str(folder), "--format", "json")
    remote = gpulint("verify", str(folder), "--format", "json", "--ray", cluster)
    assert remote.returncode == local.returncode == 0, remote.stderr
    assert without_seconds(json.loads(remote.stdout)) == without_seconds(json.loads(local.stdout))
    check_local = gpulint("check", str(folder), "--format", "json")
    check_remote = gpulint("check", str(folder), "--format", "json", "--ray", cluster)
    assert check_remote.stdout == check_local.stdout and check_remote.returncode == check_local.returncode


@needs_opencl()
def test_a_killed_worker_loses_and_duplicates_nothing(cluster: str, tmp_path: Path) -> None:
    folder = models(tmp_path, 6)
    first = gpulint("verify", str(folder), "--format", "json")
    assert first.stdout, first.stderr[-3000:]
    local = json.loads(first.stdout)
    run = subprocess.Popen(
        [sys.executable, "-m", "gpulint", "verify", str(folder), "--format", "json", "--ray", cluster],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and run.poll() is None and time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-f", "ray::_remote_unit"], capture_output=True, text=True).stdout.split()
        if found:
            killed = int(found[0])
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.02)
    out, err = run.communicate(timeout=600)
    assert killed is not None, "no task was seen running"
    assert run.returncode == 0, err
    assert out.startswith("{"), out[:3000]
    remote = json.loads(out)
    assert [m["model"] for m in remote["models"]] == [m["model"] for m in local["models"]]
    assert without_seconds(remote) == without_seconds(local)


def test_an_address_that_does_not_answer_is_one_error(tmp_path: Path) -> None:
    folder = models(tmp_path, 1)
    r = gpulint("check", str(folder), "--ray", f"127.0.0.1:{free_port()}")
    assert r.returncode == 2
    assert r.stderr.startswith("gpulint: error: cannot connect to the Ray cluster at 127.0.0.1:")
    assert "Traceback" not in r.stderr
