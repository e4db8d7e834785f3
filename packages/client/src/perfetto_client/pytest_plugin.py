"""The pytest plugin: `pytest --perfetto OUT.pftrace` records the test run into a Perfetto trace.

pytest loads it in every run where perfetto-client is installed (entry point `pytest11`,
name `perfetto`); without `--perfetto` it only adds its options. The recording itself is
`perfetto_client._tracer._test_run`.
"""

from __future__ import annotations

import argparse

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--perfetto OUT.pftrace`, `--perfetto-calls`, `--perfetto-max-size MB` and
    `--perfetto-html OUT.html`."""
    group = parser.getgroup("perfetto", "Perfetto trace of the run (perfetto-client)")
    group.addoption(
        "--perfetto",
        metavar="OUT.pftrace",
        default=None,
        help="record the run into a Perfetto trace: a slice per test (setup, call, teardown) "
        "with its outcome; open it in https://ui.perfetto.dev",
    )
    group.addoption(
        "--perfetto-calls",
        action="store_true",
        default=False,
        help="with --perfetto: also record every Python call (as perfetto-trace run; slower)",
    )
    group.addoption(
        "--perfetto-max-size",
        metavar="MB",
        type=_max_size,
        default=None,
        help="with --perfetto: stop writing the trace before it grows past MB megabytes "
        "(0: no cap; default: perfetto-trace run's --max-size); what is left out is counted "
        "and the trace is partial",
    )
    group.addoption(
        "--perfetto-html",
        metavar="OUT.html",
        default=None,
        help="with --perfetto: then write the trace's HTML report (perfetto-trace report --html)",
    )


def _max_size(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"takes a size in MB (0: no cap), not {text!r}")
    return value


@pytest.hookimpl(trylast=True)  # after pytest-xdist has said whether this process runs tests
def pytest_configure(config: pytest.Config) -> None:
    """Starts the recording when `--perfetto` is given."""
    output = config.getoption("perfetto")
    calls = bool(config.getoption("perfetto_calls"))
    html = config.getoption("perfetto_html")
    if not output:
        if calls:
            raise pytest.UsageError("--perfetto-calls needs --perfetto OUT.pftrace")
        if html:
            raise pytest.UsageError("--perfetto-html needs --perfetto OUT.pftrace")
        return
    # The tracer: 20 ms of CPU, which a pytest run without --perfetto does not pay.
    from perfetto_client._tracer._test_run import start_test_run

    start_test_run(config, output, calls, config.getoption("perfetto_max_size"), html)
