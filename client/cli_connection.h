// The flags that attn and attn-bench share to reach a server, and the channel they describe.
#pragma once

#include <vector>

#include "client/cli_arguments.h"
#include "client/client.h"

namespace attnserve::client {

std::vector<FlagSpec> ConnectionFlags();
ChannelOptions ChannelOptionsFrom(const Arguments& arguments);
CallOptions CallOptionsFrom(const Arguments& arguments);

// gRPC logs its own errors (a failed TLS handshake, ...) to stderr; the tools report the call's
// status instead. GRPC_VERBOSITY set in the environment keeps gRPC's logs.
void QuietGrpcLogs();

}  // namespace attnserve::client
