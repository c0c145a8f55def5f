// attnserve: serves the models of a model repository over gRPC, with Prometheus metrics.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <omp.h>
#include <signal.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "server/grpc/open_inference/open_inference_service.h"
#include "server/grpc/protobuf_log.h"
#include "server/grpc/v1/inference_service.h"
#include "server/http/http_server.h"
#include "server/http/open_inference/open_inference_rest.h"
#include "server/http/openai/openai_service.h"
#include "server/http/tei/tei_service.h"
#include "server/ops/cpu_quota.h"
#include "server/ops/environment_flags.h"
#include "server/ops/memory_trimmer.h"
#include "server/ops/metrics_endpoint.h"

ABSL_FLAG(std::string, host, "0.0.0.0", "Address to listen on");
ABSL_FLAG(int, port, 50051, "gRPC port");
ABSL_FLAG(int, metrics_port, 9090, "HTTP port for /metrics (0: no metrics endpoint)");
ABSL_FLAG(int, http_port, 0,
          "HTTP port of the OpenAI-compatible API: /v1/completions, /v1/chat/completions, "
          "/v1/embeddings, /v1/models, /tokenize, /detokenize, /health (0: off)");
ABSL_FLAG(std::string, http_host, "",
          "Address the HTTP API listens on (empty: --host); a pod whose proxy fronts gRPC on "
          "the loopback serves HTTP on its own address");
ABSL_FLAG(int, http_threads, 1, "Threads serving the HTTP API's connections");
ABSL_FLAG(int, http_max_connections, 1024,
          "HTTP connections open at once; more are answered 503 and closed");
ABSL_FLAG(int, http_read_timeout_s, 30,
          "An HTTP request must arrive within this; idle keep-alive connections close after it");
ABSL_FLAG(int, http_max_header_bytes, 16 << 10, "Largest HTTP request header");
ABSL_FLAG(std::string, model_repository, "models",
          "Directory with one subdirectory per model (config.json + model.safetensors)");
ABSL_FLAG(int, threads, 0, "Compute threads per engine call (0: the container's CPU quota)");
ABSL_FLAG(int, max_batch_size, 32, "Most requests (or decoding sequences) in one engine batch");
// 0, as Triton's default: requests that arrive while the engine is busy batch up anyway.
ABSL_FLAG(int, max_queue_delay_ms, 0, "Longest wait for a batch to fill before running it");
ABSL_FLAG(int, max_queue_size, 256, "Requests queued per model before UNAVAILABLE");
ABSL_FLAG(int64_t, max_batch_tokens, 16384,
          "Most tokens per engine call and per NextToken, Score or Embed request (lowered to what "
          "each model's share of memory holds)");
ABSL_FLAG(int64_t, step_tokens, 2048,
          "Most tokens one scheduler step puts through the engine: prompt chunks and NextToken, "
          "Score or Embed requests together (a larger request runs alone)");
ABSL_FLAG(int64_t, prefill_chunk_tokens, 256,
          "The step's token budget while generations decode (chunked prefill), at most");
ABSL_FLAG(double, prefill_pacing, 1.3,
          "While generations decode, a step's prompt chunks and requests take about this many "
          "times its decode call (at least 32 tokens; 0: always --prefill_chunk_tokens): the "
          "streams' inter-token latency against how fast new prompts start");
ABSL_FLAG(int64_t, memory_limit_mb, 0,
          "Memory the process may use (0: the cgroup's limit, as in a container, else physical "
          "memory); shared out among the models' KV caches, activations and answers");
ABSL_FLAG(int, idle_spin_us, 300,
          "How long an idle model scheduler polls for work before sleeping (0: never)");
ABSL_FLAG(
    std::string, weights, "auto",
    "How models keep their linear layers' weights: float32; bf16, rounded at load (half "
    "the memory; through AMX where the CPU has it, 1.6-2.7x float32's embedding and "
    "reranking speed); int8 or int4 quantized at load (a quarter or a sixth of the memory, faster "
    "decoding); or auto: int4 for GGUF files of "
    "mostly 4-bit weights, int8 for other quantized ones, float32 for the rest (per model "
    "in serving.json)");
ABSL_FLAG(std::string, kv_cache, "auto",
          "How generating models cache keys and values: float32; f16 or bf16, half the memory "
          "and of the bytes each decoding step reads (f16: 11 significant bits up to 65504, bf16: "
          "8 bits over float32's range); or auto: f16 for quantized weights, float32 for float32 "
          "weights (per model in serving.json)");
ABSL_FLAG(int64_t, prefix_cache_tokens, 8192,
          "Tokens of finished generations' prefixes each generating model keeps for reuse (at "
          "most a quarter of its KV cache; 0: none)");
ABSL_FLAG(int64_t, int8_group_size, 32,
          "int8 weights: a scale per this many input columns of each output (0: one per output)");
ABSL_FLAG(bool, int8_activations, true,
          "int8 weights: where the CPU has AVX512-VNNI, multiply decoding's and short prompts' "
          "activations as int8 too (a scale per 32; faster, slightly less exact)");
ABSL_FLAG(bool, int4_lm_head, false,
          "int4 weights: the token table and LM head in int4 too (else int8: less memory, but "
          "SmolLM2's perplexity rose 6% instead of 0.8%)");
ABSL_FLAG(int, drain_timeout_s, 30, "On SIGTERM, how long in-flight requests may take");
ABSL_FLAG(int, max_message_bytes, 16 << 20, "Largest request or response message");
ABSL_FLAG(int64_t, max_text_bytes, 256 << 10,
          "Longest text of one sequence (tokenizing takes memory in proportion to it)");
ABSL_FLAG(int, max_concurrent_streams, 512, "Most calls open at once on one client connection");
ABSL_FLAG(int, max_metadata_bytes, 64 << 10,
          "Largest header block of a call (RESOURCE_EXHAUSTED past it; gRPC 1.51 then also ends "
          "the connection's other calls)");
ABSL_FLAG(int, max_connection_idle_s, 3600, "Close client connections idle this long (0: never)");
ABSL_FLAG(int, max_connection_age_s, 1800,
          "Ask clients to reconnect after this long, so that load spreads over replicas "
          "(0: never); calls in flight then get --drain_timeout_s to finish");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve TLS (with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: require and verify client certificates (mutual TLS)");
ABSL_FLAG(std::vector<std::string>, api_key, {},
          "API keys (comma-separated) callers must send, as 'Authorization: Bearer <key>' on HTTP "
          "and 'authorization' metadata on gRPC; health checks and /metrics stay open");
ABSL_FLAG(std::string, api_key_file, "",
          "A file of API keys, one a line ('#' comments), read again when it changes: keys "
          "rotate without a restart");
ABSL_FLAG(int, http_write_timeout_s, 60,
          "An HTTP client that takes none of its answer's bytes for this long is disconnected, "
          "and its work cancelled");

namespace attnserve::server {
namespace {

// The services health reports on: attnserve.v1 and the Open Inference Protocol.
constexpr const char* kServiceNames[] = {"attnserve.v1.Inference",
                                         "inference.GRPCInferenceService"};

absl::StatusOr<std::string> ReadFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--", flag, ": cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The PEM texts of --tls_cert, --tls_key and --tls_client_ca, read once for both ports; none
// without --tls_cert.
absl::StatusOr<std::optional<HttpTls>> TlsFromFlags() {
  const std::string cert = absl::GetFlag(FLAGS_tls_cert), key = absl::GetFlag(FLAGS_tls_key);
  const std::string client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  if (cert.empty() && key.empty() && client_ca.empty()) return std::nullopt;
  if (cert.empty() || key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  HttpTls tls;
  ASSIGN_OR_RETURN(tls.certificate_chain, ReadFile("tls_cert", cert));
  ASSIGN_OR_RETURN(tls.private_key, ReadFile("tls_key", key));
  if (!client_ca.empty()) {
    ASSIGN_OR_RETURN(tls.client_ca, ReadFile("tls_client_ca", client_ca));
  }
  return tls;
}

// Insecure without TLS; TLS with it; mutual TLS with client CAs as well.
std::shared_ptr<grpc::ServerCredentials> Credentials(const std::optional<HttpTls>& tls) {
  if (!tls) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({tls->private_key, tls->certificate_chain});
  if (!tls->client_ca.empty()) {
    options.pem_root_certs = tls->client_ca;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

int Serve() {
  // SIGTERM and SIGINT are taken by sigwait below, in this thread only.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const int threads =
      absl::GetFlag(FLAGS_threads) > 0 ? absl::GetFlag(FLAGS_threads) : AvailableCpus();
  // The /metrics endpoint holds these weakly: they live as long as this function.
  auto registry = std::make_shared<prometheus::Registry>();
  auto process_metrics = std::make_shared<ProcessMetrics>();
  ServerMetrics metrics(*registry);

  EngineLoopOptions options;
  options.max_batch_size = std::max(1, absl::GetFlag(FLAGS_max_batch_size));
  options.max_queue_delay =
      absl::Milliseconds(std::max(0, absl::GetFlag(FLAGS_max_queue_delay_ms)));
  options.max_queue_size = std::max(1, absl::GetFlag(FLAGS_max_queue_size));
  options.compute_threads = threads;
  options.idle_spin = absl::Microseconds(std::max(0, absl::GetFlag(FLAGS_idle_spin_us)));
  options.max_batch_tokens = std::max<int64_t>(1, absl::GetFlag(FLAGS_max_batch_tokens));
  options.step_tokens = std::max<int64_t>(1, absl::GetFlag(FLAGS_step_tokens));
  options.prefill_chunk_tokens = std::max<int64_t>(1, absl::GetFlag(FLAGS_prefill_chunk_tokens));
  options.prefill_pacing = std::max(0.0, absl::GetFlag(FLAGS_prefill_pacing));
  options.max_response_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_text_bytes = std::max<int64_t>(1, absl::GetFlag(FLAGS_max_text_bytes));
  options.weights.group_size = std::max<int64_t>(0, absl::GetFlag(FLAGS_int8_group_size));
  options.weights.int8_activations = absl::GetFlag(FLAGS_int8_activations);
  options.weights.int4_lm_head = absl::GetFlag(FLAGS_int4_lm_head);
  options.prefix_cache_tokens = std::max<int64_t>(0, absl::GetFlag(FLAGS_prefix_cache_tokens));
  if (const absl::Status type = ParseKvCacheType(absl::GetFlag(FLAGS_kv_cache), options.kv_cache);
      !type.ok()) {
    std::cerr << "attnserve: --kv_cache: " << type.message() << "\n";
    return 2;
  }
  if (const absl::Status format = ParseWeightFormat(absl::GetFlag(FLAGS_weights), options.weights);
      !format.ok()) {
    std::cerr << "attnserve: --weights: " << format.message() << "\n";
    return 2;
  }
  const MemoryLimit limit = DetectMemoryLimit(absl::GetFlag(FLAGS_memory_limit_mb) << 20);
  // Builds and sends streamed answers, every step's endings and large answers off the engine
  // threads. Declared first, destroyed last: the engine loops post to it until they are drained.
  AnswerWriter answers;
  options.answers = &answers;
  // Models load on a thread of their own, so that the OpenMP team loading starts ends with it. A
  // team left on this thread would count against the CPUs, and libgomp then stops every compute
  // thread from spinning between parallel regions: each region waited on a futex, and an Embed
  // of all-MiniLM-L6-v2 took 9.6 ms instead of 4.7 (docs/serving.md).
  std::unique_ptr<ModelRepository> repository;
  std::thread([&] {
    repository =
        ModelRepository::Load(absl::GetFlag(FLAGS_model_repository), options, limit, metrics);
  }).join();
  if (repository->workers().empty()) {
    std::cerr << "attnserve: no model loaded from " << absl::GetFlag(FLAGS_model_repository)
              << "\n";
    return 1;
  }

  std::unique_ptr<MetricsEndpoint> exposer;
  if (absl::GetFlag(FLAGS_metrics_port) > 0) {
    auto started = MetricsEndpoint::Start(
        absl::GetFlag(FLAGS_host), absl::GetFlag(FLAGS_metrics_port), {registry, process_metrics});
    if (!started.ok()) {
      std::cerr << "attnserve: " << started.status().message() << "\n";
      return 1;
    }
    exposer = *std::move(started);
  }

  // Gives free memory back to the system after a spike (an HTTP/2 rapid-reset burst, a large
  // batch), once the engine is idle.
  MemoryTrimmer trimmer;

  auto tls = TlsFromFlags();
  if (!tls.ok()) {
    std::cerr << "attnserve: " << tls.status().message() << "\n";
    return 1;
  }
  auto keys = ApiKeys::Create(absl::GetFlag(FLAGS_api_key), absl::GetFlag(FLAGS_api_key_file));
  if (!keys.ok()) {
    std::cerr << "attnserve: " << keys.status().message() << "\n";
    return 1;
  }
  CallGate gate;
  Admission admission(*repository, metrics, gate, &answers, keys->get());
  InferenceService service(admission);
  OpenInferenceService open_inference(admission);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address =
      absl::StrCat(absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port));
  int bound_port = 0;
  builder.AddListeningPort(address, Credentials(*tls), &bound_port);
  builder.RegisterService(&service);
  builder.RegisterService(&open_inference);
  // Compressed requests are refused (UNIMPLEMENTED, naming the algorithm) before a byte is
  // inflated: gRPC inflates a whole message before it checks the size limit, so a 1 MB gzip
  // bomb of 1 GiB cost a gigabyte, and three at once killed the server.
  for (auto algorithm : {GRPC_COMPRESS_DEFLATE, GRPC_COMPRESS_GZIP}) {
    builder.SetCompressionAlgorithmSupportStatus(algorithm, false);
  }
  // gRPC's own memory comes out of the reserve (PlanMemory): half of it. Past the quota gRPC
  // shrinks its read buffers and stream windows rather than allocate.
  grpc::ResourceQuota quota("attnserve");
  quota.Resize(static_cast<size_t>(repository->memory_plan().reserve / 2));
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             std::max(1, absl::GetFlag(FLAGS_max_concurrent_streams)));
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE,
                             std::max(1024, absl::GetFlag(FLAGS_max_metadata_bytes)));
  if (const int idle = absl::GetFlag(FLAGS_max_connection_idle_s); idle > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, idle * 1000);
  }
  if (const int age = absl::GetFlag(FLAGS_max_connection_age_s); age > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, age * 1000);
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               std::max(1, absl::GetFlag(FLAGS_drain_timeout_s)) * 1000);
  }
  builder.SetMaxReceiveMessageSize(absl::GetFlag(FLAGS_max_message_bytes));
  builder.SetMaxSendMessageSize(absl::GetFlag(FLAGS_max_message_bytes));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    std::cerr << "attnserve: cannot listen on " << address << "\n";
    return 1;
  }
  // The OpenAI-compatible API, on its own port, through the same admission.
  OpenAiService openai(admission);
  TeiService tei(admission);
  OpenInferenceRest open_inference_rest(admission);
  HttpApis http_apis(admission, {&tei, &openai, &open_inference_rest});
  std::unique_ptr<HttpServer> http;
  if (const int http_port = absl::GetFlag(FLAGS_http_port); http_port > 0) {
    HttpLimits limits;
    limits.max_header_bytes = std::max(1024, absl::GetFlag(FLAGS_http_max_header_bytes));
    limits.max_body_bytes = absl::GetFlag(FLAGS_max_message_bytes);
    limits.read_timeout = absl::Seconds(std::max(1, absl::GetFlag(FLAGS_http_read_timeout_s)));
    limits.write_timeout = absl::Seconds(std::max(1, absl::GetFlag(FLAGS_http_write_timeout_s)));
    limits.max_connections = std::max(1, absl::GetFlag(FLAGS_http_max_connections));
    limits.threads = std::max(1, absl::GetFlag(FLAGS_http_threads));
    const std::string http_host = absl::GetFlag(FLAGS_http_host).empty()
                                      ? absl::GetFlag(FLAGS_host)
                                      : absl::GetFlag(FLAGS_http_host);
    auto started = HttpServer::Start(http_host, http_port, limits, http_apis, *tls);
    if (!started.ok()) {
      std::cerr << "attnserve: " << started.status().message() << "\n";
      return 1;
    }
    http = *std::move(started);
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(true);
  for (const char* name : kServiceNames) health->SetServingStatus(name, true);
  std::cerr << "attnserve: serving " << repository->workers().size() << " model(s) on " << address
            << " with " << threads << " compute thread(s)"
            << (exposer ? absl::StrCat("; metrics on :", absl::GetFlag(FLAGS_metrics_port))
                        : std::string())
            << (http ? absl::StrCat("; OpenAI API on :", http->port(), *tls ? " (HTTPS)" : "")
                     : std::string())
            << ((*keys)->required() ? "; API keys required" : "") << "\n";

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::cerr << "attnserve: " << (signal_number == SIGTERM ? "SIGTERM" : "SIGINT") << ": draining\n";
  health->SetServingStatus(false);
  for (const char* name : kServiceNames) health->SetServingStatus(name, false);
  // Refuses new calls (UNAVAILABLE) and lets those in flight finish, the schedulers running on;
  // then shuts gRPC down at once, cancelling what is left and closing idle connections, which
  // a grace period would wait for too.
  const int64_t left =
      gate.CloseAndWait(absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s)));
  if (left > 0) std::cerr << "attnserve: drain timeout: cancelling " << left << " call(s)\n";
  // Answers already made go out; then every HTTP connection closes. The server object stays
  // until the schedulers are drained: their tasks may still hold its connections.
  if (http) http->Shutdown(absl::Now() + absl::Seconds(2));
  server->Shutdown(std::chrono::system_clock::now());
  repository->DrainAll();
  // What this process answered, by status code: after a drain, every call it accepted.
  const std::map<std::string, double> answered = SumByLabel(metrics.requests, "code");
  std::cerr << "attnserve: drained, exiting; answered "
            << (answered.empty() ? "nothing"
                                 : absl::StrJoin(answered, " ", absl::PairFormatter("=")))
            << "\n";
  return 0;
}

}  // namespace
}  // namespace attnserve::server

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "attnserve --model_repository=DIR [--port=50051] [flags]\n"
      "Every flag can also come from the environment: ATTNSERVE_THREADS=2 for --threads=2.");
  if (auto status = attnserve::server::ApplyEnvironmentFlags(); !status.ok()) {
    std::cerr << "attnserve: " << status.message() << "\n";
    return 1;
  }
  absl::ParseCommandLine(argc, argv);
  // Debian builds abseil without NDEBUG, which leaves absl::Mutex's deadlock detection on: a
  // lock-order graph updated under a global lock at every gRPC mutex acquisition, 7% of the
  // server's CPU while it takes in calls (perf, during an HTTP/2 rapid-reset burst).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  attnserve::server::LimitProtobufLogging();
  return attnserve::server::Serve();
}
