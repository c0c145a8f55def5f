// The process-wide oneDNN CPU engine and a per-thread stream.
#pragma once

#include <dnnl.hpp>

namespace attnserve {

dnnl::engine& DnnlEngine();
// Each thread gets its own stream so concurrent callers never share one.
dnnl::stream& DnnlStream();

}  // namespace attnserve
