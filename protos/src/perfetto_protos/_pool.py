"""The descriptor pool that holds every generated `_pb2` module's file.

Not protobuf's default pool: upstream's `perfetto` package (how Python programs run
trace_processor) registers the same full names, `perfetto.protos.*`, in the default pool, and a
program may import both packages in either order.
"""

from google.protobuf import descriptor_pool

__all__ = ["POOL"]

POOL = descriptor_pool.DescriptorPool()
