#include "server/http/http_apis.h"

#include "absl/strings/str_cat.h"
#include "server/http/openai/openai_responses.h"

namespace attnserve::server {
namespace {

void RespondError(HttpResponder& responder, const absl::Status& status, int http_status = 0) {
  responder.Respond(http_status != 0 ? http_status : HttpStatusOf(status), "application/json",
                    ErrorBody(status, http_status));
}

// An HTTP/1.1 client opens a connection for each request it has in flight: fair shares go by
// its address ("ipv4:10.0.0.7"), not by connection, when it presents no key.
std::string PeerAddress(const std::string& peer) {
  const size_t port = peer.rfind(':');
  return port == std::string::npos || port == 0 ? peer : peer.substr(0, port);
}

}  // namespace

void HttpApis::Handle(HttpRequest request, std::shared_ptr<HttpResponder> responder) {
  if (request.target == "/health") {
    if (request.method != "GET") {
      return RespondError(*responder, absl::InvalidArgumentError("/health takes GET"), 405);
    }
    // Ready while admitting calls; 503 once shutdown begins, as a load balancer expects.
    return admission_.accepting() ? responder->Respond(200, "application/json", "{}")
                                  : RespondError(*responder, ShuttingDownError());
  }
  for (HttpApi* api : apis_) {
    if (api->IsProbe(request)) return api->Handle(std::move(request), std::move(responder));
  }
  // Everything but the health checks needs a key when the server has keys.
  absl::StatusOr<std::string> key = admission_.Authenticate(request.Header("authorization"));
  if (!key.ok()) return RespondError(*responder, key.status());
  request.client = key->empty() ? PeerAddress(request.client) : *std::move(key);
  bool known_path = false;
  for (HttpApi* api : apis_) {
    const HttpApi::Match match = api->Matches(request);
    if (match == HttpApi::Match::kYes) return api->Handle(std::move(request), std::move(responder));
    known_path = known_path || match == HttpApi::Match::kWrongMethod;
  }
  if (known_path) {
    return RespondError(*responder,
                        absl::InvalidArgumentError(absl::StrCat(request.target, " does not take ",
                                                                request.method.substr(0, 16))),
                        405);
  }
  RespondError(*responder,
               absl::NotFoundError(absl::StrCat("no such path: ", request.target.substr(0, 128))));
}

}  // namespace attnserve::server
