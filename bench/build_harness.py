"""The end-to-end tests' server harness (tests/e2e/server_harness.py) pointed at a build
directory: how the benchmarks that run a real server start it. ATTNSERVE_BINARY, when set, picks
another server binary (an earlier commit's, to compare in the same run)."""
import importlib
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def server_harness(build_dir):
    build = os.path.abspath(build_dir)
    os.environ.setdefault("ATTNSERVE_BINARY", os.path.join(build, "server", "attnserve"))
    os.environ.setdefault("ATTNSERVE_STUBS", os.path.join(build, "tests", "e2e", "python_stubs"))
    os.environ.setdefault("ATTNSERVE_MODELS", os.path.join(ROOT, "models"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
    return importlib.import_module("server_harness")
