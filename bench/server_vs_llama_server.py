"""attnserve's server against llama.cpp's llama-server on the same GGUF file, same machine, same
run: SmolLM2-135M-Instruct, streams of 128-token prompts each generating exactly 64 tokens
(ignore_eos), 1, 4 and 16 at once, every stream asking again as soon as it is answered.

    .venv/bin/python bench/server_vs_llama_server.py build \
        --llama_server /tmp/llamacpp-peer/build/bin/llama-server [--gguf FILE] [--seconds 30]
        [--rounds 2] [--streams 1,4,16] [--base OTHER_ATTNSERVE_BINARY]

- attnserve: build/server/attnserve --threads=2 on a repository holding the .gguf file, with
  its defaults (--weights=auto: int4 weights for this file of 4-bit blocks, the token table
  int8; f16 KV cache; int8 activations).
- llama-server (built outside the repository by bench/build_llamacpp.sh) with -t 2, as many slots
  as streams (-np), a context of 256 tokens per slot and its other defaults (continuous batching,
  prompt cache; each prompt differs from the others anyway), twice: with its default weight
  repacking (on a CPU with AMX, its AMX layout) and with --no-repack (its AVX-512 or AVX2 kernels
  on the file's blocks, as on CPUs without AMX).
Both are driven alike: the OpenAI API's /v1/completions with "stream": true over HTTP/1.1, one
Python thread per stream and a connection per answer (llama-server closes the connection after a
streamed answer); the prompts are distinct texts (a number
leads each) that the model's tokenizer makes 128 tokens of. Per case: generated tokens per second
(the tokens that arrived within the measured window, over its length), the median and 99th percentile of the gaps
between a stream's consecutive tokens, the median time to the first token, and the server's peak
resident memory (VmHWM). Each server is started afresh for each case; the cases alternate
between the two servers, --rounds times, and the table gives the median of the rounds. Before
each case the script waits until other processes leave the CPUs quiet (as gguf_vs_llamacpp.py).
Raw results go to bench/results/server_vs_llama_server.json."""
import argparse
import http.client
import json
import os
import signal
import socket
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

PROMPT_TOKENS, GENERATED = 128, 64
PEERS = ("attnserve", "llama-server", "llama-server --no-repack")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prompts(gguf, count):
    """`count` distinct texts of exactly PROMPT_TOKENS tokens for the model's tokenizer."""
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(gguf),
                                              gguf_file=os.path.basename(gguf))
    with open("/usr/share/common-licenses/GPL-3") as f:
        words = f.read().split()
    texts = []
    for i in range(count):
        start = (i * 37) % (len(words) - 400)
        ids = tokenizer(f"{i}. " + " ".join(words[start:start + 400]),
                        add_special_tokens=False)["input_ids"][:PROMPT_TOKENS]
        text = tokenizer.decode(ids)
        # Decoding and encoding again may merge differently: keep the ones that come back whole.
        if len(tokenizer(text, add_special_tokens=False)["input_ids"]) == PROMPT_TOKENS:
            texts.append(text)
    return texts


class Server:
    def __init__(self, command, port, model):
        self.port, self.model = port, model
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 120
        while True:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                connection.request("GET", "/health")
                if connection.getresponse().status == 200:
                    return
            except OSError:
                pass
            if time.time() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"{command[0]} did not come up")
            time.sleep(0.2)

    def peak_rss_mib(self):
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


def stream_once(connection, model, prompt):
    """One streamed completion: (arrival time of each token's event, time of the request)."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": GENERATED,
                       "temperature": 0, "stream": True, "ignore_eos": True})
    start = time.perf_counter()
    connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:200]}")
    arrivals = []
    for line in response:
        if line.startswith(b"data: {"):
            event = json.loads(line[6:])
            if event["choices"] and event["choices"][0].get("text"):
                arrivals.append(time.perf_counter())
    return arrivals, start


def load(server, streams, texts, seconds):
    """`streams` threads asking again and again; measured over `seconds` from 3 s in."""
    results = [[] for _ in range(streams)]
    begin = time.perf_counter() + 3.0  # past the first burst of prompts
    end = begin + seconds

    def client(index):
        n = index
        while time.perf_counter() < end:
            # A connection per answer: llama-server closes a streamed answer's connection.
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
            arrivals, start = stream_once(connection, server.model, texts[n % len(texts)])
            connection.close()
            results[index].append((start, arrivals))
            n += streams

    threads = [threading.Thread(target=client, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    answers = [a for r in results for a in r]
    # Tokens that arrived within the window, whoever asked for them when.
    tokens = sum(begin <= t <= end for _, arrivals in answers for t in arrivals)
    gaps = [later - earlier for _, arrivals in answers
            for earlier, later in zip(arrivals, arrivals[1:]) if begin <= earlier and later <= end]
    first = [arrivals[0] - start for start, arrivals in answers if begin <= start <= end]
    nan = float("nan")
    return {"tokens_per_s": tokens / seconds,
            "answers_started": len(first),
            "itl_median_ms": statistics.median(gaps) * 1e3 if gaps else nan,
            "itl_p99_ms": statistics.quantiles(gaps, n=100)[98] * 1e3 if len(gaps) > 1 else nan,
            "ttft_median_ms": statistics.median(first) * 1e3 if first else nan,
            "peak_rss_mib": server.peak_rss_mib()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir")
    parser.add_argument("--llama_server", default="/tmp/llamacpp-peer/build/bin/llama-server")
    parser.add_argument("--gguf", default=GGUF)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--streams", default="1,4,16")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help="of " + ", ".join(PEERS) + " and 'llama-server q4_0'")
    parser.add_argument("--q4_0", help="for the peer 'llama-server q4_0': a Q4_0 file of the "
                                       "model (bench/gguf_vs_llamacpp.py --q4_0 makes one)")
    parser.add_argument("--base", help="another attnserve binary (an earlier commit's), run as "
                                       "the peer 'attnserve base' with the same flags")
    parser.add_argument("--attnserve_flags", default="",
                        help="more flags for attnserve, e.g. --prefill_chunk_tokens=64")
    parser.add_argument("--quiet", type=float, default=0.15)
    parser.add_argument("--patience", type=float, default=300.0)
    args = parser.parse_args()
    gguf = os.path.realpath(args.gguf)
    stream_counts = [int(s) for s in args.streams.split(",")]
    peers = args.peers.split(",")
    if args.base and "attnserve base" not in peers:
        peers.insert(1, "attnserve base")
    texts = prompts(gguf, 64)
    repository = tempfile.mkdtemp()
    os.symlink(gguf, os.path.join(repository, "smollm2.gguf"))
    attnserve = os.path.join(os.path.abspath(args.build_dir), "server", "attnserve")

    def start(peer, streams):
        port = free_port()
        if peer in ("attnserve", "attnserve base"):
            binary = attnserve if peer == "attnserve" else os.path.abspath(args.base)
            return Server([binary, "--threads=2", "--host=127.0.0.1", f"--port={free_port()}",
                           f"--http_port={port}", f"--metrics_port={free_port()}",
                           f"--model_repository={repository}", *args.attnserve_flags.split()],
                          port, "smollm2")
        repack = ["--no-repack"] if peer.endswith("--no-repack") else []
        model = os.path.realpath(args.q4_0) if peer.endswith("q4_0") else gguf
        return Server([args.llama_server, "-m", model, "-t", "2", "-tb", "2", "-np", str(streams),
                       "-c", str(256 * streams), "--host", "127.0.0.1", "--port", str(port),
                       *repack], port, "smollm2")

    runs = {}
    for round_index in range(args.rounds):
        for streams in stream_counts:
            for peer in peers:
                share = wait_for_quiet(os.cpu_count(), args.quiet, args.patience)
                server = start(peer, streams)
                try:
                    result = load(server, streams, texts, args.seconds)
                    result["others_share_before"] = share
                finally:
                    server.stop()
                print(f"round {round_index + 1}, {streams} streams, {peer}: "
                      f"{json.dumps(result)}", file=sys.stderr, flush=True)
                runs.setdefault(f"{peer} {streams}", []).append(result)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "server_vs_llama_server.json"), "w") as f:
        json.dump(runs, f, indent=1)

    def median(peer, streams, key):
        return statistics.median(r[key] for r in runs[f"{peer} {streams}"])

    name, extensions, cpus = cpu_description()
    print(f"{name}, {cpus} CPUs, {' '.join(extensions)}")
    print("| streams | server | tokens/s | against the first | inter-token ms, median / p99 | "
          "first token ms, median | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for s in stream_counts:
        ours = median(peers[0], s, "tokens_per_s")
        for peer in peers:
            rate = median(peer, s, "tokens_per_s")
            print(f"| {s} | {peer} | {rate:.0f} | {rate / ours:.2f}x | "
                  f"{median(peer, s, 'itl_median_ms'):.1f} / {median(peer, s, 'itl_p99_ms'):.1f} | "
                  f"{median(peer, s, 'ttft_median_ms'):.0f} | "
                  f"{median(peer, s, 'peak_rss_mib'):.0f} |")


if __name__ == "__main__":
    main()
