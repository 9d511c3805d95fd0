#!/usr/bin/env python3
"""The naive reshard, as MindSpore's Python API does it: load every slice file
whole (load_checkpoint), merge each parameter's slices into the full tensor
(build_searched_strategy + merge_sliced_parameter), split the full tensors for
the target ranks, and save one checkpoint per target rank (save_checkpoint).

    naive.py SET_DIR OUT_DIR M

SET_DIR holds device{i}/ckpt_{i}/*.ckpt per rank and strategy.json (MindSpore's
JSON strategy form). A parameter with a layout is split along the dimension
its tensor map maps to the device matrix; its optimizer moment (moments.X)
follows it; everything else is replicated and rank 0's copy is kept. The
target rule is mspipe's --devices rule: the same dimension split into M equal
slices (whole when it does not divide). Output: OUT_DIR/device{i}/ckpt_{i}/
with the source's file name, crc_num trailer, fsynced, so that its files can
be compared byte for byte with mspipe's.

The .ckpt protobuf is read and written by the small hand-written codec below
(Checkpoint{repeated Value{tag, TensorProto{dims, tensor_type,
tensor_content}}}), so the script needs numpy only.
"""

import glob
import json
import os
import sys
import zlib

import numpy as np

SLICE_BYTES = 512 << 20  # MindSpore's SLICE_SIZE
CRC_MAGIC = b"crc_num"
DTYPES = {"Float32": np.float32, "Float16": np.float16, "Float64": np.float64,
          "Int8": np.int8, "Int16": np.int16, "Int32": np.int32, "Int64": np.int64,
          "UInt8": np.uint8, "UInt16": np.uint16, "UInt32": np.uint32, "UInt64": np.uint64,
          "Bool": np.bool_}
NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


def varint(buf, pos):
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def fields(buf, start, end):
    """Yields (field number, wire type, value, ) of a message in buf[start:end];
    value is an int (varint) or a (start, end) span (length-delimited)."""
    pos = start
    while pos < end:
        key, pos = varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = varint(buf, pos)
            yield num, wt, v
        elif wt == 2:
            n, pos = varint(buf, pos)
            yield num, wt, (pos, pos + n)
            pos += n
        else:
            raise ValueError("unexpected wire type %d at byte %d" % (wt, pos))


def load_checkpoint(path):
    """name -> numpy array, in file order (dicts keep insertion order)."""
    with open(path, "rb") as f:
        buf = f.read()
    end = len(buf)
    if end >= 17 and buf[end - 17:end - 10] == CRC_MAGIC:
        end -= 17
        if zlib.crc32(memoryview(buf)[:end]) != int.from_bytes(buf[end + 7:end + 17], "big"):
            raise ValueError("%s: crc32 mismatch" % path)
    parts = {}
    meta = {}
    for num, _, span in fields(buf, 0, end):
        assert num == 1
        tag, tensor = None, None
        for n, _, v in fields(buf, *span):
            if n == 1:
                tag = bytes(buf[v[0]:v[1]]).decode()
            elif n == 2:
                tensor = v
        dims, dtype, content = [], None, None
        for n, wt, v in fields(buf, *tensor):
            if n == 1 and wt == 0:
                dims.append(v)
            elif n == 1:
                p = v[0]
                while p < v[1]:
                    d, p = varint(buf, p)
                    dims.append(d)
            elif n == 2:
                dtype = bytes(buf[v[0]:v[1]]).decode()
            elif n == 3:
                content = v
        parts.setdefault(tag, []).append(buf[content[0]:content[1]])
        meta[tag] = (dims, dtype)
    out = {}
    for tag, chunks in parts.items():
        dims, dtype = meta[tag]
        shape = () if dims == [0] else tuple(dims)
        out[tag] = np.frombuffer(b"".join(chunks), dtype=DTYPES[dtype]).reshape(shape).copy()
    return out


def put_varint(out, v):
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def put_bytes(out, num, data):
    put_varint(out, num << 3 | 2)
    put_varint(out, len(data))
    out += data


def save_checkpoint(tensors, path):
    """Writes name -> array as MindSpore does (one Checkpoint message per Value,
    tensors over SLICE_BYTES split like numpy.array_split), with the crc_num
    trailer, fsynced."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    crc = 0
    with open(path, "wb") as f:
        for name, arr in tensors.items():
            dims = list(arr.shape) or [0]  # before ascontiguousarray, which makes a scalar 1-d
            arr = np.ascontiguousarray(arr)
            flat = arr.reshape(-1)
            pieces = [flat]
            if arr.nbytes > SLICE_BYTES:
                pieces = np.array_split(flat, -(-arr.nbytes // SLICE_BYTES))
            for piece in pieces:
                tensor = bytearray()
                for d in dims:
                    put_varint(tensor, 1 << 3)
                    put_varint(tensor, d)
                put_bytes(tensor, 2, NAMES[arr.dtype].encode())
                put_bytes(tensor, 3, piece.tobytes())
                value = bytearray()
                put_bytes(value, 1, name.encode())
                put_bytes(value, 2, tensor)
                msg = bytearray()
                put_bytes(msg, 1, value)
                f.write(msg)
                crc = zlib.crc32(msg, crc)
        f.write(CRC_MAGIC + crc.to_bytes(10, "big"))
        f.flush()
        os.fsync(f.fileno())


def split_axis(layout):
    """The dimension a one-level layout splits, or None."""
    for k, m in enumerate(layout["tensor_map"]):
        if m >= 0:
            return k
    return None


def main(src, out, m):
    strategy = json.load(open(os.path.join(src, "strategy.json")))  # build_searched_strategy
    layouts = strategy["parallel_layout_item"]
    files = []
    for r in range(len(glob.glob(os.path.join(src, "device*")))):
        files.append(sorted(glob.glob(os.path.join(src, "device%d" % r, "ckpt_%d" % r, "*.ckpt")))[-1])
    slices = [load_checkpoint(f) for f in files]  # every slice file, whole
    axes = {}
    for name in slices[0]:
        layout = layouts.get(name) or layouts.get(name[len("moments."):] if name.startswith("moments.") else "")
        axes[name] = split_axis(layout) if layout else None
    full = {}
    for name in slices[0]:  # merge_sliced_parameter
        if axes[name] is None:
            full[name] = slices[0][name]
        else:
            full[name] = np.concatenate([s[name] for s in slices], axis=axes[name])
    name = os.path.basename(files[0])
    for r in range(m):  # the target slices, then save_checkpoint per rank
        mine = {}
        for t, arr in full.items():
            k = axes[t]
            if k is None or arr.shape[k] % m != 0:
                mine[t] = arr
            else:
                step = arr.shape[k] // m
                mine[t] = np.take(arr, range(r * step, (r + 1) * step), axis=k)
        save_checkpoint(mine, os.path.join(out, "device%d" % r, "ckpt_%d" % r, name))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
