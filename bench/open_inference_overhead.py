"""What the Open Inference Protocol costs over attnserve.v1 for one request: a lone NextToken
(the demo model, top 5, the same text) through attnserve.v1's NextToken and through ModelInfer
with raw tensors (as Triton's clients send them), both from the same Python gRPC channel, one
call at a time, alternated in rounds so that both see the same machine. The difference of the
medians is the protocol's translation both ways plus its larger messages.
Run by the project's venv Python (tritonclient's generated stubs):
  .venv/bin/python bench/open_inference_overhead.py BUILD_DIR [--rounds 10] [--calls 200]"""
import argparse
import statistics
import struct
import time

from build_harness import server_harness


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=200, help="calls of each kind per round")
    parser.add_argument("--threads", type=int, default=1, help="server compute threads")
    args = parser.parse_args()
    harness = server_harness(args.build_dir)
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    text = "The meaning of life is"
    v1_request = harness.pb.NextTokenRequest(model="demo", sequences=[harness.pb.Sequence(
        text=text)], top_k=5)
    infer_request = service_pb2.ModelInferRequest(model_name="demo")
    infer_request.inputs.add(name="text", datatype="BYTES", shape=[1])
    infer_request.raw_input_contents.append(struct.pack("<I", len(text)) + text.encode())
    infer_request.parameters["top_k"].int64_param = 5
    for name in ("top_k_ids", "top_k_tokens", "top_k_probabilities", "top_k_log_probabilities",
                 "input_tokens"):
        infer_request.outputs.add(name=name)

    server = harness.Server(f"--threads={args.threads}")
    try:
        calls = {"attnserve.v1 NextToken": (server.stub.NextToken, v1_request),
                 "Open Inference Protocol ModelInfer": (
                     service_pb2_grpc.GRPCInferenceServiceStub(server.channel).ModelInfer,
                     infer_request)}
        seconds = {name: [] for name in calls}
        for round_ in range(args.rounds + 1):
            for name, (call, request) in calls.items():
                for _ in range(args.calls):
                    start = time.perf_counter()
                    call(request, timeout=10)
                    if round_ > 0:  # the first round warms up
                        seconds[name].append(time.perf_counter() - start)
        medians = {}
        for name, samples in seconds.items():
            samples.sort()
            medians[name] = statistics.median(samples) * 1e6
            print(f"{name}: median {medians[name]:.0f} µs, "
                  f"p90 {samples[int(len(samples) * 0.9)] * 1e6:.0f} µs ({len(samples)} calls)")
        v1, oip = medians.values()
        print(f"difference of the medians: {oip - v1:+.0f} µs ({oip / v1:.3f}x)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
