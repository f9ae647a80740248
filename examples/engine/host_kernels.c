/* host_kernels.c: the host backend's versions of the engine's kernels (kernels.cu), loaded with
 * devrt_module_load_host under the same names and arguments. Each call runs one block, which
 * takes a contiguous share of the rows (the grid's blocks run in turn on the stream's worker);
 * the results are the same as the GPU's whatever the order, since every aggregate is a sum. */
#include <string.h>
#include <time.h>
#include "engine.h"
#include "gen.h"

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

/* This block's share [*lo, *hi) of n items. */
static void share(const devrt_host_grid* g, uint64_t n, uint64_t* lo, uint64_t* hi) {
  uint64_t per = (n + g->grid_dim.x - 1) / g->grid_dim.x;
  *lo = per * g->block_idx.x < n ? per * g->block_idx.x : n;
  *hi = *lo + per < n ? *lo + per : n;
}

/* The device stamps: the first block's start (kept as ~t, as the GPU's atomicMax leaves it) and
 * the last block's end, in CLOCK_MONOTONIC ns (the host's %globaltimer). */
static void stamp(const devrt_host_grid* g, uint64_t* s, int end) {
  if (!s || g->block_idx.x != (end ? g->grid_dim.x - 1 : 0)) return;
  s[end] = end ? eg_now_ns() : ~eg_now_ns();
}

static void gen_lineitem(const devrt_host_grid* g, void** args) {
  uint64_t cap = arg_u64(args, 1), first = arg_u64(args, 2), lo, hi, *st = arg_ptr(args, 4);
  eg_li_cols c = eg_li_layout(arg_ptr(args, 0), cap);
  stamp(g, st, 0);
  share(g, arg_u64(args, 3), &lo, &hi);
  for (uint64_t i = lo; i < hi; i++) {
    eg_li_row r = eg_lineitem(first + i);
    c.okey[i] = r.okey, c.pkey[i] = r.pkey, c.price[i] = r.price, c.ship[i] = r.ship;
    c.qty[i] = r.qty, c.disc[i] = r.disc, c.group[i] = r.group;
  }
  stamp(g, st, 1);
}

static void gen_orders(const devrt_host_grid* g, void** args) {
  uint64_t cap = arg_u64(args, 1), first = arg_u64(args, 2), lo, hi, *st = arg_ptr(args, 4);
  eg_ord_cols c = eg_ord_layout(arg_ptr(args, 0), cap);
  stamp(g, st, 0);
  share(g, arg_u64(args, 3), &lo, &hi);
  for (uint64_t i = lo; i < hi; i++) {
    eg_order_row r = eg_order(first + i);
    c.okey[i] = r.okey, c.date[i] = r.date, c.prio[i] = r.prio;
  }
  stamp(g, st, 1);
}

static void q1(const devrt_host_grid* g, void** args) {
  uint64_t cap = arg_u64(args, 1), lo, hi, *part = arg_ptr(args, 4), *st = arg_ptr(args, 5);
  uint32_t cutoff = arg_u32(args, 3);
  eg_li_cols c = eg_li_layout(arg_ptr(args, 0), cap);
  stamp(g, st, 0);
  share(g, arg_u64(args, 2), &lo, &hi);
  uint64_t acc[EG_AGG_WORDS] = {0};
  for (uint64_t i = lo; i < hi; i++) {
    eg_li_row r = {0, 0, c.price[i], c.ship[i], c.qty[i], c.disc[i], c.group[i]};
    eg_q1_add(acc, r, cutoff);
  }
  for (int w = 0; w < EG_AGG_WORDS; w++) part[w] += acc[w];
  stamp(g, st, 1);
}

static void build(const devrt_host_grid* g, void** args) {
  uint64_t cap = arg_u64(args, 1), lo, hi, *ht = arg_ptr(args, 5), mask = arg_u64(args, 6);
  uint32_t d0 = arg_u32(args, 3), d1 = arg_u32(args, 4);
  eg_ord_cols c = eg_ord_layout(arg_ptr(args, 0), cap);
  stamp(g, arg_ptr(args, 7), 0);
  share(g, arg_u64(args, 2), &lo, &hi);
  for (uint64_t i = lo; i < hi; i++) {
    eg_order_row o = {c.okey[i], c.date[i], c.prio[i]};
    if (!eg_order_passes(o, d0, d1)) continue;
    uint64_t h = eg_ht_home(o.okey, mask);
    while (ht[h]) h = (h + 1) & mask;
    ht[h] = (uint64_t)o.okey << 32 | (o.prio + 1u);
  }
  stamp(g, arg_ptr(args, 7), 1);
}

static void probe(const devrt_host_grid* g, void** args) {
  uint64_t cap = arg_u64(args, 1), lo, hi, mask = arg_u64(args, 5), *part = arg_ptr(args, 6);
  const uint64_t* ht = arg_ptr(args, 4);
  uint32_t s0 = arg_u32(args, 3);
  eg_li_cols c = eg_li_layout(arg_ptr(args, 0), cap);
  stamp(g, arg_ptr(args, 7), 0);
  share(g, arg_u64(args, 2), &lo, &hi);
  uint64_t acc[2 * EG_PRIORITIES] = {0};
  for (uint64_t i = lo; i < hi; i++) {
    if (c.ship[i] < s0) continue;
    for (uint64_t h = eg_ht_home(c.okey[i], mask); ht[h]; h = (h + 1) & mask) {
      if ((uint32_t)(ht[h] >> 32) != c.okey[i]) continue;
      eg_li_row r = {0, 0, c.price[i], c.ship[i], 0, c.disc[i], 0};
      eg_join_add(acc, (uint32_t)(ht[h] & 0xff) - 1, r);
      break;
    }
  }
  for (int w = 0; w < 2 * EG_PRIORITIES; w++) part[w] += acc[w];
  stamp(g, arg_ptr(args, 7), 1);
}

static void merge(const devrt_host_grid* g, void** args) {
  const uint64_t* parts = arg_ptr(args, 0);
  uint64_t n = arg_u64(args, 1), *result = arg_ptr(args, 2), lo, hi;
  stamp(g, arg_ptr(args, 3), 0);
  share(g, EG_AGG_WORDS, &lo, &hi);
  for (uint64_t w = lo; w < hi; w++) {
    uint64_t s = 0;
    for (uint64_t k = 0; k < n; k++) s += parts[k * EG_AGG_WORDS + w];
    result[w] = s;
  }
  stamp(g, arg_ptr(args, 3), 1);
}

static void zero(const devrt_host_grid* g, void** args) {
  uint64_t* p = arg_ptr(args, 0);
  uint64_t lo, hi;
  stamp(g, arg_ptr(args, 2), 0);
  share(g, arg_u64(args, 1), &lo, &hi);
  if (hi > lo) memset(p + lo, 0, (hi - lo) * sizeof *p);
  stamp(g, arg_ptr(args, 2), 1);
}

static void part_count(const devrt_host_grid* g, void** args) {
  const uint32_t* key = arg_ptr(args, 0);
  uint32_t n = arg_u32(args, 2);
  uint64_t *counts = arg_ptr(args, 3), lo, hi;
  share(g, arg_u64(args, 1), &lo, &hi);
  for (uint64_t i = lo; i < hi; i++) counts[eg_part_of(key[i], n)]++; /* blocks run in turn */
}

static void part_scatter(const devrt_host_grid* g, void** args) {
  const uint8_t* chunk = arg_ptr(args, 0);
  uint64_t cap = arg_u64(args, 1), lo, hi, *meta = arg_ptr(args, 5);
  uint32_t orders = arg_u32(args, 3), n = arg_u32(args, 4);
  uint8_t* out = arg_ptr(args, 6);
  share(g, arg_u64(args, 2), &lo, &hi);
  for (uint64_t i = lo; i < hi; i++) {
    uint32_t p = eg_part_of(((const uint32_t*)(const void*)chunk)[i], n);
    uint64_t at = meta[2 * n + p]++;
    if (orders) {
      eg_ord_cols s = eg_ord_layout((void*)chunk, cap),
                  d = eg_ord_layout(out + meta[2 * p], meta[2 * p + 1]);
      d.okey[at] = s.okey[i], d.date[at] = s.date[i], d.prio[at] = s.prio[i];
    } else {
      eg_li_cols s = eg_li_layout((void*)chunk, cap),
                 d = eg_li_layout(out + meta[2 * p], meta[2 * p + 1]);
      d.okey[at] = s.okey[i], d.pkey[at] = s.pkey[i], d.price[at] = s.price[i];
      d.ship[at] = s.ship[i], d.qty[at] = s.qty[i], d.disc[at] = s.disc[i];
      d.group[at] = s.group[i];
    }
  }
}

const devrt_host_kernel eg_host_kernels[] = {
    {"eg_gen_lineitem", gen_lineitem, 5, {8, 8, 8, 8, 8}},
    {"eg_gen_orders", gen_orders, 5, {8, 8, 8, 8, 8}},
    {"eg_q1", q1, 6, {8, 8, 8, 4, 8, 8}},
    {"eg_build", build, 8, {8, 8, 8, 4, 4, 8, 8, 8}},
    {"eg_probe", probe, 8, {8, 8, 8, 4, 8, 8, 8, 8}},
    {"eg_merge", merge, 4, {8, 8, 8, 8}},
    {"eg_zero", zero, 3, {8, 8, 8}},
    {"eg_part_count", part_count, 4, {8, 8, 4, 8}},
    {"eg_part_scatter", part_scatter, 7, {8, 8, 8, 4, 4, 8, 8}},
};
const unsigned eg_host_kernel_count = sizeof eg_host_kernels / sizeof eg_host_kernels[0];
