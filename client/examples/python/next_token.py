# Generate the stubs from the repository root (Debian: python3-grpcio python3-grpc-tools), then run:
#   mkdir -p build/stubs && python3 -m grpc_tools.protoc -I proto --python_out=build/stubs --grpc_python_out=build/stubs proto/attnserve/v1/inference.proto
#   PYTHONPATH=build/stubs python3 client/examples/python/next_token.py --text "Once upon a time"
import argparse
import json
import os
import sys

import grpc
from attnserve.v1 import inference_pb2, inference_pb2_grpc

TOP_K = 5
MAX_TOKENS = 40
TEMPERATURE = 0.8
SEED = 1  # the same seed gives the same continuation


def main():
    parser = argparse.ArgumentParser(
        description="The most probable next tokens after a text, then a sampled continuation.")
    parser.add_argument("--target", default="localhost:50051", help="the server's host:port")
    parser.add_argument("--model", default="demo")
    parser.add_argument("--text", default="The meaning of life is")
    args = parser.parse_args()

    # A server started with --api_key wants the key with every call.
    key = os.environ.get("ATTNSERVE_API_KEY")
    metadata = [("authorization", f"Bearer {key}")] if key else None
    with grpc.insecure_channel(args.target) as channel:
        stub = inference_pb2_grpc.InferenceStub(channel)
        prompt = inference_pb2.Sequence(text=args.text)

        reply = stub.NextToken(inference_pb2.NextTokenRequest(
            model=args.model, sequences=[prompt], top_k=TOP_K), timeout=30, metadata=metadata)
        print(f"Top {TOP_K} next tokens after {json.dumps(args.text, ensure_ascii=False)}:")
        print(f"{'id':>5}  {'token':<10}  probability")
        for token in reply.results[0].top:  # one result per sequence, most probable first
            # JSON quoting makes spaces, newlines and control bytes visible.
            text = json.dumps(token.text, ensure_ascii=False)
            print(f"{token.id:>5}  {text:<10}  {token.probability:.6f}")

        print(f"\nGenerating {MAX_TOKENS} tokens (temperature {TEMPERATURE}, seed {SEED}):")
        print(args.text, end="", flush=True)
        request = inference_pb2.GenerateRequest(model=args.model, prompt=prompt,
                                                max_tokens=MAX_TOKENS, temperature=TEMPERATURE,
                                                seed=SEED)
        # Tokens arrive as they are sampled; the last message says why generation stopped.
        for event in stub.Generate(request, timeout=30, metadata=metadata):
            if event.HasField("token"):
                print(event.token.text, end="", flush=True)
            else:
                print(f"\nfinish reason: {inference_pb2.FinishReason.Name(event.finish.reason)}")


if __name__ == "__main__":
    try:
        main()
    except grpc.RpcError as error:  # e.g. NOT_FOUND for an unknown model, UNAVAILABLE if no server
        sys.exit(f"error: {error.code().name}: {error.details()}")
