/* host_kernels.c: the host backend's versions of devrt's shipped kernels (dv_host_kernels[]).
 * Each runs once per block; threads of the block are a loop over a CUDA-style grid-stride range. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include "../src/backend/backend.h"

/* Kernel arguments are CUDA-style kernelParams: args[i] points at the i-th argument's bytes. */
static void* arg_ptr(void** args, unsigned i) {
  void* v;
  memcpy(&v, args[i], sizeof v);
  return v;
}
static uint64_t arg_u64(void** args, unsigned i) {
  uint64_t v;
  memcpy(&v, args[i], sizeof v);
  return v;
}
static uint32_t arg_u32(void** args, unsigned i) {
  uint32_t v;
  memcpy(&v, args[i], sizeof v);
  return v;
}

/* Device memory that two streams race on has defined, if unordered, contents on a GPU. The host
 * kernels access it with relaxed atomics, so a missing dependency shows up as a wrong result (what
 * the race tests look for), never as undefined behaviour or a sanitizer report. */
#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

/* Calls body(i) for every element index this block's threads visit, as a CUDA grid-stride loop. */
#define GRID_STRIDE(g, n, i)                                                       \
  for (uint64_t t_ = 0; t_ < (g)->block_dim.x; t_++)                               \
    for (uint64_t i = (uint64_t)(g)->block_idx.x * (g)->block_dim.x + t_; i < (n); \
         i += (uint64_t)(g)->grid_dim.x * (g)->block_dim.x)

static bool first_block(const dv_host_grid* g) {
  return g->block_idx.x == 0 && g->block_idx.y == 0 && g->block_idx.z == 0;
}

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static void fill_u32(const dv_host_grid* g, void** args) {
  uint32_t* p = arg_ptr(args, 0);
  uint32_t value = arg_u32(args, 1);
  uint64_t n = arg_u64(args, 2);
  GRID_STRIDE(g, n, i) STORE(&p[i], value);
}

static void copy_u32(const dv_host_grid* g, void** args) {
  uint32_t* dst = arg_ptr(args, 0);
  const uint32_t* src = arg_ptr(args, 1);
  uint64_t n = arg_u64(args, 2);
  GRID_STRIDE(g, n, i) STORE(&dst[i], LOAD(&src[i]));
}

static void checksum_u32(const dv_host_grid* g, void** args) {
  const uint32_t* p = arg_ptr(args, 0);
  uint64_t n = arg_u64(args, 1);
  unsigned long long* out = arg_ptr(args, 2);
  unsigned long long sum = 0;
  GRID_STRIDE(g, n, i) sum += LOAD(&p[i]);
  __atomic_fetch_add(out, sum, __ATOMIC_RELAXED);
}

static void slow_fill_u32(const dv_host_grid* g, void** args) {
  if (first_block(g)) sleep_ns(arg_u64(args, 3));
  fill_u32(g, args);
}

static void slow_copy_u32(const dv_host_grid* g, void** args) {
  if (first_block(g)) sleep_ns(arg_u64(args, 3));
  copy_u32(g, args);
}

static void record_smid(const dv_host_grid* g, void** args) {
  uint32_t* out = arg_ptr(args, 0);
  uint64_t block =
      ((uint64_t)g->block_idx.z * g->grid_dim.y + g->block_idx.y) * g->grid_dim.x + g->block_idx.x;
  out[block] = g->sm; /* the worker "SM" the backend placed the block on */
}

static void spin(const dv_host_grid* g, void** args) {
  if (first_block(g)) sleep_ns(arg_u64(args, 0));
}

static uint64_t now_ns(void) { /* the host's %globaltimer: CLOCK_MONOTONIC */
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void spin_stamp(const dv_host_grid* g, void** args) {
  uint64_t *stamps = arg_ptr(args, 1), start = now_ns();
  spin(g, args);
  stamps[2 * g->block_idx.x] = start, stamps[2 * g->block_idx.x + 1] = now_ns();
}

const dv_host_kernel_def dv_host_kernels[] = {
    {"devrt_fill_u32", fill_u32, 3, {8, 4, 8}},
    {"devrt_copy_u32", copy_u32, 3, {8, 8, 8}},
    {"devrt_checksum_u32", checksum_u32, 3, {8, 8, 8}},
    {"devrt_slow_fill_u32", slow_fill_u32, 4, {8, 4, 8, 8}},
    {"devrt_slow_copy_u32", slow_copy_u32, 4, {8, 8, 8, 8}},
    {"devrt_record_smid", record_smid, 1, {8}},
    {"devrt_spin", spin, 1, {8}},
    {"devrt_spin_stamp", spin_stamp, 2, {8, 8}},
};
const unsigned dv_host_kernel_count = sizeof dv_host_kernels / sizeof dv_host_kernels[0];
