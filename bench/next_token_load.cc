// A minimal C++ load driver for NextToken: `concurrency` threads, each calling in a closed loop
// for `seconds`, then requests/s and the median latency. Much cheaper per call than a Python
// client, so on a shared 2-core machine it measures the server rather than itself. With `bare`
// it calls GetModel instead: an RPC that never reaches the scheduler, for gRPC's own cost.
// Usage: next_token_load TARGET CONCURRENCY SECONDS PROMPT_TOKENS [bare]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "proto/attnserve/v1/inference.grpc.pb.h"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr,
                 "usage: next_token_load TARGET CONCURRENCY SECONDS PROMPT_TOKENS [bare]\n");
    return 2;
  }
  const std::string target = argv[1];
  const int concurrency = std::atoi(argv[2]);
  const double seconds = std::atof(argv[3]);
  attnserve::v1::NextTokenRequest request;
  request.set_model("demo");
  request.set_top_k(5);
  request.add_sequences()->set_text(std::string(std::atoi(argv[4]), 'a'));
  const bool bare = argc > 5 && std::string(argv[5]) == "bare";
  attnserve::v1::GetModelRequest bare_request;
  bare_request.set_model("demo");

  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto stub = attnserve::v1::Inference::NewStub(channel);
  using Clock = std::chrono::steady_clock;
  const auto stop = Clock::now() + std::chrono::duration<double>(seconds);
  std::atomic<int64_t> errors{0};
  std::mutex mutex;
  std::vector<double> latencies;
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&] {
      std::vector<double> mine;
      while (Clock::now() < stop) {
        grpc::ClientContext context;
        attnserve::v1::NextTokenResponse response;
        attnserve::v1::ModelInfo bare_response;
        const auto begin = Clock::now();
        const grpc::Status status = bare ? stub->GetModel(&context, bare_request, &bare_response)
                                         : stub->NextToken(&context, request, &response);
        if (!status.ok()) ++errors;
        mine.push_back(std::chrono::duration<double, std::micro>(Clock::now() - begin).count());
      }
      std::lock_guard<std::mutex> lock(mutex);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
    });
  }
  for (auto& thread : threads) thread.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(latencies.begin(), latencies.end());
  std::printf("{\"requests_per_second\": %.1f, \"median_us\": %.1f, \"errors\": %ld}\n",
              latencies.size() / elapsed, latencies[latencies.size() / 2], errors.load());
  return errors.load() == 0 ? 0 : 1;
}
