"""Our traced against upstream's traced: the same producer processes, the same consumer.

Each session: a `traced` subprocess on temporary sockets, one 32 MiB buffer, `track_event`
with category `bench`; `--producers` processes each write `--slices` slices (2 events each)
from `--threads` threads once the session starts; then a consumer flush, DisableTracing and
ReadBuffers into a file. Measured per session:

* traced's utime+stime (the sum of its threads' /proc/PID/task/TID/schedstat, in ns) from
  EnableTracing to the end of DisableTracing, per event sent and arrived and per MB read back;
* events that arrived: the trace decoded with upstream's schema (the PyPI `perfetto`
  package), TrackEvents of type SLICE_BEGIN/SLICE_END counted; the loss each side reports
  (TraceStats: `trace_writer_packet_loss`, `chunks_discarded`, `abi_violations`; packets
  marked `previous_packet_dropped`);
* ReadBuffers of a full, wrapped buffer (our client's producers, `--read-slices` per thread; by
  default about 80 MB written): traced's CPU per MB read over IPC.

Producers: upstream SDK programs (`--upstream-producer` or PERFETTO_UPSTREAM_PRODUCER: a
program `PRODUCER THREADS SLICES ARG_BYTES` writing TRACE_EVENT("bench", "slice", "i", i), or
with ARG_BYTES > 0 a string argument "s" of that many bytes, through the SYSTEM backend once
`bench` is enabled, printing a line starting with `done`, and exiting when
the session stops) and our client on the SYSTEM backend (this script with `--client`). The
reference service is `--upstream-traced` or PERFETTO_UPSTREAM_TRACED (it reads the socket
paths from PERFETTO_PRODUCER_SOCK_NAME and PERFETTO_CONSUMER_SOCK_NAME, as upstream's
`traced`). Without it, ours is measured alone. Medians of `--runs` sessions, the services'
sessions interleaved.

    PERFETTO_UPSTREAM_TRACED=... PERFETTO_UPSTREAM_PRODUCER=... \\
        python packages/service/benchmarks/bench_vs_upstream.py [--runs N] [--producers N]
        [--threads N] [--slices N] [--arg-bytes N] [--read-slices N]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent as UpstreamTrackEvent
from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_service import ConsumerIPCClient, TracePacketSlices
from perfetto_testing import report_row
from protozero import _native, encode_varint

BUFFER_KB = 32 * 1024
CATEGORY = "bench"
TIMEOUT = 300.0
MB = 1e6
_SLICE_EVENTS = (UpstreamTrackEvent.TYPE_SLICE_BEGIN, UpstreamTrackEvent.TYPE_SLICE_END)


# Our client as a producer (this script with --client) ---------------------------------------


def client_main(threads: int, slices: int, arg_bytes: int) -> None:
    """What the SDK producer does, with perfetto_client on the SYSTEM backend."""
    import perfetto_client as pc  # only the producer processes need it

    pc.Tracing.initialize(pc.Backend.SYSTEM)
    bench = pc.Category(CATEGORY)
    _wait_until(lambda: bench.enabled, "no session enabled 'bench'")

    text = "x" * arg_bytes

    def work() -> None:
        for i in range(slices):
            if text:
                with pc.trace_event(bench, "slice", s=text):
                    pass
            else:
                with pc.trace_event(bench, "slice", i=i):
                    pass

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(f"done {threads} {slices} events={2 * threads * slices}", flush=True)
    _wait_until(lambda: not bench.enabled, "the session did not stop")


def _wait_until(condition: Callable[[], bool], error: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"client producer: {error} in {TIMEOUT:.0f} s")
        time.sleep(0.001)


# Services ---------------------------------------------------------------------------------


class Service:
    """A traced subprocess (ours or upstream's) on sockets in a temporary directory."""

    def __init__(self, name: str, command: Sequence[str], directory: str) -> None:
        self.name = name
        self.producer_socket = f"{directory}/{name}-producer"
        self.consumer_socket = f"{directory}/{name}-consumer"
        self.env = dict(os.environ)
        self.env["PERFETTO_PRODUCER_SOCK_NAME"] = self.producer_socket
        self.env["PERFETTO_CONSUMER_SOCK_NAME"] = self.consumer_socket
        self.process = subprocess.Popen(
            command, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while not self._accepts():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"{name} traced ({command[0]}) did not start")
            time.sleep(0.05)

    def _accepts(self) -> bool:
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(self.consumer_socket)
            except OSError:
                return False
        return True

    def cpu_seconds(self) -> float:
        """utime+stime of the process's live threads, from their schedstat (ns; /proc/PID/stat
        counts 10 ms ticks)."""
        total = 0
        for path in glob.glob(f"/proc/{self.process.pid}/task/*/schedstat"):
            with contextlib.suppress(OSError), open(path) as schedstat:
                total += int(schedstat.read().split()[0])
        return total / 1e9

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# The consumer -----------------------------------------------------------------------------


class Reader:
    """Writes what ReadBuffers returns into a file as a trace; keeps the last TraceStats."""

    def __init__(self, output: str) -> None:
        self.output = open(output, "wb")  # noqa: SIM115 - closed in read()'s caller
        self.bytes = 0
        self.stats = TraceStats()
        self.connected = threading.Event()
        self.disabled = threading.Event()
        self.done = threading.Event()
        self.flushed = threading.Event()
        self.got_stats = threading.Event()

    def on_connect(self) -> None:
        self.connected.set()

    def on_disconnect(self) -> None:
        """Nothing to clean up."""

    def on_tracing_disabled(self, error: str) -> None:
        self.disabled.set()

    def on_trace_data(self, packets: Sequence[TracePacketSlices], has_more: bool) -> None:
        parts: list[bytes | memoryview] = []
        for packet in packets:
            size = sum(map(len, packet))
            self.bytes += size
            parts.append(b"\x0a" + encode_varint(size))
            parts.extend(packet)
        self.output.write(b"".join(parts))
        if not has_more:
            self.output.close()
            self.done.set()

    def on_detach(self, success: bool) -> None:
        """Not used."""

    def on_attach(self, success: bool, config: TraceConfig) -> None:
        """Not used."""

    def on_trace_stats(self, success: bool, stats: TraceStats) -> None:
        self.stats = stats
        self.got_stats.set()

    def on_observable_events(self, events: ObservableEvents) -> None:
        """Not used."""


def _config() -> TraceConfig:
    config = TraceConfig()
    config.buffers.add(size_kb=BUFFER_KB, fill_policy=TraceConfig.BufferConfig.RING_BUFFER)
    source = config.data_sources.add().config
    source.name = "track_event"
    source.track_event_config.enabled_categories.append(CATEGORY)
    source.track_event_config.disabled_categories.append("*")
    return config


def _wait(event: threading.Event, what: str) -> None:
    if not event.wait(TIMEOUT):
        raise SystemExit(f"timed out waiting for {what}")


@dataclass
class Session:
    """What one session measured."""

    sent: int
    arrived: int = 0
    dropped_marks: int = 0
    trace_mb: float = 0.0
    ingest_cpu: float = 0.0
    read_cpu: float = 0.0
    stats: dict[str, int] = field(default_factory=dict)


def run_session(  # noqa: PLR0917 - one session's shape
    service: Service,
    producer: Sequence[str],
    producers: int,
    threads: int,
    slices: int,
    arg_bytes: int,
    directory: str,
) -> Session:
    """Records one session with `producers` processes of `producer` and reads it back."""
    trace = f"{directory}/{service.name}.pftrace"
    reader = Reader(trace)
    consumer = ConsumerIPCClient(service.consumer_socket, reader)
    consumer.connect()
    processes: list[subprocess.Popen[str]] = []
    session = Session(sent=2 * producers * threads * slices)
    try:
        _wait(reader.connected, f"{service.name}'s consumer socket")
        cpu0 = service.cpu_seconds()
        consumer.enable_tracing(_config())
        for _ in range(producers):
            processes.append(
                subprocess.Popen(
                    [*producer, str(threads), str(slices), str(arg_bytes)],
                    env=service.env,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline()
            if not line.startswith("done"):
                raise SystemExit(f"a producer ({producer[0]}) exited without writing its events")
        consumer.flush(30_000, lambda _ok: reader.flushed.set())
        _wait(reader.flushed, "the flush")
        consumer.disable_tracing()
        _wait(reader.disabled, "DisableTracing")
        cpu1 = service.cpu_seconds()
        consumer.get_trace_stats()
        _wait(reader.got_stats, "the trace stats")
        cpu2 = service.cpu_seconds()
        consumer.read_buffers()
        _wait(reader.done, "ReadBuffers")
        cpu3 = service.cpu_seconds()
        consumer.free_buffers()
    finally:
        consumer.disconnect()
        for process in processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
    session.ingest_cpu = cpu1 - cpu0
    session.read_cpu = cpu3 - cpu2
    session.trace_mb = reader.bytes / MB
    buffers = reader.stats.buffer_stats
    session.stats = {
        "trace_writer_packet_loss": sum(b.trace_writer_packet_loss for b in buffers),
        "chunks_discarded": sum(b.chunks_discarded for b in buffers),
        "abi_violations": sum(b.abi_violations for b in buffers),
        "chunks_overwritten": sum(b.chunks_overwritten for b in buffers),
    }
    session.arrived, session.dropped_marks = count_events(trace)
    os.unlink(trace)
    return session


def count_events(path: str) -> tuple[int, int]:
    """Slice begin/end TrackEvents in the trace, and packets marked previous_packet_dropped
    (other than a sequence's first packet, which writers mark as well)."""
    trace = Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    events = 0
    dropped = 0
    sequences: set[int] = set()
    for packet in trace.packet:
        sequence = packet.trusted_packet_sequence_id
        if packet.previous_packet_dropped and sequence in sequences:
            dropped += 1
        sequences.add(sequence)
        if packet.HasField("track_event") and packet.track_event.type in _SLICE_EVENTS:
            events += 1
    return events, dropped


# The table --------------------------------------------------------------------------------


def _median(sessions: Sequence[Session], attribute: str) -> float:
    return statistics.median(float(getattr(session, attribute)) for session in sessions)


def _row(label: str, sessions: Sequence[Session]) -> dict[str, float]:
    sent = sessions[0].sent
    arrived = _median(sessions, "arrived")
    cpu = _median(sessions, "ingest_cpu")
    mb = _median(sessions, "trace_mb")
    stats = {key: statistics.median(s.stats[key] for s in sessions) for key in sessions[0].stats}
    marks = _median(sessions, "dropped_marks")
    print(
        f"  {label:<34} arrived {int(arrived):>8} of {sent} ({100 * (1 - arrived / sent):5.1f} %"
        f" lost; runs {[s.arrived for s in sessions]})  traced CPU {cpu:6.3f} s ="
        f" {cpu / sent * 1e6:6.3f} us/event sent, {cpu / arrived * 1e6 if arrived else 0:6.3f}"
        f" us/event arrived, {cpu / mb * 1e3 if mb else 0:7.2f} ms/MB  (trace {mb:.2f} MB;"
        f" writer_packet_loss {stats['trace_writer_packet_loss']:.0f}, chunks_discarded"
        f" {stats['chunks_discarded']:.0f}, abi_violations {stats['abi_violations']:.0f},"
        f" previous_packet_dropped marks {marks:.0f})"
    )
    return {"arrived": arrived, "sent": sent, "cpu": cpu, "mb": mb}


def _report(row: str, ours: dict[str, float], upstream: dict[str, float], floor: str) -> None:
    """The README table's figure of `row`: traced's CPU per arrived event (per session for
    `traced_session`), ours against upstream's."""
    if row == "traced_session":
        measured, reference, unit = ours["cpu"] * 1e3, upstream["cpu"] * 1e3, "ms CPU"
    else:
        measured = ours["cpu"] / max(ours["arrived"], 1) * 1e6
        reference = upstream["cpu"] / max(upstream["arrived"], 1) * 1e6
        unit = "µs CPU per event"
    report_row(
        row,
        measured=measured,
        reference=reference,
        cost_ratio=measured / reference,
        unit=unit,
        reference_name="upstream's traced v58.2",
        floor=floor,
    )


def _floor(services: dict[str, list[str]], args: argparse.Namespace, directory: str) -> str:
    """traced's CPU for a session without producers (its control plane alone), on each
    service: the medians of `args.runs` sessions."""
    alone = argparse.Namespace(**{**vars(args), "producers": 0})
    results = _sessions(services, [], 0, alone, directory)
    cpu = {name: _median(sessions, "ingest_cpu") * 1e3 for name, sessions in results.items()}
    floor = "a session without producers: " + ", ".join(
        f"{name} {ms:.2f} ms CPU" for name, ms in cpu.items()
    )
    print(f"  {floor}")
    return floor


def _sessions(
    services: dict[str, list[str]],
    producer: Sequence[str],
    slices: int,
    args: argparse.Namespace,
    directory: str,
) -> dict[str, list[Session]]:
    """`args.runs` sessions on each service, interleaved, each on a service started for it."""
    results: dict[str, list[Session]] = {name: [] for name in services}
    for _ in range(args.runs):
        for name, command in services.items():
            service = Service(name, command, directory)
            try:
                results[name].append(
                    run_session(
                        service,
                        producer,
                        args.producers,
                        args.threads,
                        slices,
                        args.arg_bytes,
                        directory,
                    )
                )
            finally:
                service.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream-traced", default=os.environ.get("PERFETTO_UPSTREAM_TRACED"))
    parser.add_argument("--upstream-producer", default=os.environ.get("PERFETTO_UPSTREAM_PRODUCER"))
    parser.add_argument("--producers", type=int, default=4, help="producer processes")
    parser.add_argument("--threads", type=int, default=1, help="writing threads per producer")
    parser.add_argument("--slices", type=int, default=30_000, help="per thread (2 events each)")
    parser.add_argument(
        "--client-slices", type=int, default=None, help="per thread of our client's producers"
    )
    parser.add_argument(
        "--arg-bytes", type=int, default=0, help="a string argument of N bytes instead of an int"
    )
    parser.add_argument(
        "--read-slices",
        type=int,
        default=None,
        help="per thread, for the ReadBuffers sessions (fills and wraps the buffer; 0: none)",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--row",
        choices=["traced_event", "traced_session"],
        help="the README performance table's row the SDK producers' CPU figure is printed for",
    )
    args = parser.parse_args()
    if args.read_slices is None:
        args.read_slices = 80_000_000 // (args.producers * args.threads * 2 * (20 + args.arg_bytes))
    ours = [sys.executable, "-m", "perfetto_service.traced"]
    client = [sys.executable, os.path.abspath(__file__), "--client"]
    sdk = [args.upstream_producer] if args.upstream_producer else None
    if not args.upstream_traced:
        print(
            "upstream's traced is absent (set PERFETTO_UPSTREAM_TRACED or --upstream-traced):"
            " measuring ours alone"
        )
    services = {"ours": ours}
    if args.upstream_traced:
        services["upstream"] = [args.upstream_traced]
    producer_kinds = {"our client (SYSTEM backend)": (client, args.client_slices or args.slices)}
    if sdk:
        producer_kinds = {"upstream SDK": (sdk, args.slices), **producer_kinds}
    build = "pure Python" if _native.pure_requested() else "compiled"
    argument = f"a string of {args.arg_bytes} bytes" if args.arg_bytes else "an int"
    print(
        f"our traced and client: {build}; {args.producers} producer processes x {args.threads}"
        f" threads, each slice's argument {argument},"
        " 32 MiB RING_BUFFER,"
        f" {args.runs} runs (median); CPU is traced's utime+stime from EnableTracing to the end"
        " of DisableTracing, a traced started for each session"
    )
    with tempfile.TemporaryDirectory() as directory:
        for kind, (producer, slices) in producer_kinds.items():
            print(f"{kind} producers, {slices} slices per thread:")
            results = _sessions(services, producer, slices, args, directory)
            rows = {name: _row(f"{name} traced", results[name]) for name in services}
            if "upstream" in rows:
                o, u = rows["ours"], rows["upstream"]
                rate = {name: row["arrived"] / max(row["cpu"], 1e-9) for name, row in rows.items()}
                speed = rate["ours"] / max(rate["upstream"], 1e-9)
                if args.row and kind == "upstream SDK":
                    _report(args.row, o, u, _floor(services, args, directory))
                print(
                    f"  ours vs upstream: {speed:.2f}x upstream's events per CPU-second"
                    f" (goal >= 1.2), {o['cpu'] / u['cpu'] if u['cpu'] else 0:.2f}x its CPU;"
                    f" loss {100 * (1 - o['arrived'] / o['sent']):.1f} % vs"
                    f" {100 * (1 - u['arrived'] / u['sent']):.1f} % (goal: <=)"
                )
        if not args.read_slices:
            return
        print(
            f"ReadBuffers of a full buffer ({args.read_slices} slices per thread from our"
            " client's producers, which lose nothing):"
        )
        read = _sessions(services, client, args.read_slices, args, directory)
        per_mb = {}
        for name, sessions in read.items():
            cpu = _median(sessions, "read_cpu")
            mb = _median(sessions, "trace_mb")
            per_mb[name] = mb / cpu if cpu else float("inf")
            print(
                f"  {name} traced: {mb:.1f} MB read, traced CPU {cpu:.3f} s ="
                f" {per_mb[name]:.0f} MB per CPU-second"
            )
        if "upstream" in per_mb:
            print(
                f"  ours vs upstream: {per_mb['ours'] / per_mb['upstream']:.2f}x upstream's MB"
                " per CPU-second (goal >= 1)"
            )
            if args.row == "traced_event":
                report_row(
                    "traced_read",
                    measured=per_mb["ours"],
                    reference=per_mb["upstream"],
                    cost_ratio=per_mb["upstream"] / per_mb["ours"],
                    unit="MB per CPU-s",
                    reference_name="upstream's traced",
                )


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--client":
        client_main(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
