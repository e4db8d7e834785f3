"""OpenTelemetry spans and logging records in one Perfetto trace (docs/otel-logging.md).

Run: `python examples/otel_spans.py out.pftrace`, then open out.pftrace in ui.perfetto.dev.
"""

import logging
import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from perfetto_client import Backend, Tracing
from perfetto_client.logging import PerfettoLogHandler
from perfetto_client.otel import PerfettoSpanProcessor

provider = TracerProvider()
provider.add_span_processor(PerfettoSpanProcessor())  # next to the program's own exporters
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("shop")

log = logging.getLogger("shop")
log.setLevel(logging.INFO)
log.addHandler(PerfettoLogHandler(level=logging.INFO))


def checkout(cart: list[str]) -> None:
    with tracer.start_as_current_span("checkout", attributes={"items": len(cart)}) as span:
        for item in cart:
            with tracer.start_as_current_span("reserve", attributes={"item": item}):
                log.info("reserved %s", item)
        span.add_event("paid", {"amount": 42.5})
        log.warning("stock of %s is low", cart[0])


Tracing.initialize(Backend.IN_PROCESS)
with Tracing.new_trace() as session:  # records every default-enabled category: otel, log
    checkout(["book", "pen"])
with open(sys.argv[1] if len(sys.argv) > 1 else "otel.pftrace", "wb") as f:
    f.write(session.read_trace())
session.close()
