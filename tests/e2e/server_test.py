"""End-to-end tests: the real server binary on loopback, called from Python (python3-grpcio)."""
import concurrent.futures
import json
import math
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

import grpc

from server_harness import (Server, free_port, health_pb2, make_certificates, pb, pb_grpc,
                            reflection_pb2, reflection_pb2_grpc)

MODEL = "demo"


class ServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--max_queue_delay_ms=5")
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def next_token(self, *texts, **options):
        request = pb.NextTokenRequest(model=MODEL, sequences=[pb.Sequence(text=t) for t in texts],
                                      **options)
        return self.stub.NextToken(request, timeout=30)

    def generate(self, text, **options):
        tokens, finish = [], None
        for event in self.stub.Generate(
                pb.GenerateRequest(model=MODEL, prompt=pb.Sequence(text=text), **options),
                timeout=60):
            if event.HasField("token"):
                tokens.append(event.token)
            else:
                finish = event.finish
        return tokens, finish

    def test_list_and_get_model(self):
        models = self.stub.ListModels(pb.ListModelsRequest()).models
        self.assertEqual([m.name for m in models], [MODEL])
        info = self.stub.GetModel(pb.GetModelRequest(model=MODEL))
        self.assertEqual(info.architecture, "causal_lm")
        self.assertEqual(info.vocab_size, 257)
        self.assertEqual(info.tokenizer.special_tokens["<|endoftext|>"], 256)
        self.assertEqual(set(info.methods),
                         {"NextToken", "Generate", "Score", "Tokenize", "Detokenize"})

    def test_health_overall_and_per_service(self):
        for service in ("", "attnserve.v1.Inference", "inference.GRPCInferenceService"):
            response = self.server.health.Check(health_pb2.HealthCheckRequest(service=service))
            self.assertEqual(response.status, health_pb2.HealthCheckResponse.SERVING)

    def test_reflection_lists_the_services(self):
        stub = reflection_pb2_grpc.ServerReflectionStub(self.server.channel)
        responses = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        services = {s.name for s in next(responses).list_services_response.service}
        self.assertIn("attnserve.v1.Inference", services)
        self.assertIn("inference.GRPCInferenceService", services)
        self.assertIn("grpc.health.v1.Health", services)

    def test_a_real_prometheus_scrapes_the_server(self):
        self.next_token("for prometheus")
        with tempfile.TemporaryDirectory() as directory:
            config = os.path.join(directory, "prometheus.yml")
            with open(config, "w") as f:
                f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n"
                        "  - job_name: attnserve\n    static_configs:\n"
                        f"      - targets: ['127.0.0.1:{self.server.metrics_port}']\n")
            web = free_port()
            prometheus = subprocess.Popen(
                ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={directory}/data",
                 f"--web.listen-address=127.0.0.1:{web}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                query = (f"http://127.0.0.1:{web}/api/v1/query?query="
                         "attnserve_requests_total%7Bmethod%3D%22NextToken%22%2Ccode%3D%22OK%22%7D")
                found = None
                deadline = time.time() + 60
                while time.time() < deadline and not found:
                    time.sleep(1)
                    try:
                        with urllib.request.urlopen(query, timeout=2) as response:
                            found = json.load(response)["data"]["result"]
                    except (OSError, ValueError, KeyError):
                        pass
                self.assertTrue(found, "Prometheus never scraped a NextToken request count")
                self.assertEqual(found[0]["metric"]["model"], MODEL)
                self.assertGreaterEqual(float(found[0]["value"][1]), 1)
            finally:
                prometheus.terminate()
                prometheus.wait()

    def test_next_token_distribution(self):
        result = self.next_token("The cat sat on the", top_k=257, full_distribution=True)
        top = result.results[0].top
        self.assertEqual(len(top), 257)
        self.assertAlmostEqual(sum(t.probability for t in top), 1.0, places=4)
        self.assertTrue(all(a.probability >= b.probability for a, b in zip(top, top[1:])))
        for t in top[:5]:
            self.assertAlmostEqual(math.log(t.probability), t.log_probability, places=4)
        packed = result.results[0].distribution
        probabilities = struct.unpack(f"<{len(packed) // 4}f", packed)
        self.assertEqual(len(probabilities), 257)
        self.assertAlmostEqual(probabilities[top[0].id], top[0].probability, places=6)
        self.assertEqual(result.results[0].input_tokens, len("The cat sat on the"))

    def test_text_and_token_ids_agree(self):
        by_text = self.next_token("Hello")
        ids = list("Hello".encode())
        by_ids = self.stub.NextToken(pb.NextTokenRequest(
            model=MODEL, sequences=[pb.Sequence(tokens=pb.TokenIds(ids=ids))]))
        self.assertEqual([t.id for t in by_text.results[0].top],
                         [t.id for t in by_ids.results[0].top])

    def test_batched_results_equal_unbatched(self):
        texts = ["A", "Once upon a time", "To be or not to be, that is"]
        together = self.next_token(*texts, top_k=5)
        for text, result in zip(texts, together.results):
            alone = self.next_token(text, top_k=5).results[0]
            self.assertEqual([t.id for t in result.top], [t.id for t in alone.top])
            for a, b in zip(result.top, alone.top):
                self.assertAlmostEqual(a.log_probability, b.log_probability, places=4)

    def test_concurrent_requests_share_batches(self):
        before = self.server.metric_value("attnserve_batch_size_count", method="NextToken")
        before_sum = self.server.metric_value("attnserve_batch_size_sum", method="NextToken")
        texts = [f"Request number {i} says" for i in range(32)]
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            results = list(pool.map(lambda t: self.next_token(t, top_k=3), texts))
        calls = self.server.metric_value("attnserve_batch_size_count", method="NextToken") - before
        sequences = self.server.metric_value("attnserve_batch_size_sum", method="NextToken") \
            - before_sum
        self.assertEqual(sequences, 32)
        self.assertLess(calls, 32, "concurrent requests never shared an engine batch")
        for text, result in zip(texts, results):
            alone = self.next_token(text, top_k=3).results[0]
            self.assertEqual([t.id for t in result.results[0].top], [t.id for t in alone.top])

    def test_generate_greedy_is_deterministic_and_streams_log_probabilities(self):
        first, finish = self.generate("The best thing about", max_tokens=20)
        second, _ = self.generate("The best thing about", max_tokens=20)
        self.assertEqual([t.id for t in first], [t.id for t in second])
        self.assertEqual(finish.reason, pb.FINISH_REASON_MAX_TOKENS)
        self.assertEqual(finish.generated_tokens, 20)
        self.assertEqual(finish.prompt_tokens, len("The best thing about"))
        self.assertTrue(all(t.log_probability <= 0 for t in first))
        # Greedy: each streamed token is the top NextToken choice after the text so far.
        text = "The best thing about"
        step = self.next_token(text, top_k=1).results[0].top[0]
        self.assertEqual(step.id, first[0].id)

    def test_generate_sampling_with_a_seed_is_reproducible(self):
        options = dict(max_tokens=30, temperature=1.0, top_k=40, top_p=0.9, seed=7)
        a, _ = self.generate("Life is", **options)
        b, _ = self.generate("Life is", **options)
        self.assertEqual([t.id for t in a], [t.id for t in b])
        c, _ = self.generate("Life is", **dict(options, seed=8))
        self.assertNotEqual([t.id for t in a], [t.id for t in c])

    def test_generate_stops_at_a_stop_sequence(self):
        tokens, _ = self.generate("The", max_tokens=200)
        text = "".join(t.text for t in tokens)
        stop = text[5:7]
        tokens, finish = self.generate("The", max_tokens=200, stop=[stop])
        self.assertEqual(finish.reason, pb.FINISH_REASON_STOP_SEQUENCE)
        self.assertTrue("".join(t.text for t in tokens).endswith(stop))

    def test_generate_ignore_eos_and_min_tokens(self):
        # This prompt and seed draw end-of-text after 15 tokens.
        options = dict(max_tokens=40, temperature=1.0, seed=37)
        tokens, finish = self.generate("The end", **options)
        self.assertEqual(finish.reason, pb.FINISH_REASON_END_OF_TEXT)
        self.assertLess(len(tokens), 20)
        tokens, finish = self.generate("The end", ignore_eos=True, **options)
        self.assertEqual((len(tokens), finish.reason), (40, pb.FINISH_REASON_MAX_TOKENS))
        tokens, finish = self.generate("The end", min_tokens=20, **options)
        self.assertGreaterEqual(len(tokens), 20)
        self.assertEqual(finish.generated_tokens, len(tokens))
        # Stop sequences wait for min_tokens too.
        greedy, _ = self.generate("The", max_tokens=40)
        stop = "".join(t.text for t in greedy)[5:7]
        tokens, finish = self.generate("The", max_tokens=40, stop=[stop], min_tokens=30)
        self.assertGreaterEqual(len(tokens), 30)
        with self.assertRaises(grpc.RpcError) as raised:
            self.generate("The end", max_tokens=40, min_tokens=41)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("min_tokens = 41 must be in [0, max_tokens = 40]",
                      raised.exception.details())

    def test_generate_near_the_end_of_the_context(self):
        info = self.stub.GetModel(pb.GetModelRequest(model=MODEL))
        prompt = "x" * (info.max_context - 3)
        tokens, finish = self.generate(prompt, max_tokens=50)
        self.assertEqual(finish.reason, pb.FINISH_REASON_CONTEXT_FULL)
        self.assertLessEqual(len(tokens), 3)

    def test_requests_at_the_maximum_context_are_served_and_past_it_refused(self):
        limit = self.stub.GetModel(pb.GetModelRequest(model=MODEL)).max_context
        at_limit = pb.Sequence(text="m" * limit)
        past_limit = pb.Sequence(tokens=pb.TokenIds(ids=[109] * (limit + 1)))
        self.assertEqual(self.stub.NextToken(pb.NextTokenRequest(
            model=MODEL, sequences=[at_limit]), timeout=60).results[0].input_tokens, limit)
        self.assertEqual(len(self.stub.Score(pb.ScoreRequest(model=MODEL, sequence=at_limit),
                                             timeout=60).tokens), limit - 1)
        tokens, finish = self.generate("m" * (limit - 1), max_tokens=10)
        self.assertEqual((len(tokens), finish.reason), (1, pb.FINISH_REASON_CONTEXT_FULL))
        for method, request in (
                ("NextToken", pb.NextTokenRequest(model=MODEL, sequences=[past_limit])),
                ("Score", pb.ScoreRequest(model=MODEL, sequence=past_limit)),
                ("Generate", pb.GenerateRequest(model=MODEL, prompt=at_limit))):
            with self.subTest(method=method), self.assertRaises(grpc.RpcError) as raised:
                result = getattr(self.stub, method)(request, timeout=60)
                if method == "Generate":
                    list(result)
            self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(str(limit), raised.exception.details())

    def test_a_tiny_temperature_is_greedy(self):
        # 1e-41 is valid (in [0, 100]) but overflows any logit it divides (found by fuzzing).
        top = self.next_token("The cat", temperature=1e-41, top_k=3).results[0].top
        self.assertEqual([t.probability for t in top], [1.0, 0.0, 0.0])
        greedy, _ = self.generate("The cat", max_tokens=8)
        tiny, _ = self.generate("The cat", max_tokens=8, temperature=1e-41, seed=3)
        self.assertEqual([t.id for t in tiny], [t.id for t in greedy])

    def test_score_is_consistent_with_next_token(self):
        text = "Hello there"
        score = self.stub.Score(pb.ScoreRequest(model=MODEL, sequence=pb.Sequence(text=text)))
        self.assertEqual(len(score.tokens), len(text) - 1)
        self.assertAlmostEqual(score.total_log_probability,
                               sum(t.log_probability for t in score.tokens), places=3)
        full = self.next_token(text[:5], top_k=257).results[0].top
        expected = next(t.log_probability for t in full if t.id == ord(text[5]))
        self.assertAlmostEqual(score.tokens[4].log_probability, expected, places=4)

    def test_malformed_requests_get_clear_errors_and_the_server_keeps_serving(self):
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        seq = pb.Sequence(text="hi")
        cases = [
            ("NextToken", pb.NextTokenRequest(model="nope", sequences=[seq]),
             grpc.StatusCode.NOT_FOUND, "nope"),
            ("NextToken", pb.NextTokenRequest(sequences=[seq]), invalid, "model"),
            ("NextToken", pb.NextTokenRequest(model=MODEL), invalid, "sequences"),
            ("NextToken", pb.NextTokenRequest(model=MODEL, sequences=[pb.Sequence()]), invalid,
             "sequences[0] has neither"),
            ("NextToken", pb.NextTokenRequest(model=MODEL, sequences=[pb.Sequence(text="")]),
             invalid, "sequences[0] is empty"),
            ("NextToken", pb.NextTokenRequest(model=MODEL, sequences=[
                pb.Sequence(tokens=pb.TokenIds(ids=[5, 300]))]), invalid, "ids[1] = 300"),
            ("NextToken", pb.NextTokenRequest(model=MODEL, sequences=[
                pb.Sequence(tokens=pb.TokenIds(ids=[-1]))]), invalid, "ids[0] = -1"),
            ("NextToken", pb.NextTokenRequest(model=MODEL, sequences=[
                pb.Sequence(text="x" * 5000)]), invalid, "at most 1024"),
            ("NextToken", pb.NextTokenRequest(model=MODEL, sequences=[seq] * 300), invalid,
             "at most 256"),
            ("NextToken", pb.NextTokenRequest(model=MODEL, sequences=[seq], top_k=258), invalid,
             "top_k"),
            ("NextToken", pb.NextTokenRequest(model=MODEL, sequences=[seq], top_k=-1), invalid,
             "top_k"),
            ("NextToken", pb.NextTokenRequest(model=MODEL, sequences=[seq], temperature=-1),
             invalid, "temperature"),
            ("NextToken", pb.NextTokenRequest(model=MODEL, sequences=[seq],
                                              temperature=float("nan")), invalid, "temperature"),
            ("Embed", pb.EmbedRequest(model=MODEL, sequences=[seq]), invalid,
             "does not answer Embed"),
            ("Score", pb.ScoreRequest(model=MODEL), invalid, "sequence is missing"),
            ("Score", pb.ScoreRequest(model="", sequence=seq), invalid, "model is empty"),
            ("Generate", pb.GenerateRequest(model=MODEL), invalid, "prompt is missing"),
            ("Generate", pb.GenerateRequest(model=MODEL, prompt=seq, max_tokens=-5), invalid,
             "max_tokens"),
            ("Generate", pb.GenerateRequest(model=MODEL, prompt=seq, top_p=1.5), invalid,
             "top_p"),
            ("Generate", pb.GenerateRequest(model=MODEL, prompt=seq, top_p=float("inf")),
             invalid, "top_p"),
            ("Generate", pb.GenerateRequest(model=MODEL, prompt=seq, top_k=1000), invalid,
             "top_k"),
            ("Generate", pb.GenerateRequest(model=MODEL, prompt=seq, stop=[""]), invalid,
             "stop[0]"),
            ("Generate", pb.GenerateRequest(model=MODEL, prompt=seq, stop=["a"] * 17), invalid,
             "stop"),
            ("Generate", pb.GenerateRequest(model=MODEL, prompt=pb.Sequence(text="y" * 1024)),
             invalid, "leaves no room"),
            ("GetModel", pb.GetModelRequest(model="../../etc/passwd"),
             grpc.StatusCode.NOT_FOUND, "no model named"),
        ]
        for method, request, code, fragment in cases:
            with self.subTest(method=method, fragment=fragment):
                call = getattr(self.stub, method)
                with self.assertRaises(grpc.RpcError) as raised:
                    result = call(request, timeout=10)
                    if method == "Generate":
                        list(result)
                self.assertEqual(raised.exception.code(), code, raised.exception.details())
                self.assertIn(fragment, raised.exception.details())
        self.assertEqual(len(self.next_token("still serving").results), 1)
        # Unknown model names do not become metric labels.
        self.assertNotIn('model="nope"', self.server.metrics())

    def test_undecodable_requests_are_refused_without_flooding_the_log(self):
        # The service decodes requests itself: one that does not decode is INVALID_ARGUMENT naming
        # the message type and what is wrong with it (gRPC's generated code answered
        # UNIMPLEMENTED with no message, and libprotobuf logged every one).
        def raw(method, streaming=False):
            call = self.server.channel.unary_stream if streaming else \
                self.server.channel.unary_unary
            return call(f"/attnserve.v1.Inference/{method}", request_serializer=lambda b: b,
                        response_deserializer=lambda b: b)
        not_utf8 = b"\x0a\x04de\xffo\x12\x03\x0a\x01a"  # model "de\xffo", one sequence
        cases = [  # method, bytes, what the message names
            ("NextToken", not_utf8, "attnserve.v1.NextTokenRequest.model"),
            ("NextToken", b"\xff\xff\xff\xff", "not valid protobuf wire format"),
            ("Score", b"\x0a", "attnserve.v1.ScoreRequest"),
            ("Embed", b"\x12\x05ab", "attnserve.v1.EmbedRequest"),
            ("GetModel", b"\x0a\x01\xfe", "attnserve.v1.GetModelRequest.model"),
            ("ListModels", b"\x08", "attnserve.v1.ListModelsRequest"),
        ]
        before = self.server.output().count("libprotobuf")
        for method, payload, fragment in cases:
            with self.subTest(method=method, payload=payload):
                with self.assertRaises(grpc.RpcError) as raised:
                    raw(method)(payload, timeout=5)
                self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(fragment, raised.exception.details())
        with self.assertRaises(grpc.RpcError) as raised:
            list(raw("Generate", streaming=True)(b"\x0a\x02\xc3\x28", timeout=5))
        self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("attnserve.v1.GenerateRequest.model", raised.exception.details())
        for _ in range(200):
            with self.assertRaises(grpc.RpcError):
                raw("NextToken")(not_utf8, timeout=5)
        self.assertEqual(self.server.output().count("libprotobuf") - before, 0)
        self.assertEqual(len(self.next_token("still serving").results), 1)

    def test_expired_deadline_is_not_run(self):
        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.NextToken(pb.NextTokenRequest(model=MODEL, sequences=[
                pb.Sequence(text="z" * 1000)] * 16), timeout=0.001)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)

    def test_cancelled_stream_frees_its_sequence(self):
        # Greedy from "The" runs for hundreds of tokens before any end of text.
        stream = self.stub.Generate(pb.GenerateRequest(
            model=MODEL, prompt=pb.Sequence(text="The"), max_tokens=1000))
        next(stream)
        self.assertGreaterEqual(self.server.metric_value("attnserve_active_sequences"), 1)
        stream.cancel()
        deadline = time.time() + 5
        while time.time() < deadline and self.server.metric_value("attnserve_active_sequences"):
            time.sleep(0.05)
        self.assertEqual(self.server.metric_value("attnserve_active_sequences"), 0)

    def test_a_killed_client_frees_its_sequence(self):
        # A client process that dies mid-stream (no cancel sent; its connection just closes).
        client = subprocess.Popen([sys.executable, "-c", f"""
import sys
sys.path.insert(0, {os.environ['ATTNSERVE_STUBS']!r})
import grpc
from attnserve.v1 import inference_pb2 as pb, inference_pb2_grpc as pb_grpc
stub = pb_grpc.InferenceStub(grpc.insecure_channel("127.0.0.1:{self.server.port}"))
stream = stub.Generate(pb.GenerateRequest(model="{MODEL}", prompt=pb.Sequence(text="The"),
                                          max_tokens=1000))
next(stream)
print("streaming", flush=True)
sys.stdin.read()
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            self.assertEqual(client.stdout.readline().strip(), b"streaming")
            self.assertGreaterEqual(self.server.metric_value("attnserve_active_sequences"), 1)
        finally:
            client.kill()
            client.wait()
        deadline = time.time() + 5
        while time.time() < deadline and self.server.metric_value("attnserve_active_sequences"):
            time.sleep(0.05)
        self.assertEqual(self.server.metric_value("attnserve_active_sequences"), 0)
        self.assertEqual(len(self.next_token("still serving").results), 1)

    def test_metrics_pass_promtool(self):
        self.next_token("metrics please")
        text = self.server.metrics()
        for name in ("attnserve_requests_total", "attnserve_request_duration_seconds_bucket",
                     "attnserve_queue_duration_seconds_bucket", "attnserve_batch_size_bucket",
                     "attnserve_tokens_total", "attnserve_in_flight_requests",
                     "process_cpu_seconds_total", "process_resident_memory_bytes"):
            self.assertIn(name, text)
        check = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                               capture_output=True)
        self.assertEqual(check.returncode, 0, check.stdout.decode() + check.stderr.decode())


class LifecycleTest(unittest.TestCase):
    def test_sigterm_under_load_loses_no_accepted_request(self):
        server = Server()
        try:
            finishes, codes, lock = [], [], threading.Lock()
            stop = threading.Event()

            def stream(i):
                try:
                    for event in server.stub.Generate(pb.GenerateRequest(
                            model=MODEL, prompt=pb.Sequence(text=f"Story {i}:"), max_tokens=40),
                            timeout=60):
                        if event.HasField("finish"):
                            with lock:
                                finishes.append(event.finish)
                except grpc.RpcError as e:
                    with lock:
                        codes.append(e.code())

            def unary(i):
                # Calls until the server refuses one: every call before was answered in full.
                while not stop.is_set():
                    try:
                        response = server.stub.NextToken(pb.NextTokenRequest(
                            model=MODEL, sequences=[pb.Sequence(text=f"caller {i} " * 20)] * 4),
                            timeout=60)
                        with lock:
                            codes.append(grpc.StatusCode.OK if len(response.results) == 4
                                         else "short")
                    except grpc.RpcError as e:
                        with lock:
                            codes.append(e.code())
                        return

            threads = [threading.Thread(target=stream, args=(i,)) for i in range(6)]
            threads += [threading.Thread(target=unary, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            # SIGTERM once both kinds of work run: a stream decodes and a unary call was answered
            # (waiting on the stream alone raced the unary callers' first calls on a busy CI).
            def under_load():
                with lock:
                    answered = grpc.StatusCode.OK in codes
                return answered and server.metric_value("attnserve_active_sequences") >= 1
            deadline = time.time() + 10
            while not under_load() and time.time() < deadline:
                time.sleep(0.01)
            code = server.terminate()
            stop.set()
            for t in threads:
                t.join()
            self.assertEqual(code, 0, server.output())
            # Every call the server accepted ran to its end (all its tokens, or the model's
            # end of text); a call that arrived after the drain began was refused, never cut.
            for finish in finishes:
                self.assertTrue(
                    finish.reason == pb.FINISH_REASON_MAX_TOKENS and finish.generated_tokens == 40
                    or finish.reason == pb.FINISH_REASON_END_OF_TEXT, finish)
            self.assertEqual(set(codes) - {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE},
                             set(), codes)
            self.assertGreaterEqual(len(finishes), 1)
            self.assertGreaterEqual(codes.count(grpc.StatusCode.OK), 1)
            self.assertIn("drained", server.output())
        finally:
            server.stop()

    def test_sigterm_with_idle_connections_exits_at_once(self):
        # Idle connections and nothing in flight: the drain has nothing to wait for. gRPC's own
        # graceful shutdown waited 5 s for an idle channel to go away (one whose client, like
        # Python's between calls, does not read its socket).
        server = Server("--drain_timeout_s=30")
        try:
            other = grpc.insecure_channel(f"127.0.0.1:{server.port}")
            pb_grpc.InferenceStub(other).ListModels(pb.ListModelsRequest(), timeout=10)
            start = time.time()
            self.assertEqual(server.terminate(), 0, server.output())
            self.assertLess(time.time() - start, 2.0, server.output())
            other.close()
        finally:
            server.stop()

    def test_corrupted_model_directories_are_refused_and_the_others_serve(self):
        demo = os.path.abspath(os.environ["ATTNSERVE_MODELS"] + "/demo")
        with open(os.path.join(demo, "config.json")) as f:
            config = json.load(f)
        with open(os.path.join(demo, "model.safetensors"), "rb") as f:
            weights = f.read()
        header_length = struct.unpack("<Q", weights[:8])[0]
        deeper = dict(config, num_layers=config["num_layers"] + 1)
        broken = {  # name: (config.json text, model.safetensors bytes, what the error names)
            "truncated": (json.dumps(config), weights[:len(weights) // 2], "model.safetensors"),
            "bad_header": (json.dumps(config), struct.pack("<Q", 1 << 40) + weights[8:],
                           "model.safetensors"),
            "garbled_header": (json.dumps(config),
                               weights[:8] + b"{" * header_length + weights[8 + header_length:],
                               "model.safetensors"),
            "missing_tensor": (json.dumps(deeper), weights, f"layers.{config['num_layers']}."),
            "not_json": ("{", weights, "config.json"),
            "incomplete_config": ('{"format_version": 1, "architecture": "causal_lm"}', weights,
                                  "config.json"),
            "no_weights": (json.dumps(config), None, "model.safetensors"),
        }
        with tempfile.TemporaryDirectory() as repository:
            os.symlink(demo, os.path.join(repository, "good"))
            for name, (config_text, weight_bytes, _) in broken.items():
                os.makedirs(os.path.join(repository, name))
                with open(os.path.join(repository, name, "config.json"), "w") as f:
                    f.write(config_text)
                if weight_bytes is not None:
                    with open(os.path.join(repository, name, "model.safetensors"), "wb") as f:
                        f.write(weight_bytes)
            server = Server(models=repository)
            try:
                listing = server.stub.ListModels(pb.ListModelsRequest())
                self.assertEqual([m.name for m in listing.models], ["good"])
                errors = {failure.name: failure.error for failure in listing.failed}
                self.assertEqual(sorted(errors), sorted(broken))
                for name, (_, _, fragment) in broken.items():
                    with self.subTest(name=name):
                        self.assertIn(fragment, errors[name])
                        self.assertIn(name, server.output())
                self.assertEqual(len(server.stub.NextToken(pb.NextTokenRequest(
                    model="good", sequences=[pb.Sequence(text="ok")])).results), 1)
            finally:
                server.stop()

    def test_weights_changed_on_disk_do_not_change_the_served_model(self):
        # The server reads its own copy of the weights: a model file truncated (SIGBUS on the
        # next read of a shared mapping, from a request or the idle page warmer) or rewritten
        # in place (other numbers, NaN answered as OK) under the running server changes nothing.
        demo = os.path.abspath(os.environ["ATTNSERVE_MODELS"] + "/demo")
        with tempfile.TemporaryDirectory() as repository:
            shutil.copytree(demo, os.path.join(repository, MODEL))
            weights = os.path.join(repository, MODEL, "model.safetensors")
            server = Server(models=repository)
            try:
                request = pb.NextTokenRequest(model=MODEL, sequences=[pb.Sequence(text="The ")],
                                              full_distribution=True)
                before = server.stub.NextToken(request, timeout=30).results[0].distribution
                size = os.path.getsize(weights)
                os.truncate(weights, 8)
                time.sleep(1.5)  # the idle scheduler's page warmer walks the weights meanwhile
                after_truncation = server.stub.NextToken(request, timeout=30)
                self.assertEqual(after_truncation.results[0].distribution, before)
                with open(weights, "r+b") as f:
                    f.write(b"\xff" * size)  # NaN in every float
                time.sleep(1.5)
                after_rewrite = server.stub.NextToken(request, timeout=30)
                self.assertEqual(after_rewrite.results[0].distribution, before)
                self.assertIsNone(server.process.poll(), server.output())
            finally:
                server.stop()

    def test_quantized_weights_from_serving_json_or_the_flag(self):
        # serving.json's "weights": "int8" or "int4" quantizes one model at load; --weights=int8
        # every model; a bad value is refused naming the file or the flag. The quantized models'
        # answers stay close to float32's.
        demo = os.path.abspath(os.environ["ATTNSERVE_MODELS"] + "/demo")
        texts = ["The meaning of life is", "Q: Why?\nA:", "It was a dark and stormy night"]

        def distributions(stub, model):
            request = pb.NextTokenRequest(model=model, sequences=[pb.Sequence(text=t) for t in texts],
                                          full_distribution=True)
            return [struct.unpack(f"<{len(r.distribution) // 4}f", r.distribution)
                    for r in stub.NextToken(request, timeout=30).results]

        with tempfile.TemporaryDirectory() as repository:
            os.symlink(demo, os.path.join(repository, "float"))
            for name, settings in {"int8": {"weights": "int8"}, "int4": {"weights": "int4"},
                                   "bad": {"weights": "int2"}}.items():
                shutil.copytree(demo, os.path.join(repository, name))
                with open(os.path.join(repository, name, "serving.json"), "w") as f:
                    json.dump(settings, f)
            server = Server(models=repository)
            try:
                listing = server.stub.ListModels(pb.ListModelsRequest())
                self.assertEqual(sorted(m.name for m in listing.models),
                                 ["float", "int4", "int8"])
                failure = listing.failed[0]
                self.assertEqual(failure.name, "bad")
                self.assertIn("serving.json", failure.error)
                self.assertIn('"int2" is not a weight format', failure.error)
                info = server.stub.GetModel(pb.GetModelRequest(model="int4"))
                self.assertEqual((info.weights, info.int8_group_size), ("int4", 0))
                self.assertRegex(server.output(), r"model int4: \S+/model.safetensors, int4 "
                                 r"weights \(int8 where a layer's depth is not a multiple of 32, "
                                 r"and the token table and LM head\), int8 activations for up to "
                                 r"(16|32) rows")
                info = server.stub.GetModel(pb.GetModelRequest(model="int8"))
                self.assertEqual((info.weights, info.int8_group_size), ("int8", 32))
                self.assertRegex(server.output(), r"model int8: \S+/model.safetensors, int8 "
                                 r"weights, a scale per 32 input "
                                 r"columns \(0: per output\), (int8|float) activations for up "
                                 r"to 32 rows, prefill through (bf16 packed|float32 packed|"
                                 r"float32) tiles")
                self.assertEqual(server.stub.GetModel(pb.GetModelRequest(model="float")).weights,
                                 "float32")
                for model, bound in (("int8", 0.02), ("int4", 0.05)):
                    for reference, quantized in zip(distributions(server.stub, "float"),
                                                    distributions(server.stub, model)):
                        self.assertLess(max(abs(a - b) for a, b in zip(reference, quantized)),
                                        bound, model)
                        self.assertEqual(reference.index(max(reference)),
                                         quantized.index(max(quantized)), model)
                events = list(server.stub.Generate(pb.GenerateRequest(
                    model="int8", prompt=pb.Sequence(text=texts[0]), max_tokens=16), timeout=60))
                self.assertEqual(sum(e.HasField("token") for e in events), 16)
            finally:
                server.stop()
        server = Server("--weights=int8", "--int8_group_size=0")
        try:
            info = server.stub.GetModel(pb.GetModelRequest(model=MODEL))
            self.assertEqual((info.weights, info.int8_group_size), ("int8", 0))
        finally:
            server.stop()
        process = subprocess.run(
            [os.environ["ATTNSERVE_BINARY"], f"--model_repository={os.environ['ATTNSERVE_MODELS']}",
             "--port=0", "--metrics_port=0", "--weights=bf8"], capture_output=True, timeout=60)
        self.assertEqual(process.returncode, 2)
        self.assertIn(b'--weights: "bf8" is not a weight format', process.stderr)

    def test_no_model_name_reaches_the_filesystem(self):
        # A valid model sits beside the repository: no name a request can send reaches it.
        with tempfile.TemporaryDirectory() as root:
            repository = os.path.join(root, "repository")
            os.makedirs(repository)
            demo = os.path.abspath(os.environ["ATTNSERVE_MODELS"] + "/demo")
            os.symlink(demo, os.path.join(repository, "good"))
            os.symlink(demo, os.path.join(root, "outside"))
            server = Server(models=repository)
            try:
                names = ["outside", "../outside", "good/../../outside", "./good", "good/",
                         os.path.join(root, "outside"), "%2e%2e/outside", "good\0", "..",
                         ".", "/", "g" * 100000]
                for name in names:
                    with self.subTest(name=name[:40]), \
                            self.assertRaises(grpc.RpcError) as raised:
                        server.stub.NextToken(pb.NextTokenRequest(
                            model=name, sequences=[pb.Sequence(text="x")]), timeout=10)
                    self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)
                    self.assertLess(len(raised.exception.details()), 300)
                self.assertEqual(len(server.stub.NextToken(pb.NextTokenRequest(
                    model="good", sequences=[pb.Sequence(text="ok")])).results), 1)
            finally:
                server.stop()


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.directory = tempfile.TemporaryDirectory()
        cls.read = staticmethod(make_certificates(cls.directory.name))

    @classmethod
    def tearDownClass(cls):
        cls.directory.cleanup()

    def path(self, name):
        return os.path.join(self.directory.name, name)

    def call(self, server):
        return server.stub.NextToken(pb.NextTokenRequest(
            model=MODEL, sequences=[pb.Sequence(text="secure")]), timeout=10)

    def test_tls(self):
        credentials = grpc.ssl_channel_credentials(root_certificates=self.read("ca.pem"))
        server = Server(f"--tls_cert={self.path('server.pem')}",
                        f"--tls_key={self.path('server.key')}", credentials=credentials)
        try:
            self.assertEqual(len(self.call(server).results), 1)
            # A client that trusts another CA is refused.
            wrong = grpc.secure_channel(
                f"127.0.0.1:{server.port}",
                grpc.ssl_channel_credentials(root_certificates=self.read("other_ca.pem")),
                [("grpc.ssl_target_name_override", "localhost")])
            with self.assertRaises(grpc.RpcError) as raised:
                pb_stub(wrong).ListModels(pb.ListModelsRequest(), timeout=5)
            self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)
            # Plaintext is refused too.
            plain = grpc.insecure_channel(f"127.0.0.1:{server.port}")
            with self.assertRaises(grpc.RpcError):
                pb_stub(plain).ListModels(pb.ListModelsRequest(), timeout=5)
        finally:
            server.stop()

    def test_mutual_tls_requires_a_client_certificate_from_the_ca(self):
        def credentials(client=None):
            kwargs = dict(root_certificates=self.read("ca.pem"))
            if client:
                kwargs.update(private_key=self.read(f"{client}.key"),
                              certificate_chain=self.read(f"{client}.pem"))
            return grpc.ssl_channel_credentials(**kwargs)

        server = Server(f"--tls_cert={self.path('server.pem')}",
                        f"--tls_key={self.path('server.key')}",
                        f"--tls_client_ca={self.path('ca.pem')}",
                        credentials=credentials("client"))
        try:
            self.assertEqual(len(self.call(server).results), 1)
            for client in (None, "stranger"):
                with self.subTest(client=client):
                    channel = grpc.secure_channel(f"127.0.0.1:{server.port}", credentials(client),
                                                  [("grpc.ssl_target_name_override", "localhost")])
                    with self.assertRaises(grpc.RpcError) as raised:
                        pb_stub(channel).ListModels(pb.ListModelsRequest(), timeout=5)
                    self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)
        finally:
            server.stop()

    def test_bad_tls_flags_stop_the_server_with_a_message(self):
        process = subprocess.run(
            [os.environ["ATTNSERVE_BINARY"], f"--model_repository={os.environ['ATTNSERVE_MODELS']}",
             "--port=0", "--metrics_port=0", f"--tls_cert={self.path('server.pem')}"],
            capture_output=True, timeout=60)
        self.assertNotEqual(process.returncode, 0)
        self.assertIn(b"--tls_cert and --tls_key go together", process.stderr)


class ReferenceModelsTest(unittest.TestCase):
    """An encoder-decoder and an encoder exported by the reference, served beside the demo model:
    the server's answers equal the PyTorch reference's."""

    @classmethod
    def setUpClass(cls):
        cls.repository = tempfile.TemporaryDirectory()
        subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__),
                                                     "make_reference_models.py"), cls.repository.name],
                       check=True)
        with open(os.path.join(cls.repository.name, "expected.json")) as f:
            cls.expected = json.load(f)
        os.remove(os.path.join(cls.repository.name, "expected.json"))
        os.symlink(os.path.abspath(os.environ["ATTNSERVE_MODELS"] + "/demo"),
                   os.path.join(cls.repository.name, "demo"))
        cls.server = Server(models=cls.repository.name)
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.repository.cleanup()

    def ids(self, name):
        return pb.Sequence(tokens=pb.TokenIds(ids=self.expected[name]))

    def test_next_token_matches_the_reference(self):
        info = self.stub.GetModel(pb.GetModelRequest(model="translator"))
        self.assertEqual(info.architecture, "seq2seq")
        self.assertEqual(set(info.methods),
                         {"NextToken", "Generate", "Score", "Tokenize", "Detokenize"})
        reply = self.stub.NextToken(pb.NextTokenRequest(
            model="translator", sequences=[self.ids("target")] * 2,
            sources=[self.ids("source"), self.ids("source")], top_k=257))
        for result in reply.results:
            for token in result.top:
                self.assertAlmostEqual(token.log_probability,
                                       self.expected["next_log_probs"][token.id], places=4)

    def test_score_matches_the_reference(self):
        reply = self.stub.Score(pb.ScoreRequest(model="translator", sequence=self.ids("target"),
                                                source=self.ids("source")))
        for token, expected in zip(reply.tokens, self.expected["score"]):
            self.assertAlmostEqual(token.log_probability, expected, places=4)

    def test_greedy_generation_matches_the_reference(self):
        ids = [event.token.id for event in self.stub.Generate(pb.GenerateRequest(
            model="translator", prompt=self.ids("target"), source=self.ids("source"),
            max_tokens=8)) if event.HasField("token")]
        expected = self.expected["greedy"]
        if 256 in expected:  # the server stops at end of text
            expected = expected[: expected.index(256)]
        self.assertEqual(ids, expected)

    def test_embed_matches_the_reference(self):
        ref = self.expected["embedder"]
        sequences = [pb.Sequence(tokens=pb.TokenIds(ids=t)) for t in ref["texts"]]
        pooled = self.stub.Embed(pb.EmbedRequest(model="embedder", sequences=sequences,
                                                 head_contribution_layers=[1]))
        for embedding, expected, states, contributions, text in zip(
                pooled.embeddings, ref["pooled"], ref["states"], ref["contributions"],
                ref["texts"]):
            self.assertEqual((embedding.rows, embedding.width), (1, 24))
            for got, want in zip(embedding.values, expected):
                self.assertAlmostEqual(got, want, places=4)
            heads = embedding.head_contributions[0]
            self.assertEqual((heads.layer, heads.heads, heads.rows, heads.width),
                             (1, 3, len(text), 24))
            flat = [v for token in contributions[: len(text)] for head in token for v in head]
            for got, want in zip(heads.values, flat):
                self.assertAlmostEqual(got, want, places=4)
        per_token = self.stub.Embed(pb.EmbedRequest(model="embedder", sequences=sequences,
                                                    pooling=pb.POOLING_NONE, normalize=True))
        first = per_token.embeddings[0]
        self.assertEqual((first.rows, first.width), (len(ref["texts"][0]), 24))
        row = ref["states"][0][0]
        norm = sum(v * v for v in row) ** 0.5
        for got, want in zip(first.values[:24], row):
            self.assertAlmostEqual(got, want / norm, places=4)

    def test_sources_are_checked(self):
        cases = [
            (pb.ScoreRequest(model="translator", sequence=self.ids("target")), "Score",
             "source is missing"),
            (pb.NextTokenRequest(model="translator", sequences=[self.ids("target")]),
             "NextToken", "sources has 0 entries"),
            (pb.NextTokenRequest(model="demo", sequences=[self.ids("target")],
                                 sources=[self.ids("source")]), "NextToken",
             "not an encoder-decoder"),
            (pb.EmbedRequest(model="embedder", sequences=[self.ids("target")],
                             head_contribution_layers=[2]), "Embed", "not a layer of embedder"),
            (pb.EmbedRequest(model="embedder", sequences=[self.ids("target")],
                             head_contribution_layers=[0, 0]), "Embed", "repeats layer 0"),
            (pb.EmbedRequest(model="embedder", sequences=[self.ids("target")],
                             pooling=pb.POOLING_PMA), "Embed", "PMA"),
            (pb.EmbedRequest(model="embedder", feature_sets=[pb.FeatureSet(values=[1], width=1)]),
             "Embed", "takes token ids"),
        ]
        for request, method, fragment in cases:
            with self.subTest(fragment=fragment):
                with self.assertRaises(grpc.RpcError) as raised:
                    getattr(self.stub, method)(request, timeout=10)
                self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(fragment, raised.exception.details())


class MetricsEndpointTest(unittest.TestCase):
    def test_idle_and_slow_connections_do_not_block_a_scrape(self):
        # 8 connections that never send a byte and 4 that send a request one byte at a time
        # (a slowloris), against 8 worker threads. Each must send its request whole within 2 s,
        # so a scrape waits about two timeouts at most; with civetweb's defaults (30 s) two idle
        # connections blocked scrapes for 30 s, and a slowloris for as long as it lasted.
        server = Server()
        hostile, stop = [], threading.Event()
        try:
            for i in range(12):
                connection = socket.create_connection(("127.0.0.1", server.metrics_port))
                hostile.append(connection)

            def dribble():
                while not stop.is_set():
                    for connection in hostile[8:]:
                        try:
                            connection.sendall(b"G")
                        except OSError:
                            pass
                    time.sleep(0.2)
            dribbler = threading.Thread(target=dribble)
            dribbler.start()
            time.sleep(0.5)
            for _ in range(3):
                start = time.time()
                with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                            timeout=40) as response:
                    body = response.read().decode()
                self.assertLess(time.time() - start, 10.0)
                self.assertIn("attnserve_queue_capacity", body)
                self.assertIn("process_resident_memory_bytes", body)
        finally:
            stop.set()
            for connection in hostile:
                connection.close()
            server.stop()


def rapid_reset(port, connections, streams):
    """HTTP/2 rapid reset (CVE-2023-44487): on each connection, `streams` calls opened and
    cancelled at once (HEADERS, then RST_STREAM), as fast as the socket takes them."""
    import h2.config
    import h2.connection
    import h2.errors

    def attack():
        with socket.create_connection(("127.0.0.1", port)) as sock:
            connection = h2.connection.H2Connection(
                h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
            connection.initiate_connection()
            headers = [(":method", "POST"), (":scheme", "http"),
                       (":path", "/attnserve.v1.Inference/NextToken"),
                       (":authority", f"127.0.0.1:{port}"), ("content-type", "application/grpc"),
                       ("te", "trailers")]
            for i in range(streams):
                connection.send_headers(2 * i + 1, headers)
                connection.reset_stream(2 * i + 1, h2.errors.ErrorCodes.CANCEL)
                if i % 100 == 99:
                    sock.sendall(connection.data_to_send())
                    sock.setblocking(False)
                    try:  # the server's frames: settings, window updates
                        while incoming := sock.recv(1 << 16):
                            connection.receive_data(incoming)
                    except BlockingIOError:
                        pass
                    sock.setblocking(True)
            sock.sendall(connection.data_to_send())

    threads = [threading.Thread(target=attack) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


class Http2AbuseTest(unittest.TestCase):
    def test_memory_returns_after_a_rapid_reset_burst(self):
        # 100,000 calls opened and reset over 4 connections. gRPC 1.51 (Debian's) allocates each
        # one and frees it later, so memory peaks with the attacker's rate (about 1.5 GB here);
        # it must come back, where glibc kept it (+450 MB to +1.5 GB, for good).
        server = Server()
        try:
            self.assertEqual(len(server.stub.NextToken(pb.NextTokenRequest(
                model=MODEL, sequences=[pb.Sequence(text="warm")])).results), 1)
            before = resident_megabytes(server.process.pid)
            rapid_reset(server.port, connections=4, streams=25000)
            # Under AddressSanitizer (make test-asan) its allocator replaces glibc's, which the
            # server trims, and its shadow memory stays: there the burst must only leave the
            # server serving.
            if "ASAN_OPTIONS" not in os.environ:
                deadline = time.time() + 60
                while time.time() < deadline and \
                        resident_megabytes(server.process.pid) - before > 64:
                    time.sleep(1)
                self.assertLess(resident_megabytes(server.process.pid) - before, 64,
                                server.metrics())
            self.assertEqual(len(server.stub.NextToken(pb.NextTokenRequest(
                model=MODEL, sequences=[pb.Sequence(text="still serving")])).results), 1)
        finally:
            server.stop()

    def test_the_connection_limits_are_announced(self):
        # Clients learn the limits from the server's HTTP/2 SETTINGS: open calls per connection
        # (gRPC's clients queue the ones past it) and the header block size.
        import h2.config
        import h2.connection
        import h2.events
        server = Server("--max_concurrent_streams=7", "--max_metadata_bytes=20000")
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                connection = h2.connection.H2Connection(
                    h2.config.H2Configuration(client_side=True))
                connection.initiate_connection()
                sock.sendall(connection.data_to_send())
                settings = None
                while settings is None:
                    data = sock.recv(1 << 16)
                    self.assertTrue(data, "the server closed the connection")
                    for event in connection.receive_data(data):
                        if isinstance(event, h2.events.RemoteSettingsChanged):
                            settings = connection.remote_settings
            self.assertEqual(settings.max_concurrent_streams, 7)
            self.assertEqual(settings.max_header_list_size, 20000)
        finally:
            server.stop()

    def test_large_headers_fail_their_own_call_only(self):
        # A 20 KB header block passes (gRPC's 8 KB default refused it and, in 1.51, ended every
        # other call on the connection too); past --max_metadata_bytes it is RESOURCE_EXHAUSTED.
        server = Server()
        try:
            stream = server.stub.Generate(pb.GenerateRequest(
                model=MODEL, prompt=pb.Sequence(text="hello"), max_tokens=100), timeout=60)
            next(stream)
            request = pb.NextTokenRequest(model=MODEL, sequences=[pb.Sequence(text="x")])
            server.stub.NextToken(request, metadata=[("x-large", "a" * 20000)], timeout=10)
            self.assertEqual(sum(1 for _ in stream), 100)
            with self.assertRaises(grpc.RpcError) as raised:
                server.stub.NextToken(request, metadata=[("x-huge", "a" * 100000)], timeout=10)
            self.assertEqual(raised.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            # gRPC 1.51 closes that connection (docs/reliability.md); a new one is served (a
            # channel of its own: channels to one target otherwise share their connection).
            with grpc.insecure_channel(f"127.0.0.1:{server.port}",
                                       [("grpc.use_local_subchannel_pool", 1)]) as channel:
                self.assertEqual(len(pb_grpc.InferenceStub(channel).NextToken(
                    request, timeout=10).results), 1)
        finally:
            server.stop()


class MessageLimitTest(unittest.TestCase):
    def test_messages_past_the_limit_are_refused_and_the_server_keeps_serving(self):
        server = Server("--max_message_bytes=65536")
        try:
            huge = pb.NextTokenRequest(model=MODEL, sequences=[pb.Sequence(text="q" * 100000)])
            with self.assertRaises(grpc.RpcError) as raised:
                server.stub.NextToken(huge, timeout=10)
            self.assertEqual(raised.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            # A response past the limit (200 full distributions: 200 KB) fails the same way.
            wide = pb.NextTokenRequest(model=MODEL, sequences=[pb.Sequence(text="ab")] * 200,
                                       full_distribution=True)
            with self.assertRaises(grpc.RpcError) as raised:
                server.stub.NextToken(wide, timeout=30)
            self.assertEqual(raised.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertEqual(len(server.stub.NextToken(pb.NextTokenRequest(
                model=MODEL, sequences=[pb.Sequence(text="ok")])).results), 1)
        finally:
            server.stop()


    def test_a_compression_bomb_is_refused_before_it_is_inflated(self):
        # 256 MiB of one letter, about 250 KB gzipped on the wire: refused by the algorithm's
        # name before gRPC inflates it, so the server's memory does not move.
        server = Server()
        try:
            before = resident_megabytes(server.process.pid)
            bomb = pb.NextTokenRequest(model=MODEL, sequences=[pb.Sequence(text="a" * (256 << 20))])
            with self.assertRaises(grpc.RpcError) as raised:
                server.stub.NextToken(bomb, compression=grpc.Compression.Gzip, timeout=60)
            self.assertEqual(raised.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
            self.assertIn("gzip", raised.exception.details())
            del bomb
            self.assertLess(resident_megabytes(server.process.pid) - before, 16)
            self.assertEqual(len(server.stub.NextToken(pb.NextTokenRequest(
                model=MODEL, sequences=[pb.Sequence(text="ok")])).results), 1)
        finally:
            server.stop()


def resident_megabytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def pb_stub(channel):
    from attnserve.v1 import inference_pb2_grpc
    return inference_pb2_grpc.InferenceStub(channel)


if __name__ == "__main__":
    unittest.main()
