"""Where a sweep's points run: a process pool on this machine (the default) or Ray tasks.

Both run one function over many argument tuples and yield ``(key, result)`` as each finishes, in
whatever order they finish. A worker that dies (killed, out of memory) becomes that task's failure
result; the sweep goes on.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Iterator, Sequence

from ..progress import ENV_VAR as PROGRESS_ENV
from .space import SweepError

Task = tuple[str, tuple]  # (key, arguments)
DIED = "the worker process died running this point (killed or out of memory?)"


def _quiet_worker() -> None:
    # Workers' own progress bars would tear the sweep's.
    os.environ[PROGRESS_ENV] = "0"


class LocalRunner:
    """A pool of ``jobs`` processes (spawned: TVM's threads and a fork do not mix)."""

    name = "local"

    def __init__(self, jobs: int | None = None):
        self.jobs = max(1, jobs or os.cpu_count() or 1)

    def share(self, value: Any) -> Any:
        """What to hand every task for ``value`` (here: the value itself)."""
        return value

    def run(self, fn: Callable[..., dict], tasks: Sequence[Task]) -> Iterator[tuple[str, dict]]:
        attempts: Counter[str] = Counter()
        pending = list(tasks)
        while pending:
            # A task whose pool broke twice runs alone: if it breaks again, it is the one that dies.
            together = [t for t in pending if attempts[t[0]] < 2]
            batches = ([together] if together else []) + [[t] for t in pending if attempts[t[0]] >= 2]
            pending = []
            for batch in batches:
                for key, args, result in self._pool(fn, batch):
                    if result is not None:
                        yield key, result
                        continue
                    attempts[key] += 1
                    if attempts[key] > 2:
                        yield key, {"status": "error", "error": DIED}
                    else:
                        pending.append((key, args))

    def _pool(self, fn, batch: Sequence[Task]) -> Iterator[tuple[str, tuple, dict | None]]:
        """Run ``batch`` on a fresh pool; None for the tasks of a pool that broke."""
        context = multiprocessing.get_context("spawn")
        workers = min(self.jobs, len(batch))
        with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_quiet_worker) as pool:
            futures = {pool.submit(fn, *args): (key, args) for key, args in batch}
            for future in as_completed(futures):
                key, args = futures[future]
                try:
                    yield key, args, future.result()
                except BrokenProcessPool:
                    yield key, args, None
                except Exception as e:  # noqa: BLE001 - e.g. arguments that do not pickle
                    yield key, args, {"status": "error", "error": f"{type(e).__name__}: {e}"[:500]}

    def close(self) -> None:
        pass


def _check_reachable(address: str) -> None:
    """Fail in seconds on a cluster address nothing answers at (Ray itself retries for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", "local": Ray resolves those itself and fails fast
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as e:
        raise SweepError(
            f"nothing answers at the Ray address '{address}' ({e.strerror or e}); start the cluster with "
            "`ray start --head`, or give --ray without an address for a Ray instance on this machine"
        ) from None


class RayRunner:
    """Every task a Ray task of one CPU, on the cluster at ``address`` or a local Ray instance.

    Already inside ``ray.init(...)``: that instance is used (and left running).
    """

    name = "ray"

    def __init__(self, address: str | None = None, jobs: int | None = None):
        try:
            import ray
        except ImportError:
            raise SweepError("--ray needs Ray: pip install 'ray>=2.50' (or the package's [sweep] extra)") from None
        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            options: dict[str, Any] = {"runtime_env": {"env_vars": {PROGRESS_ENV: "0"}}}
            if address:
                _check_reachable(address)
                try:
                    ray.init(address=address, **options)
                except (ConnectionError, RuntimeError, ValueError) as e:
                    raise SweepError(
                        f"cannot reach the Ray cluster at '{address}' ({str(e).splitlines()[0]}); start it with "
                        "`ray start --head`, or give --ray without an address for a Ray instance on this machine"
                    ) from None
            else:
                ray.init(num_cpus=max(1, jobs or os.cpu_count() or 1), include_dashboard=False, **options)
            self.started = True

    def share(self, value: Any) -> Any:
        """A reference in Ray's object store: sent to each node once, not with every task."""
        return self.ray.put(value)

    def run(self, fn: Callable[..., dict], tasks: Sequence[Task]) -> Iterator[tuple[str, dict]]:
        ray = self.ray
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        refs = {remote.remote(*args): key for key, args in tasks}
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                key = refs.pop(ref)
                try:
                    yield key, ray.get(ref)
                except ray.exceptions.WorkerCrashedError:
                    yield key, {"status": "error", "error": DIED}
                except ray.exceptions.RayError as e:
                    yield key, {"status": "error", "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"[:500]}

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
