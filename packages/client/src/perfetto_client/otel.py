"""OpenTelemetry spans in Perfetto traces: add `PerfettoSpanProcessor()` to an SDK TracerProvider.

    provider.add_span_processor(perfetto_client.otel.PerfettoSpanProcessor())

Needs the OpenTelemetry SDK: `pip install 'perfetto-client[otel]'`.
"""

try:
    from perfetto_client._span_processor import PerfettoSpanProcessor
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the installation
    if not (exc.name or "").startswith("opentelemetry"):
        raise
    raise ModuleNotFoundError(
        "perfetto_client.otel needs the OpenTelemetry SDK: pip install 'perfetto-client[otel]'",
        name=exc.name,
    ) from None

__all__ = ["PerfettoSpanProcessor"]
