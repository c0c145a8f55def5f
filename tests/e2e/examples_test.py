"""End-to-end tests of the client examples in client/examples/: each runs against the real server
and must print what the server answers the test itself for the same requests.

The Node example needs client/examples/node/node_modules, which scripts/install-deps.sh installs.
The Go, Java and Rust examples are built here first, offline and incrementally, with what
scripts/install-deps.sh fetched (their toolchains, modules, crates and Maven artifacts).
"""
import json
import os
import re
import shutil
import subprocess
import unittest

from server_harness import Server, pb

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES = os.path.join(ROOT, "client", "examples")
MODEL = "demo"
# What every example asks for (their constants); the test asks the server the same.
TOP_K, MAX_TOKENS, TEMPERATURE, SEED = 5, 40, 0.8, 1
# Plain text; text after which the demo model's seeded continuation ends at end of text rather
# than at max tokens; text that needs JSON quoting (quotes, a backslash, a newline, non-ASCII).
TEXTS = ["The meaning of life is", "Hello.", 'She said "caf\u00e9\\n" and\nthen']

ROW = re.compile(r' *(\d+)  (".*") +(\S+)')
GENERATION = re.compile(r"Generating (\d+) tokens \(temperature ([\d.]+), seed (\d+)\):\n"
                        r"(.*)\nfinish reason: (\w+)\n", re.DOTALL)

# A cold build of the Go or the Rust example takes about a minute on 2 idle cores; this only
# bounds a stuck one.
BUILD_TIMEOUT = 600

# The server wants an API key; every example sends $ATTNSERVE_API_KEY.
KEY = "sk-attnserve-examples"

server = None


def setUpModule():
    global server
    server = Server(f"--api_key={KEY}", api_key=KEY)


def tearDownModule():
    server.stop()


def parse(output):
    """The example's output as (top-k title, [(id, text, probability)], generation match)."""
    table, separator, generation = output.partition("\n\n")
    if not separator:
        raise AssertionError(f"no blank line between the table and the generation:\n{output}")
    title, header, *rows = table.split("\n")
    if header.split() != ["id", "token", "probability"]:
        raise AssertionError(f"unexpected table header {header!r}:\n{output}")
    parsed = []
    for row in rows:
        match = ROW.fullmatch(row)
        if not match:
            raise AssertionError(f"unparsable table row {row!r}:\n{output}")
        parsed.append((int(match[1]), json.loads(match[2]), float(match[3])))
    match = GENERATION.fullmatch(generation)
    if not match:
        raise AssertionError(f"unexpected generation output:\n{generation}")
    return title, parsed, match


def find_tool(name, before_path=(), after_path=()):
    """`name` where scripts/install-deps.sh looks for it: in before_path, on PATH, in after_path."""
    path = [*before_path, *os.environ.get("PATH", "").split(os.pathsep), *after_path]
    found = shutil.which(name, path=os.pathsep.join(path))
    if found is None:
        raise AssertionError(f"{name} is not installed: run scripts/install-deps.sh (make deps)")
    return found


def build(example, tool, *commands, **env):
    """Builds an example in its directory, offline: the build fetches nothing."""
    environment = dict(os.environ, **env)
    # Whatever the tool runs (rustc, protoc plugins, go) comes from beside it.
    environment["PATH"] = os.path.dirname(tool) + os.pathsep + environment.get("PATH", "")
    for command in commands:
        result = subprocess.run(command, cwd=os.path.join(EXAMPLES, example), env=environment,
                                capture_output=True, encoding="utf-8", timeout=BUILD_TIMEOUT)
        if result.returncode != 0:
            raise AssertionError(
                f"building client/examples/{example} offline failed: {' '.join(command)} exited "
                f"{result.returncode}. scripts/install-deps.sh (make deps) fetches what it "
                f"needs.\n{result.stdout}{result.stderr}")


class ExampleTests:
    """What every example must do; a subclass says how to run its example."""

    command = None  # the example's command line, without arguments
    cwd = None
    env = {}  # what the example needs in its environment

    def run_example(self, *args, command=None, cwd=None, **env):
        environment = {k: v for k, v in os.environ.items() if k != "ATTNSERVE_PROTO"}
        environment["ATTNSERVE_API_KEY"] = KEY
        environment.update(self.env, **env)
        return subprocess.run([*(command or self.command), "--target", f"127.0.0.1:{server.port}",
                               *args], cwd=cwd or self.cwd, env=environment, capture_output=True,
                              encoding="utf-8", timeout=120)

    def run_ok(self, *args):
        result = self.run_example(*args)
        self.assertEqual(result.returncode, 0,
                         f"stderr:\n{result.stderr}\nstdout:\n{result.stdout}")
        return result.stdout

    def test_prints_the_servers_next_tokens_and_seeded_generation(self):
        for text in TEXTS:
            with self.subTest(text=text):
                output = self.run_ok("--model", MODEL, "--text", text)
                title, rows, generation = parse(output)
                self.assertEqual(title, f"Top {TOP_K} next tokens after "
                                        f"{json.dumps(text, ensure_ascii=False)}:")

                expected = server.stub.NextToken(pb.NextTokenRequest(
                    model=MODEL, sequences=[pb.Sequence(text=text)], top_k=TOP_K),
                    timeout=30).results[0].top
                self.assertEqual(len(rows), TOP_K, output)
                self.assertEqual([(i, token) for i, token, _ in rows],
                                 [(t.id, t.text) for t in expected])
                probabilities = [p for _, _, p in rows]
                self.assertTrue(all(0 < p <= 1 for p in probabilities), probabilities)
                self.assertEqual(probabilities, sorted(probabilities, reverse=True))
                for printed, t in zip(probabilities, expected):
                    self.assertAlmostEqual(printed, t.probability, delta=5e-7)

                max_tokens, temperature, seed, text_out, reason = generation.groups()
                self.assertEqual((int(max_tokens), float(temperature), int(seed)),
                                 (MAX_TOKENS, TEMPERATURE, SEED))
                tokens, finish = [], None
                for event in server.stub.Generate(pb.GenerateRequest(
                        model=MODEL, prompt=pb.Sequence(text=text), max_tokens=MAX_TOKENS,
                        temperature=TEMPERATURE, seed=SEED), timeout=60):
                    if event.HasField("token"):
                        tokens.append(event.token.text)
                    else:
                        finish = event.finish
                # The prompt, then the continuation as it streamed (a seed makes it reproducible).
                self.assertTrue(text_out.startswith(text), text_out)
                continuation = text_out[len(text):]
                self.assertTrue(continuation)
                self.assertEqual(continuation, "".join(tokens))
                self.assertEqual(reason, pb.FinishReason.Name(finish.reason))

    def test_without_the_key_the_server_refuses_and_the_example_says_so(self):
        result = self.run_example("--model", MODEL, "--text", "Hello", ATTNSERVE_API_KEY="")
        self.assertNotEqual(result.returncode, 0, result.stdout)
        self.assertIn("UNAUTHENTICATED", result.stderr)

    def test_an_unknown_model_exits_nonzero_with_the_status_and_the_model(self):
        result = self.run_example("--model", "no_such_model", "--text", "Hello")
        self.assertNotEqual(result.returncode, 0, f"exit 0 for an unknown model:\n{result.stdout}")
        self.assertIn("NOT_FOUND", result.stderr)
        self.assertIn("no_such_model", result.stderr)
        # Readable: one line, no traceback or stack trace.
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)


class PythonExampleTest(ExampleTests, unittest.TestCase):
    # Debian's grpcio lives in the system interpreter, whatever python3 is first on PATH.
    command = ["/usr/bin/python3", os.path.join(EXAMPLES, "python", "next_token.py")]
    env = {"PYTHONPATH": os.environ["ATTNSERVE_STUBS"]}


class NodeExampleTest(ExampleTests, unittest.TestCase):
    command = ["node", "next_token.js"]
    cwd = os.path.join(EXAMPLES, "node")

    @classmethod
    def setUpClass(cls):
        if shutil.which("node") is None:
            raise AssertionError("node is not on PATH: run scripts/install-deps.sh")
        if not os.path.isdir(os.path.join(cls.cwd, "node_modules", "@grpc", "grpc-js")):
            raise AssertionError("client/examples/node/node_modules is missing: run "
                                 "scripts/install-deps.sh (it runs npm ci there)")

    def test_runs_from_any_directory_and_attnserve_proto_says_where_the_proto_is(self):
        command = ["node", os.path.join(self.cwd, "next_token.js")]
        found = self.run_example("--model", MODEL, command=command, cwd="/")
        self.assertEqual(found.returncode, 0, found.stderr)
        missing = self.run_example("--model", MODEL, command=command, cwd="/",
                                   ATTNSERVE_PROTO="/nonexistent/inference.proto")
        self.assertNotEqual(missing.returncode, 0, "ATTNSERVE_PROTO was ignored")
        self.assertIn("/nonexistent/inference.proto", missing.stderr)


class GoExampleTest(ExampleTests, unittest.TestCase):
    command = [os.path.join(EXAMPLES, "go", "bin", "next_token")]

    @classmethod
    def setUpClass(cls):
        go = find_tool("go", before_path=[os.path.join(ROOT, ".toolchains", "go", "bin")],
                       after_path=["/usr/local/go/bin"])
        # go generate: protoc with the two plugins go.mod pins, built into bin/.
        build("go", go, [go, "generate"], [go, "build", "-o", "bin/next_token", "."],
              GOFLAGS="-mod=readonly -buildvcs=false", GOPROXY="off", GOTOOLCHAIN="local")


class JavaExampleTest(ExampleTests, unittest.TestCase):
    # Java 17 decodes its arguments in the locale's charset: a UTF-8 locale keeps TEXTS' é.
    env = {"LC_ALL": "C.UTF-8"}

    @classmethod
    def setUpClass(cls):
        mvn, java = find_tool("mvn"), find_tool("java")
        build("java", mvn, [mvn, "--offline", "--batch-mode", "--quiet", "package"])
        cls.command = [java, "-jar", os.path.join(EXAMPLES, "java", "target", "next-token.jar")]


class RustExampleTest(ExampleTests, unittest.TestCase):
    command = [os.path.join(EXAMPLES, "rust", "target", "debug", "next-token")]

    @classmethod
    def setUpClass(cls):
        cargo_home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
        cargo = find_tool("cargo", before_path=[os.path.join(cargo_home, "bin")])
        build("rust", cargo,
              [cargo, "build", "--offline", "--locked", "--quiet", "--target-dir", "target"])


if __name__ == "__main__":
    unittest.main()
