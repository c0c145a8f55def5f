"""Writes request_fuzz's seed corpus: one file per request, a selector byte (the RPC: 0
NextToken, 1 Score, 2 Embed, 3 Generate, 4 GetModel) then the serialized request. Valid and
invalid requests for each of the fuzzing repository's models (demo: causal LM, translator:
encoder-decoder, embedder: encoder).
Usage: make_request_corpus.py STUBS_DIR CORPUS_DIR"""
import os
import sys

sys.path.insert(0, sys.argv[1])
from attnserve.v1 import inference_pb2 as pb  # noqa: E402


def text(t):
    return pb.Sequence(text=t)


def ids(*values):
    return pb.Sequence(tokens=pb.TokenIds(ids=values))


SEEDS = {
    "next_token_text": (0, pb.NextTokenRequest(model="demo", sequences=[text("Once upon")])),
    "next_token_batch": (0, pb.NextTokenRequest(
        model="demo", sequences=[text("a"), ids(72, 105), text("\u65e5\u672c")], top_k=5,
        temperature=0.7, full_distribution=True)),
    "next_token_bad_id": (0, pb.NextTokenRequest(model="demo", sequences=[ids(1, 300, -2)])),
    "next_token_seq2seq": (0, pb.NextTokenRequest(
        model="translator", sequences=[ids(256, 98)], sources=[text("hello world")])),
    "next_token_unknown_model": (0, pb.NextTokenRequest(
        model="../demo", sequences=[text("x")])),
    "score": (1, pb.ScoreRequest(model="demo", sequence=text("The cat sat"))),
    "score_seq2seq": (1, pb.ScoreRequest(model="translator", sequence=ids(256, 98, 111),
                                         source=text("hi"))),
    "embed_mean": (2, pb.EmbedRequest(model="embedder", sequences=[text("attention"),
                                                                   text("is all")],
                                      normalize=True, head_contribution_layers=[1])),
    "embed_none": (2, pb.EmbedRequest(model="embedder", sequences=[text("abc")],
                                      pooling=pb.POOLING_NONE)),
    "embed_features_refused": (2, pb.EmbedRequest(
        model="embedder", feature_sets=[pb.FeatureSet(values=[1.0, 2.0], width=2)])),
    "generate_greedy": (3, pb.GenerateRequest(model="demo", prompt=text("The"), max_tokens=4)),
    "generate_sampled": (3, pb.GenerateRequest(
        model="demo", prompt=text("Hi"), max_tokens=6, temperature=0.9, top_k=20, top_p=0.9,
        seed=7, stop=["e", "\n"])),
    "generate_seq2seq": (3, pb.GenerateRequest(model="translator", prompt=ids(256),
                                               source=text("hello"), max_tokens=3)),
    "generate_long_prompt": (3, pb.GenerateRequest(model="translator", prompt=ids(256),
                                                   source=text("x" * 80))),
    "get_model": (4, pb.GetModelRequest(model="embedder")),
}


def main():
    corpus = sys.argv[2]
    os.makedirs(corpus, exist_ok=True)
    for name, (selector, request) in SEEDS.items():
        with open(os.path.join(corpus, name), "wb") as f:
            f.write(bytes([selector]) + request.SerializeToString())


if __name__ == "__main__":
    main()
