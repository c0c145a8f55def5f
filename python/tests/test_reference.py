"""Tests of the Python side itself: the reference's incremental decoding, the exporter round
trip and the tokenizer. Run by ctest (python_reference_test) with /usr/bin/python3."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from attnserve import functional  # noqa: E402
from attnserve.attention import MultiHeadAttention  # noqa: E402
from attnserve.blocks import FeedForward  # noqa: E402
from attnserve.export import export, load, storage_order  # noqa: E402
from attnserve.models import CausalLM, Encoder  # noqa: E402
from attnserve.safetensors import load as load_tensors  # noqa: E402
from attnserve.tokenizer import ByteTokenizer  # noqa: E402


class ReferenceTest(unittest.TestCase):
    def test_cached_decoding_matches_the_full_pass(self):
        torch.manual_seed(0)
        for attention in ("softmax", "exclusive", "linear"):
            model = CausalLM(300, model_dim=32, num_layers=2, num_heads=4, attention=attention,
                             positions="learned", max_positions=64).eval()
            ids = torch.randint(0, 300, (1, 20))
            with torch.no_grad():
                full = model(ids, torch.tensor([20]))
                caches = model.new_caches()
                model(ids[:, :8], torch.tensor([8]), caches)
                for t in range(8, 20):
                    step = model(ids[:, t : t + 1], torch.tensor([1]), caches)[:, -1]
                    torch.testing.assert_close(step, full[:, t], atol=1e-5, rtol=1e-5)

    def test_rotary_scores_depend_on_relative_positions_alone(self):
        torch.manual_seed(2)
        q, k = torch.randn(1, 1, 1, 16, dtype=torch.float64), torch.randn(1, 1, 1, 16,
                                                                          dtype=torch.float64)
        for interleaved in (False, True):
            def score(m, n):
                rq = functional.rotate(q, torch.tensor([m]), [1], 16, interleaved=interleaved)
                rk = functional.rotate(k, torch.tensor([n]), [1], 16, interleaved=interleaved)
                return float((rq * rk).sum())
            self.assertAlmostEqual(score(7, 3), score(104, 100), places=9)
            self.assertNotAlmostEqual(score(7, 3), score(3, 7), places=3)
        # Partial rotary leaves the dimensions past `dims` alone.
        rotated = functional.rotate(q, torch.tensor([5]), [1], 8)
        torch.testing.assert_close(rotated[..., 8:], q[..., 8:])

    def test_grouped_query_attention_is_multi_head_attention_with_shared_heads(self):
        torch.manual_seed(3)
        gqa = MultiHeadAttention(32, 4, 8, num_kv_heads=2, causal=True).double()
        mha = MultiHeadAttention(32, 4, 8, causal=True).double()
        with torch.no_grad():
            mha.q_proj.load_state_dict(gqa.q_proj.state_dict())
            mha.out_proj.load_state_dict(gqa.out_proj.state_dict())
            for name in ("k_proj", "v_proj"):
                shared = getattr(gqa, name)
                getattr(mha, name).weight.copy_(
                    shared.weight.view(2, 8, 32).repeat_interleave(2, 0).reshape(32, 32))
                getattr(mha, name).bias.copy_(shared.bias.view(2, 8).repeat_interleave(2, 0)
                                              .reshape(32))
            x, lengths = torch.randn(2, 9, 32, dtype=torch.float64), torch.tensor([9, 4])
            torch.testing.assert_close(gqa(x, lengths), mha(x, lengths))

    def test_sliding_window_sees_the_last_keys_only(self):
        allowed = functional.attention_mask(torch.tensor([6]), torch.tensor([6]), 6, 6, True, 3)
        for i in range(6):
            self.assertEqual(allowed[0, i].nonzero().flatten().tolist(),
                             list(range(max(0, i - 2), i + 1)))

    def test_gated_feed_forward_multiplies_the_activated_gate(self):
        torch.manual_seed(4)
        ffn = FeedForward(8, 16, activation="silu", gated=True)
        x = torch.randn(3, 8)
        expected = ffn.fc2(torch.nn.functional.silu(ffn.gate(x)) * ffn.fc1(x))
        torch.testing.assert_close(ffn(x), expected)

    def test_llama3_scaling_keeps_short_and_slows_long_wavelengths(self):
        base = functional.rotary_inverse_frequencies(64, 500000.0)
        scaled = functional.rotary_inverse_frequencies(
            64, 500000.0, dict(type="llama3", factor=8.0, low_freq_factor=1.0,
                               high_freq_factor=4.0, original_max_positions=8192))
        wavelength = 2 * torch.pi / base
        short, long = wavelength < 8192 / 4, wavelength > 8192
        torch.testing.assert_close(scaled[short], base[short])
        torch.testing.assert_close(scaled[long], base[long] / 8)
        self.assertTrue(short.any() and long.any())

    def test_export_then_load_round_trips(self):
        torch.manual_seed(1)
        for model, inputs in (
                (CausalLM(300, model_dim=16, num_layers=1, num_heads=2, tie_embeddings=True),
                 torch.randint(0, 300, (2, 5))),
                (Encoder(input_dim=7, model_dim=16, num_layers=1, num_heads=2, pooling="pma",
                         norm="scale_norm", positions="none"), torch.randn(2, 5, 7)),
                (CausalLM(300, model_dim=16, num_layers=1, num_heads=4, num_kv_heads=2,
                          gated_ffn=True, activation="silu", positions="rope", rope_theta=500.0,
                          rope_scaling=dict(type="linear", factor=2.0), attention_window=3),
                 torch.randint(0, 300, (2, 5)))):
            with tempfile.TemporaryDirectory() as directory:
                export(model.eval(), directory)
                tensors, _ = load_tensors(os.path.join(directory, "model.safetensors"))
                self.assertNotIn("lm_head.weight", tensors)  # tied: stored once
                again = load(directory)
                lengths = torch.tensor([5, 3])
                with torch.no_grad():
                    torch.testing.assert_close(again(inputs, lengths), model(inputs, lengths))

    def test_a_classifier_round_trips_with_its_head_and_token_types(self):
        torch.manual_seed(2)
        model = Encoder(vocab_size=300, model_dim=16, num_layers=1, num_heads=2, token_types=2,
                        classifier=dict(num_labels=3, dense=True, labels=["a", "b", "c"])).eval()
        inputs, lengths = torch.randint(0, 300, (2, 5)), torch.tensor([5, 3])
        types = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 0, 0]])
        with tempfile.TemporaryDirectory() as directory:
            export(model, directory)
            with open(os.path.join(directory, "config.json")) as f:
                config = json.load(f)
            self.assertEqual(config["classifier"]["labels"], ["a", "b", "c"])
            self.assertEqual(config["token_types"], 2)
            again = load(directory)
            with torch.no_grad():
                logits = model.classify(inputs, lengths, types)
                torch.testing.assert_close(again.classify(inputs, lengths, types), logits)
                # The types are read: without them the logits differ.
                self.assertFalse(torch.allclose(model.classify(inputs, lengths), logits))

    def test_command_line_exports_a_saved_model(self):
        model = CausalLM(260, model_dim=16, num_layers=1, num_heads=2)
        with tempfile.TemporaryDirectory() as directory:
            checkpoint = os.path.join(directory, "model.pt")
            torch.save(model, checkpoint)
            out = os.path.join(directory, "exported")
            subprocess.run([sys.executable, "-m", "attnserve.export", checkpoint, out],
                           cwd=os.path.join(os.path.dirname(__file__), ".."), check=True,
                           capture_output=True)
            self.assertEqual(set(os.listdir(out)), {"config.json", "model.safetensors"})
            self.assertEqual(load(out).settings["vocab_size"], 260)

    def test_qkv_projections_are_stored_back_to_back(self):
        names = ["l.k_proj.bias", "l.k_proj.weight", "l.out_proj.weight", "l.q_proj.bias",
                 "l.q_proj.weight", "l.v_proj.bias", "l.v_proj.weight"]
        order = storage_order(names)
        weights = [order.index(f"l.{p}_proj.weight") for p in "qkv"]
        biases = [order.index(f"l.{p}_proj.bias") for p in "qkv"]
        self.assertEqual(weights, list(range(weights[0], weights[0] + 3)))
        self.assertEqual(biases, list(range(biases[0], biases[0] + 3)))

    def test_tokenizer_round_trips_and_marks_special_tokens(self):
        tokenizer = ByteTokenizer()
        text = "naïve café — 東京"
        ids = tokenizer.encode(text)
        self.assertTrue(all(0 <= i < 256 for i in ids))
        self.assertEqual(tokenizer.decode(ids + [256] + ids), text + "<|endoftext|>" + text)
        self.assertEqual(tokenizer.decode([0xE6, 0x9D]), "\ufffd")  # a cut-off character


if __name__ == "__main__":
    unittest.main()
