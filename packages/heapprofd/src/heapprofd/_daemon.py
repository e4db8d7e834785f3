"""The `heapprofd` command: the daemon, and `heapprofd run` for programs to profile."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import runpy
import signal
import sys
import types
from collections.abc import Callable

from perfetto_service import producer_socket_names

from heapprofd._command_line import Parser, python_program_problem
from heapprofd._errors import HeapprofdError
from heapprofd._task_runner import TaskRunner
from heapprofd._wire import default_socket_path

__all__ = ["main", "producer_socket_name"]

NOTIFY_FD_ENV = "HEAPPROFD_NOTIFY_FD"
WAIT_ENV = "HEAPPROFD_WAIT_S"

_ExceptHook = Callable[[type[BaseException], BaseException, types.TracebackType | None], None]


def producer_socket_name() -> str:
    """traced's producer socket, found as upstream's producers find it."""
    return producer_socket_names()[0]


def run_daemon() -> int:
    from heapprofd._producer import HeapprofdProducer

    logging.basicConfig(level=logging.INFO, format="heapprofd: %(message)s")
    runner = TaskRunner()
    producer = HeapprofdProducer(runner, producer_socket_name(), default_socket_path())
    notify = os.environ.get(NOTIFY_FD_ENV)
    if notify:

        def ready() -> None:
            os.write(int(notify), b"1")
            os.close(int(notify))
            producer.on_registered.clear()

        producer.on_registered.append(ready)
    try:
        producer.start()
    except OSError as exc:
        print(f"heapprofd: cannot listen on {default_socket_path()}: {exc}", file=sys.stderr)
        return 1
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: runner.quit())
    try:
        runner.run(idle_timeout_s=0.5)
    finally:
        producer.close()
    return 0


def run_program(argv: list[str]) -> int:
    """Runs `script.py args` (or `-m module args`) with the client loaded and connected."""
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print(
            "heapprofd run: give a script to run: heapprofd run [--] script.py [args]",
            file=sys.stderr,
        )
        return 1
    if (problem := python_program_problem(argv)) is not None:
        print(f"heapprofd run: {problem}", file=sys.stderr)
        return 1
    from heapprofd import _client

    try:
        _client.enable()
    except HeapprofdError as exc:
        print(f"heapprofd: {exc}", file=sys.stderr)
        return 1
    with _client.own_allocations():  # until the program starts, the work is heapprofd's
        _client.leave_out_runner_frames()
        # no daemon or no session for us yet: a session may still signal us
        with contextlib.suppress(OSError, HeapprofdError):
            _client.connect()
        wait = os.environ.pop(WAIT_ENV, "")
        if wait:
            _client.wait_until_profiling(float(wait))
        program = _prepare_program(argv)
    program()
    return 0


def _prepare_program(argv: list[str]) -> Callable[[], object]:
    """Sets up sys for `script.py args` or `-m module args`; the call that runs it."""
    if argv[0] == "-m":
        sys.argv = argv[1:]
        sys.path.insert(0, os.getcwd())  # as `python -m` does
        sys.excepthook = _without_own_frames(sys.excepthook)
        return functools.partial(runpy.run_module, argv[1], run_name="__main__", alter_sys=True)
    script = argv[0]
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    sys.excepthook = _without_own_frames(sys.excepthook)
    return functools.partial(runpy.run_path, os.path.abspath(script), run_name="__main__")


_RUNPY = runpy.run_path.__code__.co_filename


def _without_own_frames(excepthook: _ExceptHook) -> _ExceptHook:
    """`excepthook` shown the program's frames only, as `python script.py` would show them."""

    def hook(
        exc_type: type[BaseException], exc: BaseException, tb: types.TracebackType | None
    ) -> None:
        entry = tb
        while entry is not None and entry.tb_frame.f_code is not run_program.__code__:
            entry = entry.tb_next
        if entry is not None:  # raised by the program, not by heapprofd before it ran
            entry = entry.tb_next
            while entry is not None and entry.tb_frame.f_code.co_filename == _RUNPY:
                entry = entry.tb_next
            tb = entry
        excepthook(exc_type, exc.with_traceback(tb), tb)

    return hook


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "run":
        return run_program(args[1:])
    parser = Parser(
        prog="heapprofd",
        description="The heap profiler daemon; `heapprofd run [--] script.py [args]` runs a "
        "program that sessions can profile from its start.",
    )
    parser.usage = "heapprofd [-h] [--version]\n       heapprofd run [--] script.py [args]"
    parser.parse_args(args)
    return run_daemon()


if __name__ == "__main__":
    sys.exit(main())
