"""The resource model end to end (docs/serving.md): a server in a 1 GiB memory cgroup, as a
small container is, survives the requests that used to kill it and still answers; streams
whose clients do not read are paused and leave the decoding slots to others; a shared prompt
prefix is reused."""
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(__file__))
from server_harness import Server, pb, pb_grpc  # noqa: E402

CGROUP_ROOT = "/sys/fs/cgroup/memory"
LIMIT = 1 << 30


def export_encoder(directory):
    """An encoder of the demo model's size, with a 1024-token context: a target for the
    requests that make large answers."""
    script = f"""
import sys, torch
sys.path.insert(0, {os.path.join(os.path.dirname(__file__), '..', '..', 'python')!r})
from attnserve.models import Encoder
from attnserve.export import export
torch.manual_seed(1)
model = Encoder(vocab_size=257, model_dim=192, num_layers=4, num_heads=6, head_dim_qk=32,
                attention="softmax", positions="sinusoidal", max_positions=1024,
                pooling="mean").eval()
export(model, {directory!r})
"""
    subprocess.run([sys.executable, "-c", script], check=True)


class MemoryCgroup:
    """A cgroup v1 memory controller group with a hard limit, which a child joins before exec."""

    def __init__(self, limit):
        self.path = os.path.join(CGROUP_ROOT, f"attnserve-test-{os.getpid()}")
        os.makedirs(self.path, exist_ok=True)
        with open(os.path.join(self.path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))
        with open(os.path.join(self.path, "memory.swappiness"), "w") as f:
            f.write("0")

    def join(self):
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return int(f.read())

    def remove(self):
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def tokens(n, seed=0):
    return pb.Sequence(tokens=pb.TokenIds(ids=[(seed * 7 + 13 * i) % 256 for i in range(n)]))


class MemoryCapTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(CGROUP_ROOT, os.W_OK):
            raise RuntimeError(f"{CGROUP_ROOT} is not writable: this test needs root and the "
                               "cgroup v1 memory controller, as CI machines have")
        cls.repository = tempfile.TemporaryDirectory()
        os.symlink(os.path.abspath(os.environ["ATTNSERVE_MODELS"] + "/demo"),
                   os.path.join(cls.repository.name, "demo"))
        export_encoder(os.path.join(cls.repository.name, "encoder"))
        cls.cgroup = MemoryCgroup(LIMIT)
        # Under AddressSanitizer (make test-asan) freed memory waits in a quarantine of 256 MiB
        # by default, memory the server's budget cannot see: keep it small.
        if "ASAN_OPTIONS" in os.environ:
            os.environ["ASAN_OPTIONS"] += ":quarantine_size_mb=16"
        # Two compute threads: the requests run at full speed on both cores.
        cls.server = Server("--threads=2", models=cls.repository.name, preexec_fn=cls.cgroup.join)
        cls.stub = pb_grpc.InferenceStub(grpc.insecure_channel(
            f"127.0.0.1:{cls.server.port}", [("grpc.max_receive_message_length", -1)]))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.cgroup.remove()
        cls.repository.cleanup()

    def assertAlive(self):
        self.assertIsNone(self.server.process.poll(), self.server.output()[-2000:])
        reply = self.server.stub.NextToken(pb.NextTokenRequest(
            model="demo", sequences=[pb.Sequence(text="still here")]), timeout=30)
        self.assertEqual(len(reply.results[0].top), 10)

    def call_all(self, calls, workers=32):
        """Runs the calls at once; the status code of each."""
        def run(call):
            try:
                call()
                return grpc.StatusCode.OK
            except grpc.RpcError as error:
                return error.code()
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            return list(pool.map(run, calls))

    def test_0_the_server_knows_its_limit(self):
        self.assertRegex(self.server.output(),
                         r"memory limit 1024 MiB \(.*attnserve-test-\d+/memory.limit_in_bytes\)")

    def test_requests_that_can_never_fit_are_refused_at_once_naming_the_limit(self):
        stub = self.stub
        start = time.time()
        with self.assertRaises(grpc.RpcError) as raised:
            stub.NextToken(pb.NextTokenRequest(model="demo", sequences=[tokens(1024, s)
                                                                        for s in range(256)]),
                           timeout=60)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertRegex(raised.exception.details(),
                         r"262144 tokens .* at most \d+ per request \(--max_batch_tokens\)")
        with self.assertRaises(grpc.RpcError) as raised:
            stub.Embed(pb.EmbedRequest(model="encoder", sequences=[tokens(1000, s)
                                                                   for s in range(48)],
                                       pooling=pb.POOLING_NONE, head_contribution_layers=[0, 1, 2, 3]),
                       timeout=60)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("over the message limit of 16777216 (--max_message_bytes)",
                      raised.exception.details())
        self.assertLess(time.time() - start, 2.0, "refused before running anything")
        self.assertGreaterEqual(self.server.metric_value("attnserve_requests_refused_total",
                                                         budget="tokens"), 1)
        self.assertAlive()

    def test_the_requests_that_used_to_kill_it_are_survived(self):
        stub = self.stub
        # Under AddressSanitizer (make test-asan) a quarter of the load: the same paths, checked
        # for memory errors; the full load took five of CI's minutes there, and the cap is held
        # to it in `make test`.
        n = 8 if "ASAN_OPTIONS" in os.environ else 32
        # 32 concurrent NextToken requests of 8 × 1024 tokens, batched within the budget.
        codes = self.call_all([lambda s=s: stub.NextToken(pb.NextTokenRequest(
            model="demo", sequences=[tokens(1024, s * 8 + i) for i in range(8)]), timeout=300)
            for s in range(n)])
        self.assertEqual(set(codes) - {grpc.StatusCode.UNAVAILABLE}, {grpc.StatusCode.OK}, codes)
        # Per-token states and every layer's head contributions, as large as an answer may be.
        codes = self.call_all([lambda s=s: stub.Embed(pb.EmbedRequest(
            model="encoder", sequences=[tokens(1000, s)], pooling=pb.POOLING_NONE,
            head_contribution_layers=[0, 1]), timeout=300) for s in range(n * 3 // 2)], workers=48)
        self.assertIn(grpc.StatusCode.OK, codes)
        self.assertEqual(set(codes) - {grpc.StatusCode.UNAVAILABLE}, {grpc.StatusCode.OK}, codes)
        # Long scores and long generations at once.
        calls = [lambda s=s: stub.Score(pb.ScoreRequest(model="demo", sequence=tokens(1024, s)),
                                        timeout=300) for s in range(n)]
        calls += [lambda s=s: list(stub.Generate(pb.GenerateRequest(
            model="demo", prompt=tokens(900, s), max_tokens=100), timeout=300))
            for s in range(n)]
        codes = self.call_all(calls, workers=64)
        self.assertEqual(set(codes) - {grpc.StatusCode.UNAVAILABLE}, {grpc.StatusCode.OK}, codes)
        self.assertAlive()
        peak = self.cgroup.read("memory.max_usage_in_bytes")
        print(f"\nmemory cap: peak {peak >> 20} MiB of {LIMIT >> 20} MiB, "
              f"RSS now {self.server.metric_value('process_resident_memory_bytes') / 2**20:.0f} "
              f"MiB", flush=True)
        self.assertEqual(self.cgroup.read("memory.failcnt") > 0 and
                         self.server.process.poll() is not None, False)


class Int8LoadingTest(unittest.TestCase):
    def test_an_int8_model_loads_under_a_cap_smaller_than_its_float_file(self):
        # The float32 file is read tensor by tensor and each weight's float pages are released
        # once it is quantized, so the file never has to fit whole: a 481 MiB file loads as int8
        # (134 MiB of weights) in a 400 MiB cgroup, beside the server's own 86 MiB (175 under
        # AddressSanitizer), and answers.
        if not os.access(CGROUP_ROOT, os.W_OK):
            raise RuntimeError(f"{CGROUP_ROOT} is not writable: this test needs root and the "
                               "cgroup v1 memory controller, as CI machines have")
        with tempfile.TemporaryDirectory() as repository:
            directory = os.path.join(repository, "lm")
            script = f"""
import sys, torch
sys.path.insert(0, {os.path.join(os.path.dirname(__file__), '..', '..', 'python')!r})
from attnserve.models import CausalLM
from attnserve.export import export
torch.manual_seed(1)
model = CausalLM(257, model_dim=1024, num_layers=10, num_heads=16, ffn_dim=4096,
                 attention="softmax", positions="learned", max_positions=32).eval()
export(model, {directory!r})
"""
            subprocess.run([sys.executable, "-c", script], check=True)
            file_mib = os.path.getsize(os.path.join(directory, "model.safetensors")) / 2**20
            cgroup = MemoryCgroup(400 << 20)
            server = Server("--weights=int8", "--threads=2", models=repository,
                            preexec_fn=cgroup.join)
            try:
                reply = server.stub.NextToken(pb.NextTokenRequest(
                    model="lm", sequences=[tokens(30)]), timeout=30)
                self.assertEqual(len(reply.results[0].top), 10)
                peak = cgroup.read("memory.max_usage_in_bytes") / 2**20
                print(f"\nint8 load: float file {file_mib:.0f} MiB, cgroup peak {peak:.0f} MiB "
                      "of 400 MiB", file=sys.stderr)
                self.assertGreater(file_mib, 400)
                self.assertEqual(cgroup.read("memory.failcnt"), 0)
            finally:
                server.stop()
                cgroup.remove()


class StreamsTest(unittest.TestCase):
    # A server of its own for each test: streams one test leaves behind (cancelled, still being
    # swept) must not take another's slots, queue places or token counts.
    def setUp(self):
        self.server = Server()

    def tearDown(self):
        self.server.stop()

    def test_unread_streams_are_paused_and_leave_the_slots_to_others(self):
        # Clients that never read: small HTTP/2 windows, so the server's writes wait on them.
        options = [("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)]
        target = f"127.0.0.1:{self.server.port}"
        channels = [grpc.insecure_channel(target, options) for _ in range(3)]
        request = pb.GenerateRequest(model="demo", prompt=pb.Sequence(text="Once upon a time"),
                                     max_tokens=800, temperature=1.0, seed=3)
        streams = [pb_grpc.InferenceStub(channels[i % 3]).Generate(request, timeout=300)
                   for i in range(300)]
        try:
            # Each is paused, or was refused while the queue was full (300 at once, 256 places).
            # Under ASan on a busy machine settling took more than a minute (268 of 300).
            def settled():
                return self.server.metric_value("attnserve_paused_streams") + \
                    self.server.metric_value("attnserve_requests_total", method="Generate",
                                             code="UNAVAILABLE")
            deadline = time.time() + 200
            while time.time() < deadline and settled() < 300:
                time.sleep(0.2)
            self.assertEqual(settled(), 300)
            paused = self.server.metric_value("attnserve_paused_streams")
            self.assertGreaterEqual(paused, 256)
            generated = self.server.metric_value("attnserve_tokens_total", kind="generated")
            # Another client still gets its first token quickly.
            start = time.time()
            other = self.server.stub.Generate(pb.GenerateRequest(
                model="demo", prompt=pb.Sequence(text="Hello"), max_tokens=16), timeout=30)
            first = next(other)
            first_token = time.time() - start
            events = [first] + list(other)
            self.assertEqual(events[-1].finish.reason, pb.FINISH_REASON_MAX_TOKENS)
            print(f"\nbackpressure: {paused:.0f} streams paused after {generated:.0f} tokens; "
                  f"another client's first token in {first_token * 1000:.0f} ms", flush=True)
            self.assertLess(first_token, 2.0)
            time.sleep(1)
            self.assertLessEqual(
                self.server.metric_value("attnserve_tokens_total", kind="generated"),
                generated + 16, "paused streams stay paused")
            # A paused stream resumes when its client reads, and finishes: beyond the tokens
            # its window held when it paused.
            events = list(streams[0])
            self.assertIn(events[-1].finish.reason,
                          (pb.FINISH_REASON_MAX_TOKENS, pb.FINISH_REASON_END_OF_TEXT))
            self.assertEqual(events[-1].finish.generated_tokens, len(events) - 1)
            self.assertGreater(len(events), 2 * generated / paused)
        finally:
            for stream in streams:
                stream.cancel()
            for channel in channels:
                channel.close()

    def test_one_clients_unread_streams_leave_room_for_another_client(self):
        # A client with gRPC's default windows that never reads: its 64 KiB per stream hold
        # more events than these generations make, so the server cannot tell it from a client
        # that reads. What it guarantees: that client gets its share of the queue and of the
        # decoding slots, and another client is answered at once. (How a full queue makes room
        # for another client is tested exactly in tests/server/engine_loop_test.cc: here the
        # queue may have room again by then, when streams end, or pause because this process
        # reads its socket late, and the slots they leave take queued requests.)
        alone_start = time.time()
        list(self.server.stub.Generate(pb.GenerateRequest(
            model="demo", prompt=pb.Sequence(text="Hello"), max_tokens=16), timeout=30))
        alone = time.time() - alone_start
        target = f"127.0.0.1:{self.server.port}"
        # Its own connection, as another process's would be (channels in one process share
        # one by default).
        hostile = grpc.insecure_channel(target, [("grpc.use_local_subchannel_pool", 1)])
        request = pb.GenerateRequest(model="demo", prompt=pb.Sequence(text="Once upon a time"),
                                     max_tokens=800, temperature=1.0, seed=3)
        streams = [pb_grpc.InferenceStub(hostile).Generate(request, timeout=300)
                   for _ in range(300)]
        try:
            # Until every one of its calls was admitted (decoding, paused, queued or done) or
            # refused.
            def held():
                m = self.server.metric_value
                return m("attnserve_active_sequences") + m("attnserve_queue_length")

            def arrived():
                m = self.server.metric_value
                return held() + m("attnserve_requests_total", method="Generate") - 1

            deadline = time.time() + 120
            while time.time() < deadline and arrived() < 300:
                time.sleep(0.1)
            state = (f"{held():.0f} of the busy client's calls held ("
                     f"{self.server.metric_value('attnserve_active_sequences'):.0f} decoding or "
                     f"paused, {self.server.metric_value('attnserve_paused_streams'):.0f} of them "
                     f"paused, {self.server.metric_value('attnserve_queue_length'):.0f} queued)")
            self.assertGreaterEqual(arrived(), 300, state)
            # It holds every decoding slot. Between a step that ends some of its streams and the
            # next, which gives their slots to its queued calls, the gauge shows fewer (28 of 32
            # once in CI): look again for a moment.
            deadline, active = time.time() + 5, 0
            while time.time() < deadline and active < 32:
                active = self.server.metric_value("attnserve_active_sequences")
                time.sleep(0.01)
            self.assertGreaterEqual(active, 32, state)
            start = time.time()
            other = self.server.stub.Generate(pb.GenerateRequest(
                model="demo", prompt=pb.Sequence(text="Hello"), max_tokens=16), timeout=30)
            first = next(other)
            first_token = time.time() - start
            events = [first] + list(other)
            generate = time.time() - start
            self.assertEqual(events[-1].finish.reason, pb.FINISH_REASON_MAX_TOKENS)
            start = time.time()
            reply = self.server.stub.NextToken(pb.NextTokenRequest(
                model="demo", sequences=[pb.Sequence(text="Hello")]), timeout=30)
            next_token = time.time() - start
            self.assertEqual(len(reply.results), 1)
            # The busy client's own requests past the queue's places were refused, retryably,
            # saying why.
            refused = [s for s in streams if s.done() and s.code() == grpc.StatusCode.UNAVAILABLE]
            for stream in refused:
                self.assertIn("queue", stream.details())
            pushed_out = sum("fewer requests queued" in s.details() for s in refused)
            print(f"\nunread default-window streams, {state}: another client's first token in "
                  f"{first_token * 1000:.0f} ms, 16 tokens in {generate * 1000:.0f} ms "
                  f"({alone * 1000:.0f} ms alone), NextToken in {next_token * 1000:.0f} ms; "
                  f"{len(refused)} of the busy client's 300 refused, {pushed_out} of them "
                  "pushed out of a full queue", flush=True)
            # Every step decodes the busy client's streams beside it: slower than alone, but
            # never behind them.
            self.assertLess(first_token, 1.0)
            self.assertLess(generate, 5.0)
            self.assertLess(next_token, 1.0)
        finally:
            for stream in streams:
                stream.cancel()
            hostile.close()

    def test_a_shared_prefix_is_reused(self):
        prefix = "You are a helpful assistant. " * 31  # 899 bytes: 28 blocks of 32
        before = self.server.metric_value("attnserve_prefix_reused_tokens_total")
        answers = []
        for question in ["What is 2+2?", "What is 2+2?", "Name a colour."]:
            events = list(self.server.stub.Generate(pb.GenerateRequest(
                model="demo", prompt=pb.Sequence(text=prefix + question), max_tokens=8),
                timeout=30))
            answers.append([e.token.id for e in events if e.HasField("token")])
        reused = self.server.metric_value("attnserve_prefix_reused_tokens_total") - before
        self.assertGreaterEqual(reused, 2 * 896)
        self.assertEqual(answers[0], answers[1], "greedy from a reused prefix, same tokens")


if __name__ == "__main__":
    unittest.main()
