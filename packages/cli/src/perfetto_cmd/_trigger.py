"""Activating triggers as a producer: `trigger_perfetto` and configs with activate_triggers."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from perfetto_service import ProducerIPCClient, producer_socket_names

from perfetto_cmd._command_version import version_line

if TYPE_CHECKING:
    from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig

__all__ = ["activate_triggers", "trigger_perfetto_main"]

_TIMEOUT_S = 10.0


def _producer_socket() -> str:
    names = producer_socket_names()
    return names[0] if names else ""


_PRODUCER_NAME = "perfetto_cmd_producer"


class _TriggerProducer:
    """A producer with no data sources that only activates triggers."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.done = threading.Event()
        self.success = False
        self.client = ProducerIPCClient(_producer_socket(), self, _PRODUCER_NAME)

    def on_connect(self) -> None:
        self.client.activate_triggers(self.names)
        self.client.sync(self._on_synced)

    def _on_synced(self) -> None:
        self.success = True
        self.done.set()

    def on_disconnect(self) -> None:
        self.done.set()

    def on_tracing_setup(self) -> None:
        """No shared memory is used."""

    def setup_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        """Registers no data sources."""

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        """Registers no data sources."""

    def stop_data_source(self, instance_id: int) -> None:
        """Registers no data sources."""

    def flush(self, request_id: int, instance_ids: Sequence[int], flags: int) -> None:
        """Registers no data sources."""

    def clear_incremental_state(self, instance_ids: Sequence[int]) -> None:
        """Registers no data sources."""


def activate_triggers(names: Sequence[str]) -> bool:
    """Connects as a producer and activates `names`; True once the service took them."""
    producer = _TriggerProducer(names)
    producer.client.connect()
    try:
        producer.done.wait(_TIMEOUT_S)
    finally:
        producer.client.disconnect()
    if not producer.success:
        print(
            f"Could not activate triggers: no tracing service answered on {_producer_socket()}",
            file=sys.stderr,
        )
    return producer.success


_USAGE = """\
Usage: trigger_perfetto TRIGGER...
  -h|--help  Show this message
  --version  Print the version
"""


def trigger_perfetto_main(argv: Sequence[str] | None = None) -> int:
    """`trigger_perfetto TRIGGER...`: activates the triggers; 0 on success, 1 otherwise.

    Unknown options are reported and ignored, as upstream does (apps call this command, so its
    command line stays forward compatible).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        sys.stderr.write(_USAGE)
        return 1
    if "--version" in args:
        print(version_line("trigger_perfetto"))
        return 0
    names = [a for a in args if not a.startswith("-")]
    if len(names) != len(args):
        print("Ignoring unknown arguments. See --help for usage.", file=sys.stderr)
    if not names:
        print("At least one trigger must be specified.", file=sys.stderr)
        sys.stderr.write(_USAGE)
        return 1
    return 0 if activate_triggers(names) else 1
