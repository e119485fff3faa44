#!/usr/bin/env python3
"""Independent TensorBoard event-file reader for dlkit's tests (stdlib only; no dlkit code).

Usage: check_tfevents.py FILE

Checks the file name (events.out.tfevents.<10-digit unix time>.<host>), every record's framing
(u64 length | u32 masked crc32c(length) | data | u32 masked crc32c(data)), and that the first
record is an Event with file_version "brain.Event:2". Prints one JSON line per scalar:
{"tag", "step", "value", "wall_time"}. Any violation: message on stderr, exit 1.
"""
import json
import os
import re
import struct
import sys


def make_table():
    table = []
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = make_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ TABLE[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fail(msg):
    print(f"{sys.argv[1]}: {msg}", file=sys.stderr)
    sys.exit(1)


def varint(buf, pos):
    result = shift = 0
    while True:
        if pos >= len(buf):
            fail("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            fail("varint longer than 10 bytes")


def fields(buf):
    """Yields (field number, wire type, value) of a protobuf message."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            n, pos = varint(buf, pos)
            value, pos = buf[pos : pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            fail(f"unsupported wire type {wire}")
        if pos > len(buf):
            fail("field runs past the end of its message")
        yield field, wire, value


def parse_event(data):
    ev = {"wall_time": None, "step": 0, "file_version": None, "values": []}
    for field, wire, value in fields(data):
        if field == 1 and wire == 1:
            ev["wall_time"] = struct.unpack("<d", value)[0]
        elif field == 2 and wire == 0:
            ev["step"] = value - (1 << 64) if value >= 1 << 63 else value  # int64 two's complement
        elif field == 3 and wire == 2:
            ev["file_version"] = value.decode("utf-8")
        elif field == 5 and wire == 2:
            for sf, sw, sv in fields(value):
                if sf != 1 or sw != 2:
                    continue
                v = {}
                for vf, vw, vv in fields(sv):
                    if vf == 1 and vw == 2:
                        v["tag"] = vv.decode("utf-8")
                    elif vf == 2 and vw == 5:
                        v["value"] = struct.unpack("<f", vv)[0]
                ev["values"].append(v)
    return ev


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    name = os.path.basename(sys.argv[1])
    if not re.fullmatch(r"events\.out\.tfevents\.\d{10}\..+", name):
        fail(f"file name {name!r} is not events.out.tfevents.<10-digit time>.<host>")
    with open(sys.argv[1], "rb") as f:
        blob = f.read()
    pos = 0
    records = []
    while pos < len(blob):
        if pos + 12 > len(blob):
            fail(f"truncated record header at byte {pos}")
        header = blob[pos : pos + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", blob[pos + 8 : pos + 12])
        if len_crc != masked(header):
            fail(f"record {len(records)} at byte {pos}: length crc mismatch")
        start = pos + 12
        if start + length + 4 > len(blob):
            fail(f"record {len(records)} at byte {pos}: truncated data")
        data = blob[start : start + length]
        (data_crc,) = struct.unpack("<I", blob[start + length : start + length + 4])
        if data_crc != masked(data):
            fail(f"record {len(records)} at byte {pos}: data crc mismatch")
        records.append(data)
        pos = start + length + 4
    if not records:
        fail("no records")
    first = parse_event(records[0])
    if first["file_version"] != "brain.Event:2":
        fail(f"first record's file_version is {first['file_version']!r}, not 'brain.Event:2'")
    if first["wall_time"] is None:
        fail("first record has no wall_time")
    for data in records[1:]:
        ev = parse_event(data)
        for v in ev["values"]:
            if "tag" not in v or "value" not in v:
                fail(f"summary value without tag or simple_value at step {ev['step']}")
            print(json.dumps({"tag": v["tag"], "step": ev["step"], "value": v["value"], "wall_time": ev["wall_time"]}))


if __name__ == "__main__":
    main()
