"""What loading a model costs the server: seconds from start to serving, resident memory when
the memory plan is made, and resident memory 3 s after one NextToken (the trimmer has run).

Usage: bench/model_load.py BUILD_DIR MODEL_DIR [--runs 3]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import grpc


def resident_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("model")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "tests/e2e/python_stubs"))
    from attnserve.v1 import inference_pb2 as pb, inference_pb2_grpc as pb_grpc

    with tempfile.TemporaryDirectory() as repository:
        os.symlink(os.path.abspath(args.model), os.path.join(repository, "model"))
        for run in range(args.runs):
            log = tempfile.TemporaryFile("w+")
            start = time.time()
            server = subprocess.Popen(
                [os.path.join(args.build, "server/attnserve"), f"--model_repository={repository}",
                 "--host=127.0.0.1", "--port=50199", "--metrics_port=0"],
                stdout=log, stderr=subprocess.STDOUT)
            try:
                while True:
                    log.seek(0)
                    text = log.read()
                    if "serving" in text:
                        break
                    if server.poll() is not None:
                        raise RuntimeError(text)
                    time.sleep(0.01)
                loaded = time.time() - start
                planned = re.search(r"(\d+) MiB resident", text).group(1)
                channel = grpc.insecure_channel("127.0.0.1:50199")
                pb_grpc.InferenceStub(channel).NextToken(pb.NextTokenRequest(
                    model="model", sequences=[pb.Sequence(text="hello world " * 10)]), timeout=60)
                time.sleep(3)
                print(f"run {run + 1}: serving after {loaded:.2f} s; {planned} MiB resident at "
                      f"the memory plan, {resident_mib(server.pid):.1f} MiB after a request")
                channel.close()
            finally:
                server.terminate()
                server.wait()


if __name__ == "__main__":
    main()
