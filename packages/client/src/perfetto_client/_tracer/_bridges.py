"""`perfetto-trace run --otel` / `--logging LEVEL`: the bridges installed in the recorded program.

`--otel` adds a `PerfettoSpanProcessor` to every OpenTelemetry SDK `TracerProvider` the
program creates (and to the global one, if already set); `--logging` gives a
`PerfettoLogHandler` the records that reach the root logger's handlers. Both write through
the client API, into the recording's track events, as the program's own processors and
handlers do: a span or record that also reaches one of those is written once.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from perfetto_client._errors import TracingError
from perfetto_client._log_handler import PerfettoLogHandler


def _reaches_root_alone(logger: Any, level: int) -> bool:
    """Whether a record of `level` from `logger` reaches the root logger's handlers (as
    `Logger.callHandlers` walks them) and no PerfettoLogHandler of the program's own takes it
    on the way: that one writes it, once."""
    while True:
        for handler in logger.handlers:
            if isinstance(handler, PerfettoLogHandler) and level >= handler.level:
                return False
        if not logger.propagate or logger.parent is None:
            return logger.parent is None
        logger = logger.parent


class _RootHook:
    """`--logging`'s handler, given each record that reaches the root logger's handlers
    without being one of them: `logging.basicConfig`, the module's `logging.warning` & co.
    (which configure the root logger when it has no handler) and Python's last resort work
    as without it. A record one of the program's own PerfettoLogHandlers takes is left to it."""

    def __init__(self, level: int) -> None:
        self.handler = PerfettoLogHandler(level)
        self._original: Any = None

    def install(self) -> None:
        """Hands every record that reaches the root logger to the handler too."""
        original = self._original = logging.Logger.callHandlers
        handler = self.handler

        def callHandlers(logger: logging.Logger, record: logging.LogRecord) -> None:  # noqa: N802
            if record.levelno >= handler.level and _reaches_root_alone(logger, record.levelno):
                handler.handle(record)
            original(logger, record)

        logging.Logger.callHandlers = callHandlers  # type: ignore[method-assign, assignment]

    def uninstall(self) -> None:
        """Stops handing records to the handler."""
        if self._original is not None:
            logging.Logger.callHandlers = self._original  # type: ignore[method-assign]
            self._original = None


class Bridges:
    """The bridges one recording installs (`install`) and removes (`uninstall`)."""

    def __init__(self, otel: bool, log_level: int | None) -> None:
        """Loads what the bridges need (before the recording starts: a missing SDK is an
        error, not a program run unrecorded)."""
        self._sdk: Any = None
        self._processor: Any = None
        self._original_init: Any = None
        if otel:
            try:
                # An optional dependency (perfetto-client[otel]), 121 ms of CPU: for --otel only.
                from opentelemetry.sdk import trace as sdk_trace

                from perfetto_client._span_processor import PerfettoSpanProcessor
            except ImportError:
                raise TracingError(
                    "--otel needs the OpenTelemetry SDK: pip install 'perfetto-client[otel]'"
                ) from None
            self._sdk = sdk_trace
            self._processor = PerfettoSpanProcessor()
        self._logging = _RootHook(log_level) if log_level is not None else None

    def install(self) -> None:
        """Adds the span processor to every SDK TracerProvider, the handler to the root logger."""
        if self._sdk is not None:
            provider_class = self._sdk.TracerProvider
            original = self._original_init = provider_class.__init__
            processor = self._processor

            @functools.wraps(original)
            def __init__(provider: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
                original(provider, *args, **kwargs)
                provider.add_span_processor(processor)

            provider_class.__init__ = __init__
            from opentelemetry import trace

            current = trace.get_tracer_provider()
            if isinstance(current, provider_class):
                current.add_span_processor(processor)
        if self._logging is not None:
            self._logging.install()

    def uninstall(self) -> None:
        """Stops attaching the processor to new providers and handing records to the handler."""
        if self._original_init is not None:
            self._sdk.TracerProvider.__init__ = self._original_init
            self._original_init = None
        if self._logging is not None:
            self._logging.uninstall()
