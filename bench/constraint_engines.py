"""llguidance against XGrammar, the two constrained-decoding engines docs/structured-outputs.md
weighs, on SmolLM2-135M-Instruct's vocabulary (49,152 tokens) and the extraction schema of
bench/structured_outputs.py: the time to compile a schema neither has seen, and the time to
compute one token's mask along a valid answer, both through their Python packages (whose cores
are Rust and C++), same process, interleaved.

Neither package is a dependency of the project: run it in a scratch environment that has them
beside the project's venv (XGrammar needs torch, which Debian's 1.13 satisfies):

    /usr/bin/python3 -m venv --system-site-packages /tmp/engines
    /tmp/engines/bin/pip install --no-deps xgrammar==0.2.9 apache-tvm-ffi==0.1.11 \\
        llguidance==1.9.1 typing-extensions==4.15.0
    PYTHONPATH=/tmp/engines/lib/python3.11/site-packages:.venv/lib/python3.11/site-packages \\
        /tmp/engines/bin/python bench/constraint_engines.py [--rounds 5]
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gguf_vs_llamacpp import GGUF, cpu_description  # noqa: E402
from structured_outputs import SCHEMA  # noqa: E402

ANSWER = ('{"name":"Ann Larsen","age":31,"city":"Oslo","skills":["chess","music"],'
          '"employed":true}')


def fresh_schema(i):
    return json.dumps(SCHEMA).replace('"city"', f'"city_{i}"')


def fresh_answer(i):
    return ANSWER.replace('"city"', f'"city_{i}"')


class Llguidance:
    name = "llguidance"

    def __init__(self, hf_tokenizer):
        import llguidance
        import llguidance.hf
        import llguidance.numpy
        self.llg, self.numpy = llguidance, llguidance.numpy
        self.tokenizer = llguidance.hf.from_tokenizer(hf_tokenizer)
        self.mask = llguidance.numpy.allocate_token_bitmask(1, self.tokenizer.vocab_size)

    def compile(self, schema):
        grammar = self.llg.LLMatcher.grammar_from_json_schema(
            schema, defaults={"whitespace_flexible": False})
        return self.llg.LLMatcher(self.tokenizer, grammar)

    def mask_and_take(self, matcher, token):
        self.numpy.fill_next_token_bitmask(matcher, self.mask, 0)
        assert matcher.consume_token(token), matcher.get_error()


class XGrammar:
    name = "XGrammar"

    def __init__(self, hf_tokenizer):
        import xgrammar
        self.xgr = xgrammar
        self.info = xgrammar.TokenizerInfo.from_huggingface(hf_tokenizer)
        self.compiler = xgrammar.GrammarCompiler(self.info, cache_enabled=False)
        self.mask = xgrammar.allocate_token_bitmask(1, self.info.vocab_size)

    def compile(self, schema):
        compiled = self.compiler.compile_json_schema(schema, any_whitespace=False,
                                                    separators=(",", ":"))
        return self.xgr.GrammarMatcher(compiled)

    def mask_and_take(self, matcher, token):
        matcher.fill_next_token_bitmask(self.mask)
        assert matcher.accept_token(token)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(os.path.dirname(GGUF), gguf_file=os.path.basename(GGUF))
    engines = [Llguidance(hf), XGrammar(hf)]
    results = {engine.name: {"compile_ms": [], "mask_ms": []} for engine in engines}
    for round_index in range(args.rounds):
        for engine in engines:
            schema_index = round_index * len(engines) + engines.index(engine)
            start = time.perf_counter()
            matcher = engine.compile(fresh_schema(schema_index))
            results[engine.name]["compile_ms"].append(1000 * (time.perf_counter() - start))
            tokens = hf.encode(fresh_answer(schema_index), add_special_tokens=False)
            start = time.perf_counter()
            for token in tokens:
                engine.mask_and_take(matcher, token)
            results[engine.name]["mask_ms"].append(
                1000 * (time.perf_counter() - start) / len(tokens))
    print(cpu_description())
    print("| engine | compile a new schema | mask per token |")
    print("|---|---|---|")
    for engine in engines:
        r = results[engine.name]
        print(f"| {engine.name} | {statistics.median(r['compile_ms']):.1f} ms | "
              f"{statistics.median(r['mask_ms']):.3f} ms |")


if __name__ == "__main__":
    main()
