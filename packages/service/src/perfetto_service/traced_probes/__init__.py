"""`traced_probes`: upstream's probes data sources (perfetto-probes) as a producer on
traced's producer socket."""

from perfetto_service.traced_probes._main import main
from perfetto_service.traced_probes._probes_producer import PRODUCER_NAME, ProbesProducer

__all__ = ["PRODUCER_NAME", "ProbesProducer", "main"]
