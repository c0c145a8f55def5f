#include "client/cli_connection.h"

#include <grpc/support/log.h>

#include <cstdlib>

namespace attnserve::client {

std::vector<FlagSpec> ConnectionFlags() {
  return {
      {"target", FlagKind::kString, "localhost:50051", "the server, host:port"},
      {"tls", FlagKind::kSwitch, "false", "connect with TLS (implied by the --tls_* files)"},
      {"tls_ca", FlagKind::kString, "", "PEM CA bundle that signed the server's certificate"},
      {"tls_cert", FlagKind::kString, "", "PEM client certificate, for mutual TLS"},
      {"tls_key", FlagKind::kString, "", "PEM key of --tls_cert"},
      {"tls_server_name", FlagKind::kString, "",
       "the name in the server's certificate, when it is not the target's host"},
      {"timeout", FlagKind::kNumber, "30", "seconds each call may take"},
      {"api_key", FlagKind::kString, "",
       "the API key a server started with --api_key wants (default: $ATTNSERVE_API_KEY)"},
      {"retries", FlagKind::kInteger, "4",
       "attempts per call while the server answers UNAVAILABLE, 1 to 5"},
  };
}

ChannelOptions ChannelOptionsFrom(const Arguments& arguments) {
  ChannelOptions options;
  options.target = arguments.text("target");
  options.ca_file = arguments.text("tls_ca");
  options.cert_file = arguments.text("tls_cert");
  options.key_file = arguments.text("tls_key");
  options.server_name = arguments.text("tls_server_name");
  options.tls = arguments.on("tls") || !options.ca_file.empty() || !options.cert_file.empty() ||
                !options.key_file.empty();
  options.retry.max_attempts = static_cast<int>(arguments.integer("retries"));
  return options;
}

CallOptions CallOptionsFrom(const Arguments& arguments) {
  CallOptions call;
  call.timeout = absl::Seconds(arguments.number("timeout"));
  call.api_key = arguments.text("api_key");
  if (call.api_key.empty()) {
    if (const char* key = std::getenv("ATTNSERVE_API_KEY")) call.api_key = key;
  }
  return call;
}

void QuietGrpcLogs() {
  if (std::getenv("GRPC_VERBOSITY") == nullptr) gpr_set_log_function([](gpr_log_func_args*) {});
}

}  // namespace attnserve::client
