"""A small program to trace: recursive Fibonacci, a worker thread and a caught exception.

python3 tools/dev.py trace examples/fib.py     perfetto-trace records it (trace.pftrace)
python examples/fib.py out.pftrace             it records itself with perfetto_client.record

`parse` raises a ValueError that `parse_or_zero` catches: the trace marks it with an
`exception` instant on `parse`'s slice (`exception ValueError` with `--exception-types`,
and always on 3.12+; the pure hook records no caught exceptions).
"""

import sys
import threading

import perfetto_client


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def parse(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"not a number: {text!r}")
    return int(text)


def parse_or_zero(text: str) -> int:
    try:
        return parse(text)
    except ValueError:
        return 0


def main() -> None:
    worker = threading.Thread(target=fib, args=(13,), name="fib worker")
    worker.start()
    print(f"fib(15) = {fib(15)}")
    worker.join()
    print(f"parse_or_zero('x') = {parse_or_zero('x')}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        with perfetto_client.record(sys.argv[1], c_calls=False) as recording:
            main()
        print(recording.summary.lines()[0] if recording.summary else "")
    else:
        main()
