// kernels.cu: the demo engine's kernels in CUDA C, built by nvcc into a fatbin that the devrt CLI
// embeds (fatbin.S) and loads with devrt_module_load. Host versions: host_kernels.c. Every kernel
// takes a stamp (2 words, or NULL) where it leaves its first block's start (as ~t, by atomicMax)
// and its last block's end (atomicMax), in %globaltimer ns: launches timed by the device itself.
#include "gen.h"

typedef unsigned long long u64;

#define TID (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x)
#define STRIDE ((uint64_t)gridDim.x * blockDim.x)

__device__ static u64 now_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ static void stamp_start(u64* s) {
  if (s && threadIdx.x == 0) atomicMax(&s[0], ~now_ns());
}

__device__ static void stamp_end(u64* s) {
  if (!s) return;
  __syncthreads(); /* the block's work, its atomics included, is done */
  if (threadIdx.x == 0) atomicMax(&s[1], now_ns());
}

__device__ static u64 warp_sum(u64 v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

/* Adds n per-thread values into out[0..n) through one shared slot per value (blockDim.x is a
 * multiple of 32; sh has n words). */
__device__ static void block_add(const u64* v, int n, u64* sh, u64* out) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) sh[i] = 0;
  __syncthreads();
  for (int i = 0; i < n; i++) {
    u64 s = warp_sum(v[i]);
    if ((threadIdx.x & 31) == 0 && s) atomicAdd(&sh[i], s);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    if (sh[i]) atomicAdd(&out[i], sh[i]);
}

static __device__ __forceinline__ uint32_t pack4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return a | (uint32_t)b << 8 | (uint32_t)c << 16 | (uint32_t)d << 24;
}

// ---- generate: four rows a thread, written as vectors ----

extern "C" __global__ void eg_gen_lineitem(uint8_t* chunk, uint64_t cap, uint64_t first,
                                           uint64_t rows, u64* stamp) {
  stamp_start(stamp);
  eg_li_cols c = eg_li_layout(chunk, cap);
  uint64_t quads = rows / 4;
  for (uint64_t q = TID; q < quads; q += STRIDE) {
    eg_li_row a = eg_lineitem(first + 4 * q), b = eg_lineitem(first + 4 * q + 1),
              d = eg_lineitem(first + 4 * q + 2), e = eg_lineitem(first + 4 * q + 3);
    ((uint4*)c.okey)[q] = make_uint4(a.okey, b.okey, d.okey, e.okey);
    ((uint4*)c.pkey)[q] = make_uint4(a.pkey, b.pkey, d.pkey, e.pkey);
    ((uint4*)c.price)[q] = make_uint4(a.price, b.price, d.price, e.price);
    ((uint2*)c.ship)[q] =
        make_uint2(a.ship | (uint32_t)b.ship << 16, d.ship | (uint32_t)e.ship << 16);
    ((uint32_t*)c.qty)[q] = pack4(a.qty, b.qty, d.qty, e.qty);
    ((uint32_t*)c.disc)[q] = pack4(a.disc, b.disc, d.disc, e.disc);
    ((uint32_t*)c.group)[q] = pack4(a.group, b.group, d.group, e.group);
  }
  for (uint64_t i = quads * 4 + TID; i < rows; i += STRIDE) {
    eg_li_row r = eg_lineitem(first + i);
    c.okey[i] = r.okey, c.pkey[i] = r.pkey, c.price[i] = r.price, c.ship[i] = r.ship;
    c.qty[i] = r.qty, c.disc[i] = r.disc, c.group[i] = r.group;
  }
  stamp_end(stamp);
}

extern "C" __global__ void eg_gen_orders(uint8_t* chunk, uint64_t cap, uint64_t first,
                                         uint64_t rows, u64* stamp) {
  stamp_start(stamp);
  eg_ord_cols c = eg_ord_layout(chunk, cap);
  for (uint64_t i = TID; i < rows; i += STRIDE) {
    eg_order_row r = eg_order(first + i);
    c.okey[i] = r.okey, c.date[i] = r.date, c.prio[i] = r.prio;
  }
  stamp_end(stamp);
}

// ---- Q1: filter and aggregate. Each thread keeps its own sums of the six groups in shared memory
// and adds a passing row to its group's four sums only: a few instructions a row, where sums kept
// in registers need a pass over every group (registers cannot be indexed by the row's group). The
// block then adds up its threads' sums, one warp per sum, and adds them to the slot. ----

#define Q1_THREADS 256 /* eg_q1's block size: the engine launches every kernel with 256 threads */

/* [group][thread]: the 32 threads of a warp use 32 consecutive words, so no bank conflicts. */
struct q1_sums {
  uint32_t cnt[EG_GROUPS][Q1_THREADS], qty[EG_GROUPS][Q1_THREADS];
  u64 price[EG_GROUPS][Q1_THREADS], dp[EG_GROUPS][Q1_THREADS];
};

/* Four consecutive rows' columns, loaded as vectors (quad q: rows 4q .. 4q + 3). */
struct q1_quad {
  uint4 price;
  uint2 ship;
  uint32_t qty, disc, group;
};

static __device__ __forceinline__ q1_quad q1_load(const eg_li_cols& c, uint64_t q) {
  q1_quad r = {__ldg((const uint4*)c.price + q), __ldg((const uint2*)c.ship + q),
               __ldg((const uint32_t*)c.qty + q), __ldg((const uint32_t*)c.disc + q),
               __ldg((const uint32_t*)c.group + q)};
  return r;
}

static __device__ __forceinline__ void q1_row(q1_sums& s, uint32_t price, uint32_t ship,
                                              uint32_t qty, uint32_t disc, uint32_t group,
                                              uint32_t cutoff) {
  if (ship > cutoff || group >= EG_GROUPS) return;
  unsigned t = threadIdx.x;
  s.cnt[group][t] += 1, s.qty[group][t] += qty;
  s.price[group][t] += price, s.dp[group][t] += (u64)price * (100u - disc);
}

static __device__ __forceinline__ void q1_rows(q1_sums& s, const q1_quad& r, uint32_t cutoff) {
#pragma unroll
  for (int k = 0; k < 4; k++) {
    uint32_t price = k == 0 ? r.price.x : k == 1 ? r.price.y : k == 2 ? r.price.z : r.price.w;
    uint32_t ship = (k < 2 ? r.ship.x : r.ship.y) >> (16 * (k % 2)) & 0xffff;
    q1_row(s, price, ship, r.qty >> 8 * k & 0xff, r.disc >> 8 * k & 0xff, r.group >> 8 * k & 0xff,
           cutoff);
  }
}

/* Sum w of the block (w = 4 * group + field, the slot's order) over its threads. */
static __device__ __forceinline__ u64 q1_sum(const q1_sums& s, int w, int i) {
  int g = w / 4;
  switch (w % 4) {
    case 0:
      return s.cnt[g][i];
    case 1:
      return s.qty[g][i];
    case 2:
      return s.price[g][i];
    default:
      return s.dp[g][i];
  }
}

extern "C" __global__ void __launch_bounds__(Q1_THREADS, 4)
    eg_q1(const uint8_t* chunk, uint64_t cap, uint64_t rows, uint32_t cutoff, u64* part,
          u64* stamp) {
  __shared__ q1_sums s;
  stamp_start(stamp);
  eg_li_cols c = eg_li_layout((void*)chunk, cap);
  unsigned t = threadIdx.x;
  for (int g = 0; g < EG_GROUPS; g++) /* only this thread's column: no barrier needed */
    s.cnt[g][t] = 0, s.qty[g][t] = 0, s.price[g][t] = 0, s.dp[g][t] = 0;
  /* Two quads an iteration, both loaded before either is added: more loads in flight. */
  uint64_t quads = rows / 4;
  for (uint64_t q = TID; q < quads; q += 2 * STRIDE) {
    bool second = q + STRIDE < quads;
    q1_quad a = q1_load(c, q), b = second ? q1_load(c, q + STRIDE) : q1_quad{};
    q1_rows(s, a, cutoff);
    if (second) q1_rows(s, b, cutoff);
  }
  for (uint64_t i = quads * 4 + TID; i < rows; i += STRIDE)
    q1_row(s, c.price[i], c.ship[i], c.qty[i], c.disc[i], c.group[i], cutoff);
  __syncthreads();
  int lane = t % 32;
  for (int w = t / 32; w < EG_AGG_WORDS; w += Q1_THREADS / 32) {
    u64 v = 0;
    for (int i = lane; i < Q1_THREADS; i += 32) v += q1_sum(s, w, i);
    v = warp_sum(v);
    if (lane == 0 && v) atomicAdd(&part[w], v);
  }
  stamp_end(stamp);
}

// ---- the join: build a hash table of the passing orders, probe it with the passing lines ----

extern "C" __global__ void eg_build(const uint8_t* chunk, uint64_t cap, uint64_t rows, uint32_t d0,
                                    uint32_t d1, u64* ht, uint64_t mask, u64* stamp) {
  stamp_start(stamp);
  eg_ord_cols c = eg_ord_layout((void*)chunk, cap);
  for (uint64_t i = TID; i < rows; i += STRIDE) {
    eg_order_row o = {c.okey[i], c.date[i], c.prio[i]};
    if (!eg_order_passes(o, d0, d1)) continue;
    u64 e = (u64)o.okey << 32 | (o.prio + 1u);
    for (uint64_t h = eg_ht_home(o.okey, mask); atomicCAS(&ht[h], 0ull, e) != 0;
         h = (h + 1) & mask) {}
  }
  stamp_end(stamp);
}

extern "C" __global__ void eg_probe(const uint8_t* chunk, uint64_t cap, uint64_t rows, uint32_t s0,
                                    const u64* ht, uint64_t mask, u64* part, u64* stamp) {
  __shared__ u64 sh[2 * EG_PRIORITIES];
  stamp_start(stamp);
  eg_li_cols c = eg_li_layout((void*)chunk, cap);
  u64 v[2 * EG_PRIORITIES] = {};
  for (uint64_t i = TID; i < rows; i += STRIDE) {
    if (c.ship[i] < s0) continue;
    uint32_t key = c.okey[i];
    for (uint64_t h = eg_ht_home(key, mask);; h = (h + 1) & mask) {
      u64 e = ht[h];
      if (!e) break;
      if ((uint32_t)(e >> 32) != key) continue;
      uint32_t p = (uint32_t)(e & 0xff) - 1;
      u64 dp = (u64)c.price[i] * (100u - c.disc[i]);
#pragma unroll
      for (uint32_t k = 0; k < EG_PRIORITIES; k++)
        v[2 * k] += p == k, v[2 * k + 1] += p == k ? dp : 0;
      break;
    }
  }
  block_add(v, 2 * EG_PRIORITIES, sh, part);
  stamp_end(stamp);
}

// ---- the distributed join's shuffle: count a chunk's rows for each part (both layouts start
// with the order key), then scatter them into their parts' chunks (meta: each part's byte offset
// and capacity, then its row cursor) ----

extern "C" __global__ void eg_part_count(const uint8_t* chunk, uint64_t rows, uint32_t nparts,
                                         u64* counts) {
  const uint32_t* key = (const uint32_t*)chunk;
  for (uint64_t i = TID; i < rows; i += STRIDE)
    atomicAdd(&counts[eg_part_of(key[i], nparts)], 1ull);
}

extern "C" __global__ void eg_part_scatter(const uint8_t* chunk, uint64_t cap, uint64_t rows,
                                           uint32_t orders, uint32_t nparts, u64* meta,
                                           uint8_t* out) {
  for (uint64_t i = TID; i < rows; i += STRIDE) {
    uint32_t p = eg_part_of(((const uint32_t*)chunk)[i], nparts);
    u64 at = atomicAdd(&meta[2 * nparts + p], 1ull);
    uint8_t* base = out + meta[2 * p];
    if (orders) {
      eg_ord_cols s = eg_ord_layout((void*)chunk, cap), d = eg_ord_layout(base, meta[2 * p + 1]);
      d.okey[at] = s.okey[i], d.date[at] = s.date[i], d.prio[at] = s.prio[i];
    } else {
      eg_li_cols s = eg_li_layout((void*)chunk, cap), d = eg_li_layout(base, meta[2 * p + 1]);
      d.okey[at] = s.okey[i], d.pkey[at] = s.pkey[i], d.price[at] = s.price[i];
      d.ship[at] = s.ship[i], d.qty[at] = s.qty[i], d.disc[at] = s.disc[i];
      d.group[at] = s.group[i];
    }
  }
}

// ---- merge the chunks' slots; zero a block ----

extern "C" __global__ void eg_merge(const u64* parts, uint64_t nchunks, u64* result, u64* stamp) {
  stamp_start(stamp);
  for (uint64_t w = TID; w < EG_AGG_WORDS; w += STRIDE) {
    u64 s = 0;
    for (uint64_t k = 0; k < nchunks; k++) s += parts[k * EG_AGG_WORDS + w];
    result[w] = s;
  }
  stamp_end(stamp);
}

extern "C" __global__ void eg_zero(u64* p, uint64_t words, u64* stamp) {
  stamp_start(stamp);
  for (uint64_t i = TID; i < words; i += STRIDE) p[i] = 0;
  stamp_end(stamp);
}
