"""OpenTelemetry spans and counters around the steps of an epoch (docs/operations.md, "Metrics
and alerts": Tracing), through the OpenTelemetry *API* only, and only once the process set an
SDK up.

Laminar never configures OpenTelemetry and never imports it: it uses the global tracer and meter
providers when ``opentelemetry`` is already imported in the process *and* a provider other than
the API's default (no-op proxy) is set — what ``opentelemetry-instrument`` or an application's
own ``trace.set_tracer_provider(...)`` does (a provider named by ``OTEL_PYTHON_TRACER_PROVIDER``
counts once the API loaded it: at the first ``get_tracer_provider()`` of the process).
Otherwise every hook here is a few dictionary lookups and returns: no import, no span object,
no allocation (the cost is gated in ``benches/bench_telemetry.py``). ``opentelemetry-api`` is
not a dependency of the wheel; the ``otel`` extra names it.

What is recorded (attributes: ``laminar.group``, ``laminar.sink``, ``laminar.epoch``,
``laminar.rows``, ``laminar.command``):

- a span per step of an epoch, named ``laminar.<step>``: ``begin``, ``write``, ``prepare``,
  ``decide``, ``commit`` (and ``abort``, ``recover``), wrapped around the protocol command that
  is the step (`traced`, applied by `laminar.engine.loop.drive` to every machine's commands:
  the drivers', the Spark tasks', recovery's);
- a span per epoch of a writer (``laminar.epoch``) and per Spark task (``laminar.task``)
  (`epoch`), the steps' parent;
- counters ``laminar.rows.written`` and ``laminar.bytes.written`` (Arrow bytes handed to the
  sinks; attributes ``laminar.group`` and ``laminar.role``: ``epoch`` or ``task``) (`written`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["enabled", "epoch", "traced", "written"]

_C = TypeVar("_C")
_E = TypeVar("_E")


@dataclass
class _Epoch:
    """The epoch (or task) a span is open for: what its write steps report."""

    group: str
    epoch: int | None
    rows: int = 0
    nbytes: int = 0


_current: ContextVar[_Epoch | None] = ContextVar("laminar_telemetry_epoch", default=None)


@dataclass
class _Instruments:
    provider: Any
    meter_provider: Any
    tracer: Any
    rows: Any
    nbytes: Any


_cache: list[_Instruments] = []


#: The API's own providers until an SDK is set (``opentelemetry.metrics`` names its proxy
#: privately, hence names rather than classes).
_DEFAULT_PROVIDERS = frozenset(
    {"ProxyTracerProvider", "NoOpTracerProvider", "_ProxyMeterProvider", "NoOpMeterProvider"}
)


def _provider(module: str, private: str, getter: str) -> Any:
    """The global provider ``module.getter()`` when an SDK set one, else None. Fast path: the
    API module's own global is still None (nothing set, nothing loaded from the environment),
    without calling the getter (~3 µs for both providers otherwise)."""
    api = sys.modules.get(module)
    if api is None or getattr(api, private, False) is None:
        return None
    provider = getattr(sys.modules[module.removesuffix("._internal")], getter)()
    return None if type(provider).__name__ in _DEFAULT_PROVIDERS else provider


def _instruments() -> _Instruments | None:
    """The tracer and counters of the providers an SDK set up (module docstring); None when
    there is neither."""
    if "opentelemetry" not in sys.modules:
        return None
    provider = _provider("opentelemetry.trace", "_TRACER_PROVIDER", "get_tracer_provider")
    meter_provider = _provider(
        "opentelemetry.metrics._internal", "_METER_PROVIDER", "get_meter_provider"
    )
    if provider is None and meter_provider is None:
        return None
    if _cache and _cache[0].provider is provider and _cache[0].meter_provider is meter_provider:
        return _cache[0]
    from laminar import __version__  # in-function: laminar imports this module

    tracer = provider.get_tracer("laminar", __version__) if provider is not None else None
    rows = nbytes = None
    if meter_provider is not None:
        meter = meter_provider.get_meter("laminar", __version__)
        rows = meter.create_counter(
            "laminar.rows.written", unit="{row}", description="rows handed to laminar's sinks"
        )
        nbytes = meter.create_counter(
            "laminar.bytes.written", unit="By", description="Arrow bytes handed to the sinks"
        )
    _cache[:] = [_Instruments(provider, meter_provider, tracer, rows, nbytes)]
    return _cache[0]


def enabled() -> bool:
    """Whether spans are recorded (an SDK's tracer provider is set in this process)."""
    instruments = _instruments()
    return instruments is not None and instruments.tracer is not None


def traced(perform: Callable[[_C], _E]) -> Callable[[_C], _E]:
    """``perform`` (a driver's command performer) with a span around each command that is a step
    of an epoch (the core's ``Command.step``); ``perform`` itself when tracing is off."""
    instruments = _instruments()
    if instruments is None or instruments.tracer is None:
        return perform
    tracer = instruments.tracer

    def perform_traced(command: _C) -> _E:
        kind = str(getattr(command, "kind", ""))
        step = getattr(command, "step", None)
        if step is None:
            return perform(command)
        current = _current.get()
        attributes: dict[str, Any] = {"laminar.command": kind}
        for name, value in (
            ("laminar.epoch", getattr(command, "epoch", None)),
            ("laminar.sink", getattr(command, "sink_id", None)),
            ("laminar.group", current.group if current is not None else None),
        ):
            if value is not None:
                attributes[name] = value
        with tracer.start_as_current_span(f"laminar.{step}", attributes=attributes) as span:
            event = perform(command)
            if step == "write" and current is not None and current.rows:
                span.set_attribute("laminar.rows", current.rows)
            return event

    return perform_traced


@contextlib.contextmanager
def _recorded(role: str, state: _Epoch, instruments: _Instruments) -> Iterator[None]:
    attributes: dict[str, Any] = {"laminar.group": state.group}
    if state.epoch is not None:
        attributes["laminar.epoch"] = state.epoch
    token = _current.set(state)
    try:
        with instruments.tracer.start_as_current_span(
            f"laminar.{role}", attributes=attributes
        ) as span:
            yield
            span.set_attribute("laminar.rows", state.rows)
            span.set_attribute("laminar.bytes", state.nbytes)
    finally:
        _current.reset(token)


def epoch(
    role: str, group: str, epoch: int | None, *, rows: int = 0, nbytes: int = 0
) -> contextlib.AbstractContextManager[None]:
    """A span around one epoch of a writer (``role="epoch"``) or one Spark task (``"task"``);
    the step spans inside are its children and report its ``rows``. A no-op context when
    tracing is off."""
    instruments = _instruments()
    if instruments is None or instruments.tracer is None:
        return contextlib.nullcontext()
    return _recorded(role, _Epoch(group, epoch, rows, nbytes), instruments)


def written(role: str, group: str, rows: int, nbytes: int) -> None:
    """Count ``rows`` and ``nbytes`` handed to the sinks of ``group`` (by a writer's epoch or a
    Spark task); the open `epoch` span reports them."""
    instruments = _instruments()
    if instruments is None:
        return
    current = _current.get()
    if current is not None and role == "task":
        current.rows += rows
        current.nbytes += nbytes
    attributes = {"laminar.group": group, "laminar.role": role}
    if instruments.rows is not None:
        instruments.rows.add(rows, attributes)
        instruments.nbytes.add(nbytes, attributes)
