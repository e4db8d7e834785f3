"""The compiled TrackEventWriter writes the same bytes as its pure-Python source."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from perfetto_client import _track_event_writer as loaded


def _pure_module() -> ModuleType:
    path = Path(loaded.__file__ or "").with_name("_track_event_writer.py")
    spec = importlib.util.spec_from_file_location("_track_event_writer_pure", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _new_writer(
    module: Any, monkeypatch: pytest.MonkeyPatch, *, thread_time: bool, sink: Any = None
) -> tuple[Any, Any, list[bytes]]:
    """A writer of `module` appending to the returned list (or writing into `sink`), with
    fresh interning tables."""
    module.load_encoders()
    packets: list[bytes] = []
    if sink is None:
        sink = SimpleNamespace(write_packet=packets.append, close=lambda: None)
    keys = module.EventKeys()
    monkeypatch.setattr(module, "event_keys", keys)  # the same fresh table in both modules
    monkeypatch.setattr(module, "time", _FixedThreadTime())
    monkeypatch.setattr(module, "_annotation_names", {})
    monkeypatch.setattr(module, "_annotation_name_list", [""])

    def reset(writer: Any, ts: int) -> list[bytes]:
        return [b"reset" + str(ts).encode()]

    cls = module.ThreadTimeWriter if thread_time else module.TrackEventWriter
    writer = cls(
        sink,
        clock=lambda: 0,
        clock_id=6,
        thread_track_uuid=7,
        reset_packets=reset,
    )
    return writer, keys, packets


def _write_sequence(
    module: Any, monkeypatch: pytest.MonkeyPatch, *, thread_time: bool, sink: Any = None
) -> list[bytes]:
    writer, keys, packets = _new_writer(module, monkeypatch, thread_time=thread_time, sink=sink)
    first = keys.key("cat", "first")
    second = keys.key("cat", "second", dynamic_category=True)
    writer.slice_begin(first, 1_000)
    writer.slice_begin(second, 1_005)
    writer.slice_end(1_006)
    writer.slice_end(900)  # before the last timestamp: written absolute
    writer.slice_begin(first, 1_000_000_000)  # a delta above 2**14
    annotation = module.intern_debug_annotation_name("arg")
    interned = writer.interned_for(0, 0, [annotation])
    writer.event(first, 3, 1_000_000_100, b"\x58\x09" + b"\x22\x02\x08\x01", interned)
    writer.event(0, 4, 1_000_000_200, b"\x58\x09" + module.counter_value_field(2.5), b"")
    writer.instant(first, 1_000_000_250)
    writer.instant(first, 1_000_000_260)
    writer.instant(second, 1_000_000_270)
    for value in (7, 1 << 20, -3, 2.5, True, -(1 << 63), (1 << 63) - 1, 1 << 63):
        writer.counter(b"\x58\x09", value, 1_000_000_280)
    writer.clear_incremental_state()
    writer.slice_end(1_000_000_300)
    return packets


class _FixedThreadTime:
    """Stands for the `time` module: thread CPU time advancing 1000 ns per reading."""

    def __init__(self) -> None:
        self.now = 0

    def thread_time_ns(self) -> int:
        self.now += 1000
        return self.now


@pytest.mark.parametrize("thread_time", [False, True])
def test_instants_and_counters_write_the_bytes_of_the_general_event(
    thread_time: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, general = (
        _write_events(loaded, monkeypatch, thread_time=thread_time, general=general)
        for general in (False, True)
    )
    assert fast == general
    assert len(fast) == 10


def _write_events(
    module: Any, monkeypatch: pytest.MonkeyPatch, *, thread_time: bool, general: bool
) -> list[bytes]:
    """Instants and counters written by the writer's own methods or as general events."""
    writer, keys, packets = _new_writer(module, monkeypatch, thread_time=thread_time)
    key = keys.key("cat", "mark")
    for ts in (1_000, 1_010, 500, 1_000_000):  # 500: before the last, written absolute
        if general:
            writer.event(key, module.TYPE_INSTANT, ts, b"", b"")
        else:
            writer.instant(key, ts)
    for value in (7, 1 << 20, -3, 2.5, True):
        if general:
            fields = b"\x58\x09" + module.counter_value_field(value)
            writer.event(0, module.TYPE_COUNTER, 2_000_000, fields, b"")
        else:
            writer.counter(b"\x58\x09", value, 2_000_000)
    return packets


@pytest.mark.parametrize("thread_time", [False, True])
def test_compiled_and_pure_writers_write_the_same_bytes(
    thread_time: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if (loaded.__file__ or "").endswith(".py"):
        pytest.skip("the writer runs as pure Python here: nothing compiled to compare")
    compiled_packets = _write_sequence(loaded, monkeypatch, thread_time=thread_time)
    pure_packets = _write_sequence(_pure_module(), monkeypatch, thread_time=thread_time)
    assert compiled_packets == pure_packets
    assert len(compiled_packets) >= 8


def _chunks_of(write: Callable[[Any], object]) -> list[bytes]:
    """The chunks (past chunk id and writer id) that `write(trace_writer)` leaves, written
    into a perfetto_smb TraceWriter and flushed."""
    from perfetto_smb import SharedMemoryArbiter

    chunks: list[bytes] = []

    def commit(request: Any, done: Any) -> None:
        chunks.extend(bytes(move.data[6:]) for move in request.chunks_to_move)
        if done is not None:
            done()

    arbiter = SharedMemoryArbiter(
        bytearray(16 * 4096), 4096, commit, post_task=lambda task: task(), emulation=True
    )
    trace_writer = arbiter.create_trace_writer(1)
    write(trace_writer)
    trace_writer.flush()
    return chunks


def _write_packets(packets: list[bytes]) -> Callable[[Any], None]:
    def write(trace_writer: Any) -> None:
        for packet in packets:
            trace_writer.write_packet(packet)

    return write


@pytest.mark.parametrize("thread_time", [False, True])
def test_events_written_into_the_chunk_are_the_bytes_write_packet_writes(
    thread_time: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bound to a perfetto_smb TraceWriter (compiled: events encoded straight into its
    chunk), a sequence leaves the chunk that writing its packets with write_packet leaves."""
    direct = _chunks_of(
        lambda sink: _write_sequence(loaded, monkeypatch, thread_time=thread_time, sink=sink)
    )
    packets = _write_sequence(loaded, monkeypatch, thread_time=thread_time)
    assert direct == _chunks_of(_write_packets(packets))
    assert len(direct) == 1
    assert len(packets) >= 8


ARGS: list[dict[str, object]] = [
    {"i": 5, "big": 1 << 40, "neg": -3, "min": -(1 << 63)},
    {"b": True, "f": 2.5, "s": "text", "utf": "h\u00e9", "empty": ""},
    {"u": 1 << 63, "huge": 1 << 70},
    {"sur": "\ud800", "n": None, "l": [1, "x"], "d": {"k": 1}},
    {},
]


@pytest.mark.parametrize("thread_time", [False, True])
def test_slice_args_written_into_the_chunk_are_the_bytes_write_packet_writes(
    thread_time: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slice's args encoded straight into the chunk (compiled: ints, bools, floats and strs,
    once their names are interned on the sequence) are the bytes `encode_annotations` gives."""
    from perfetto_client import _debug_annotations, _track_event

    names, name_list = loaded._annotation_names, loaded._annotation_name_list
    into_chunk = []

    def write(sink: Any) -> list[bytes]:
        writer, keys, packets = _new_writer(loaded, monkeypatch, thread_time=thread_time, sink=sink)
        # _debug_annotations keeps the process's annotation iids: keep the process's table.
        monkeypatch.setattr(loaded, "_annotation_names", names)
        monkeypatch.setattr(loaded, "_annotation_name_list", name_list)
        key = keys.key("cat", "step")
        ts = 1_000
        for _ in range(2):  # the second time, every name is interned on the sequence
            for args in ARGS:
                ts += 10
                if _debug_annotations.put_annotated_event(
                    writer, key, 1, ts, tuple(args), tuple(args.values())
                ):
                    into_chunk.append(args)
                else:
                    extra, iids = _debug_annotations.encode_annotations(args)
                    _track_event.write_event((writer,), key, 1, ts, None, extra, iids)
                writer.slice_end(ts + 5)
        return packets

    direct = _chunks_of(write)
    compiled = (_debug_annotations.__file__ or "").endswith(".so")
    # Compiled, a plain writer: int64s, bools, floats and strs once their names and the
    # event's head are on the sequence (not ints past int64, surrogates, None, lists, dicts).
    expected = [ARGS[4], ARGS[0], ARGS[1], ARGS[4]] if compiled and not thread_time else []
    assert into_chunk == expected
    packets = write(None)
    assert direct == _chunks_of(_write_packets(packets))
    assert len(packets) >= 16
