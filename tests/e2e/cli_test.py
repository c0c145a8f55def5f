"""End-to-end tests of the command-line tools against the real server: every `attn` command must
print what the server answers the test itself for the same request, and every `attn-bench` mode
must make the calls it reports and report them consistently.

Environment (set by ctest): ATTN_BINARY, ATTN_BENCH_BINARY, and what server_harness.py reads
(ATTNSERVE_BINARY, ATTNSERVE_STUBS, ATTNSERVE_MODELS).
"""
import csv
import io
import json
import math
import os
import pty
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from google.protobuf import json_format

import grpc

import server_harness
from server_harness import free_port, pb
from server_harness import make_certificates

ATTN = os.path.abspath(os.environ["ATTN_BINARY"])
ATTN_BENCH = os.path.abspath(os.environ["ATTN_BENCH_BINARY"])
MODEL = "demo"

# A server error: one line on stderr, "attn: STATUS_NAME: message".
SERVER_ERROR = re.compile(r"attn: ([A-Z_]+): (.+)\n")
# Table rows (cli_table.cc: columns two spaces apart, numbers right-aligned).
NEXT_TOKEN_ROW = re.compile(r" *(\d+)  (.*\S) +(\d+) +(\d+\.\d{4}) +(-?\d+\.\d{3})")
SCORE_ROW = re.compile(r" *(\d+)  (.*\S) +(\d+) +(-?\d+\.\d{3})")
SCORE_TOTAL = re.compile(r"total log-probability (-?\d+\.\d{3}) over (\d+) tokens, "
                         r"perplexity (\d+\.\d{3})")
EMBED_TITLE = re.compile(r"model (\S+): (\d+) x (\d+) \(rows x width\)")
EMBED_ROW = re.compile(r" *(\d+) +(\d+\.\d{4})  (\S.*)")
BENCH_CSV_COLUMNS = ["concurrency", "rate", "ok", "errors", "seconds", "requests_per_second",
                     "p50_ms", "p90_ms", "p99_ms", "max_ms", "ttft_p50_ms", "ttft_p99_ms",
                     "itl_p50_ms", "itl_p99_ms", "tokens_per_second"]
PROGRESS = re.compile(r"\[(concurrency \d+|rate \S+/s)\] +(\d+\.\d) s  (\d+) ok  (\d+) errors  "
                      r"(\d+\.\d) req/s  p50 (\d+\.\d\d) ms")


class Server(server_harness.Server):
    """The harness's server, quicker to start: its channel's first connection attempt waits
    until the port is open, instead of failing and backing off for seconds."""

    def wait_until_serving(self, timeout=30):
        deadline = time.time() + timeout
        while self.process.poll() is None and time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.02)
        super().wait_until_serving(timeout)


server = None  # the demo model alone


def setUpModule():
    global server
    server = Server()


def tearDownModule():
    server.stop()


def run(binary, *args, target=None, timeout=60, **kwargs):
    """The tool's CompletedProcess; --target is the demo server unless given."""
    if target is None:
        target = f"127.0.0.1:{server.port}"
    return subprocess.run([binary, *(["--target", target] if target else []), *args],
                          capture_output=True, encoding="utf-8", timeout=timeout, **kwargs)


def c_quoted(text):
    """A token as cli_table.cc's Quoted prints it (absl::Utf8SafeCEscape in quotes)."""
    escapes = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "'": "\\'", "\\": "\\\\"}
    out = []
    for ch in text:
        if ch in escapes:
            out.append(escapes[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\%03o" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def generate_events(stub, **request):
    return list(stub.Generate(pb.GenerateRequest(**request), timeout=60))


def wait_for_metric(target_server, expected, name, **labels):
    """The metric's value once it reaches `expected` (or after 3 s): the server counts a request
    as it answers it, a moment after the client may have its answer."""
    deadline = time.time() + 3
    value = target_server.metric_value(name, **labels)
    while value < expected and time.time() < deadline:
        time.sleep(0.05)
        value = target_server.metric_value(name, **labels)
    return value


class ToolTestCase(unittest.TestCase):
    def attn(self, *args, **kwargs):
        return run(ATTN, *args, **kwargs)

    def attn_ok(self, *args, **kwargs):
        result = self.attn(*args, **kwargs)
        self.assertEqual(result.returncode, 0, f"attn {' '.join(args)}\nstderr:\n"
                                               f"{result.stderr}\nstdout:\n{result.stdout}")
        return result

    def bench(self, *args, **kwargs):
        return run(ATTN_BENCH, *args, **kwargs)

    def bench_ok(self, *args, **kwargs):
        result = self.bench(*args, **kwargs)
        self.assertEqual(result.returncode, 0, f"attn-bench {' '.join(args)}\nstderr:\n"
                                               f"{result.stderr}\nstdout:\n{result.stdout}")
        return result

    def assertServerError(self, result, exit_code, status, *fragments, grpc_log=False):
        """`grpc_log`: gRPC's own log lines may come first (see test_tls)."""
        self.assertEqual(result.returncode, exit_code,
                         f"stderr:\n{result.stderr}\nstdout:\n{result.stdout}")
        stderr = result.stderr
        if grpc_log:
            *logged, last = stderr.rstrip("\n").split("\n")
            self.assertTrue(all(re.match(r"[EWI]\d{4} ", line) for line in logged), stderr)
            stderr = last + "\n"
        match = SERVER_ERROR.fullmatch(stderr)
        self.assertTrue(match, f"not one 'attn: STATUS: message' line: {result.stderr!r}")
        self.assertEqual(match[1], status, result.stderr)
        for fragment in fragments:
            self.assertIn(fragment, match[2])

    def assertUsageError(self, result, *fragments, tool="attn"):
        self.assertEqual(result.returncode, 2,
                         f"stderr:\n{result.stderr}\nstdout:\n{result.stdout}")
        self.assertTrue(result.stderr.startswith(f"{tool}: "), result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        for fragment in fragments:
            self.assertIn(fragment, result.stderr)
        self.assertEqual(result.stdout, "")


class AttnTest(ToolTestCase):
    """attn against the demo model, the only one served."""

    @classmethod
    def setUpClass(cls):
        cls.stub = server.stub

    def next_token(self, sequence, **options):
        return self.stub.NextToken(pb.NextTokenRequest(model=MODEL, sequences=[sequence],
                                                       **options), timeout=30)

    def parse_next_token_table(self, output):
        title, header, *rows = output.rstrip("\n").split("\n")
        self.assertEqual(header.split(), ["RANK", "TOKEN", "ID", "PROBABILITY", "LOG-PROB"])
        parsed = []
        for row in rows:
            match = NEXT_TOKEN_ROW.fullmatch(row)
            self.assertTrue(match, f"unparsable row {row!r} in\n{output}")
            parsed.append((int(match[1]), match[2], int(match[3]), float(match[4]),
                           float(match[5])))
        return title, parsed

    def assertTableMatches(self, output, expected):
        title, rows = self.parse_next_token_table(output)
        self.assertEqual(title, f"model {MODEL}, {expected.input_tokens} input tokens")
        self.assertEqual(len(rows), len(expected.top), output)
        for rank, (row, token) in enumerate(zip(rows, expected.top), 1):
            self.assertEqual(row[:3], (rank, c_quoted(token.text), token.id), output)
            self.assertAlmostEqual(row[3], token.probability, delta=5.1e-5)
            self.assertAlmostEqual(row[4], token.log_probability, delta=5.1e-4)

    def test_help_lists_the_commands_and_the_exit_codes(self):
        result = self.attn_ok("--help", target="")
        for command in ("health [SERVICE]", "models", "info MODEL", "next-token", "generate",
                        "score", "embed", "--tls_ca", "--retries", "Exit codes:",
                        "DEADLINE_EXCEEDED"):
            self.assertIn(command, result.stdout)

    def test_health(self):
        for service in ([], ["attnserve.v1.Inference"]):
            with self.subTest(service=service):
                result = self.attn_ok("health", *service)
                self.assertEqual((result.stdout, result.stderr), ("SERVING\n", ""))
        self.assertServerError(self.attn("health", "no.such.Service"), 4, "NOT_FOUND")
        self.assertUsageError(self.attn("health", "a", "b"), "at most one service")
        self.assertServerError(self.attn("health", "--retries", "1",
                                         target=f"127.0.0.1:{free_port()}"), 5, "UNAVAILABLE")

    def test_models(self):
        listing = self.stub.ListModels(pb.ListModelsRequest(), timeout=10)
        output = self.attn_ok("models").stdout
        header, *rows = output.rstrip("\n").split("\n")
        self.assertEqual(header.split(),
                         ["MODEL", "ARCHITECTURE", "ATTENTION", "VOCAB", "CONTEXT", "ANSWERS"])
        self.assertEqual(len(rows), 1, output)
        info = listing.models[0]
        self.assertEqual(rows[0].split(), [info.name, info.architecture, info.attention,
                                           str(info.vocab_size), str(info.max_context),
                                           *info.methods])
        self.assertEqual(rows[0].split()[:2], [MODEL, "causal_lm"])

        output = self.attn_ok("models", "--json").stdout
        self.assertIn("vocab_size", json.loads(output)["models"][0])  # proto field names
        self.assertEqual(json_format.Parse(output, pb.ListModelsResponse()), listing)

    def test_info(self):
        info = self.stub.GetModel(pb.GetModelRequest(model=MODEL), timeout=10)
        output = self.attn_ok("info", MODEL).stdout
        header, *rows = output.rstrip("\n").split("\n")
        self.assertEqual(header.split(), ["FIELD", "VALUE"])
        fields = dict(re.fullmatch(r"(\S+(?: \S+)?) +(.*)", row).groups() for row in rows)
        self.assertEqual(fields, {
            "name": MODEL, "architecture": info.architecture, "attention": info.attention,
            "positions": info.positions, "norm": info.norm, "layers": str(info.num_layers),
            "heads": str(info.num_heads), "model dim": str(info.model_dim),
            "weights": info.weights, "vocabulary": str(info.vocab_size), "max context": str(info.max_context),
            "tokenizer": f"{info.tokenizer.type}, {info.tokenizer.vocab_size} tokens",
            "answers": " ".join(info.methods)})

        output = self.attn_ok("info", MODEL, "--json").stdout
        self.assertEqual(json_format.Parse(output, pb.ModelInfo()), info)

    def test_tokenize_and_detokenize(self):
        output = self.attn_ok("tokenize", "--text", "hé!").stdout.rstrip("\n").split("\n")
        self.assertEqual(output[0].split(), ["POSITION", "ID", "TOKEN", "BYTES", "TEXT"])
        # The byte tokenizer: one token per byte; é is two.
        self.assertEqual([row.split()[1] for row in output[1:-1]], ["104", "195", "169", "33"])
        self.assertEqual(output[-1], "4 tokens")
        reply = json.loads(self.attn_ok("tokenize", "--text", "hé!", "--json").stdout)
        # JSON as protobuf writes it: int64 as strings, zeros left out.
        self.assertEqual([(int(t.get("start", 0)), int(t["end"])) for t in reply["tokens"]],
                         [(0, 1), (1, 2), (2, 3), (3, 4)])
        self.assertEqual(self.attn_ok("detokenize", "--tokens", "104,195,169,33,256").stdout,
                         "hé!<|endoftext|>\n")
        self.assertEqual(self.attn_ok("detokenize", "--tokens", "104,256",
                                      "--skip_special_tokens").stdout, "h\n")
        self.assertUsageError(self.attn("tokenize"), "tokenize takes --text")
        result = self.attn("detokenize", "--tokens", "5,999")
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertIn("ids[1] = 999 is outside the vocabulary", result.stderr)

    def test_next_token_text(self):
        text = 'The meaning of life is'
        expected = self.next_token(pb.Sequence(text=text)).results[0]
        self.assertEqual(len(expected.top), 10)
        # --model left out: the server serves one model.
        self.assertTableMatches(self.attn_ok("next-token", "--text", text).stdout, expected)

        expected = self.next_token(pb.Sequence(text=text), top_k=3).results[0]
        self.assertTableMatches(
            self.attn_ok("next-token", "--model", MODEL, "--text", text, "--top_k", "3").stdout,
            expected)

    def test_next_token_quotes_tokens_and_passes_the_temperature(self):
        # After a quote and a newline, the likeliest tokens include ones that need escaping.
        text = 'She said "Hello.\n'
        request = dict(top_k=20, temperature=2.5)
        expected = self.next_token(pb.Sequence(text=text), **request).results[0]
        self.assertNotEqual([t.probability for t in expected.top],
                            [t.probability for t in self.next_token(
                                pb.Sequence(text=text), top_k=20).results[0].top])
        output = self.attn_ok("next-token", "--text", text, "--top_k", "20",
                              "--temperature", "2.5").stdout
        self.assertTableMatches(output, expected)
        self.assertTrue(any("\\" in c_quoted(t.text) for t in expected.top),
                        "no token needing an escape: the quoting is not exercised")

    def test_next_token_tokens(self):
        ids = list(b"Hello, wor")
        expected = self.next_token(pb.Sequence(tokens=pb.TokenIds(ids=ids))).results[0]
        output = self.attn_ok("next-token", "--tokens", ",".join(map(str, ids))).stdout
        self.assertTableMatches(output, expected)
        # The same bytes as text answer the same.
        self.assertEqual(output, self.attn_ok("next-token", "--text", "Hello, wor").stdout)

    def test_next_token_json(self):
        for args, sequence in ((["--text", "Once upon a"], pb.Sequence(text="Once upon a")),
                               (["--tokens", "72,105"], pb.Sequence(tokens=pb.TokenIds(
                                   ids=[72, 105])))):
            with self.subTest(args=args):
                output = self.attn_ok("next-token", *args, "--top_k", "4", "--json").stdout
                self.assertIn("log_probability", json.loads(output)["results"][0]["top"][0])
                self.assertEqual(json_format.Parse(output, pb.NextTokenResponse()),
                                 self.next_token(sequence, top_k=4))

    def test_generate_streams_the_seeded_sample_and_says_why_it_stopped(self):
        text = "Once upon a time"
        request = dict(model=MODEL, prompt=pb.Sequence(text=text), max_tokens=24,
                       temperature=0.8, top_k=40, top_p=0.95, seed=7)
        events = generate_events(self.stub, **request)
        tokens = [e.token.text for e in events if e.HasField("token")]
        finish = events[-1].finish
        self.assertTrue(events[-1].HasField("finish"))
        greedy = generate_events(self.stub, model=MODEL, prompt=pb.Sequence(text=text),
                                 max_tokens=24)
        self.assertNotEqual(tokens, [e.token.text for e in greedy if e.HasField("token")],
                            "the seeded sample equals the greedy one: pick another seed")

        result = self.attn_ok("generate", "--text", text, "--max_tokens", "24", "--temperature",
                              "0.8", "--top_k", "40", "--top_p", "0.95", "--seed", "7")
        self.assertEqual(result.stdout, "".join(tokens) + "\n")
        reason = {pb.FINISH_REASON_MAX_TOKENS: "max tokens",
                  pb.FINISH_REASON_END_OF_TEXT: "end of text"}[finish.reason]
        self.assertEqual(result.stderr, f"[{reason}: {finish.prompt_tokens} prompt tokens, "
                                        f"{finish.generated_tokens} generated]\n")
        self.assertEqual(finish.generated_tokens, len(tokens))

    def test_generate_json_prints_one_event_per_line_then_the_finish(self):
        events = generate_events(self.stub, model=MODEL, prompt=pb.Sequence(
            tokens=pb.TokenIds(ids=list(b"Q: Why?\nA:"))), max_tokens=10, temperature=1.0,
            seed=0)
        result = self.attn_ok("generate", "--tokens", ",".join(map(str, b"Q: Why?\nA:")),
                              "--max_tokens", "10", "--temperature", "1", "--seed", "0", "--json")
        lines = result.stdout.splitlines()
        self.assertEqual(len(lines), len(events), result.stdout)
        parsed = [json_format.Parse(line, pb.GenerateResponse()) for line in lines]
        self.assertEqual(parsed, events)
        self.assertTrue(all("token" in json.loads(line) for line in lines[:-1]))
        self.assertEqual(json.loads(lines[-1])["finish"]["reason"], "FINISH_REASON_MAX_TOKENS")
        self.assertEqual(result.stderr, "")  # the finish line is in the JSON
        # The same sample, run past its end-of-text (drawn after 7 tokens) to 30 tokens.
        events = generate_events(self.stub, model=MODEL, prompt=pb.Sequence(
            text="Once upon a time"), max_tokens=30, temperature=1.0, seed=0, ignore_eos=True)
        result = self.attn_ok("generate", "--text", "Once upon a time", "--max_tokens", "30",
                              "--temperature", "1", "--seed", "0", "--ignore_eos", "--json")
        self.assertEqual([json_format.Parse(line, pb.GenerateResponse())
                          for line in result.stdout.splitlines()], events)
        self.assertEqual(events[-1].finish.generated_tokens, 30)

    def test_generate_stops_at_a_stop_sequence(self):
        text, stops = "Once upon", ["zzz", "e"]
        events = generate_events(self.stub, model=MODEL, prompt=pb.Sequence(text=text),
                                 max_tokens=40, stop=stops)
        self.assertEqual(events[-1].finish.reason, pb.FINISH_REASON_STOP_SEQUENCE)
        tokens = "".join(e.token.text for e in events if e.HasField("token"))
        result = self.attn_ok("generate", "--text", text, "--max_tokens", "40", "--stop",
                              ",".join(stops))
        self.assertEqual(result.stdout, tokens + "\n")
        self.assertTrue(result.stdout.endswith("e\n"), result.stdout)
        self.assertTrue(result.stderr.startswith("[stop sequence: "), result.stderr)

    def test_score(self):
        text = "Hello world"
        expected = self.stub.Score(pb.ScoreRequest(model=MODEL, sequence=pb.Sequence(text=text)),
                                   timeout=30)
        output = self.attn_ok("score", "--text", text).stdout
        header, *rows, total = output.rstrip("\n").split("\n")
        self.assertEqual(header.split(), ["POSITION", "TOKEN", "ID", "LOG-PROB"])
        self.assertEqual(len(rows), len(text) - 1)
        self.assertEqual(len(rows), len(expected.tokens))
        for position, (row, token) in enumerate(zip(rows, expected.tokens), 1):
            match = SCORE_ROW.fullmatch(row)
            self.assertTrue(match, f"unparsable row {row!r}")
            self.assertEqual((int(match[1]), match[2], int(match[3])),
                             (position, c_quoted(token.text), token.id))
            self.assertAlmostEqual(float(match[4]), token.log_probability, delta=5.1e-4)
        match = SCORE_TOTAL.fullmatch(total)
        self.assertTrue(match, total)
        self.assertAlmostEqual(float(match[1]), expected.total_log_probability, delta=5.1e-4)
        self.assertEqual(int(match[2]), len(expected.tokens))
        self.assertAlmostEqual(float(match[3]), math.exp(-expected.total_log_probability /
                                                         len(expected.tokens)), delta=5.1e-4)

        output = self.attn_ok("score", "--tokens", ",".join(map(str, b"Hi there")),
                              "--json").stdout
        self.assertIn("total_log_probability", json.loads(output))
        self.assertEqual(json_format.Parse(output, pb.ScoreResponse()), self.stub.Score(
            pb.ScoreRequest(model=MODEL, sequence=pb.Sequence(tokens=pb.TokenIds(
                ids=list(b"Hi there")))), timeout=30))

    def test_not_found_names_the_model(self):
        self.assertServerError(self.attn("info", "no_such_model"), 4, "NOT_FOUND",
                               "no_such_model")
        result = self.attn("next-token", "--model", "no_such_model", "--text", "Hi")
        self.assertServerError(result, 4, "NOT_FOUND", "no_such_model")
        self.assertEqual(result.stdout, "")

    def test_invalid_argument(self):
        result = self.attn("next-token", "--tokens", "72,300")
        self.assertServerError(result, 3, "INVALID_ARGUMENT", "300", "vocabulary")
        self.assertEqual(result.stdout, "")
        self.assertServerError(self.attn("next-token", "--text", "Hi", "--top_k", "1000"), 3,
                               "INVALID_ARGUMENT", "top_k")
        self.assertServerError(self.attn("generate", "--text", "Hi", "--max_tokens", "-1"), 3,
                               "INVALID_ARGUMENT", "max_tokens")

    def test_embed_on_a_causal_model_is_refused(self):
        # The server answers INVALID_ARGUMENT for an RPC the model does not answer: exit 3.
        self.assertServerError(self.attn("embed", "--text", "Hi"), 3, "INVALID_ARGUMENT",
                               "does not answer Embed")

    def test_usage_errors(self):
        cases = [
            (["bogus"], ['unknown command "bogus"']),
            (["models", "--bogus"], ["unknown flag --bogus"]),
            (["next-token", "--text", "Hi", "--tokens", "1"], ["--text", "--tokens"]),
            (["next-token"], ["--text", "--tokens"]),
            (["next-token", "--tokens", "1,x"], ['"x"']),
            (["next-token", "--text", "Hi", "--top_k", "many"], ["--top_k", '"many"']),
            (["next-token", "--text"], ["--text needs a value"]),
            (["next-token", "--text", "Hi", "extra"], ['"extra"']),
            (["info"], ["attn info MODEL"]),
            (["embed", "--text", "Hi", "--pooling", "median"], ["--pooling", '"median"']),
            (["models", "--retries", "6"], ["1 to 5"]),
            (["models", "--tls_cert", "client.pem"], ["key"]),
        ]
        for args, fragments in cases:
            with self.subTest(args=args):
                self.assertUsageError(self.attn(*args), *fragments)
        # No command at all: the help on stderr, and the usage exit code.
        result = self.attn(target="")
        self.assertEqual(result.returncode, 2)
        self.assertIn("Commands:", result.stderr)
        self.assertEqual(result.stdout, "")
        for args, fragment in ((["models", "extra"], "models takes no arguments"),
                               (["models", "--tls_key", "client.key"], "key go together"),
                               (["next-token", "--text", "Hi", "--timeout", "0"],
                                "--timeout must be positive")):
            with self.subTest(args=args):
                self.assertUsageError(self.attn(*args), fragment)

    def test_a_failed_generate_prints_nothing(self):
        result = self.attn("generate", "--model", "nosuch", "--text", "Hi")
        self.assertServerError(result, 4, "NOT_FOUND", "nosuch")
        self.assertEqual(result.stdout, "")

    def test_unreachable_server_is_unavailable_after_retries_and_fails_fast(self):
        start = time.monotonic()
        result = self.attn("models", "--retries", "2", "--timeout", "5",
                           target=f"127.0.0.1:{free_port()}")
        elapsed = time.monotonic() - start
        self.assertServerError(result, 5, "UNAVAILABLE")
        self.assertLess(elapsed, 3, "waited for the deadline instead of failing fast")

    def test_deadline_exceeded(self):
        # gRPC's deadline timers tick in milliseconds: a call answered within about one can beat
        # a 1 µs deadline, so the model calls take longer (a 1000-token prompt, about 50 ms), and
        # `models`, which the server answers at once, goes to a socket that accepts the
        # connection and never speaks HTTP/2.
        long_text = "deadline " * 111
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)
            silent_target = f"127.0.0.1:{silent.getsockname()[1]}"
            for args, target in ((["next-token", "--text", long_text], None),
                                 (["generate", "--text", long_text], None),
                                 (["models"], silent_target)):
                for attempt in range(3):  # reliably, not by luck
                    with self.subTest(args=args, attempt=attempt):
                        result = self.attn(*args, "--timeout", "0.000001",
                                           **({"target": target} if target else {}))
                        self.assertServerError(result, 6, "DEADLINE_EXCEEDED")
        # A generous timeout is not hit.
        self.attn_ok("next-token", "--text", "Hi", "--timeout", "30")


class DrainTest(ToolTestCase):
    def test_health_during_a_drain_exits_5(self):
        draining = Server()
        try:
            target = f"127.0.0.1:{draining.port}"
            self.assertEqual(self.attn_ok("health", target=target).stdout, "SERVING\n")
            # A long generation keeps the server draining, not gone, after SIGTERM.
            stream = draining.stub.Generate(pb.GenerateRequest(
                model=MODEL, prompt=pb.Sequence(text="Once upon a time"), max_tokens=1000),
                timeout=60)
            next(stream)
            draining.process.send_signal(signal.SIGTERM)
            result = self.attn("health", "--retries", "1", target=target)
            self.assertEqual(result.returncode, 5, result.stderr)
            if result.stdout:  # before the server stops taking calls: the health says so
                self.assertEqual(result.stdout, "NOT_SERVING\n")
                self.assertTrue(result.stderr.startswith("attn: "), result.stderr)
            else:  # after: the call is refused
                self.assertTrue(SERVER_ERROR.fullmatch(result.stderr), result.stderr)
                self.assertIn("UNAVAILABLE", result.stderr)
            self.assertIsNone(draining.process.poll(), "the server did not wait for the stream")
            events = list(stream)
            self.assertEqual(events[-1].finish.reason, pb.FINISH_REASON_MAX_TOKENS)
            self.assertEqual(draining.process.wait(timeout=30), 0)
        finally:
            draining.stop()


class ReferenceModelsTest(ToolTestCase):
    """A repository of several models: the demo, an encoder ("embedder"), an encoder-decoder
    ("translator") and one that fails to load."""

    @classmethod
    def setUpClass(cls):
        cls.repository = tempfile.TemporaryDirectory()
        subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__),
                                                     "make_reference_models.py"),
                        cls.repository.name], check=True)
        os.remove(os.path.join(cls.repository.name, "expected.json"))
        os.symlink(os.path.abspath(os.environ["ATTNSERVE_MODELS"] + "/demo"),
                   os.path.join(cls.repository.name, "demo"))
        broken = os.path.join(cls.repository.name, "broken")
        os.makedirs(broken)
        with open(os.path.join(broken, "config.json"), "w") as f:
            f.write('{"format_version": 1, "architecture": "causal_lm"}')
        cls.server = Server(models=cls.repository.name)
        cls.stub = cls.server.stub
        cls.target = f"127.0.0.1:{cls.server.port}"

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.repository.cleanup()

    def embed(self, text, **options):
        return self.stub.Embed(pb.EmbedRequest(model="embedder", sequences=[pb.Sequence(
            text=text)], **options), timeout=30)

    def test_models_lists_every_model_and_the_failures(self):
        listing = self.stub.ListModels(pb.ListModelsRequest(), timeout=10)
        output = self.attn_ok("models", target=self.target).stdout
        lines = output.rstrip("\n").split("\n")
        self.assertEqual([line.split()[:2] for line in lines[1:4]],
                         [["demo", "causal_lm"], ["embedder", "encoder"],
                          ["translator", "seq2seq"]])
        self.assertEqual(len(listing.failed), 1)
        self.assertEqual(lines[4:], [f"not loaded: broken: {listing.failed[0].error}"])
        self.assertEqual(json_format.Parse(self.attn_ok("models", "--json",
                                                        target=self.target).stdout,
                                           pb.ListModelsResponse()), listing)

    def test_model_must_be_named_when_several_are_served(self):
        for command in ("next-token", "generate", "score", "embed"):
            with self.subTest(command=command):
                self.assertUsageError(self.attn(command, "--text", "Hi", target=self.target),
                                      "--model", "demo, embedder, translator")
        self.attn_ok("next-token", "--model", "demo", "--text", "Hi", target=self.target)

    def test_embed_json(self):
        text = "attention"
        for args, options in (([], {}), (["--pooling", "first"], dict(pooling=pb.POOLING_FIRST)),
                              (["--pooling", "none", "--normalize"],
                               dict(pooling=pb.POOLING_NONE, normalize=True))):
            with self.subTest(args=args):
                output = self.attn_ok("embed", "--model", "embedder", "--text", text, "--json",
                                      *args, target=self.target).stdout
                expected = self.embed(text, **options)
                self.assertEqual(json_format.Parse(output, pb.EmbedResponse()), expected)
        # The options reach the server: first-token pooling differs from the default (mean).
        self.assertNotEqual(self.embed(text).embeddings[0].values,
                            self.embed(text, pooling=pb.POOLING_FIRST).embeddings[0].values)

    def assertEmbedTable(self, output, expected):
        title, header, *rows = output.rstrip("\n").split("\n")
        match = EMBED_TITLE.fullmatch(title)
        self.assertTrue(match, title)
        self.assertEqual((match[1], int(match[2]), int(match[3])),
                         ("embedder", expected.rows, expected.width))
        self.assertEqual(header, "ROW  L2 NORM  FIRST VALUES")
        self.assertEqual(len(rows), expected.rows)
        for index, line in enumerate(rows):
            match = EMBED_ROW.fullmatch(line)
            self.assertTrue(match, line)
            values = expected.values[index * expected.width:(index + 1) * expected.width]
            self.assertEqual(int(match[1]), index)
            self.assertAlmostEqual(float(match[2]), math.sqrt(sum(v * v for v in values)),
                                   delta=5.1e-5)
            printed = match[3].split(" ")
            self.assertEqual(printed[-1], "...")  # 24 wide: the first 6 values, then "..."
            self.assertEqual(len(printed), 7)
            for got, want in zip(printed[:6], values):
                self.assertAlmostEqual(float(got), want, delta=5.1e-5)

    def test_embed_table(self):
        text = "is all"
        pooled = self.embed(text).embeddings[0]
        self.assertEqual((pooled.rows, pooled.width), (1, 24))
        output = self.attn_ok("embed", "--model", "embedder", "--text", text,
                              target=self.target).stdout
        self.assertEmbedTable(output, pooled)

        per_token = self.embed(text, pooling=pb.POOLING_NONE, normalize=True).embeddings[0]
        self.assertEqual(per_token.rows, len(text))
        output = self.attn_ok("embed", "--model", "embedder", "--tokens",
                              ",".join(map(str, text.encode())), "--pooling", "none",
                              "--normalize", target=self.target).stdout
        self.assertEmbedTable(output, per_token)
        self.assertIn(" 1.0000  ", output)

    def test_embed_bad_pooling(self):
        self.assertUsageError(self.attn("embed", "--model", "embedder", "--text", "Hi",
                                        "--pooling", "max", target=self.target),
                              '"max"', "mean")
        # A pooling the model cannot do is the server's refusal.
        self.assertServerError(self.attn("embed", "--model", "embedder", "--text", "Hi",
                                         "--pooling", "pma", target=self.target),
                               3, "INVALID_ARGUMENT", "PMA")

    def test_encoder_decoder_takes_a_source(self):
        source, prefix = "hello world", [256] + list(b"bo")
        expected = self.stub.NextToken(pb.NextTokenRequest(
            model="translator", sequences=[pb.Sequence(tokens=pb.TokenIds(ids=prefix))],
            sources=[pb.Sequence(text=source)], top_k=5), timeout=30)
        output = self.attn_ok("next-token", "--model", "translator", "--tokens",
                              ",".join(map(str, prefix)), "--source", source, "--top_k", "5",
                              "--json", target=self.target).stdout
        self.assertEqual(json_format.Parse(output, pb.NextTokenResponse()), expected)
        self.assertServerError(self.attn("score", "--model", "translator", "--text", "bon",
                                         target=self.target), 3, "INVALID_ARGUMENT", "source")

    def test_bench_embed(self):
        before = self.server.metric_value("attnserve_requests_total", model="embedder",
                                          method="Embed", code="OK")
        result = self.bench_ok("--model", "embedder", "--rpc", "embed", "--requests", "20",
                               "--warmup", "0", "--format", "json", target=self.target)
        level = json.loads(result.stdout)["levels"][0]
        self.assertEqual((level["ok"], level["errors"]), (20, {}))
        self.assertEqual(wait_for_metric(self.server, before + 20, "attnserve_requests_total",
                                         model="embedder", method="Embed", code="OK"),
                         before + 20)

    def test_bench_refuses_prompts_longer_than_the_context(self):
        # The embedder's context is 64 tokens.
        result = self.bench("--model", "embedder", "--rpc", "embed", "--prompt_tokens",
                            "uniform:8:80", "--requests", "5", target=self.target)
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertIn("attn-bench: INVALID_ARGUMENT: prompts of up to 80 tokens do not fit "
                      "model embedder's context of 64", result.stderr)


class TlsTest(ToolTestCase):
    @classmethod
    def setUpClass(cls):
        cls.directory = tempfile.TemporaryDirectory()
        cls.read = staticmethod(make_certificates(cls.directory.name))
        cls.tls = Server(f"--tls_cert={cls.path('server.pem')}",
                         f"--tls_key={cls.path('server.key')}",
                         credentials=grpc.ssl_channel_credentials(cls.read("ca.pem")))
        cls.mutual = Server(f"--tls_cert={cls.path('server.pem')}",
                            f"--tls_key={cls.path('server.key')}",
                            f"--tls_client_ca={cls.path('ca.pem')}",
                            credentials=grpc.ssl_channel_credentials(
                                cls.read("ca.pem"), cls.read("client.key"),
                                cls.read("client.pem")))

    @classmethod
    def tearDownClass(cls):
        cls.tls.stop()
        cls.mutual.stop()
        cls.directory.cleanup()

    @classmethod
    def path(cls, name):
        return os.path.join(cls.directory.name, name)

    def assertModelsListed(self, result):
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.splitlines()[1].split()[:2], [MODEL, "causal_lm"])

    def test_tls(self):
        target = f"127.0.0.1:{self.tls.port}"
        self.assertModelsListed(self.attn("models", "--tls_ca", self.path("ca.pem"),
                                          target=target))
        # The name to check the certificate against: right, then wrong.
        self.assertModelsListed(self.attn("models", "--tls_ca", self.path("ca.pem"),
                                          "--tls_server_name", "localhost", target=target))
        self.assertServerError(self.attn("models", "--tls_ca", self.path("ca.pem"),
                                         "--tls_server_name", "elsewhere.example",
                                         "--retries", "1", target=target), 5, "UNAVAILABLE")
        # Plaintext, or a certificate from another CA, does not get through.
        self.assertServerError(self.attn("models", "--retries", "1", "--timeout", "10",
                                         target=target), 5, "UNAVAILABLE")
        # (gRPC logs the failed handshake to stderr itself before attn's line.)
        self.assertServerError(self.attn("models", "--tls_ca", self.path("other_ca.pem"),
                                         "--retries", "1", target=target), 5, "UNAVAILABLE",
                               "certificate verify failed")
        # An unreadable CA file is a usage error naming it; nothing is called.
        missing = self.path("missing-ca.pem")
        self.assertUsageError(self.attn("models", "--tls_ca", missing, target=target), missing)

    def test_mutual_tls(self):
        target = f"127.0.0.1:{self.mutual.port}"
        ca = ["--tls_ca", self.path("ca.pem")]
        self.assertModelsListed(self.attn("models", *ca, "--tls_cert", self.path("client.pem"),
                                          "--tls_key", self.path("client.key"), target=target))
        for client in (None, "stranger"):
            with self.subTest(client=client):
                certificate = ["--tls_cert", self.path(f"{client}.pem"), "--tls_key",
                               self.path(f"{client}.key")] if client else []
                result = self.attn("models", *ca, *certificate, "--retries", "1",
                                   target=target)
                self.assertNotEqual(result.returncode, 0, result.stdout)
                self.assertEqual(result.returncode, 5, result.stderr)  # a failed handshake
                self.assertTrue(SERVER_ERROR.fullmatch(result.stderr), result.stderr)
                self.assertEqual(result.stdout, "")
        missing = self.path("missing.key")
        self.assertUsageError(self.attn("models", *ca, "--tls_cert", self.path("client.pem"),
                                        "--tls_key", missing, target=target), missing)

    def test_bench_over_mutual_tls(self):
        result = self.bench_ok("--tls_ca", self.path("ca.pem"), "--tls_cert",
                               self.path("client.pem"), "--tls_key", self.path("client.key"),
                               "--requests", "10", "--warmup", "0", "--format", "json",
                               target=f"127.0.0.1:{self.mutual.port}")
        self.assertEqual(json.loads(result.stdout)["levels"][0]["ok"], 10)


class BenchTest(ToolTestCase):
    """attn-bench against the demo server."""

    def requests_ok(self, method):
        return server.metric_value("attnserve_requests_total", model=MODEL, method=method,
                                   code="OK")

    def assertPercentiles(self, p50, p90, p99, maximum):
        self.assertGreater(p50, 0)
        self.assertLessEqual(p50, p90)
        self.assertLessEqual(p90, p99)
        self.assertLessEqual(p99, maximum)

    def test_help(self):
        result = self.bench_ok("--help", target="")
        for flag in ("--concurrency_sweep", "--rate", "--prompt_tokens", "--rpc", "--format",
                     "Exit codes:"):
            self.assertIn(flag, result.stdout)

    def test_closed_loop_table(self):
        before = self.requests_ok("NextToken")
        result = self.bench_ok("--concurrency", "2", "--duration", "1", "--warmup", "0.3")
        title, header, *rows = result.stdout.rstrip("\n").split("\n")
        self.assertEqual(title, f"next-token on {MODEL} at 127.0.0.1:{server.port}, prompts of "
                                f"8 tokens; latency in ms")
        self.assertEqual(header.split(), ["LOAD", "OK", "ERRORS", "REQ/S", "P50", "P90", "P99",
                                          "MAX"])
        self.assertEqual(len(rows), 1, result.stdout)  # and no error lines below
        load, ok, errors, rate, *latency = rows[0].split()
        self.assertEqual((load, int(errors)), ("2", 0))
        self.assertGreater(int(ok), 0)
        self.assertPercentiles(*map(float, latency))
        # Over one measured second (and the last calls' ends), requests per second is about
        # the count.
        self.assertTrue(0.7 * int(ok) <= float(rate) <= 1.01 * int(ok), rows[0])
        # The server answered at least as many (the warm-up's besides).
        self.assertGreaterEqual(wait_for_metric(server, before + int(ok),
                                                "attnserve_requests_total", model=MODEL,
                                                method="NextToken", code="OK"),
                                before + int(ok))

    def test_concurrency_sweep_csv(self):
        result = self.bench_ok("--concurrency_sweep", "1,4", "--duration", "1", "--warmup",
                               "0.2", "--format", "csv")
        reader = csv.reader(io.StringIO(result.stdout))
        header, *rows = list(reader)
        self.assertEqual(header, BENCH_CSV_COLUMNS)
        self.assertEqual(len(rows), 2, result.stdout)
        for row, clients in zip(rows, (1, 4)):
            level = dict(zip(header, row))
            self.assertEqual(len(row), len(header))
            self.assertEqual((int(level["concurrency"]), float(level["rate"]),
                              int(level["errors"])), (clients, 0, 0))
            self.assertGreater(int(level["ok"]), 0)
            self.assertGreater(float(level["requests_per_second"]), 0)
            # Measuring lasts --duration, and then until the calls in flight end.
            self.assertTrue(0.99 <= float(level["seconds"]) < 2.5, level)
            self.assertAlmostEqual(float(level["requests_per_second"]),
                                   int(level["ok"]) / float(level["seconds"]),
                                   delta=0.01 + 1e-3 * float(level["requests_per_second"]))
            self.assertPercentiles(*(float(level[c]) for c in ("p50_ms", "p90_ms", "p99_ms",
                                                               "max_ms")))
            # Not generate: no token timings.
            self.assertEqual([level[c] for c in BENCH_CSV_COLUMNS[10:]], [""] * 5)

    def test_open_loop_rate(self):
        before = self.requests_ok("NextToken")
        result = self.bench_ok("--rate", "50", "--requests", "40", "--warmup", "0", "--format",
                               "json")
        report = json.loads(result.stdout)
        self.assertEqual((report["rpc"], report["model"], report["prompt_tokens"]),
                         ("next-token", MODEL, "8"))
        level, = report["levels"]
        self.assertEqual((level["ok"], level["errors"], level["rate"]), (40, {}, 50))
        self.assertTrue(25 <= level["requests_per_second"] <= 60, level)
        # 40 requests due 20 ms apart take at least 39 intervals.
        self.assertGreaterEqual(level["seconds"], 0.75)
        latency = level["latency_ms"]
        self.assertPercentiles(latency["p50"], latency["p90"], latency["p99"], latency["max"])
        self.assertNotIn("tokens_per_second", level)
        # Without warm-up, exactly the requests asked for.
        self.assertEqual(wait_for_metric(server, before + 40, "attnserve_requests_total",
                                         model=MODEL, method="NextToken", code="OK"),
                         before + 40)

    def test_open_loop_with_one_caller_is_paced_by_the_server(self):
        result = self.bench_ok("--rate", "1000", "--max_in_flight", "1", "--rpc", "generate",
                               "--max_tokens", "16", "--requests", "10", "--warmup", "0",
                               "--format", "json")
        level = json.loads(result.stdout)["levels"][0]
        self.assertEqual(level["ok"], 10)
        # One caller, requests of several ms due 1 ms apart: the server sets the pace ...
        self.assertLess(level["requests_per_second"], 500, level)
        # ... and, latency counting from when each request was due, the later ones' grows with
        # the queue (the last waits for the nine before it).
        latency = level["latency_ms"]
        self.assertGreater(latency["max"], 1.5 * latency["p50"], level)

    def test_generate_reports_token_timings(self):
        result = self.bench_ok("--rpc", "generate", "--max_tokens", "8", "--concurrency", "2",
                               "--duration", "1", "--warmup", "0.2", "--format", "json")
        level = json.loads(result.stdout)["levels"][0]
        self.assertGreater(level["ok"], 0)
        self.assertEqual(level["errors"], {})
        for name in ("latency_ms", "time_to_first_token_ms", "inter_token_latency_ms"):
            p = level[name]
            self.assertPercentiles(p["p50"], p["p90"], p["p99"], p["max"])
        # The first token comes before the whole answer.
        self.assertLess(level["time_to_first_token_ms"]["p50"], level["latency_ms"]["p50"])
        self.assertGreater(level["tokens_per_second"], 0)
        # At most 8 tokens per request.
        self.assertLessEqual(level["tokens_per_second"],
                             8 * level["requests_per_second"] * 1.001)
        self.assertGreater(level["tokens_per_second"], level["requests_per_second"])

        # The table has the token columns too.
        result = self.bench_ok("--rpc", "generate", "--max_tokens", "4", "--requests", "5",
                               "--warmup", "0")
        header = result.stdout.split("\n")[1]
        self.assertIn("TTFT P50  TTFT P99  ITL P50  ITL P99  TOKENS/S", header)

    def test_score_and_get_model(self):
        for rpc, method in (("score", "Score"), ("get-model", None)):
            with self.subTest(rpc=rpc):
                before = self.requests_ok(method) if method else 0
                result = self.bench_ok("--rpc", rpc, "--requests", "20", "--warmup", "0",
                                       "--format", "json")
                level = json.loads(result.stdout)["levels"][0]
                self.assertEqual((level["ok"], level["errors"]), (20, {}))
                self.assertEqual(json.loads(result.stdout)["rpc"], rpc)
                if method:
                    self.assertEqual(wait_for_metric(server, before + 20,
                                                     "attnserve_requests_total", model=MODEL,
                                                     method=method, code="OK"), before + 20)

    def prompt_tokens(self, spec, requests):
        """The prompt tokens the server counted for `requests` next-token calls."""
        before = server.metric_value("attnserve_tokens_total", model=MODEL, kind="prompt")
        calls_before = self.requests_ok("NextToken")
        result = self.bench_ok("--prompt_tokens", spec, "--requests", str(requests), "--warmup",
                               "0", "--format", "json")
        report = json.loads(result.stdout)
        self.assertEqual((report["prompt_tokens"], report["levels"][0]["ok"]), (spec, requests))
        wait_for_metric(server, calls_before + requests, "attnserve_requests_total", model=MODEL,
                        method="NextToken", code="OK")
        return server.metric_value("attnserve_tokens_total", model=MODEL, kind="prompt") - before

    def test_prompt_length_distributions(self):
        self.assertEqual(self.prompt_tokens("5", 10), 50)
        uniform = self.prompt_tokens("uniform:4:16", 40)
        self.assertTrue(300 <= uniform <= 500, uniform)  # mean 10; never all 4s or all 16s
        normal = self.prompt_tokens("normal:8:2", 40)
        self.assertTrue(260 <= normal <= 380, normal)  # mean 8

    def test_progress_lines_on_stderr(self):
        result = self.bench_ok("--duration", "1.5", "--warmup", "0.5", "--format", "csv")
        lines = result.stderr.splitlines()
        self.assertTrue(lines, "no progress line in a 2 s run")
        final_ok = int(list(csv.DictReader(io.StringIO(result.stdout)))[0]["ok"])
        for line in lines:
            match = PROGRESS.fullmatch(line)
            self.assertTrue(match, f"unexpected stderr line {line!r}")
            self.assertEqual(match[1], "concurrency 1")
            self.assertTrue(1.0 <= float(match[2]) <= 2.0, line)
            self.assertTrue(0 < int(match[3]) <= final_ok, line)
            self.assertEqual(int(match[4]), 0)
        self.assertNotIn("req/s", result.stdout)

    def test_progress_on_a_terminal_rewrites_one_line(self):
        master, slave = pty.openpty()
        try:
            process = subprocess.Popen(
                [ATTN_BENCH, "--target", f"127.0.0.1:{server.port}", "--rate", "100",
                 "--duration", "0.7", "--warmup", "0.1", "--format", "json"],
                stdout=subprocess.PIPE, stderr=slave, encoding="utf-8")
            os.close(slave)
            stdout, _ = process.communicate(timeout=60)
            terminal = b""
            while True:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                terminal += chunk
        finally:
            os.close(master)
        self.assertEqual(process.returncode, 0, terminal)
        self.assertEqual(json.loads(stdout)["levels"][0]["rate"], 100)
        text = terminal.decode()
        self.assertGreaterEqual(text.count("\r[rate 100/s] "), 2, repr(text))
        self.assertTrue(text.endswith("\n"), repr(text))
        self.assertEqual(text.rstrip().count("\n"), 0, repr(text))  # one line, rewritten

    def test_usage_errors(self):
        cases = [
            (["--rate", "-1"], "--rate must be positive"),
            (["--rate", "0"], "--rate must be positive"),
            (["--prompt_tokens", "uniform:9:2"], '"uniform:9:2"'),
            (["--prompt_tokens", "normal:8"], '"normal:8"'),
            (["--prompt_tokens", "0"], '"0"'),
            (["--format", "xml"], "--format"),
            (["--rate", "10", "--concurrency", "2"], "choose one"),
            (["--concurrency", "2", "--concurrency_sweep", "1,2"], "choose one"),
            (["--concurrency", "0"], "--concurrency must be positive"),
            (["--concurrency_sweep", "1,x"], '"x"'),
            (["--rate", "10", "--max_in_flight", "0"], "--max_in_flight"),
            (["--rpc", "bogus"], '"bogus"'),
            (["--duration", "0"], "--duration"),
            (["--warmup", "-1"], "--warmup"),
            (["--requests", "-1"], "--requests"),
            (["--bogus"], "unknown flag --bogus"),
            (["extra"], '"extra"'),
            (["--tls_ca", "/nonexistent/ca.pem"], "/nonexistent/ca.pem"),
        ]
        for args, fragment in cases:
            with self.subTest(args=args):
                self.assertUsageError(self.bench(*args), fragment, tool="attn-bench")

    def test_what_the_model_cannot_do(self):
        result = self.bench("--rpc", "embed", "--requests", "5")
        self.assertEqual(result.returncode, 3, result.stderr)  # as attn embed on demo
        self.assertEqual(result.stderr, "attn-bench: INVALID_ARGUMENT: model demo does not "
                                        "answer Embed; it answers NextToken, Generate, Score, "
                                        "Tokenize, Detokenize\n")
        self.assertEqual(result.stdout, "")
        self.assertUsageError(self.bench("--rpc", "generate", "--max_tokens", "0"),
                              "--max_tokens must be positive", tool="attn-bench")

        # demo's context is 1024 tokens.
        for args, fragment in (
                (["--prompt_tokens", "2000"], "prompts of up to 2000 tokens do not fit model "
                                              "demo's context of 1024"),
                (["--prompt_tokens", "normal:1000:10"], "prompts of up to 1040 tokens"),
                (["--rpc", "generate", "--prompt_tokens", "1000", "--max_tokens", "32"],
                 "prompts of up to 1000 tokens do not fit model demo's context of 1024 with "
                 "--max_tokens")):
            with self.subTest(args=args):
                result = self.bench(*args, "--requests", "5")
                self.assertEqual(result.returncode, 3, result.stderr)
                self.assertIn(f"attn-bench: INVALID_ARGUMENT: {fragment}", result.stderr)
                self.assertEqual(result.stdout, "")

        result = self.bench("--model", "no_such_model", "--requests", "5")
        self.assertEqual(result.returncode, 4, result.stderr)
        self.assertIn("attn-bench: NOT_FOUND:", result.stderr)
        self.assertIn("no_such_model", result.stderr)

    def test_unreachable_server(self):
        start = time.monotonic()
        result = self.bench("--requests", "5", "--retries", "2", "--timeout", "5",
                            target=f"127.0.0.1:{free_port()}")
        self.assertEqual(result.returncode, 5, result.stderr)
        self.assertTrue(result.stderr.startswith("attn-bench: UNAVAILABLE: "), result.stderr)
        self.assertLess(time.monotonic() - start, 3)


if __name__ == "__main__":
    unittest.main()
