"""Hugging Face checkpoints served as they are, against transformers itself (4.45.2, PyPI).

For each supported model_type (bert, roberta, distilbert, gpt2, llama, mistral, qwen2) a model with random weights (every
parameter, LayerNorms included) is built by transformers from a small config and saved as a
snapshot directory (config.json, model.safetensors, tokenizer.json); the engine loads the directory
(tests/engine/hf_model_tool.cc) and runs a padded batch of sequences of different lengths. Hidden
states, pooled embeddings and logits must match transformers' within 1e-4 (fp32), and logits from
decoding with the cache those of the full pass within 1e-5. Then: sharded checkpoints, task-model
prefixes, sentence-transformers pooling, untied GPT-2 heads, Llama-family variants (grouped-query
and multi-query attention, biases, rotary scalings, sliding windows, tied heads) with greedy
generation identical to transformers' token for token, and the errors a malformed snapshot
gets. Rotary positions: the kernel's frequencies, angles, cos and sin against transformers' own
to 8.7k positions for every scaling, and log-probabilities of an 8k-token sequence against a
float64 run whose error must not grow with the position."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import (BertConfig, BertForMaskedLM, BertForSequenceClassification,  # noqa: E402
                          BertModel, DistilBertConfig, DistilBertForSequenceClassification,
                          DistilBertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, LlamaForSequenceClassification, MistralConfig,
                          MistralForCausalLM, Phi3Config, Qwen2Config, Qwen2ForCausalLM,
                          Qwen2ForSequenceClassification,
                          RobertaConfig, RobertaForSequenceClassification, RobertaModel,
                          XLMRobertaConfig, XLMRobertaForSequenceClassification)
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402
from transformers.models.phi3.modeling_phi3 import Phi3LongRoPEScaledRotaryEmbedding  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_tokenizer_reference_test import MINILM, gpt2, llama2  # noqa: E402

TOOL = os.environ["HF_MODEL_TOOL"]
LENGTHS = [7, 12, 3]  # one padded batch


def randomize(model, seed):
    """Every parameter random, norms around 1: a test that cannot pass by the defaults."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            values = torch.randn(parameter.shape, generator=generator) * 0.2
            if ("norm" in name.lower() or "ln_" in name) and name.endswith("weight"):
                values += 1.0
            parameter.copy_(values)
    return model.eval()


def sequences(vocab, seed, lowest=4):
    generator = np.random.default_rng(seed)
    return [generator.integers(lowest, vocab, size=n).tolist() for n in LENGTHS]


def padded(batch):
    longest = max(len(s) for s in batch)
    ids = torch.tensor([s + [0] * (longest - len(s)) for s in batch])
    mask = torch.tensor([[1] * len(s) + [0] * (longest - len(s)) for s in batch])
    return ids, mask


def run_engine(directory, batch, generate=0, **options):
    request = {"sequences": batch, "generate": generate, **options}
    result = subprocess.run([TOOL, directory], input=json.dumps(request), capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise AssertionError(f"hf_model_tool exit {result.returncode}: {result.stderr}")
    return json.loads(result.stdout)


def engine_error(directory, batch=((5,),)):
    result = subprocess.run([TOOL, directory], input=json.dumps({"sequences": batch}),
                            capture_output=True, text=True)
    return result.returncode, result.stderr


def save(model, directory, tokenizer, **kwargs):
    model.save_pretrained(directory, safe_serialization=True, **kwargs)
    with open(os.path.join(directory, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f)


class HfModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(MINILM) as f:
            cls.wordpiece = json.load(f)
        cls.byte_level = gpt2()
        cls.byte_fallback = llama2()
        cls.scratch = tempfile.mkdtemp()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch)

    def directory(self, name):
        path = os.path.join(self.scratch, name)
        os.makedirs(path, exist_ok=True)
        return path

    def assert_config_refused(self, directory, config, expected):
        """Writes config.json; the engine must refuse the directory naming the file and with
        `expected` in its message."""
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(config, f)
        code, message = engine_error(directory)
        self.assertEqual(code, 2, config)
        self.assertIn(expected, message)
        self.assertIn("config.json", message)

    def assert_close(self, ours, reference, tolerance, what):
        ours, reference = np.asarray(ours, dtype=np.float64), np.asarray(reference, np.float64)
        self.assertEqual(ours.shape, reference.shape, what)
        error = np.max(np.abs(ours - reference) / (1 + np.abs(reference)))
        self.assertLessEqual(error, tolerance, f"{what}: error {error:.2e}")

    def check_encoder(self, model, directory, batch, pooled=None):
        ours = run_engine(directory, batch)
        ids, mask = padded(batch)
        with torch.no_grad():
            states = model(input_ids=ids, attention_mask=mask).last_hidden_state
        for b, sequence in enumerate(batch):
            self.assert_close(ours["states"][b], states[b, :len(sequence)], 1e-4, f"states {b}")
        if pooled is None:  # mean over the tokens, as the engine's default
            weights = mask.unsqueeze(-1).to(states.dtype)
            pooled = (states * weights).sum(1) / weights.sum(1)
        else:
            pooled = pooled(states)
        self.assert_close(ours["embeddings"], pooled, 1e-4, "embeddings")
        return ours

    def test_bert(self):
        config = BertConfig(vocab_size=30522, hidden_size=48, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=80, max_position_embeddings=40,
                            type_vocab_size=2, layer_norm_eps=1e-12)
        model = randomize(BertModel(config), 1)
        directory = self.directory("bert")
        save(model, directory, self.wordpiece)
        self.check_encoder(model, directory, sequences(30522, 1))

    def test_bert_with_a_task_head_and_shards(self):
        # BertForMaskedLM saves its encoder under "bert." beside the head; shards and an index.
        config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=3,
                            num_attention_heads=2, intermediate_size=64, max_position_embeddings=32,
                            hidden_act="gelu_new")
        masked = randomize(BertForMaskedLM(config), 2)
        directory = self.directory("bert_mlm")
        save(masked, directory, self.wordpiece, max_shard_size="1MB")
        self.assertTrue(os.path.exists(os.path.join(directory, "model.safetensors.index.json")))
        self.check_encoder(masked.bert, directory, sequences(30522, 2))

    def test_roberta(self):
        # Positions count from the padding index + 1; one token type.
        config = RobertaConfig(vocab_size=50265, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=34, type_vocab_size=1, pad_token_id=1,
                               layer_norm_eps=1e-5)
        model = randomize(RobertaModel(config, add_pooling_layer=False), 3)
        directory = self.directory("roberta")
        save(model, directory, self.byte_level)
        self.check_encoder(model, directory, sequences(50265, 3))
        # The longest sequence the table allows: max_position_embeddings - pad - 1 tokens.
        self.check_encoder(model, directory, [list(range(4, 36)), [5, 6], [7]])

    def test_distilbert(self):
        config = DistilBertConfig(vocab_size=30522, dim=32, n_layers=2, n_heads=4, hidden_dim=72,
                                  max_position_embeddings=24)
        model = randomize(DistilBertModel(config), 4)
        directory = self.directory("distilbert")
        save(model, directory, self.wordpiece)
        self.check_encoder(model, directory, sequences(30522, 4))

    def check_classifier(self, model, directory, batch, token_types=None):
        """The head's logits for each sequence (pairs with their token types) within 1e-5 of
        transformers', and each sequence's labels ranked alike."""
        options = {"token_types": token_types} if token_types else {}
        ours = run_engine(directory, batch, **options)
        ids, mask = padded(batch)
        kwargs = {"token_type_ids": padded(token_types)[0]} if token_types else {}
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask, **kwargs).logits
        self.assert_close(ours["logits"], logits, 1e-5, "logits")
        self.assertEqual(np.argsort(ours["logits"], axis=1).tolist(),
                         np.argsort(logits.numpy(), axis=1).tolist())
        self.assertEqual(ours["labels"], [model.config.id2label[i]
                                          for i in range(model.config.num_labels)])
        return ours

    def pairs(self, tokenizer_json):
        """Queries and documents encoded as pairs by the reference tokenizer: ids, type ids."""
        tokenizer = Tokenizer.from_str(json.dumps(tokenizer_json))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        encodings = [tokenizer.encode(query, document) for query, document in (
            ("what is a cat?", "a cat is a small domesticated carnivorous mammal"),
            ("capital of france", "paris"),
            ("", "an empty query and a longer document about nothing in particular"))]
        return [e.ids for e in encodings], [e.type_ids for e in encodings]

    def test_bert_cross_encoder_on_pairs(self):
        # One label (a reranker's relevance), the second text's tokens of type 1.
        config = BertConfig(vocab_size=30522, hidden_size=48, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=80, max_position_embeddings=64,
                            type_vocab_size=2, num_labels=1)
        model = randomize(BertForSequenceClassification(config), 21)
        directory = self.directory("bert_cross_encoder")
        save(model, directory, self.wordpiece)
        batch, token_types = self.pairs(self.wordpiece)
        self.assertIn(1, token_types[0])
        ours = self.check_classifier(model, directory, batch, token_types)
        # Without the types, the scores differ: they are read.
        alone = run_engine(directory, batch)
        self.assertGreater(np.max(np.abs(np.subtract(alone["logits"], ours["logits"]))), 1e-3)

    def test_bf16_weights_stay_within_their_rounding(self):
        # --weights=bf16 (AMX where the CPU has it, else the rounded weights in float32): an
        # encoder's embeddings, a cross-encoder's scores and a decoder's logits, from one pass
        # and from decoding with the cache, near transformers' float32 ones, and not equal to
        # them: the rounding is applied.
        config = BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=96, max_position_embeddings=64,
                            type_vocab_size=2, num_labels=1)
        model = randomize(BertForSequenceClassification(config), 31)
        directory = self.directory("bert_bf16")
        save(model, directory, self.wordpiece)
        batch, token_types = self.pairs(self.wordpiece)
        ours = run_engine(directory, batch, token_types=token_types, weights="bf16")
        ids, mask = padded(batch)
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, token_type_ids=padded(token_types)[0],
                        output_hidden_states=True)
        self.assert_close(ours["logits"], out.logits, 1e-2, "bf16 cross-encoder scores")
        states = out.hidden_states[-1]
        weights = mask.unsqueeze(-1).to(states.dtype)
        pooled = ((states * weights).sum(1) / weights.sum(1)).numpy()
        embeddings = np.asarray(ours["embeddings"])
        cosine = (embeddings * pooled).sum(1) / (
            np.linalg.norm(embeddings, axis=1) * np.linalg.norm(pooled, axis=1))
        self.assertGreaterEqual(cosine.min(), 0.9999)
        self.assertGreater(np.max(np.abs(embeddings - pooled)), 1e-6)

        model = randomize(LlamaForCausalLM(LlamaConfig(**self.llama_config())), 32)
        directory = self.directory("llama_bf16")
        save(model, directory, self.byte_fallback)
        batch = sequences(1000, 32)
        ours = run_engine(directory, batch, weights="bf16")
        ids, mask = padded(batch)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits
        for b, sequence in enumerate(batch):
            # Random weights give logits in the tens: errors are measured against their scale
            # (1-1.5% of it, where a wrong layout gives 100%).
            reference = logits[b, :len(sequence)].numpy()
            scale = np.abs(reference).max()
            for what, values in (("one pass", ours["logits"][b]), ("decoded", ours["decoded"][b])):
                error = np.max(np.abs(np.subtract(values, reference))) / scale
                self.assertLessEqual(error, 3e-2, f"bf16 logits {b}, {what}")
                self.assertGreater(error, 1e-6, f"bf16 logits {b}, {what}")

    def test_bert_classifier_with_named_labels(self):
        config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=64, max_position_embeddings=32,
                            id2label={0: "negative", 1: "neutral", 2: "positive"},
                            label2id={"negative": 0, "neutral": 1, "positive": 2})
        model = randomize(BertForSequenceClassification(config), 22)
        directory = self.directory("bert_classifier")
        save(model, directory, self.wordpiece)
        ours = self.check_classifier(model, directory, sequences(30522, 22))
        self.assertEqual(ours["labels"], ["negative", "neutral", "positive"])

    def test_roberta_and_xlm_roberta_classifiers(self):
        for name, config_class, model_class in (
                ("roberta", RobertaConfig, RobertaForSequenceClassification),
                ("xlm_roberta", XLMRobertaConfig, XLMRobertaForSequenceClassification)):
            with self.subTest(model=name):
                config = config_class(vocab_size=50265, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=64,
                                      max_position_embeddings=40, type_vocab_size=1,
                                      pad_token_id=1, num_labels=2)
                model = randomize(model_class(config), 23)
                directory = self.directory(f"{name}_classifier")
                save(model, directory, self.byte_level)
                batch, _ = self.pairs(self.byte_level)
                self.check_classifier(model, directory, batch)

    def test_distilbert_classifier(self):
        config = DistilBertConfig(vocab_size=30522, dim=32, n_layers=2, n_heads=4, hidden_dim=72,
                                  max_position_embeddings=40, num_labels=4)
        model = randomize(DistilBertForSequenceClassification(config), 24)
        directory = self.directory("distilbert_classifier")
        save(model, directory, self.wordpiece)
        self.check_classifier(model, directory, sequences(30522, 24))

    def test_classifier_refusals(self):
        config = GPT2Config(vocab_size=320, n_embd=32, n_layer=1, n_head=4, n_positions=32,
                            num_labels=2, architectures=["GPT2ForSequenceClassification"])
        directory = self.directory("gpt2_classifier")
        save(randomize(GPT2LMHeadModel(config), 25), directory, self.byte_level)
        with open(os.path.join(directory, "config.json")) as f:
            written = json.load(f)
        written["architectures"] = ["GPT2ForSequenceClassification"]
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(written, f)
        code, message = engine_error(directory)
        self.assertEqual(code, 2)
        self.assertIn('a sequence classifier of model_type "gpt2" is not supported', message)
        # A head whose tensor is missing is named.
        config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1,
                            num_attention_heads=2, intermediate_size=64, num_labels=2)
        directory = self.directory("bert_classifier_broken")
        save(randomize(BertForSequenceClassification(config), 26), directory, self.wordpiece)
        weights = load_file(os.path.join(directory, "model.safetensors"))
        del weights["classifier.bias"]
        save_file(weights, os.path.join(directory, "model.safetensors"), {"format": "pt"})
        code, message = engine_error(directory)
        self.assertEqual(code, 2)
        self.assertIn("classifier.bias", message)

    def test_half_and_bfloat16_checkpoints_are_widened(self):
        # Saved in float16 and bfloat16, served in float32: equal to transformers on the same
        # weights widened.
        config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=48, max_position_embeddings=24)
        for dtype in (torch.float16, torch.bfloat16):
            with self.subTest(dtype=str(dtype)):
                model = randomize(BertModel(config), 9).to(dtype)
                directory = self.directory(f"bert_{str(dtype).split('.')[-1]}")
                save(model, directory, self.wordpiece)
                self.check_encoder(model.float(), directory, sequences(30522, 9))

    def test_sentence_transformers_pooling_and_normalization(self):
        config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1,
                            num_attention_heads=2, intermediate_size=48, max_position_embeddings=16)
        model = randomize(BertModel(config), 5)
        directory = self.directory("sentence_bert")
        save(model, directory, self.wordpiece)
        os.makedirs(os.path.join(directory, "1_Pooling"))
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling",
                    "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize",
                    "type": "sentence_transformers.models.Normalize"}]
        with open(os.path.join(directory, "modules.json"), "w") as f:
            json.dump(modules, f)
        pooling = {"word_embedding_dimension": 32, "pooling_mode_cls_token": True,
                   "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
                   "pooling_mode_mean_sqrt_len_tokens": False}
        with open(os.path.join(directory, "1_Pooling", "config.json"), "w") as f:
            json.dump(pooling, f)
        cls = lambda states: torch.nn.functional.normalize(states[:, 0], dim=-1)  # noqa: E731
        self.check_encoder(model, directory, sequences(30522, 5), pooled=cls)

        pooling.update(pooling_mode_cls_token=False, pooling_mode_max_tokens=True)
        with open(os.path.join(directory, "1_Pooling", "config.json"), "w") as f:
            json.dump(pooling, f)
        code, message = engine_error(directory)
        self.assertEqual(code, 2)
        self.assertIn("pooling_mode_max_tokens is not supported", message)

    def check_gpt2(self, model, directory, batch):
        ours = run_engine(directory, batch)
        ids, mask = padded(batch)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits
        for b, sequence in enumerate(batch):
            self.assert_close(ours["logits"][b], logits[b, :len(sequence)], 1e-4, f"logits {b}")
            self.assert_close(ours["decoded"][b], ours["logits"][b], 1e-5, f"decoded {b}")
        # Decoding with transformers' own cache gives the same last logits.
        with torch.no_grad():
            past, last = None, None
            for token in batch[0]:
                step = model(input_ids=torch.tensor([[token]]), past_key_values=past,
                             use_cache=True)
                past, last = step.past_key_values, step.logits[0, -1]
        self.assert_close(ours["decoded"][0][-1], last, 1e-4, "cached decode")

    def test_gpt2(self):
        config = GPT2Config(vocab_size=50257, n_embd=48, n_layer=2, n_head=4, n_positions=32)
        model = randomize(GPT2LMHeadModel(config), 6)
        model.tie_weights()
        directory = self.directory("gpt2")
        save(model, directory, self.byte_level)
        self.check_gpt2(model, directory, sequences(50257, 6))

    def test_gpt2_untied_with_n_inner_and_erf_gelu(self):
        config = GPT2Config(vocab_size=50257, n_embd=32, n_layer=2, n_head=2, n_positions=24,
                            n_inner=40, activation_function="gelu", tie_word_embeddings=False,
                            layer_norm_epsilon=1e-6)
        model = randomize(GPT2LMHeadModel(config), 7)
        self.assertFalse(torch.equal(model.lm_head.weight, model.transformer.wte.weight))
        directory = self.directory("gpt2_untied")
        save(model, directory, self.byte_level)
        self.check_gpt2(model, directory, sequences(50257, 7))

    def test_gpt2_scores_scaled_by_layer(self):
        # transformers divides layer l's scores by l + 1 as well.
        config = GPT2Config(vocab_size=50257, n_embd=32, n_layer=3, n_head=2, n_positions=24,
                            scale_attn_by_inverse_layer_idx=True)
        model = randomize(GPT2LMHeadModel(config), 10)
        model.tie_weights()
        directory = self.directory("gpt2_layer_scaled")
        save(model, directory, self.byte_level)
        self.check_gpt2(model, directory, sequences(50257, 10))
        # Without the division the logits differ: the test can tell.
        unscaled = GPT2LMHeadModel(GPT2Config(**dict(
            config.to_dict(), scale_attn_by_inverse_layer_idx=False))).eval()
        unscaled.load_state_dict(model.state_dict())
        ids = torch.tensor([sequences(50257, 10)[0]])
        with torch.no_grad():
            self.assertGreater((model(ids).logits - unscaled(ids).logits).abs().max().item(), 1e-3)

    GENERATED = 8

    def check_llama(self, model, directory, batch, decoded=True):
        """Logits of a padded batch, decoding with the cache, and greedy generation."""
        ours = run_engine(directory, batch, self.GENERATED)
        ids, mask = padded(batch)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits
        for b, sequence in enumerate(batch):
            self.assert_close(ours["logits"][b], logits[b, :len(sequence)], 1e-4, f"logits {b}")
            if decoded:
                # Random-weight logits reach tens: a few float32 ulps of them exceed 1e-5.
                self.assert_close(ours["decoded"][b], ours["logits"][b], 3e-5, f"decoded {b}")
            with torch.no_grad():
                greedy = model.generate(torch.tensor([sequence]), do_sample=False,
                                        max_new_tokens=self.GENERATED, min_new_tokens=self.GENERATED,
                                        pad_token_id=0)[0, len(sequence):].tolist()
            self.assertEqual(ours["generated"][b], greedy, f"greedy generation {b}")

    def llama_config(self, **changes):
        settings = dict(vocab_size=1000, hidden_size=64, intermediate_size=96,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=False,
                        attn_implementation="eager")
        settings.update(changes)
        return settings

    def test_decoder_sequence_classifiers(self):
        # Llama's and Qwen2's *ForSequenceClassification: a score layer without bias on the
        # last token's state (transformers finds it by pad_token_id, which no sequence holds).
        for name, config_class, model_class in (
                ("llama", LlamaConfig, LlamaForSequenceClassification),
                ("qwen2", Qwen2Config, Qwen2ForSequenceClassification)):
            with self.subTest(model=name):
                config = config_class(**self.llama_config(
                    pad_token_id=0, id2label={0: "no", 1: "maybe", 2: "yes"},
                    label2id={"no": 0, "maybe": 1, "yes": 2}))
                directory = self.directory(f"{name}_classifier")
                save(randomize(model_class(config), 27), directory, self.byte_fallback)
                ours = self.check_classifier(model_class.from_pretrained(directory).eval(),
                                             directory, sequences(1000, 27))
                self.assertEqual(ours["labels"], ["no", "maybe", "yes"])

    def test_llama(self):
        # Grouped-query attention (2 key/value heads for 4), an untied head, Llama 2's
        # byte-fallback BPE tokenizer.
        model = randomize(LlamaForCausalLM(LlamaConfig(**self.llama_config())), 11)
        directory = self.directory("llama")
        save(model, directory, self.byte_fallback)
        self.check_llama(model, directory, sequences(1000, 11))

    def test_llama_variants(self):
        # Multi-query attention with biases everywhere, a head width of its own, a tied head and
        # Llama 3's rotary scaling; linear scaling; half-precision weights.
        variants = {
            "mqa_bias_llama3": dict(num_key_value_heads=1, attention_bias=True, mlp_bias=True,
                                    head_dim=24, tie_word_embeddings=True, rope_theta=500000.0,
                                    rope_scaling=dict(rope_type="llama3", factor=8.0,
                                                      low_freq_factor=1.0, high_freq_factor=4.0,
                                                      original_max_position_embeddings=16)),
            "linear": dict(rope_scaling=dict(type="linear", factor=2.0), hidden_act="gelu"),
            # Qwen2.5's long-context setting: its correction range and attention factor.
            "yarn": dict(rope_theta=1e6, rope_scaling=dict(type="yarn", factor=2.0,
                                                           original_max_position_embeddings=64)),
        }
        for seed, (name, changes) in enumerate(variants.items(), start=12):
            with self.subTest(name):
                model = randomize(LlamaForCausalLM(LlamaConfig(**self.llama_config(**changes))),
                                  seed)
                if changes.get("tie_word_embeddings"):
                    model.tie_weights()
                directory = self.directory(f"llama_{name}")
                save(model, directory, self.byte_fallback)
                self.check_llama(model, directory, sequences(1000, seed))

    def test_llama_dynamic_rope_scaling_past_the_trained_context(self):
        # transformers picks dynamic NTK's base from the longest sequence of a call, the engine
        # from each sequence's own length: compared one sequence at a time. Decoding with the
        # cache keeps the rotation each key had when cached (as transformers does), so only the
        # full pass is compared past max_position_embeddings.
        config = LlamaConfig(**self.llama_config(
            max_position_embeddings=8, rope_scaling=dict(type="dynamic", factor=2.0)))
        model = randomize(LlamaForCausalLM(config), 14)
        directory = self.directory("llama_dynamic")
        save(model, directory, self.byte_fallback)
        for sequence in sequences(1000, 14):
            ours = run_engine(directory, [sequence])
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([sequence])).logits[0]
            self.assert_close(ours["logits"][0], logits, 1e-4, f"{len(sequence)} tokens")
        self.assertIn("beyond", engine_error(directory, [list(range(5, 22))])[1])

    ROTARY_CONTEXT = 8704  # past 8k positions
    ROTARY_POSITIONS = list(range(0, ROTARY_CONTEXT, 7)) + list(range(ROTARY_CONTEXT - 40,
                                                                         ROTARY_CONTEXT))

    def rotary_model(self, name, **changes):
        """A one-head Llama of head_dim 128 saved for the engine; its LlamaConfig."""
        config = LlamaConfig(**self.llama_config(**{
            **dict(hidden_size=128, num_attention_heads=1, num_key_value_heads=1,
                   num_hidden_layers=1, intermediate_size=64, max_position_embeddings=8192),
            **changes}))
        directory = self.directory(f"rotary_{name}")
        save(randomize(LlamaForCausalLM(config), 20), directory, self.byte_fallback)
        return config, directory

    def assert_rotary_tables(self, directory, reference, context, bitwise, what):
        """The engine's frequencies for a sequence of `context` tokens and its cos and sin at
        ROTARY_POSITIONS against transformers' rotary module `reference`. bitwise: the
        frequencies, so the angles, equal; else within a float ulp. cos and sin (rounded
        correctly here, by SLEEF in torch) within an ulp or two of the attention factor at every
        position: the difference must not grow with the position."""
        positions = [p for p in self.ROTARY_POSITIONS if p < context]
        ours = run_engine(directory, [[1]], rotary={"positions": positions, "context": context})
        with torch.no_grad():
            cos, sin = reference(torch.zeros(1), torch.arange(context)[None])
        inverse = np.asarray(ours["inverse_frequencies"], np.float32)
        expected = reference.inv_freq.numpy()
        if bitwise:
            np.testing.assert_array_equal(inverse, expected, what)
        else:
            np.testing.assert_array_less(np.abs(inverse - expected), np.spacing(expected) * 1.01,
                                         what)
        angles = np.float32(positions)[:, None] * expected[None]
        angles_ours = np.float32(positions)[:, None] * inverse[None]
        self.assertEqual(int((angles != angles_ours).sum()) == 0, bitwise, what)
        half = inverse.size
        scale = max(1.0, float(cos.abs().max()))
        tolerance = 1.2e-7 * scale if bitwise else 1e-6
        for name, ours_values, theirs in [("cos", ours["cos"], cos), ("sin", ours["sin"], sin)]:
            reference_values = theirs[0, positions, :half].numpy()
            error = np.abs(np.asarray(ours_values, np.float32) - reference_values)
            self.assertLessEqual(error.max(), tolerance, f"{what} {name}")

    def test_rotary_tables_equal_transformers_past_8k_positions(self):
        # Every scaling the engine reads from config.json, head_dim 128, against
        # LlamaRotaryEmbedding of transformers 4.45.2. For the usual bases the frequencies and the
        # angles are bitwise transformers'; at 1e6 torch's powf (SLEEF's, not rounded correctly)
        # gives one of the 64 frequencies an ulp off.
        cases = [
            ("default_10000", dict(rope_theta=10000.0), True),
            ("default_500000", dict(rope_theta=500000.0), True),
            ("default_1e6", dict(rope_theta=1e6), False),
            ("llama3", dict(rope_theta=500000.0, rope_scaling=dict(
                rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                original_max_position_embeddings=8192)), True),
            ("linear", dict(rope_theta=10000.0, rope_scaling=dict(type="linear", factor=4.0)),
             True),
            # Past max_position_embeddings: the base of the whole sequence's length.
            ("dynamic", dict(rope_theta=10000.0, max_position_embeddings=4096,
                             rope_scaling=dict(type="dynamic", factor=2.0)), True),
            ("yarn", dict(rope_theta=10000.0, max_position_embeddings=4096,
                          rope_scaling=dict(rope_type="yarn", factor=8.0, beta_fast=16.0,
                                            beta_slow=2.0)), True),
            ("yarn_qwen2.5", dict(rope_theta=1e6, max_position_embeddings=4096,
                                  rope_scaling=dict(type="yarn", factor=4.0,
                                                    original_max_position_embeddings=4096)),
             False),
        ]
        for name, changes, bitwise in cases:
            with self.subTest(name):
                config, directory = self.rotary_model(name, **changes)
                self.assert_rotary_tables(directory, LlamaRotaryEmbedding(config=config),
                                          self.ROTARY_CONTEXT, bitwise, name)

    def test_longrope_short_and_long_factors_by_sequence_length(self):
        # Phi-3's LongRoPE: short factors for a sequence within original_max_position_embeddings,
        # long ones past it, as Phi-3's own rotary module in transformers picks them for one
        # forward pass; the attention factor from max_position_embeddings / original.
        generator = np.random.default_rng(22)
        scaling = dict(type="longrope", short_factor=(1 + generator.random(64)).tolist(),
                       long_factor=(1 + 20 * generator.random(64)).tolist())
        config, directory = self.rotary_model("longrope", max_position_embeddings=16384,
                                              original_max_position_embeddings=4096,
                                              rope_scaling=dict(scaling))
        # LlamaConfig adds rope_type to its rope_scaling; Phi3Config accepts only these keys.
        phi3 = Phi3Config(hidden_size=128, num_attention_heads=1, max_position_embeddings=16384,
                          original_max_position_embeddings=4096, rope_scaling=dict(scaling))
        reference = Phi3LongRoPEScaledRotaryEmbedding(128, phi3)
        for context in (4096, 4097, self.ROTARY_CONTEXT):
            self.assert_rotary_tables(directory, reference, context, True, f"{context} tokens")

    def test_llama_longrope_past_the_original_context(self):
        # transformers 4.45.2's Llama picks LongRoPE's long factors once for all lengths (its
        # Phi-3 and later versions by the sequence's length, as the engine): compared on
        # sequences past original_max_position_embeddings, where both use the long ones.
        # Decoding with the cache keeps the rotation each key had when cached: the first 16
        # tokens' keys used the short factors, so only the full pass and generation are compared.
        generator = np.random.default_rng(23)
        scaling = dict(type="longrope", short_factor=(1 + generator.random(8)).tolist(),
                       long_factor=(1 + 4 * generator.random(8)).tolist())
        config = LlamaConfig(**self.llama_config(original_max_position_embeddings=16,
                                                 rope_scaling=scaling))
        model = randomize(LlamaForCausalLM(config), 23)
        directory = self.directory("llama_longrope")
        save(model, directory, self.byte_fallback)
        batch = [np.random.default_rng(23).integers(4, 1000, size=n).tolist() for n in (17, 30)]
        self.check_llama(model, directory, batch, decoded=False)

    def test_log_probabilities_stay_accurate_past_8k_tokens(self):
        # An 8k-token sequence through a one-layer Llama of head_dim 128 (Llama 3's base): the
        # engine's log-probabilities against transformers run in float64 (whose rotary angles are
        # float32 as well) must be no worse far into the sequence than transformers' own float32
        # run there. Angles rounded otherwise than transformers' gave 4e-3 at 6k-8k tokens.
        config, directory = self.rotary_model("long_score", rope_theta=500000.0)
        model = randomize(LlamaForCausalLM(config), 20)
        length = 8192
        tokens = np.random.default_rng(24).integers(4, 1000, size=length).tolist()
        ours = np.asarray(run_engine(directory, [tokens], scores_only=True)["scores"][0])
        ids = torch.tensor([tokens])

        def scores(m):
            with torch.no_grad():
                log_probabilities = F.log_softmax(m(input_ids=ids).logits[0].double(), -1)
            return log_probabilities[torch.arange(length - 1), ids[0, 1:]].numpy()

        single = scores(model)
        double = scores(model.double())
        late = slice(5999, None)  # the scores of tokens 6000 to 8191
        ours_late = np.abs(ours - double)[late].max()
        theirs_late = np.abs(single - double)[late].max()
        self.assertLessEqual(ours_late, 1.5e-4)
        self.assertLessEqual(ours_late, 3 * theirs_late, f"transformers float32: {theirs_late:.2e}")

    def test_mistral_sliding_window(self):
        config = MistralConfig(**self.llama_config(sliding_window=4, head_dim=16))
        model = randomize(MistralForCausalLM(config), 15)
        directory = self.directory("mistral")
        save(model, directory, self.byte_fallback)
        self.check_llama(model, directory, sequences(1000, 15))

    def test_qwen2_biases_on_q_k_v_and_a_tied_head(self):
        # Qwen2 uses a byte-level BPE tokenizer, as GPT-2's.
        config = Qwen2Config(**self.llama_config(tie_word_embeddings=True, rope_theta=1e6,
                                                 vocab_size=50257))
        model = randomize(Qwen2ForCausalLM(config), 16)
        model.tie_weights()
        self.assertIsNotNone(model.model.layers[0].self_attn.q_proj.bias)
        directory = self.directory("qwen2")
        save(model, directory, self.byte_level)
        self.check_llama(model, directory, sequences(50257, 16))

    def test_llama_family_refusals(self):
        model = randomize(Qwen2ForCausalLM(Qwen2Config(**self.llama_config())), 17)
        directory = self.directory("qwen2_refused")
        save(model, directory, self.byte_fallback)
        with open(os.path.join(directory, "config.json")) as f:
            original = json.load(f)
        for change, expected in [
                ({"use_sliding_window": True}, "use_sliding_window is true"),
                ({"rope_scaling": {"rope_type": "su", "factor": 4.0}},
                 'rope_type is "su", expected one of'),
                ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                   "original_max_position_embeddings": 16}},
                 "original_max_position_embeddings is 16, not the original context"),
                ({"rope_scaling": {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0}},
                 "DeepSeek's YaRN attention scales are not supported"),
                ({"rope_scaling": {"rope_type": "longrope", "factor": 2.0, "short_factor": [1.0],
                                   "long_factor": "2"}},
                 "long_factor must be a list of numbers"),
                ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0],
                                   "long_factor": [2.0]}},
                 "factor is missing"),
                ({"num_key_value_heads": 3}, "num_key_value_heads is 3, which does not divide"),
                ({"eos_token_id": 5000}, "eos_token_id is 5000"),
                ({"hidden_act": "relu2"}, 'field hidden_act is "relu2"')]:
            self.assert_config_refused(directory, {**original, **change}, expected)

    def test_malformed_snapshots_are_refused_naming_what_is_wrong(self):
        config = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1,
                            num_attention_heads=2, intermediate_size=16, max_position_embeddings=8)
        model = randomize(BertModel(config), 8)
        directory = self.directory("broken")
        save(model, directory, self.wordpiece)
        weights_path = os.path.join(directory, "model.safetensors")
        weights = load_file(weights_path)

        def rewrite(change):
            tensors = dict(weights)
            change(tensors)
            save_file(tensors, weights_path, metadata={"format": "pt"})

        name = "encoder.layer.0.attention.self.key.weight"
        rewrite(lambda t: t.pop(name))
        code, message = engine_error(directory)
        self.assertEqual(code, 2)
        self.assertIn(f"missing tensor '{name}'", message)
        self.assertIn("model.safetensors", message)

        rewrite(lambda t: t.update({name: torch.zeros(3, 16)}))
        self.assertIn(f"tensor '{name}' has shape [3, 16]", engine_error(directory)[1])

        rewrite(lambda t: t.update({"classifier.weight": torch.zeros(2, 16)}))
        self.assertIn("unexpected tensor 'classifier.weight'", engine_error(directory)[1])
        rewrite(lambda t: None)

        with open(os.path.join(directory, "config.json")) as f:
            original = json.load(f)
        for change, expected in [
                ({"model_type": "t5"},
                 'model_type "t5" is not supported; supported: bert, roberta, xlm-roberta, '
                 'distilbert, gpt2, llama, mistral, qwen2'),
                ({"num_attention_heads": 3}, "num_attention_heads is 3, which does not divide 16"),
                ({"hidden_act": "swish"}, "field hidden_act is \"swish\""),
                ({"position_embedding_type": "relative_key"}, "field position_embedding_type"),
                ({"hidden_size": "16"}, "field hidden_size must be an integer")]:
            self.assert_config_refused(directory, {**original, **change}, expected)

        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(original, f)
        os.remove(os.path.join(directory, "tokenizer.json"))
        self.assertIn("tokenizer.json is missing", engine_error(directory)[1])
        os.remove(weights_path)
        self.assertIn("no model.safetensors", engine_error(directory)[1])


if __name__ == "__main__":
    unittest.main(verbosity=2)
