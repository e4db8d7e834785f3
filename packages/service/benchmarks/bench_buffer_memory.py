"""TraceBuffer memory: resident memory (VmRSS) of a process holding one large buffer.

Each figure comes from a fresh child process (so that nothing else it allocated counts): its
RSS after creating a `--gib` GiB TraceBuffer, then after copying `--written-mib` MiB of 4 KiB
chunks into it, then after cloning the buffer (what CloneSession does), each as growth over the
RSS before the buffer was created. Goal (issue #18): a 1 GiB buffer with 1 MB written costs
less than 50 MB.

    python packages/service/benchmarks/bench_buffer_memory.py [--gib N] [--written-mib N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from perfetto_service.core._trace_buffer import PacketSequenceProperties, TraceBuffer
from protozero import write_redundant_varint

MIB = 1 << 20
CHUNK_PAYLOAD = 4080
GOAL_MIB = 50


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _chunk_payload() -> bytes:
    """One chunk of whole 1016-byte packets (4-byte size headers included)."""
    packet = b"\x0a" + b"\x00" * 1014  # any bytes: the buffer does not parse packets in
    header = bytearray(4)
    write_redundant_varint(header, 0, len(packet) + 1)
    body = (bytes(header) + packet + b"\x00") * (CHUNK_PAYLOAD // (len(packet) + 5))
    return body + bytes(CHUNK_PAYLOAD - len(body))


def child(gib: int, written_mib: int) -> None:
    """Prints the RSS growth at each step, in MiB, on one line."""
    payload = _chunk_payload()
    base = _rss()
    buffer = TraceBuffer(gib << 30)
    created = _rss() - base
    props = PacketSequenceProperties(1, 1000, 4000, 1)
    for chunk_id in range(written_mib * MIB // CHUNK_PAYLOAD):
        buffer.copy_chunk_untrusted(props, chunk_id, 4, 0, payload)
    written = _rss() - base
    clone = buffer.clone()
    cloned = _rss() - base
    del clone
    print(created / MIB, written / MIB, cloned / MIB)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=int, default=1, help="buffer size in GiB (below 4)")
    parser.add_argument("--written-mib", type=int, default=1, help="MiB of chunks copied in")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.gib, args.written_mib)
        return
    argv = [sys.executable, __file__, "--child", "--gib", str(args.gib)]
    print(f"TraceBuffer resident memory, {args.gib} GiB buffer (RSS growth of a fresh process)")
    for written_mib in sorted({args.written_mib, 64}):
        out = subprocess.run(
            [*argv, "--written-mib", str(written_mib)], check=True, capture_output=True, text=True
        )
        created, written, cloned = (float(value) for value in out.stdout.split())
        print(
            f"  {written_mib:>4} MiB written: created {created:7.1f} MiB, "
            f"after writing {written:7.1f} MiB, with a clone {cloned:7.1f} MiB"
        )
        if written_mib == args.written_mib and args.gib == 1:
            verdict = "met" if written < GOAL_MIB else "NOT met"
            print(f"  goal: < {GOAL_MIB} MiB with {written_mib} MiB written: {verdict}")


if __name__ == "__main__":
    main()
