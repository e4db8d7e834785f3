"""A small program to trace: recursive Fibonacci, a worker thread and a caught exception.

python3 tools/dev.py trace examples/fib.py      (writes trace.pftrace)
"""

import sys
import threading


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def parse(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    worker = threading.Thread(target=fib, args=(n - 2,), name="fib worker")
    worker.start()
    print(f"fib({n}) = {fib(n)}")
    worker.join()
    print(f"parse('x') = {parse('x')}")


if __name__ == "__main__":
    main()
