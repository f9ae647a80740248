/* launch_util.h: what the block and launch suites share: devrt's kernels loaded through the public
 * module API, recorded launches of fill / copy / checksum over tracked blocks (or untracked, for
 * the negative tests), and reading a block back to the host in stream order. */
#ifndef DEVRT_TEST_LAUNCH_UTIL_H
#define DEVRT_TEST_LAUNCH_UTIL_H

#include "test.h"
#include "block/block.h"

typedef struct kernels {
  devrt_module* mod;
  devrt_kernel *fill, *copy, *checksum, *slow_fill, *slow_copy;
} kernels;

static inline void k_load(devrt_runtime* rt, kernels* k) {
  REQUIRE_OK(devrt_module_load(rt, NULL, &k->mod));
  REQUIRE_OK(devrt_kernel_get(k->mod, "devrt_fill_u32", &k->fill));
  REQUIRE_OK(devrt_kernel_get(k->mod, "devrt_copy_u32", &k->copy));
  REQUIRE_OK(devrt_kernel_get(k->mod, "devrt_checksum_u32", &k->checksum));
  REQUIRE_OK(devrt_kernel_get(k->mod, "devrt_slow_fill_u32", &k->slow_fill));
  REQUIRE_OK(devrt_kernel_get(k->mod, "devrt_slow_copy_u32", &k->slow_copy));
}

#define MS (1000000ull) /* nanoseconds */

/* The block's address, or NULL (a stale handle: launches refuse it before using the address). */
static inline void* bptr(devrt_runtime* rt, devrt_block b) {
  void* p = NULL;
  return devrt_block_ptr(rt, b, &p) == DEVRT_OK ? p : NULL;
}

/* Which launch paths ran (white-box: the tests of the repeat path and of groups). */
static inline uint64_t repeated(devrt_runtime* rt) {
  return dv_block_paths_get(rt).launches_repeated;
}
static inline uint64_t grouped(devrt_runtime* rt) {
  return dv_block_paths_get(rt).launches_grouped;
}

static inline devrt_block_stats bstats(devrt_runtime* rt) {
  devrt_block_stats st;
  memset(&st, 0, sizeof st);
  CHECK_OK(devrt_block_stats_get(rt, &st));
  return st;
}

/* One launch over n elements (256-thread blocks) declaring `uses` (nuses 0: untracked). */
static inline devrt_status k_run(devrt_runtime* rt, devrt_stream s, devrt_kernel* kern, uint64_t n,
                                 void** args, const devrt_block_use* uses, unsigned nuses) {
  devrt_launch_desc d = {.stream = s,
                         .kernel = kern,
                         .grid = {(unsigned)((n + 255) / 256)},
                         .block = {256},
                         .args = args,
                         .uses = uses,
                         .nuses = nuses};
  return devrt_launch(rt, &d);
}

/* b[0..n) = v, after delay_ns when > 0 (devrt_slow_fill_u32). */
static inline devrt_status k_fill(devrt_runtime* rt, const kernels* k, devrt_stream s,
                                  devrt_block b, uint32_t v, uint64_t n, uint64_t delay_ns,
                                  bool tracked) {
  void* p = bptr(rt, b);
  void* args[] = {&p, &v, &n, &delay_ns};
  devrt_block_use u[] = {{b, DEVRT_ACCESS_WRITE}};
  return k_run(rt, s, delay_ns ? k->slow_fill : k->fill, n, args, u, tracked ? 1 : 0);
}

/* dst[0..n) = src[0..n), after delay_ns when > 0 (devrt_slow_copy_u32). */
static inline devrt_status k_copy(devrt_runtime* rt, const kernels* k, devrt_stream s,
                                  devrt_block dst, devrt_block src, uint64_t n, uint64_t delay_ns,
                                  bool tracked) {
  void *d = bptr(rt, dst), *sp = bptr(rt, src);
  void* args[] = {&d, &sp, &n, &delay_ns};
  devrt_block_use u[] = {{src, DEVRT_ACCESS_READ}, {dst, DEVRT_ACCESS_WRITE}};
  return k_run(rt, s, delay_ns ? k->slow_copy : k->copy, n, args, u, tracked ? 2 : 0);
}

/* *res (a u64 block, zeroed first) = sum of src[0..n). */
static inline devrt_status k_checksum(devrt_runtime* rt, const kernels* k, devrt_stream s,
                                      devrt_block src, uint64_t n, devrt_block res) {
  devrt_status st = k_fill(rt, k, s, res, 0, 2, 0, true);
  if (st) return st;
  void *p = bptr(rt, src), *out = bptr(rt, res);
  void* args[] = {&p, &n, &out};
  devrt_block_use u[] = {{src, DEVRT_ACCESS_READ}, {res, DEVRT_ACCESS_READ_WRITE}};
  return k_run(rt, s, k->checksum, n, args, u, 2);
}

/* Copies the block's first `bytes` to host memory in stream order on s (a tracked read), then
 * waits for s. */
static inline devrt_status b_read(devrt_runtime* rt, devrt_stream s, devrt_block b, void* host,
                                  size_t bytes) {
  void* p = bptr(rt, b);
  devrt_status st = devrt_prepare_block_use(rt, b, s, DEVRT_ACCESS_READ);
  if (!st) st = devrt_memcpy_async(rt, host, p, bytes, s);
  if (!st) st = devrt_finish_block_use(rt, b, s, DEVRT_ACCESS_READ);
  if (!st) st = devrt_stream_synchronize(rt, s);
  return st;
}

/* Copies `bytes` from host memory to the block's start in stream order on s (a tracked write),
 * then waits for s. */
static inline devrt_status b_write(devrt_runtime* rt, devrt_stream s, devrt_block b,
                                   const void* host, size_t bytes) {
  void* p = bptr(rt, b);
  devrt_status st = devrt_prepare_block_use(rt, b, s, DEVRT_ACCESS_WRITE);
  if (!st) st = devrt_memcpy_async(rt, p, host, bytes, s);
  if (!st) st = devrt_finish_block_use(rt, b, s, DEVRT_ACCESS_WRITE);
  if (!st) st = devrt_stream_synchronize(rt, s);
  return st;
}

/* How many of the block's first n words differ from want (n + 1 when it cannot be read). */
static inline uint64_t b_wrong(devrt_runtime* rt, devrt_stream s, devrt_block b, uint64_t n,
                               uint32_t want) {
  uint32_t* h = malloc(n * sizeof *h);
  uint64_t wrong = n + 1;
  if (h && b_read(rt, s, b, h, n * sizeof *h) == DEVRT_OK)
    for (uint64_t i = wrong = 0; i < n; i++) wrong += h[i] != want;
  else
    fprintf(stderr, "b_wrong: read back failed: %s\n", devrt_last_error());
  free(h);
  return wrong;
}

/* The block's first word (~0u when it cannot be read). */
static inline uint32_t b_word(devrt_runtime* rt, devrt_stream s, devrt_block b) {
  uint32_t w = ~0u;
  if (b_read(rt, s, b, &w, sizeof w) != DEVRT_OK)
    fprintf(stderr, "b_word: %s\n", devrt_last_error());
  return w;
}

static inline devrt_stream s_get(devrt_runtime* rt) {
  devrt_stream s = 0;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s));
  return s;
}

#endif
