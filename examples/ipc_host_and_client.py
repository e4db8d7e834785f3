"""Perfetto's IPC on its own: a host serving two ConsumerPort methods, a client calling them.

The host runs on an asyncio loop in a background thread; the client is the threaded
`perfetto_wire.Client`. QueryCapabilities answers at once; ObserveEvents is a stream that
answers twice. Upstream's tools could call this host: the frames are upstream's.

Run: `python examples/ipc_host_and_client.py`.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading

from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.ipc.consumer_port_pb2 import (
    ObserveEventsRequest,
    ObserveEventsResponse,
    QueryCapabilitiesRequest,
    QueryCapabilitiesResponse,
)
from perfetto_wire import Client, Deferred, Host, HostServer, Reply, ServiceDescriptor


class Handlers:
    """Handlers are found by RPC name or its snake_case; each gets the request and a Deferred."""

    def query_capabilities(
        self, request: QueryCapabilitiesRequest, call: Deferred
    ) -> QueryCapabilitiesResponse:
        response = QueryCapabilitiesResponse()
        response.capabilities.has_query_capabilities = True
        return response  # returning a message replies

    def observe_events(self, request: ObserveEventsRequest, call: Deferred) -> None:
        for state in (1, 2):  # a stream: replies with has_more, then a last one
            response = ObserveEventsResponse()
            change = response.events.instance_state_changes.add()
            change.state = state  # type: ignore[assignment]
            call.resolve(response, has_more=state == 1)


def serve(path: str, ready: threading.Event, stop: threading.Event) -> None:
    loop = asyncio.new_event_loop()
    host = Host()
    host.expose_service(ServiceDescriptor.for_service("ConsumerPort"), Handlers())
    server = HostServer(host, loop=loop)
    server.listen(path)  # or "@name", or "127.0.0.1:32278"
    ready.set()
    loop.run_until_complete(asyncio.to_thread(stop.wait))
    server.close()
    loop.close()


def main() -> int:
    with tempfile.TemporaryDirectory() as directory:
        path = f"{directory}/consumer"
        ready, stop = threading.Event(), threading.Event()
        thread = threading.Thread(target=serve, args=(path, ready, stop))
        thread.start()
        ready.wait()
        try:
            with Client(path) as client:
                consumer = client.bind("ConsumerPort").result()
                request = QueryCapabilitiesRequest()
                reply = client.invoke(consumer, "QueryCapabilities", request).result()
                caps = reply.unwrap(QueryCapabilitiesResponse).capabilities
                print("has_query_capabilities:", caps.has_query_capabilities)

                events: list[ObservableEvents] = []
                finished = threading.Event()

                def on_event(reply: Reply) -> None:  # runs on the client's IPC thread
                    events.append(reply.unwrap(ObserveEventsResponse).events)
                    if not reply.has_more:
                        finished.set()

                client.invoke(consumer, "ObserveEvents", ObserveEventsRequest(), on_reply=on_event)
                finished.wait(10)
                print("events streamed:", len(events))
        finally:
            stop.set()
            thread.join()
    return 0 if caps.has_query_capabilities and len(events) == 2 else 1


if __name__ == "__main__":
    sys.exit(main())
