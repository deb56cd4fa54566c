"""One task per model: run a command's per-model function over many models, in this process, in
`--jobs` local processes, or as Ray tasks on a cluster (`--ray`), with the results in the order
the models were given whichever finished first. No scheduler of our own: a process pool, or Ray's.

A task is `fn(unit, local_path)`: `unit` says what to do with the model (picklable, the model's
own path in it), `local_path` where its bytes are on the machine that runs it. On Ray no shared
filesystem is assumed: the driver puts each model's bytes in Ray's object store, the worker writes
them to a temporary file of the same name, and `fn` names the model by the unit's path in its
result. A task whose worker or node dies is run again by Ray (`RETRIES`), and its result is kept
once, in its own place: nothing is lost or repeated. Units return their errors as results; an
exception out of `fn` is a bug and is raised here, as it would be in a serial run.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

U = TypeVar("U")
R = TypeVar("R")

CONNECT_TIMEOUT = 10.0  # seconds for the cluster's address to answer
RETRIES = 3  # runs of a task again after its worker or node died (Ray's max_retries)


class FanoutError(RuntimeError):
    """The cluster cannot be reached or used (Ray missing, a bad address, a task lost for good)."""


def run_each(
    fn: Callable[[U, str], R],
    units: Sequence[U],
    paths: Sequence[str],
    *,
    jobs: int = 1,
    ray: str | None = None,
    progress: Callable[[int], None] | None = None,
    fresh: bool = False,
    gpu: bool = False,
) -> list[R]:
    """fn(units[i], paths[i]) for every i, in order. `jobs` > 1: that many local processes (`fresh`:
    new interpreters, for tasks that open a device, which a forked child must not share). `ray`: a
    cluster address (`auto`: RAY_ADDRESS, or the cluster this machine runs); `gpu`: a task asks for
    one GPU where the cluster has GPUs."""
    tick = progress or (lambda n: None)
    if ray is not None:
        return _run_ray(fn, units, paths, ray, tick, gpu)
    if jobs > 1 and len(units) > 1:
        return _run_pool(fn, units, paths, jobs, tick, fresh)
    results = []
    for unit, path in zip(units, paths, strict=True):
        results.append(fn(unit, path))
        tick(1)
    return results


def _run_pool(
    fn: Callable[[U, str], R],
    units: Sequence[U],
    paths: Sequence[str],
    jobs: int,
    tick: Callable[[int], None],
    fresh: bool,
) -> list[R]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed  # --jobs only: ~7 ms of every start

    context = multiprocessing.get_context("spawn" if fresh else "fork")
    with ProcessPoolExecutor(max_workers=min(jobs, len(units)), mp_context=context) as pool:
        futures = [pool.submit(fn, u, p) for u, p in zip(units, paths, strict=True)]
        for _ in as_completed(futures):
            tick(1)
        return [f.result() for f in futures]


def _remote_unit(fn: Callable[[Any, str], Any], unit: Any, name: str, data: bytes) -> Any:
    """On a Ray worker: the model's bytes to a file of its own name, and the task on it."""
    with tempfile.TemporaryDirectory(prefix="gpulint-ray-") as folder:
        local = Path(folder) / Path(name).name
        local.write_bytes(data)
        return fn(unit, str(local))


def connect(address: str) -> Any:
    """The `ray` module, connected to the cluster at `address`."""
    try:
        import ray
    except ImportError:
        raise FanoutError("--ray needs Ray on this machine and the cluster: pip install 'gpulint[ray]'") from None
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS") or "auto"
    _reachable(address)
    _messages_to_stderr()
    if not ray.is_initialized():
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False, include_dashboard=False)
        except Exception as e:  # ConnectionError, or Ray's own for a bad or absent cluster
            raise FanoutError(f"cannot connect to the Ray cluster at {address}: {e}") from None
    return ray


def _messages_to_stderr() -> None:
    """Ray prints the cluster's notices (a worker died, its task is retried) on the driver's stdout,
    where gpulint writes its JSON and SARIF: they go to stderr. Ray's driver looks the printer up in
    its worker module at each message (ray._private.worker.print_to_stdstream, Ray 2.x); where that
    is not there, nothing changes."""
    try:
        from ray._private import worker
    except ImportError:
        return
    printer = getattr(worker, "print_to_stdstream", None)
    if printer is None or getattr(printer, "gpulint", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        printer({**data, "is_err": True}, ignore_prefix)

    to_stderr.gpulint = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


def _reachable(address: str) -> None:
    """A HOST:PORT that answers within seconds, before Ray's own attempts (a minute of retries)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # auto, or a form Ray resolves itself
    import socket

    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as e:
        raise FanoutError(f"cannot connect to the Ray cluster at {address}: {e.strerror or e}") from None


def _run_ray(
    fn: Callable[[U, str], R],
    units: Sequence[U],
    paths: Sequence[str],
    address: str,
    tick: Callable[[int], None],
    gpu: bool,
) -> list[R]:
    ray = connect(address)
    gpus = 1 if gpu and ray.cluster_resources().get("GPU", 0) >= 1 else 0
    task = ray.remote(_remote_unit).options(num_cpus=1, num_gpus=gpus, max_retries=RETRIES)
    results: list[R | None] = [None] * len(units)
    pending: dict[Any, int] = {}
    for i, (unit, path) in enumerate(zip(units, paths, strict=True)):
        try:
            data = Path(path).read_bytes()
        except OSError:  # the task itself says why the file cannot be read, in its own result
            results[i] = fn(unit, path)
            tick(1)
            continue
        pending[task.remote(fn, unit, path, ray.put(data))] = i
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            i = pending.pop(ref)
            try:
                results[i] = ray.get(ref)
            except ray.exceptions.RayTaskError as e:  # a bug in the task: raised as in a serial run
                raise e.as_instanceof_cause() from None
            except ray.exceptions.RayError as e:  # lost: its worker or node died RETRIES + 1 times
                raise FanoutError(f"{paths[i]}: its Ray task was lost: {e}") from None
            tick(1)
    return cast(list[R], results)  # every place filled: each task's result once, or an error above
