"""``laminar.spark``: exactly-once streaming queries from a Spark Connect client (or classic Spark).

(About 530 lines, past the usual 500 lines: the foreachBatch function, the server check, `start`
and `register` stay together here because each reaches `laminar.spark.writer` inside a function
and the writer reaches back for `ForeachBatchWriter` — the package's one known deferred import
cycle; in modules of their own they would close new ones. The query's owner
(`laminar.spark.owner`), the credential warnings (`laminar.spark.credentials`), the writer,
source and options are submodules; every public name is importable from here.)

    import laminar, laminar.spark

    query = laminar.spark.start(
        orders,                                   # a streaming DataFrame
        laminar.KafkaSink(bootstrap_servers=..., topic="orders", transactional_id="orders"),
        laminar.PostgresSink(dsn=laminar.env("ORDERS_PG_DSN"), table="public.orders"),
        checkpoint_location="s3a://bucket/checkpoints/orders",
        trigger="10 seconds",
    )

`start` checks the server first (`check_server`: its Python imports laminar at the client's
version and reaches every sink's server), then starts ``df.writeStream.foreachBatch(...)`` with the
checkpoint. In the server's Python worker, each micro-batch goes through `ForeachBatchWriter`:

- ``batch_id`` is the epoch; the batch reaches the sinks as Arrow (``DataFrame.toArrow()``);
- an empty batch opens no transaction (nothing to write; the sinks' markers stay where they are,
  and a later epoch is checked as always);
- on the first batch in a process: the sinks' servers are checked from there (a clear error
  naming the server, instead of a timeout deep in a driver), and the writer's ``owner`` is set to
  the streaming query's id, read from ``<checkpoint>/metadata`` through Spark (the worker is not
  told the query id; the checkpoint's metadata file is where Spark keeps it). A new checkpoint
  means a new id, which is what the checkpoint-reset guard needs (docs/protocol.md §5).

`register` makes ``writeStream.format("laminar")`` available instead (`laminar.spark.source`:
tasks write, the driver decides; docs/spark.md), after the same server check.

The worker that runs ``foreachBatch`` is started by the server: with Spark Connect, the
interpreter named by the server's ``PYSPARK_PYTHON`` environment variable (``spark.pyspark.python``
is not consulted there). It must have laminar at the client's version; docs/spark.md has the set-up.
"""

from __future__ import annotations

import json
import logging
import pickle
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from laminar import __version__, _lazy
from laminar._settings import env_names
from laminar._sink import TransactionalSink
from laminar.errors import ConfigError
from laminar.spark._handoff import VERSION_MISMATCH, install_advice, reduce_checked
from laminar.spark.credentials import warn_exposed_credentials
from laminar.spark.owner import query_owner

if TYPE_CHECKING:
    from laminar.readiness import SinkCheck
    from laminar.spark.writer import EpochResult, ExactlyOnceWriter

# The writer, the readiness checks and the scale-out protocol are imported where they are used:
# Spark imports this package in every fresh driver-side Python process of a format("laminar")
# micro-batch (the data source lives in laminar.spark.source), which needs none of them.

__all__ = [
    "ForeachBatchWriter",
    "ServerReport",
    "check_server",
    "foreach_batch",
    "query_owner",
    "register",
    "start",
    "warn_exposed_credentials",
]

log = logging.getLogger("laminar.spark")

Trigger = str | Mapping[str, Any] | None


# -- the foreachBatch function ------------------------------------------------------------------


class ForeachBatchWriter:
    """The function Spark calls for each micro-batch: ``writer(df, batch_id)``.

    Picklable configuration (the writer and the checkpoint location); everything else lives in
    the process that runs it. ``checkpoint_location``, when given, lets the first batch learn the
    streaming query's id (the writer's ``owner``); ``check_servers`` makes the first batch check
    every sink's server from the worker before anything is written.
    """

    def __init__(
        self,
        writer: ExactlyOnceWriter,
        checkpoint_location: str | None = None,
        *,
        check_servers: bool = True,
        check_timeout_s: float = 15.0,
    ) -> None:
        from laminar.spark.writer import ExactlyOnceWriter  # lazy: see top

        if not isinstance(writer, ExactlyOnceWriter):
            raise ConfigError(
                f"foreach_batch() takes a laminar.exactly_once(...) writer, not "
                f"{type(writer).__name__}"
            )
        self.writer = writer
        self.checkpoint_location = checkpoint_location
        self.check_servers = check_servers
        self.check_timeout_s = check_timeout_s
        self._ready = False
        #: Batches seen in this process, of which empty ones (no transaction opened).
        self.batches = 0
        self.empty_batches = 0
        #: What happened to the last non-empty batch in this process (None before one).
        self.last_result: EpochResult | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_ready=False, batches=0, empty_batches=0, last_result=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("last_result", None)
        self.__dict__.update(state)

    def __reduce__(self) -> tuple[Any, ...]:
        return reduce_checked(self)

    def __repr__(self) -> str:
        where = f", checkpoint_location={self.checkpoint_location!r}"
        return f"ForeachBatchWriter({self.writer!r}{where if self.checkpoint_location else ''})"

    def __call__(self, df: Any, batch_id: int) -> None:
        epoch = int(batch_id)
        if not self._ready:
            self._prepare(df)
        self.batches += 1
        started = time.perf_counter()
        if self.writer.scale_out:
            self._scaled(df, epoch, started)
            return
        table = df.toArrow()
        if table.num_rows == 0:
            self.empty_batches += 1
            log.debug("epoch %d is empty: nothing to write, no transaction", epoch)
            return
        fetched = time.perf_counter()
        result = self.writer.write_epoch(epoch, table)
        self.last_result = result
        log.info(
            "epoch %d: %s %d rows (toArrow %.1f ms, write %.1f ms, %d attempt(s))",
            epoch,
            "committed" if result.committed else "already committed, skipped",
            table.num_rows,
            (fetched - started) * 1e3,
            (time.perf_counter() - fetched) * 1e3,
            result.attempts,
        )

    def _scaled(self, df: Any, epoch: int, started: float) -> None:
        """Scale-out mode: the batch's partitions are written by Spark tasks (``mapInArrow``)
        and this process decides (docs/protocol.md §4); only the small result rows come back."""
        from laminar.protocol.scaleout import RESULT_DDL  # lazy: see top

        def run(task: Any) -> list[Any]:
            return list(df.mapInArrow(task, RESULT_DDL).collect())

        result = self.writer.write_epoch_scaled(epoch, run)
        log.info(
            "epoch %d: %s through scale-out tasks (%.1f ms, %d attempt(s))",
            epoch,
            "committed" if result.committed else "nothing written (replayed or empty batch)",
            (time.perf_counter() - started) * 1e3,
            result.attempts,
        )

    def _prepare(self, df: Any) -> None:
        """Once per process, before the first batch is written."""
        writer = self.writer
        if writer.owner is None and self.checkpoint_location:
            writer.owner = query_owner(df.sparkSession, self.checkpoint_location)
            log.info("writer owner: %s", writer.owner)
        if self.check_servers:
            # lazy: see top
            from laminar.readiness import describe_process, require_reachable

            where = f"the process running foreachBatch ({describe_process()})"
            require_reachable(writer.sinks, where=where, timeout_s=self.check_timeout_s)
        self._ready = True


def foreach_batch(
    writer: ExactlyOnceWriter,
    *,
    checkpoint_location: str | None = None,
    check_servers: bool = True,
) -> ForeachBatchWriter:
    """The ``foreachBatch`` function for ``writer``, for those who build the ``writeStream``
    themselves; pass the same ``checkpoint_location`` as the query's option so the first batch
    can tie the sinks to the query (``owner``)::

        fb = laminar.spark.foreach_batch(writer, checkpoint_location=ckpt)
        df.writeStream.foreachBatch(fb).option("checkpointLocation", ckpt).start()
    """
    return ForeachBatchWriter(
        writer, checkpoint_location=checkpoint_location, check_servers=check_servers
    )


# -- checking the server before a query starts --------------------------------------------------


@dataclass(frozen=True)
class ServerReport:
    """What a probe task found in the Spark server's Python (`check_server`)."""

    python: str
    python_version: str
    host: str
    #: laminar's version there, or None if it cannot be imported.
    laminar_version: str | None
    #: Why ``import laminar`` failed, or None.
    import_error: str | None = None
    #: Where laminar was imported from.
    laminar_path: str | None = None
    sinks: list[SinkCheck] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """laminar imports at the client's version and every sink's server answers."""
        return self.laminar_version == __version__ and all(s.ok for s in self.sinks)

    def problem(self) -> str | None:
        """What is wrong, as a message that says what to do (None if nothing is)."""
        where = f"the Spark server's Python ({self.python} on {self.host})"
        if self.laminar_version is None:
            return (
                f"{where} cannot import laminar ({self.import_error}): "
                f"{install_advice(__version__, self.python)}"
            )
        if self.laminar_version != __version__:
            return (
                f"{VERSION_MISMATCH}: the client runs laminar {__version__} but {where} has "
                f"laminar {self.laminar_version} (from {self.laminar_path}); "
                f"{install_advice(__version__, self.python)}"
            )
        failed = [s for s in self.sinks if not s.ok]
        if failed:
            from laminar.readiness import unreachable_message  # lazy: see top

            return unreachable_message(failed, where)
        return None


# The probe runs in the server's Python, where laminar may be missing: it is compiled from this
# source into a module of its own, so that Spark's cloudpickle ships it by value.
_PROBE_SOURCE = """
def laminar_server_probe(batches):
    import json, os, socket, sys
    import pyarrow as pa

    for _ in batches:
        pass
    report = {
        "python": sys.executable,
        "python_version": sys.version.split()[0],
        "host": socket.gethostname(),
    }
    try:
        import laminar
    except BaseException as e:
        report["import_error"] = type(e).__name__ + ": " + str(e)
    else:
        report["laminar_version"] = laminar.__version__
        report["laminar_path"] = os.path.dirname(laminar.__file__)
        if laminar.__version__ == CLIENT_VERSION and SINKS is not None:
            from laminar.spark import _probe_sinks

            report["sinks"] = _probe_sinks(SINKS, TIMEOUT_S)
    yield pa.RecordBatch.from_pylist([{"report": json.dumps(report)}])
"""


def _make_probe(client_version: str, sinks: bytes | None, timeout_s: float) -> Any:
    namespace: dict[str, Any] = {
        "__name__": "laminar_server_probe",
        "CLIENT_VERSION": client_version,
        "SINKS": sinks,
        "TIMEOUT_S": timeout_s,
    }
    exec(compile(_PROBE_SOURCE, "<laminar server probe>", "exec"), namespace)  # noqa: S102
    return namespace["laminar_server_probe"]


def _probe_sinks(payload: bytes, timeout_s: float) -> list[dict[str, Any]]:
    """Runs in the probe task: unpickle the sinks and check each server from there."""
    from laminar.readiness import check_sinks  # lazy: see top

    sinks = pickle.loads(payload)  # noqa: S301 (sent by our own client)
    return [check.to_dict() for check in check_sinks(sinks, timeout_s)]


def check_server(
    spark: Any,
    sinks: ExactlyOnceWriter | Sequence[TransactionalSink] = (),
    *,
    timeout_s: float = 15.0,
    raise_on_problem: bool = True,
) -> ServerReport:
    """Run a one-row probe task in the Spark server's Python and report what it found: the
    interpreter, laminar's version there (or why it cannot be imported) and whether each sink's
    server answers from there (address, credentials, topic; ``laminar.env`` settings resolved in
    the server's environment).

    Raises `ConfigError` with what to install where, or which server could not be reached,
    unless ``raise_on_problem`` is False. With Spark Connect, tasks and ``foreachBatch`` use the
    same interpreter (the server's ``PYSPARK_PYTHON``); on a cluster, tasks run on executors.
    """
    from laminar.readiness import SinkCheck  # lazy: see top
    from laminar.spark.writer import ExactlyOnceWriter  # lazy: see top

    if isinstance(sinks, ExactlyOnceWriter):
        sinks = sinks.sinks
    sink_list = list(sinks)
    payload = pickle.dumps(sink_list) if sink_list else None
    probe = _make_probe(__version__, payload, timeout_s)
    started = time.monotonic()
    rows = spark.range(0, 1, 1, 1).mapInArrow(probe, "report string").collect()
    seconds = time.monotonic() - started
    if len(rows) != 1:
        raise ConfigError(f"the server probe returned {len(rows)} rows instead of 1")
    data = json.loads(rows[0][0])
    report = ServerReport(
        python=str(data.get("python")),
        python_version=str(data.get("python_version")),
        host=str(data.get("host")),
        laminar_version=data.get("laminar_version"),
        import_error=data.get("import_error"),
        laminar_path=data.get("laminar_path"),
        sinks=[SinkCheck.from_dict(d) for d in data.get("sinks", [])],
        seconds=seconds,
    )
    problem = report.problem()
    if problem is not None and raise_on_problem:
        raise ConfigError(problem)
    return report


# -- the Spark-native sink: format("laminar") ---------------------------------------------------


def register(spark: Any, *, check_server: bool = True, check_timeout_s: float = 15.0) -> None:
    """Register ``format("laminar")`` (`laminar.spark.source`) with ``spark``, a Spark Connect
    or classic session, after checking that the server's Python imports laminar at this
    client's version (`check_server`; the servers themselves are checked when a query starts,
    from the driver and from each task's process), and warning about credentials handed to the
    executors in a way Spark shows (`warn_exposed_credentials`)::

        laminar.spark.register(spark)
        (df.writeStream.format("laminar")
           .option("postgres.dsn.env", "ORDERS_PG_DSN").option("postgres.table", "public.orders")
           .option("checkpointLocation", ckpt).start())
    """
    # In-function: the data source needs pyspark >= 4's datasource API, optional for foreachBatch.
    from laminar.spark.source import LaminarDataSource

    if check_server:
        _check_spark_server(spark, (), check_timeout_s)
    warn_exposed_credentials(spark)
    spark.dataSource.register(LaminarDataSource)


# -- building and starting the query ------------------------------------------------------------


def start(
    df: Any,
    *targets: TransactionalSink | ExactlyOnceWriter,
    checkpoint_location: str,
    kafka: TransactionalSink | Sequence[TransactionalSink] | None = None,
    postgres: TransactionalSink | Sequence[TransactionalSink] | None = None,
    trigger: Trigger = None,
    query_name: str | None = None,
    output_mode: str | None = None,
    options: Mapping[str, Any] | None = None,
    check_server: bool = True,
    check_timeout_s: float = 15.0,
    **writer_options: Any,
) -> Any:
    """Start ``df.writeStream.foreachBatch(...)`` writing every micro-batch exactly once.

    ``targets``: sinks (several: atomically) or one ``laminar.exactly_once(...)`` writer;
    ``kafka=``/``postgres=`` add sinks by kind (a sink or a list). ``checkpoint_location`` is
    required: Spark's checkpoint is what makes batch ids (the epochs) survive a restart.
    ``trigger``: ``"10 seconds"`` (processing time), ``"availableNow"``, ``"once"``, or a dict
    of ``DataStreamWriter.trigger`` arguments. ``query_name``, ``output_mode`` and ``options``
    (more ``writeStream`` options) are passed to Spark as they are. Other keyword arguments go
    to ``laminar.exactly_once`` (e.g. ``retries``, ``owner``).

    ``check_server`` first runs `check_server` (one small task, about a second); the first batch
    checks the servers again from the process that writes. Returns the ``StreamingQuery``.
    """
    writer = _writer_from(targets, kafka, postgres, writer_options)
    if not isinstance(checkpoint_location, str) or not checkpoint_location.strip():
        raise ConfigError(
            "laminar.spark.start() needs checkpoint_location=: exactly-once across restarts "
            "needs Spark's checkpoint (it replays a batch with the same id)"
        )
    if check_server:
        _check_spark_server(df.sparkSession, writer, check_timeout_s)
    warn_exposed_credentials(df.sparkSession, env_names(writer.sinks))
    function = ForeachBatchWriter(writer, checkpoint_location, check_timeout_s=check_timeout_s)
    stream = df.writeStream.foreachBatch(function).option("checkpointLocation", checkpoint_location)
    for key, value in (options or {}).items():
        if key == "checkpointLocation":
            raise ConfigError("pass the checkpoint as checkpoint_location=, not in options=")
        stream = stream.option(key, value)
    if output_mode is not None:
        stream = stream.outputMode(output_mode)
    if query_name is not None:
        stream = stream.queryName(query_name)
    trigger_args = _trigger_arguments(trigger)
    if trigger_args:
        stream = stream.trigger(**trigger_args)
    try:
        return stream.start()
    except Exception as e:
        problem = _explain_start_failure(e)
        if problem is None:
            raise
        raise ConfigError(problem) from e


def _check_spark_server(
    session: Any, writer: ExactlyOnceWriter | Sequence[TransactionalSink], timeout_s: float
) -> None:
    try:
        check_server(session, writer, timeout_s=timeout_s)
    except ConfigError:
        raise
    except Exception as e:
        problem = _explain_start_failure(e)
        if problem is None:
            raise
        raise ConfigError(problem) from e


def _writer_from(
    targets: tuple[TransactionalSink | ExactlyOnceWriter, ...],
    kafka: TransactionalSink | Sequence[TransactionalSink] | None,
    postgres: TransactionalSink | Sequence[TransactionalSink] | None,
    writer_options: dict[str, Any],
) -> ExactlyOnceWriter:
    from laminar.spark.writer import ExactlyOnceWriter, exactly_once  # lazy: see top

    writers = [t for t in targets if isinstance(t, ExactlyOnceWriter)]
    if writers:
        if len(targets) != 1 or kafka is not None or postgres is not None or writer_options:
            raise ConfigError(
                "pass either one laminar.exactly_once(...) writer or sinks (with writer "
                "options as keywords), not both"
            )
        return writers[0]
    sinks: list[TransactionalSink] = list(targets)  # type: ignore[arg-type]
    for group in (kafka, postgres):
        if group is None:
            continue
        sinks.extend([group] if isinstance(group, TransactionalSink) else list(group))
    if not sinks:
        raise ConfigError("laminar.spark.start() needs at least one sink (or a writer)")
    return exactly_once(*sinks, **writer_options)


def _trigger_arguments(trigger: Trigger) -> dict[str, Any]:
    if trigger is None:
        return {}
    if isinstance(trigger, Mapping):
        args = dict(trigger)
    elif isinstance(trigger, str):
        word = trigger.strip().replace("_", "").lower()
        if word == "availablenow":
            args = {"availableNow": True}
        elif word == "once":
            args = {"once": True}
        else:
            args = {"processingTime": trigger.strip()}
    else:
        raise ConfigError(
            f"trigger= takes an interval ('10 seconds'), 'availableNow', 'once' or a dict of "
            f"DataStreamWriter.trigger arguments, not {type(trigger).__name__}"
        )
    if "continuous" in args:
        raise ConfigError(
            "trigger continuous= is not possible with foreachBatch (Spark runs it only in "
            "micro-batch mode); use a processing-time trigger"
        )
    return args


def _explain_start_failure(error: BaseException) -> str | None:
    """Turn Spark's error for a server Python without laminar (or another version) into the
    message that says what to install where; None for any other error."""
    text = str(error)
    for line in text.splitlines():
        if VERSION_MISMATCH in line:
            start = line.index(VERSION_MISMATCH)
            return line[start:].strip()
    if "No module named 'laminar'" in text:
        return (
            "the Spark server's Python cannot import laminar (No module named 'laminar'), so it "
            f"cannot run this writer: {install_advice(__version__)}"
        )
    return None


#: Names re-exported from `laminar.spark.writer` on first use (imported there lazily, see top).
_LAZY = {
    name: "laminar.spark.writer" for name in ("EpochResult", "ExactlyOnceWriter", "exactly_once")
}


def __getattr__(name: str) -> Any:
    """``laminar.spark.exactly_once``/``ExactlyOnceWriter``/``EpochResult`` (`_LAZY`), or a
    submodule not imported yet (``laminar.spark.writer``: an eager import used to load it)."""
    return _lazy.attribute(__name__, name, _LAZY)


def __dir__() -> list[str]:
    return _lazy.names(__name__, _LAZY)
