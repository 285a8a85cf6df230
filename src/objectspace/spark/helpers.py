"""Helper processes: the other cores of an executor for a batch Spark holds in one partition.

A micro-batch in one partition runs in one Spark task, hence one Python worker and one
core, while the executor's other cores wait (Spark's own stateful operators would have
shuffled the rows to one task per core). With ``task_processes=k`` (see
:class:`~objectspace.spark.StatefulRunner`) that task runs the batch's instances in ``k``
processes: instance ``i`` runs in the worker itself when ``i % k == 0``, else in the
worker's helper ``i % k``, a Python process the worker starts on first use (the same
interpreter and ``sys.path``) and keeps for its next tasks, as Spark keeps the worker. The
assignment is fixed, so each process keeps the instances it ran in its memory
(:data:`~objectspace.spark.cache.WORKER`) from batch to batch, exactly as a worker does;
its snapshot files go to the worker's folder.

The worker and a helper talk over a private socket pair: the worker sends the task (the
same object Spark shipped to it, pickled with cloudpickle) and each instance's rows; the
helper answers with each instance's result as an Arrow IPC stream, or with the error that
stopped it. Nothing but the worker writes to that socket. An error in a helper fails the
task with the helper's traceback (Spark retries the task) and the helper is replaced; a
helper found dead (killed, out of memory) is replaced and its instances run once more in
the new one, which restores them as any process would (a second death fails the task). A
helper ends with its worker: the socket closes, and a watch thread ends it even while a
function runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from objectspace.errors import ObjectSpaceError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "HELPERS",
    "HelperError",
    "TaskHelpers",
    "as_table",
    "ipc_bytes",
    "run_split",
    "serve",
]

logger = logging.getLogger(__name__)

Work = list[tuple[int, Any]]
"""The instances a helper runs in one task: (instance index, its rows: a list of dicts or
an Arrow IPC stream)."""


def as_table(payload: Any) -> pa.Table:
    """An instance's rows as an Arrow table, from a table or an Arrow IPC stream."""
    import pyarrow as pa

    if isinstance(payload, bytes):
        return pa.ipc.open_stream(payload).read_all()
    table: pa.Table = payload
    return table


def ipc_bytes(table: pa.Table) -> bytes:
    """``table`` as the bytes of an Arrow IPC stream."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _as_stream(payload: Any) -> Any:
    """An instance's rows as they travel to a helper: a table as an Arrow IPC stream."""
    import pyarrow as pa

    return ipc_bytes(payload) if isinstance(payload, pa.Table) else payload


class HelperError(ObjectSpaceError):
    """A helper process failed to run an instance (its error's text included), or died."""


_MAIN = "import sys; from objectspace.spark.helpers import serve; serve(int(sys.argv[1]))"


class _Died(HelperError):
    """The helper's socket closed: the process is gone."""


class _Helper:
    """One helper process and the worker's end of its socket."""

    def __init__(self, snapshot_folder: str | None) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _MAIN, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                env=env,
                stdin=subprocess.DEVNULL,
                # What the user's function prints goes where the worker's errors go (the
                # executor's log), never into the worker's own stdout.
                stdout=2,
                close_fds=True,
            )
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self.conn.send_bytes(pickle.dumps(snapshot_folder))
        self.busy = False

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, task_blob: bytes, context: dict[str, Any] | None, work: Work) -> None:
        message = (task_blob, context, work)
        self.busy = True
        with contextlib.suppress(OSError):  # gone already: receive() says so
            self.conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def receive(self) -> list[tuple[int, bytes]]:
        try:
            answer = pickle.loads(self.conn.recv_bytes())
        except (EOFError, OSError) as exc:
            try:
                code = self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            raise _Died(
                f"a task helper process (pid {self.process.pid}) died while running "
                f"instances (exit code {code}): {exc!r}"
            ) from None
        finally:
            self.busy = False
        if answer[0] == "ok":
            results: list[tuple[int, bytes]] = answer[1]
            return results
        _, index, text = answer
        raise HelperError(f"instance {index} failed in a task helper process:\n{text}")

    def close(self) -> None:
        self.conn.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class TaskHelpers:
    """A worker's helper processes (started on first use, kept between tasks)."""

    def __init__(self) -> None:
        self._helpers: dict[int, _Helper] = {}

    def helper(self, slot: int, snapshot_folder: str | None) -> _Helper:
        """Helper ``slot`` (1, 2, ...), started now when it is not running."""
        found = self._helpers.get(slot)
        if found is not None and (found.busy or not found.alive()):
            # A helper left busy by a failed task holds an answer nobody reads: replace it.
            self.stop(slot)
            found = None
        if found is None:
            found = self._helpers[slot] = _Helper(snapshot_folder)
        return found

    def running(self, slot: int) -> _Helper:
        """Helper ``slot``, which a task of this worker started."""
        return self._helpers[slot]

    def stop(self, slot: int) -> None:
        found = self._helpers.pop(slot, None)
        if found is not None:
            try:
                found.close()
            except Exception as exc:
                logger.debug("task helper %s not closed cleanly: %r", slot, exc)

    def stop_all(self) -> None:
        for slot in list(self._helpers):
            self.stop(slot)

    def pids(self) -> list[int]:
        return [h.process.pid for h in self._helpers.values()]


HELPERS = TaskHelpers()
"""This worker's helpers."""


def run_split(
    processes: int,
    by_instance: dict[int, Any],
    task_blob: Callable[[], bytes],
    run_here: Callable[[int, Any], pa.Table],
    snapshot_folder: str | None,
) -> list[tuple[int, pa.Table]]:
    """Run every instance of ``by_instance`` (its rows: dicts or an Arrow table): those of slot
    ``index % processes`` > 0 in that helper, the others here (``run_here``), at the same
    time; their results by index."""
    import pyarrow as pa

    work: dict[int, Work] = {}
    for index in sorted(by_instance):
        slot = index % processes
        payload = by_instance[index]
        work.setdefault(slot, []).append((index, _as_stream(payload) if slot else payload))
    sent: list[int] = []
    blob = task_blob() if any(slot for slot in work) else b""
    context = _task_context()
    try:
        for slot, items in work.items():
            if slot:
                HELPERS.helper(slot, snapshot_folder).send(blob, context, items)
                sent.append(slot)
        results = [(index, run_here(index, rows)) for index, rows in work.get(0, [])]
        for slot in sent:
            try:
                answer = HELPERS.running(slot).receive()
            except _Died as died:
                # Gone before or while it ran them (killed, out of memory): a new helper
                # runs them once more from the committed state, as a retried task would.
                logger.warning("%s; running its instances in a new helper", died)
                HELPERS.stop(slot)
                HELPERS.helper(slot, snapshot_folder).send(blob, context, work[slot])
                answer = HELPERS.running(slot).receive()
            for index, data in answer:
                results.append((index, pa.ipc.open_stream(data).read_all()))
    except BaseException:
        for slot in sent:  # whatever they were doing, their state is no longer known
            HELPERS.stop(slot)
        raise
    results.sort(key=lambda item: item[0])
    return results


# What a helper's tasks see of their Spark task (``TaskContext.get()``): the worker's.
_CONTEXT_FIELDS = (
    "_stageId",
    "_partitionId",
    "_attemptNumber",
    "_taskAttemptId",
    "_localProperties",
    "_cpus",
    "_cpuAmount",
    "_resources",
)


def _task_context() -> dict[str, Any] | None:
    """The fields of this worker's ``TaskContext`` (``None``: not in a Spark task)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return None
    return {name: getattr(ctx, name) for name in _CONTEXT_FIELDS if hasattr(ctx, name)}


def _set_task_context(fields: dict[str, Any] | None) -> None:
    from pyspark import TaskContext

    ctx = None
    if fields is not None:
        ctx = object.__new__(TaskContext)
        for name, value in fields.items():
            setattr(ctx, name, value)
    TaskContext._setTaskContext(ctx)


def _exit_with_parent(parent: int) -> None:
    """End this process once its worker is gone, even while a function runs (an endless
    loop would never read the closed socket)."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="objectspace-helper-watch", daemon=True).start()


def serve(fd: int) -> None:
    """A helper's loop: run the instances of each task the worker sends, until it closes."""

    from objectspace.spark import cache

    _exit_with_parent(os.getppid())
    conn = Connection(fd)
    folder = pickle.loads(conn.recv_bytes())
    cache.WORKER.snapshot_path = folder
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return
        task_blob, context, work = pickle.loads(message)
        task = pickle.loads(task_blob)
        _set_task_context(context)
        out: list[tuple[int, bytes]] = []
        failed = None
        for index, rows in work:
            try:
                table = task._result(index, rows, helper=True)
            except BaseException:
                failed = ("error", index, traceback.format_exc())
                break
            out.append((index, ipc_bytes(table)))
        answer = failed or ("ok", out)
        try:
            conn.send_bytes(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
        except (EOFError, OSError):
            return
