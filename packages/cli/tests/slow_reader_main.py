"""A slow reader of a pipe, for the perfetto command's tests.

Run as `python slow_reader_main.py OUT BYTES_PER_S [PAUSE_AFTER PAUSE_S]`. Copies stdin into
OUT at no more than BYTES_PER_S, counted from its first byte; with PAUSE_AFTER, stops reading
for PAUSE_S seconds once that many bytes were read. Exits at the end of stdin.
"""

from __future__ import annotations

import os
import sys
import time

_READ_SIZE = 16 * 1024


def main() -> None:
    out, rate = sys.argv[1], float(sys.argv[2])
    pause_after = int(sys.argv[3]) if len(sys.argv) > 3 else -1
    pause_s = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    total = 0
    started = -1.0
    with open(out, "wb") as sink:
        while True:
            data = os.read(0, _READ_SIZE)
            if not data:
                return
            if started < 0:  # the pace counts from the first byte
                started = time.monotonic()
            sink.write(data)
            total += len(data)
            if pause_after >= 0 and total >= pause_after:
                pause_after = -1
                time.sleep(pause_s)
                started += pause_s
            ahead = started + total / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)


if __name__ == "__main__":
    main()
