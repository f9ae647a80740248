/* shim.c: times a pluggable allocator's calls (alloc_time.py): wraps the alloc and free it finds
 * with dlsym; counters read by Python. */
#include <dlfcn.h>
#include <stdint.h>
#include <time.h>
static void* (*A)(size_t, int, void*);
static void (*F)(void*, size_t, int, void*);
static uint64_t c[4]; /* alloc ns, allocs, free ns, frees */
static uint64_t now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
int shim_init(const char* lib, const char* an, const char* fn) {
  void* h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
  if (!h) return 1;
  A = (void* (*)(size_t, int, void*))dlsym(h, an);
  F = (void (*)(void*, size_t, int, void*))dlsym(h, fn);
  return !A || !F;
}
void* shim_alloc(size_t n, int d, void* s) {
  uint64_t t = now();
  void* p = A(n, d, s);
  __atomic_fetch_add(&c[0], now() - t, __ATOMIC_RELAXED);
  __atomic_fetch_add(&c[1], 1, __ATOMIC_RELAXED);
  return p;
}
void shim_free(void* p, size_t n, int d, void* s) {
  uint64_t t = now();
  F(p, n, d, s);
  __atomic_fetch_add(&c[2], now() - t, __ATOMIC_RELAXED);
  __atomic_fetch_add(&c[3], 1, __ATOMIC_RELAXED);
}
void shim_read(uint64_t* o) {
  for (int i = 0; i < 4; i++) o[i] = __atomic_load_n(&c[i], __ATOMIC_RELAXED);
}
