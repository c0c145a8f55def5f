#include "engine/dnnl_context.h"

namespace attnserve {

dnnl::engine& DnnlEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& DnnlStream() {
  thread_local dnnl::stream stream(DnnlEngine());
  return stream;
}

}  // namespace attnserve
