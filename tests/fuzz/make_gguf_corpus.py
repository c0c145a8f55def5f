"""Writes gguf_fuzz's seed corpus: small valid GGUF files (metadata of every value type, one
file per family of tensor types) and malformed ones, one per refusal engine/gguf makes. Written
field by field (no dependencies), deterministic: rerunning rewrites the same bytes.
Usage: make_gguf_corpus.py CORPUS_DIR"""
import os
import random
import struct
import sys

# Metadata value types.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
# ggml tensor types: (type number, elements per block, bytes per block, fp16 field offsets).
TYPES = {
    "F32": (0, 1, 4, []), "F16": (1, 1, 2, [0]), "BF16": (30, 1, 2, []),
    "Q4_0": (2, 32, 18, [0]), "Q4_1": (3, 32, 20, [0, 2]), "Q5_0": (6, 32, 22, [0]),
    "Q5_1": (7, 32, 24, [0, 2]), "Q8_0": (8, 32, 34, [0]), "Q2_K": (10, 256, 84, [80, 82]),
    "Q3_K": (11, 256, 110, [108]), "Q4_K": (12, 256, 144, [0, 2]),
    "Q5_K": (13, 256, 176, [0, 2]), "Q6_K": (14, 256, 210, [208]),
}


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def string(s):
    data = s.encode() if isinstance(s, str) else s
    return u64(len(data)) + data


def array(item_type, items):
    return u32(item_type) + u64(len(items)) + b"".join(items)


def entry(key, value_type, value):
    return string(key) + u32(value_type) + value


EVERY_VALUE_TYPE = [
    entry("general.architecture", STRING, string("llama")),
    entry("u8", U8, struct.pack("<B", 200)), entry("i8", I8, struct.pack("<b", -100)),
    entry("u16", U16, struct.pack("<H", 60000)), entry("i16", I16, struct.pack("<h", -30000)),
    entry("u32", U32, u32(4000000000)), entry("i32", I32, struct.pack("<i", -7)),
    entry("f32", F32, struct.pack("<f", 0.5)), entry("bool", BOOL, b"\x01"),
    entry("u64", U64, u64(2**64 - 1)), entry("i64", I64, struct.pack("<q", -2**63)),
    entry("f64", F64, struct.pack("<d", 0.1)),
    entry("tokens", ARRAY, array(STRING, [string("a"), string(b"\xff\xfe"), string("<s>")])),
    entry("scores", ARRAY, array(F32, [struct.pack("<f", -1.5), struct.pack("<f", 2)])),
    entry("nested", ARRAY, array(ARRAY, [array(U8, [b"\x01", b"\x02"]), array(STRING, [])])),
]


def random_data(rng, type_name, elements):
    _, block_size, block_bytes, halves = TYPES[type_name]
    blocks = elements // block_size
    if type_name == "F32":
        return b"".join(struct.pack("<f", rng.uniform(-4, 4)) for _ in range(elements))
    data = bytearray(rng.randrange(256) for _ in range(blocks * block_bytes))
    for b in range(blocks):
        for offset in halves:  # finite scales
            at = b * block_bytes + offset
            data[at:at + 2] = struct.pack("<e", rng.choice([-1, 1]) * rng.uniform(1e-3, 2))
    return bytes(data)


def gguf(entries, tensors, version=3, alignment=32, magic=b"GGUF", tensor_count=None,
         offsets=None):
    """tensors: (name, dims, type number, data); offsets from the data section, default packed."""
    out = magic + u32(version) + u64(len(tensors) if tensor_count is None else tensor_count)
    out += u64(len(entries)) + b"".join(entries)
    if offsets is None:
        offsets, next_offset = [], 0
        for _, _, _, data in tensors:
            offsets.append(next_offset)
            next_offset = (next_offset + len(data) + alignment - 1) // alignment * alignment
    for (name, dims, type_number, _), offset in zip(tensors, offsets):
        out += string(name) + u32(len(dims)) + b"".join(u64(d) for d in dims)
        out += u32(type_number) + u64(offset)
    if not tensors:
        return out
    data_start = (len(out) + alignment - 1) // alignment * alignment
    out = bytearray(out.ljust(data_start, b"\0"))
    for (_, _, _, data), offset in zip(tensors, offsets):
        if not data:
            continue
        end = data_start + offset + len(data)
        if len(out) < end:
            out.extend(b"\0" * (end - len(out)))
        out[data_start + offset:end] = data
    return bytes(out)


def tensor(rng, name, type_name, dims):
    elements = 1
    for d in dims:
        elements *= d
    return (name, dims, TYPES[type_name][0], random_data(rng, type_name, elements))


def seeds():
    rng = random.Random(20241126)
    floats = [tensor(rng, "f32", "F32", [4, 2]), tensor(rng, "f16", "F16", [8]),
              tensor(rng, "bf16", "BF16", [2, 2, 2])]
    legacy = [tensor(rng, name.lower(), name, [32, 2])
              for name in ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]]
    k_quants = [tensor(rng, name.lower(), name, [256])
                for name in ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]]
    one = [tensor(rng, "w", "F32", [4])]
    valid_k = gguf([], k_quants)
    yield "floats_every_value_type", gguf(EVERY_VALUE_TYPE, floats)
    yield "legacy_quants", gguf(EVERY_VALUE_TYPE[:1], legacy)
    yield "k_quants", valid_k
    yield "v2_alignment_64", gguf([entry("general.alignment", U32, u32(64))], one + floats[1:],
                                  version=2, alignment=64)
    yield "metadata_only", gguf(EVERY_VALUE_TYPE, [])
    # Malformed: each is refused for one reason.
    yield "bad_magic", gguf([], one, magic=b"GGML")
    yield "version_1", gguf([], one, version=1)
    yield "big_endian", gguf([], one, version=0x03000000)
    yield "truncated_data", valid_k[:-100]
    yield "truncated_header", valid_k[:60]
    yield "too_many_tensors", gguf([], one, tensor_count=2**20 + 1)
    yield "tensor_count_past_file", gguf([], one, tensor_count=1000)
    yield "string_past_file", gguf([entry("general.name", STRING, u64(10**6) + b"abc")], [])
    yield "string_over_limit", gguf([entry("t", STRING, u64(2**24 + 1))], [])
    yield "array_past_file", gguf([entry("a", ARRAY, u32(F32) + u64(1000) + b"\0" * 8)], [])
    yield "array_over_limit", gguf([entry("a", ARRAY, u32(U8) + u64(2**22 + 1))], [])
    deep = array(U8, [b"\x07"])
    for _ in range(8):
        deep = array(ARRAY, [deep])
    yield "nested_too_deep", gguf([entry("deep", ARRAY, deep)], [])
    yield "unknown_value_type", gguf([entry("odd", 13, u32(0))], [])
    yield "bool_2", gguf([entry("flag", BOOL, b"\x02")], [])
    yield "duplicate_key", gguf([entry("k", U8, b"\x01"), entry("k", U8, b"\x02")], [])
    yield "alignment_24", gguf([entry("general.alignment", U32, u32(24))], one)
    yield "alignment_u64", gguf([entry("general.alignment", U64, u64(32))], one)
    yield "duplicate_tensor", gguf([], one + one)
    yield "zero_dim", gguf([], [("w", [4, 0], 0, b"")])
    yield "negative_dim", gguf([], [("w", [2**64 - 1], 0, b"")])
    yield "overflowing_dims", gguf([], [("w", [2**40, 2**40], 0, b"")])
    yield "five_dims", gguf([], [("w", [1, 1, 1, 1, 1], 0, b"\0" * 4)])
    yield "unknown_type", gguf([], [("w", [256], 16, b"\0" * 66)])
    yield "partial_block", gguf([], [("w", [16, 2], 2, b"\0" * 18)])
    yield "misaligned_offset", gguf([], one, offsets=[8])
    yield "data_past_end", gguf([], [("w", [4], 0, b"")], offsets=[2**63])
    yield "data_cut_short", gguf([], one)[:-1]


def main():
    directory = sys.argv[1]
    os.makedirs(directory, exist_ok=True)
    for name, data in seeds():
        assert len(data) < 4096, name
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
