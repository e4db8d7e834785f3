"""Writes a protobuf message with protozero and reads it back with its decoder.

    python examples/protozero_messages.py

The code of packages/protozero/README.md comes from here.
"""

from protozero import HeapBuffered, Message, ProtoDecoder

hb = HeapBuffered(Message)  # or HeapBuffered(TracePacket) with generated writers
hb.msg.append_int(1, -5)  # field 1, varint (negative int32/int64 take 10 bytes)
child = hb.msg.begin_nested_message(3, Message)
child.append_string(1, "foo")  # the child's 4-byte size is back-filled ...
hb.msg.append_bool(2, True)  # ... when a field of a parent is set or on finalize()
data = hb.serialize()

decoder = ProtoDecoder(data)
fields = {field.id: field for field in decoder}
nested = fields[3].as_message().find(1)
if decoder.error is not None or nested is None:
    raise SystemExit(f"protozero_messages: decoding failed: {decoder.error}")
print(f"{len(data)} bytes: int {fields[1].as_int64()}, bool {fields[2].as_bool()}")
print(f"nested message: {nested.as_string()!r}")
