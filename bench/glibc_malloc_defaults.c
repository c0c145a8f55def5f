// Preloaded into a benchmark, makes mallopt a no-op, so glibc's default thresholds stay in force
// instead of the engine's (engine/tensor.cc keeps freed activations for the next pass):
//   gcc -shared -fPIC -O2 -o /tmp/glibc_malloc_defaults.so bench/glibc_malloc_defaults.c
//   LD_PRELOAD=/tmp/glibc_malloc_defaults.so build/bench/model_bench DIR --runs 10
int mallopt(int param, int value) {
  (void)param;
  (void)value;
  return 1;
}
