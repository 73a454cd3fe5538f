#!/usr/bin/python3
"""An independent reader of TensorBoard event files, for ETE's tests.

Decodes every file under DIR/tensorboard the way TensorBoard does: TFRecord framing (length,
masked CRC-32C of the length, data, masked CRC-32C of the data; CRCs from crcmod) and
tensorflow.Event / Summary messages parsed by protobuf from a .proto compiled here with protoc.
Prints one JSON object: {"file_version": ..., "steps": {step: {tag: value}}}. Exits non-zero on a
bad CRC, a truncated record or an undecodable event.

Debian packages: python3-protobuf, protobuf-compiler, python3-crcmod.
"""
import importlib.util
import json
import os
import struct
import subprocess
import sys
import tempfile

import crcmod.predefined

PROTO = """
syntax = "proto3";
package tensorflow;
message Summary {
  message Value {
    string node_name = 7;
    string tag = 1;
    oneof value { float simple_value = 2; bytes obsolete_old_style_histogram = 3; }
  }
  repeated Value value = 1;
}
message Event {
  double wall_time = 1;
  int64 step = 2;
  oneof what { string file_version = 3; bytes graph_def = 4; Summary summary = 5; }
}
"""

crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_module():
    tmp = tempfile.mkdtemp()
    with open(os.path.join(tmp, "event.proto"), "w") as f:
        f.write(PROTO)
    subprocess.run(["protoc", f"--proto_path={tmp}", f"--python_out={tmp}", "event.proto"],
                   check=True)
    spec = importlib.util.spec_from_file_location("event_pb2", os.path.join(tmp, "event_pb2.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        if pos + 12 > len(data):
            sys.exit(f"{path}: truncated record header at byte {pos}")
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if crc != masked(header):
            sys.exit(f"{path}: bad length CRC at byte {pos}")
        body = data[pos + 12:pos + 12 + length]
        if len(body) != length or pos + 16 + length > len(data):
            sys.exit(f"{path}: truncated record at byte {pos}")
        (crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if crc != masked(body):
            sys.exit(f"{path}: bad data CRC at byte {pos}")
        yield body
        pos += 16 + length


def main():
    pb = event_module()
    folder = os.path.join(sys.argv[1], "tensorboard")
    out = {"file_version": None, "steps": {}}
    for name in sorted(os.listdir(folder)):
        if not name.startswith("events.out.tfevents."):
            continue
        for body in records(os.path.join(folder, name)):
            e = pb.Event()
            e.ParseFromString(body)
            if e.WhichOneof("what") == "file_version":
                out["file_version"] = e.file_version
            elif e.WhichOneof("what") == "summary":
                row = out["steps"].setdefault(str(e.step), {})
                for v in e.summary.value:
                    row[v.tag] = v.simple_value
    print(json.dumps(out))


if __name__ == "__main__":
    main()
