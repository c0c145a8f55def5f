"""A small safetensors writer and reader (Debian ships no safetensors package).

Format: 8-byte little-endian header length N, N bytes of JSON header, then the tensor data.
The header is padded with spaces to a multiple of 8 so every tensor is aligned.
"""
import json
import struct

import numpy as np
import torch

_DTYPES = {
    torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.int64: "I64",
    torch.int32: "I32", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}
_NUMPY = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
          "I32": np.int32, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def save(tensors, path, metadata=None):
    """Writes {name: tensor} to path, data in the dict's order; metadata is a {str: str} map."""
    header, blobs, offset = {}, [], 0
    for name in tensors:
        t = tensors[name].detach().contiguous().cpu()
        blob = t.numpy().tobytes()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for blob in blobs:
            f.write(blob)


def load(path):
    """Returns ({name: tensor}, metadata)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[8 + n + begin : 8 + n + end], dtype=_NUMPY[entry["dtype"]])
        tensors[name] = torch.from_numpy(array.copy().reshape(entry["shape"]))
    return tensors, metadata
