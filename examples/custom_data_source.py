"""A custom data source: writes its own packets whenever a session enables it.

Run: `python examples/custom_data_source.py [out.pftrace]`.
"""

from __future__ import annotations

import sys

import perfetto_client as pc
from perfetto_client import Backend, Tracing


class Temperature(pc.DataSource):
    """Reports readings as for_testing packets (a real source would use its own proto)."""

    name = "com.example.temperature"

    def on_start(self, config: object) -> None:
        print("temperature source started")

    def on_stop(self, args: pc.StopArgs) -> None:
        print("temperature source stopped")


def report(value: float) -> None:
    def write(ctx: pc.TraceContext) -> None:
        packet = ctx.new_trace_packet()
        packet.begin_for_testing().set_str(f"temperature {value:.1f}")

    Temperature.trace(write)  # does nothing while no session enabled the source


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "custom_data_source.pftrace"
    Tracing.initialize(Backend.IN_PROCESS)
    Temperature.register()
    session = Tracing.new_trace()
    session.setup({"data_sources": [{"config": {"name": Temperature.name}}]}, output=out)
    session.start()
    for reading in (20.5, 21.0, 21.7):
        report(reading)
    session.stop()
    session.close()
    print(f"wrote {out}: open it in https://ui.perfetto.dev")


if __name__ == "__main__":
    main()
