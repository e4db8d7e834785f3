"""A consumer process for the traced tests: enables tracing of the test data source and waits.

Run as `python ipc_consumer_main.py SOCKET`; prints `ENABLED` once the request is sent and
the service has answered a later call, then sleeps until killed.
"""

from __future__ import annotations

import sys
import threading
import time

from ipc_fakes import RecordingConsumer
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_service import ConsumerIPCClient
from traced_testlib import make_config


def main() -> None:
    consumer = RecordingConsumer()
    client = ConsumerIPCClient(sys.argv[1], consumer)
    client.connect()
    config: TraceConfig = make_config()
    client.enable_tracing(config)
    answered = threading.Event()
    client.query_capabilities(lambda _capabilities: answered.set())
    answered.wait(30)
    sys.stdout.write("ENABLED\n")
    sys.stdout.flush()
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
