"""Fixtures: a traced per test on its own sockets, and producers on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cmdlib import Producer, Traced


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[Traced]:
    with Traced(tmp_path) as daemon:
        yield daemon


@pytest.fixture
def producer(traced: Traced) -> Iterator[Callable[..., Producer]]:
    started: list[Producer] = []

    def start(data_source: str = "test.ds", count: int = 10, extra: int = 0) -> Producer:
        started.append(Producer(traced, data_source, count, extra))
        return started[-1]

    yield start
    for process in started:
        process.stop()
