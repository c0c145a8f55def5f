"""Retrieval serving end to end (issue 44): cross-encoders and classifiers from Hugging Face
checkpoints (random weights, saved by transformers) and a sentence-transformers embedder with
prompts, served through attnserve.v1's Classify and Rerank, text-embeddings-inference's /embed,
/rerank, /predict, /tokenize and /info, Cohere's and Jina's /v1/rerank and vLLM's /v1/score.
Every score and embedding against sentence-transformers (CrossEncoder, SentenceTransformer) and
transformers on the same directories, within 1e-5 and ranked alike; then the refusals. Run by the
project's venv Python (transformers, sentence-transformers)."""
import concurrent.futures
import http.client
import json
import os
import sys
import tempfile
import unittest

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# hf_model_reference_test's checkpoint helpers are used here without its engine tool.
os.environ.setdefault("HF_MODEL_TOOL", "")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import tritonclient.grpc as triton_grpc  # noqa: E402
import tritonclient.http as triton_http  # noqa: E402
from sentence_transformers import CrossEncoder, SentenceTransformer  # noqa: E402
from transformers import BertConfig, BertForSequenceClassification, BertModel  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "engine"))
from hf_model_reference_test import randomize, save  # noqa: E402
from hf_tokenizer_reference_test import MINILM  # noqa: E402
from server_harness import Server, free_port, grpc, pb  # noqa: E402

QUERY = "what is a cat?"
DOCUMENTS = [
    "a cat is a small domesticated carnivorous mammal",
    "Paris is the capital of France.",
    "Cats sleep for most of the day and hunt at dusk.",
    "",
    "The quarterly report shows revenue grew 12% year over year.",
    "un chat est un petit mammifère",
]
TEXTS = ["I loved this movie!", "Terrible service.", "ok", "The weather is fine today."]


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f)


def make_models(root, wordpiece):
    """reranker (one label, sigmoid), ce_identity (a CrossEncoder whose config names Identity),
    sentiment (three named labels, softmax), embedder (mean pooling, Normalize, prompts)."""
    def bert(**settings):
        return BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=64,
                          max_position_embeddings=64, **settings)
    for name, seed, settings in (
            ("reranker", 21, {"num_labels": 1}),
            ("ce_identity", 23, {"num_labels": 1, "sbert_ce_default_activation_function":
                                 "torch.nn.modules.linear.Identity"}),
            ("sentiment", 22, {"id2label": {0: "negative", 1: "neutral", 2: "positive"},
                               "label2id": {"negative": 0, "neutral": 1, "positive": 2}})):
        directory = os.path.join(root, name)
        save(randomize(BertForSequenceClassification(bert(**settings)), seed), directory,
             wordpiece)
    directory = os.path.join(root, "embedder")
    save(randomize(BertModel(bert()), 5), directory, wordpiece)
    os.makedirs(os.path.join(directory, "1_Pooling"))
    write_json(os.path.join(directory, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"}])
    write_json(os.path.join(directory, "1_Pooling", "config.json"),
               {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True})
    write_json(os.path.join(directory, "config_sentence_transformers.json"),
               {"prompts": {"query": "query: ", "passage": "passage: "},
                "default_prompt_name": None})


repository = None


def setUpModule():
    global repository
    repository = tempfile.TemporaryDirectory()
    with open(MINILM) as f:
        make_models(repository.name, json.load(f))


def tearDownModule():
    repository.cleanup()


def path(name):
    return os.path.join(repository.name, name)


class RetrievalTest(unittest.TestCase):
    flags = ()

    @classmethod
    def setUpClass(cls):
        cls.http_port = free_port()
        cls.server = Server(f"--http_port={cls.http_port}", *cls.flags, models=repository.name)
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def path(self, name):
        return path(name)

    def post(self, path, body):
        connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=60)
        connection.request("POST", path, json.dumps(body),
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = json.loads(response.read())
        connection.close()
        return response.status, answer

    def get(self, path):
        connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=60)
        connection.request("GET", path)
        response = connection.getresponse()
        answer = json.loads(response.read())
        connection.close()
        return response.status, answer

    def assert_ranked_alike(self, results, reference, score_key="score"):
        """`results` ([{index, score}], best first) rank as the reference scores do, each within
        1e-5 of its reference score."""
        self.assertEqual([r["index"] for r in results],
                         np.argsort(-np.asarray(reference), kind="stable").tolist()[:len(results)])
        for r in results:
            self.assertAlmostEqual(r[score_key], float(reference[r["index"]]), delta=1e-5)

    def test_models_list_what_they_answer(self):
        methods = {name: list(self.stub.GetModel(pb.GetModelRequest(model=name)).methods)
                   for name in ("reranker", "sentiment", "embedder")}
        self.assertEqual(methods["reranker"], ["Embed", "Classify", "Rerank", "Tokenize",
                                               "Detokenize"])
        self.assertEqual(methods["sentiment"], ["Embed", "Classify", "Tokenize", "Detokenize"])
        self.assertEqual(methods["embedder"], ["Embed", "Tokenize", "Detokenize"])
        self.assertEqual(list(self.stub.GetModel(pb.GetModelRequest(model="sentiment")).labels),
                         ["negative", "neutral", "positive"])

    def test_classify_equals_transformers(self):
        model = BertForSequenceClassification.from_pretrained(self.path("sentiment")).eval()
        tokenizer = CrossEncoder(self.path("sentiment"), device="cpu").tokenizer
        batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
        with torch.no_grad():
            logits = model(**batch).logits
        for raw, expected in ((False, torch.softmax(logits, dim=1)), (True, logits)):
            reply = self.stub.Classify(pb.ClassifyRequest(
                model="sentiment", sequences=[pb.Sequence(text=t) for t in TEXTS],
                raw_scores=raw))
            ours = np.array([[s.score for s in c.scores] for c in reply.classifications])
            np.testing.assert_allclose(ours, expected.numpy(), atol=1e-5)
            self.assertEqual([c.tokens for c in reply.classifications],
                             batch["attention_mask"].sum(1).tolist())
            self.assertEqual([s.label for s in reply.classifications[0].scores],
                             ["negative", "neutral", "positive"])
        # TEI's /predict: one input's labels by descending score; a batch of texts and pairs.
        status, answer = self.post("/predict", {"model": "sentiment", "inputs": TEXTS[0]})
        self.assertEqual(status, 200, answer)
        probabilities = torch.softmax(logits, dim=1)[0].tolist()
        self.assertEqual([a["label"] for a in answer],
                         [model.config.id2label[i] for i in np.argsort(probabilities)[::-1]])
        self.assertAlmostEqual(answer[0]["score"], max(probabilities), delta=1e-5)
        pairs = [[QUERY, d] for d in DOCUMENTS[:3]]
        status, answer = self.post("/predict", {"model": "sentiment", "inputs": pairs,
                                                "raw_scores": True})
        self.assertEqual(status, 200, answer)
        batch = tokenizer([p[0] for p in pairs], [p[1] for p in pairs], padding=True,
                          return_tensors="pt")
        with torch.no_grad():
            logits = model(**batch).logits
        for row, expected in zip(answer, logits.tolist()):
            for entry in row:
                self.assertAlmostEqual(entry["score"],
                                       expected[model.config.label2id[entry["label"]]],
                                       delta=1e-5)

    def test_rerank_equals_the_cross_encoder_on_every_api(self):
        for name in ("reranker", "ce_identity"):
            with self.subTest(model=name):
                reference = CrossEncoder(self.path(name), device="cpu").predict(
                    [(QUERY, d) for d in DOCUMENTS])
                reply = self.stub.Rerank(pb.RerankRequest(model=name, query=QUERY,
                                                          documents=DOCUMENTS,
                                                          return_documents=True))
                self.assert_ranked_alike([{"index": r.index, "score": r.score}
                                          for r in reply.results], reference)
                self.assertEqual([r.document for r in reply.results],
                                 [DOCUMENTS[r.index] for r in reply.results])
                status, tei = self.post("/rerank", {"model": name, "query": QUERY,
                                                    "texts": DOCUMENTS, "return_text": True})
                self.assertEqual(status, 200, tei)
                self.assert_ranked_alike(tei, reference)
                self.assertEqual([r["text"] for r in tei], [DOCUMENTS[r["index"]] for r in tei])
                status, cohere = self.post("/v1/rerank", {"model": name, "query": QUERY,
                                                          "documents": DOCUMENTS, "top_n": 3})
                self.assertEqual(status, 200, cohere)
                self.assertEqual(len(cohere["results"]), 3)
                self.assert_ranked_alike(cohere["results"], reference, "relevance_score")
                self.assertEqual(cohere["results"][0]["document"]["text"],
                                 DOCUMENTS[cohere["results"][0]["index"]])
                status, score = self.post("/v1/score", {"model": name, "text_1": QUERY,
                                                        "text_2": DOCUMENTS})
                self.assertEqual(status, 200, score)
                np.testing.assert_allclose([d["score"] for d in score["data"]], reference,
                                           atol=1e-5)
        # raw_scores: the logit, whose sigmoid the default is.
        raw = self.stub.Rerank(pb.RerankRequest(model="reranker", query=QUERY,
                                                documents=DOCUMENTS, raw_scores=True))
        scored = self.stub.Rerank(pb.RerankRequest(model="reranker", query=QUERY,
                                                   documents=DOCUMENTS))
        for r, s in zip(raw.results, scored.results):
            self.assertEqual(r.index, s.index)
            self.assertAlmostEqual(1 / (1 + np.exp(-r.score)), s.score, delta=1e-6)

    def test_over_long_documents_are_cut_only_when_asked(self):
        long_document = "cats " * 100
        request = {"model": "reranker", "query": QUERY, "texts": [long_document, "a cat"]}
        status, answer = self.post("/rerank", request)
        self.assertEqual(status, 422, answer)
        self.assertEqual(answer["error_type"], "Validation")
        self.assertIn("texts[0]", answer["error"])
        # Cut from the document's end, the query whole, as the CrossEncoder truncates a pair
        # whose first text is the shorter.
        status, answer = self.post("/rerank", dict(request, truncate=True))
        self.assertEqual(status, 200, answer)
        reference = CrossEncoder(self.path("reranker"), device="cpu", max_length=64).predict(
            [(QUERY, long_document), (QUERY, "a cat")])
        self.assert_ranked_alike(answer, reference)
        # Cohere's and vLLM's APIs cut without being asked.
        status, answer = self.post("/v1/rerank", {"model": "reranker", "query": QUERY,
                                                  "documents": [long_document, "a cat"]})
        self.assertEqual(status, 200, answer)
        self.assert_ranked_alike(answer["results"], reference, "relevance_score")

    def test_tei_embed_with_prompts_equals_sentence_transformers(self):
        reference = SentenceTransformer(self.path("embedder"), device="cpu")
        for prompt_name in (None, "query"):
            with self.subTest(prompt_name=prompt_name):
                body = {"model": "embedder", "inputs": TEXTS}
                if prompt_name:
                    body["prompt_name"] = prompt_name
                status, answer = self.post("/embed", body)
                self.assertEqual(status, 200, answer)
                np.testing.assert_allclose(answer, reference.encode(TEXTS,
                                                                    prompt_name=prompt_name),
                                           atol=1e-5)
        status, answer = self.post("/embed", {"model": "embedder", "inputs": "x",
                                              "prompt_name": "title"})
        self.assertEqual(status, 422, answer)
        self.assertIn("prompt_name", answer["error"])
        self.assertIn("passage, query", answer["error"])
        status, tokens = self.post("/tokenize", {"model": "embedder", "inputs": TEXTS[:2],
                                                 "prompt_name": "query"})
        self.assertEqual(status, 200, tokens)
        expected = reference.tokenizer(["query: " + t for t in TEXTS[:2]])["input_ids"]
        self.assertEqual([[t["id"] for t in row] for row in tokens], expected)
        self.assertTrue(tokens[0][0]["special"])

    def test_tei_info_and_routing(self):
        # Several models answer Embed here: a request without "model" is refused, naming them.
        status, answer = self.post("/embed", {"inputs": "hello"})
        self.assertEqual(status, 422, answer)
        self.assertIn("embedder", answer["error"])
        status, answer = self.get("/info")
        self.assertEqual(status, 422, answer)
        # vLLM's /tokenize keeps its own shape on the same path.
        status, answer = self.post("/tokenize", {"model": "embedder", "prompt": "hello"})
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["count"], 3)

    def test_open_inference_classify_on_both_bindings(self):
        reference = CrossEncoder(self.path("reranker"), device="cpu").predict(
            [(QUERY, d) for d in DOCUMENTS])
        for module, address in ((triton_grpc, f"127.0.0.1:{self.server.port}"),
                                (triton_http, f"127.0.0.1:{self.http_port}")):
            with self.subTest(binding=module.__name__):
                client = module.InferenceServerClient(address)
                inputs = []
                for name, texts in (("text", [QUERY] * len(DOCUMENTS)), ("text_pair", DOCUMENTS)):
                    tensor = module.InferInput(name, [len(texts)], "BYTES")
                    tensor.set_data_from_numpy(np.array([t.encode() for t in texts],
                                                        dtype=object))
                    inputs.append(tensor)
                result = client.infer("reranker/classify", inputs)
                np.testing.assert_allclose(result.as_numpy("scores")[:, 0], reference, atol=1e-5)
                self.assertEqual(result.as_numpy("labels").tolist(), [b"LABEL_0"])
                metadata = client.get_model_metadata("sentiment/classify")
                outputs = metadata["outputs"] if isinstance(metadata, dict) else [
                    {"name": t.name, "shape": list(t.shape)} for t in metadata.outputs]
                self.assertEqual([(o["name"], list(o["shape"])) for o in outputs],
                                 [("scores", [-1, 3]), ("labels", [3])])
                client.close()

    def test_refusals_name_the_problem(self):
        def grpc_error(call, request):
            with self.assertRaises(grpc.RpcError) as error:
                call(request)
            return error.exception.code(), error.exception.details()
        code, details = grpc_error(self.stub.Rerank, pb.RerankRequest(
            model="sentiment", query="q", documents=["d"]))
        self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("does not answer Rerank", details)
        code, details = grpc_error(self.stub.Classify, pb.ClassifyRequest(
            model="embedder", sequences=[pb.Sequence(text="x")]))
        self.assertIn("does not answer Classify", details)
        code, details = grpc_error(self.stub.Classify, pb.ClassifyRequest(
            model="sentiment", sequences=[pb.Sequence(text="x")], text_pairs=["a", "b"]))
        self.assertIn("text_pairs", details)
        code, details = grpc_error(self.stub.Rerank, pb.RerankRequest(
            model="reranker", query="q", documents=[]))
        self.assertEqual(details, "documents is empty")
        code, details = grpc_error(self.stub.Rerank, pb.RerankRequest(
            model="reranker", query="q", documents=["d"] * 1001))
        self.assertIn("documents has 1001 entries; at most 1000", details)
        # 10,000 texts: refused before any is tokenized.
        status, answer = self.post("/rerank", {"model": "reranker", "query": "q",
                                               "texts": ["word"] * 10000})
        self.assertEqual(status, 422, answer)
        self.assertIn("at most 1000", answer["error"])
        status, answer = self.post("/predict", {"model": "sentiment", "inputs": [["a"]]})
        self.assertEqual(status, 422, answer)
        self.assertIn("inputs[0]", answer["error"])
        status, answer = self.post("/v1/rerank", {"model": "reranker", "query": "q",
                                                  "documents": [{"title": "no text"}]})
        self.assertEqual(status, 400, answer)
        self.assertEqual(answer["error"]["param"], "documents[0]")
        status, answer = self.post("/v1/score", {"model": "reranker", "text_1": ["a", "b"],
                                                 "text_2": ["c", "d", "e"]})
        self.assertEqual(status, 400, answer)
        self.assertIn("text_1", answer["error"]["message"])
        # The server is up, and counted what it answered.
        self.assertGreater(self.server.metric_value("attnserve_requests_total",
                                                    method="tei.rerank"), 0)
        self.assertGreater(self.server.metric_value("attnserve_requests_total",
                                                    method="Rerank"), 0)


class Int8Test(unittest.TestCase):
    """int8 weights and activations: embeddings within cosine 0.999 of sentence-transformers',
    the reranker's scores within 0.02 and its best document the same."""

    @classmethod
    def setUpClass(cls):
        cls.http_port = free_port()
        cls.server = Server(f"--http_port={cls.http_port}", "--weights=int8",
                            models=repository.name)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_int8_stays_close_to_the_reference(self):
        post = RetrievalTest.post.__get__(self)
        status, ours = post("/embed", {"model": "embedder", "inputs": TEXTS + DOCUMENTS[:3]})
        self.assertEqual(status, 200, ours)
        reference = SentenceTransformer(path("embedder"), device="cpu").encode(
            TEXTS + DOCUMENTS[:3])
        for a, b in zip(np.asarray(ours), reference):
            self.assertGreaterEqual(float(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b)),
                                    0.999)
        status, ranked = post("/rerank", {"model": "reranker", "query": QUERY,
                                          "texts": DOCUMENTS})
        self.assertEqual(status, 200, ranked)
        scores = CrossEncoder(path("reranker"), device="cpu").predict(
            [(QUERY, d) for d in DOCUMENTS])
        self.assertEqual(ranked[0]["index"], int(np.argmax(scores)))
        for r in ranked:
            self.assertAlmostEqual(r["score"], float(scores[r["index"]]), delta=0.02)


class MemoryCapTest(unittest.TestCase):
    """Hostile retrieval requests at once, in a 1 GiB cgroup as a container runs the server: a
    MiniLM-sized cross-encoder reranking many documents near its context with their texts
    returned, TEI embeddings of the most texts a request may hold, pairs over the context, empty
    texts. Each is answered or refused with a status that says why; the cgroup never reaches its
    limit and the server stays up."""

    def test_hostile_requests_at_once_stay_within_the_cap(self):
        from resources_test import CGROUP_ROOT, LIMIT, MemoryCgroup
        if not os.access(CGROUP_ROOT, os.W_OK):
            raise RuntimeError(f"{CGROUP_ROOT} is not writable: this test needs root and the "
                               "cgroup v1 memory controller, as CI machines have")
        # Two models share the cap (each model's budgets are its share of the memory), in a
        # repository of their own.
        capped_models = tempfile.TemporaryDirectory()
        self.addCleanup(capped_models.cleanup)
        with open(MINILM) as f:
            wordpiece = json.load(f)
        config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                            num_attention_heads=12, intermediate_size=1536,
                            max_position_embeddings=512, num_labels=1)
        save(randomize(BertForSequenceClassification(config), 31),
             os.path.join(capped_models.name, "big_reranker"), wordpiece)
        os.symlink(path("embedder"), os.path.join(capped_models.name, "embedder"))
        cgroup = MemoryCgroup(LIMIT)
        http_port = free_port()
        capped = Server("--threads=2", f"--http_port={http_port}", models=capped_models.name,
                        preexec_fn=cgroup.join)
        try:
            document = "the cat sat on a mat and looked at the birds " * 50  # over 512 tokens
            calls = [("/rerank", {"model": "big_reranker", "query": QUERY, "truncate": True,
                                  "return_text": True, "texts": [document] * 3})
                     for _ in range(12)]
            calls += [("/v1/rerank", {"model": "big_reranker", "query": QUERY,
                                      "documents": [document[:i * 7] for i in range(1, 25)]})
                      for _ in range(8)]
            calls += [("/embed", {"model": "embedder", "inputs": ["word " * 60] * 256})
                      for _ in range(8)]
            calls += [("/rerank", {"model": "big_reranker", "query": QUERY,
                                   "texts": [document] * 3}),  # over the context: refused
                      ("/rerank", {"model": "big_reranker", "query": "", "texts": [""]}),
                      ("/predict", {"model": "embedder", "inputs": "no head"}),
                      ("/rerank", {"model": "big_reranker", "query": QUERY,
                                   "texts": ["word"] * 10000})]

            def run(call):
                connection = http.client.HTTPConnection("127.0.0.1", http_port, timeout=300)
                connection.request("POST", call[0], json.dumps(call[1]))
                response = connection.getresponse()
                body = json.loads(response.read())
                connection.close()
                return response.status, body
            with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
                answers = list(pool.map(run, calls))
            codes = [status for status, _ in answers]
            self.assertIn(200, codes)
            # Answered, or refused as too large (413), invalid (422, 400) or overloaded (429).
            self.assertLessEqual(set(codes), {200, 400, 413, 422, 429}, answers)
            # Reranks within the budgets are answered.
            self.assertIn(200, codes[:20], answers[:20])
            self.assertEqual(codes[-4:-2], [422, 200], answers[-4:])
            self.assertIn("ask for truncation", answers[-4][1]["error"])
            self.assertIn("does not answer Classify", answers[-2][1]["error"])
            self.assertIn("at most 1000", answers[-1][1]["error"])
            self.assertIsNone(capped.process.poll(), capped.output()[-2000:])
            print(f"\nretrieval under a {LIMIT >> 20} MiB cap: {codes.count(200)} of "
                  f"{len(codes)} answered, peak {cgroup.read('memory.max_usage_in_bytes') >> 20} "
                  "MiB", flush=True)
            self.assertEqual(cgroup.read("memory.failcnt"), 0)
            status, _ = run(("/rerank", {"model": "big_reranker", "query": QUERY,
                                         "texts": ["still here"]}))
            self.assertEqual(status, 200)
        finally:
            capped.stop()
            cgroup.remove()


if __name__ == "__main__":
    unittest.main(verbosity=2)
