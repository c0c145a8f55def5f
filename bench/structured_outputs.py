"""What structured outputs cost (docs/structured-outputs.md, docs/benchmarks.md), on
SmolLM2-135M-Instruct (the GGUF file make serve serves, int4 weights by --weights=auto):

- compile: the latency of a one-token chat answer whose JSON schema the server has not seen,
  less that of the same request once the schema is cached (median of --schemas schemas);
- mask: the engine thread's time in llguidance's mask per constrained token
  (attnserve_constraint_mask_seconds), and its share of the engine's time;
- tokens/s of chat answers constrained to an extraction schema against the same requests
  unconstrained (ignore_eos, as many tokens as the constrained answers average), 1 and 16
  streams at once, each stream asking again as soon as it is answered.

    .venv/bin/python bench/structured_outputs.py build [--seconds 20] [--rounds 2]
        [--streams 1,16]

Raw results go to bench/results/structured_outputs.json."""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from gguf_vs_llamacpp import GGUF, cpu_description, wait_for_quiet  # noqa: E402
from server_vs_llama_server import free_port  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 24},
        "skills": {"type": "array", "items": {"enum": ["cooking", "chess", "python", "music"]},
                   "maxItems": 3},
        "employed": {"type": "boolean"},
    },
    "required": ["name", "age", "city", "skills", "employed"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "user", "content": "Describe a fictional person as JSON: name, age, city, "
                                        "skills and whether they are employed."}]


class Server:
    def __init__(self, binary):
        self.repository = tempfile.TemporaryDirectory()
        os.symlink(os.path.realpath(GGUF), os.path.join(self.repository.name, "smollm2.gguf"))
        self.http, self.metrics = free_port(), free_port()
        self.process = subprocess.Popen(
            [binary, f"--model_repository={self.repository.name}", "--threads=2",
             f"--port={free_port()}", f"--metrics_port={self.metrics}", f"--http_port={self.http}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                self.post({"messages": MESSAGES, "max_tokens": 1})
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the server did not start")

    def post(self, fields):
        connection = http.client.HTTPConnection("127.0.0.1", self.http, timeout=300)
        try:
            connection.request("POST", "/v1/chat/completions",
                               json.dumps({"model": "smollm2", **fields}))
            response = connection.getresponse()
            body = json.loads(response.read())
            if response.status != 200:
                raise RuntimeError(body)
            return body
        finally:
            connection.close()

    def mask_seconds(self):
        connection = http.client.HTTPConnection("127.0.0.1", self.metrics, timeout=10)
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
        connection.close()
        values = {}
        for line in text.splitlines():
            for name in ("attnserve_constraint_mask_seconds_sum",
                         "attnserve_constraint_mask_seconds_count"):
                if line.startswith(name):
                    values[name] = float(line.rsplit(" ", 1)[1])
        return (values.get("attnserve_constraint_mask_seconds_sum", 0.0),
                values.get("attnserve_constraint_mask_seconds_count", 0.0))

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)
        self.repository.cleanup()


def compile_seconds(server, schemas):
    """Median extra latency of a schema's first use over its cached use."""
    extra = []
    for i in range(schemas):
        schema = json.loads(json.dumps(SCHEMA).replace('"city"', f'"city_{i}"'))
        fields = {"messages": MESSAGES, "max_tokens": 1,
                  "response_format": {"type": "json_schema",
                                      "json_schema": {"name": "p", "schema": schema}}}
        times = []
        for _ in range(2):
            start = time.perf_counter()
            server.post(fields)
            times.append(time.perf_counter() - start)
        extra.append(times[0] - times[1])
    return statistics.median(extra)


def run_case(server, streams, seconds, constrained, max_tokens):
    fields = {"messages": MESSAGES, "temperature": 0.7}
    if constrained:
        fields.update(max_tokens=200, response_format={
            "type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}})
    else:
        fields.update(max_tokens=max_tokens, ignore_eos=True)
    tokens, answers, lock = [0], [0], threading.Lock()
    stop = time.time() + seconds

    def stream(index):
        seed = index * 1000
        while time.time() < stop:
            body = server.post({**fields, "seed": seed})
            seed += 1
            if constrained:
                json.loads(body["choices"][0]["message"]["content"])  # it parses
            with lock:
                tokens[0] += body["usage"]["completion_tokens"]
                answers[0] += 1

    mask_before = server.mask_seconds()
    start = time.time()
    threads = [threading.Thread(target=stream, args=(i,)) for i in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.time() - start
    mask_after = server.mask_seconds()
    masks = mask_after[1] - mask_before[1]
    return {"tokens_per_s": tokens[0] / wall, "answers": answers[0],
            "tokens_per_answer": tokens[0] / max(answers[0], 1),
            "mask_ms_per_token": 1000 * (mask_after[0] - mask_before[0]) / masks if masks else 0,
            "mask_share": (mask_after[0] - mask_before[0]) / wall}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--streams", default="1,16")
    parser.add_argument("--schemas", type=int, default=9)
    args = parser.parse_args()
    binary = os.path.join(args.build, "server", "attnserve")
    results = {"cpu": cpu_description(), "cases": []}
    server = Server(binary)
    try:
        wait_for_quiet(os.cpu_count(), 0.1, 120)
        results["compile_ms"] = 1000 * compile_seconds(server, args.schemas)
        print(f"compile: {results['compile_ms']:.1f} ms per schema", flush=True)
        length = 48
        for round_index in range(args.rounds):
            for streams in [int(s) for s in args.streams.split(",")]:
                for constrained in (True, False):
                    wait_for_quiet(os.cpu_count(), 0.1, 120)
                    case = run_case(server, streams, args.seconds, constrained, length)
                    if constrained:
                        length = max(1, round(case["tokens_per_answer"]))
                    case.update(round=round_index, streams=streams, constrained=constrained)
                    results["cases"].append(case)
                    print(json.dumps(case), flush=True)
    finally:
        server.stop()
    print(f"\n{results['cpu']}; compile {results['compile_ms']:.1f} ms per schema")
    print("| streams | tokens/s with a schema | without | ratio | mask per token | mask share |")
    print("|---|---|---|---|---|---|")
    for streams in sorted({c["streams"] for c in results["cases"]}):
        def median(constrained, key):
            return statistics.median(c[key] for c in results["cases"]
                                     if c["streams"] == streams and c["constrained"] == constrained)
        with_schema, without = median(True, "tokens_per_s"), median(False, "tokens_per_s")
        print(f"| {streams} | {with_schema:.1f} | {without:.1f} | {with_schema / without:.2f} | "
              f"{median(True, 'mask_ms_per_token'):.3f} ms | "
              f"{100 * median(True, 'mask_share'):.1f}% |")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "structured_outputs.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
