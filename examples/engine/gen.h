/* gen.h: the demo engine's tables and query shapes, shared by the CUDA kernels (kernels.cu), their
 * host versions (host_kernels.c) and the CPU reference (reference.c): every row is a pure function
 * of its index (splitmix64), so host and device generate the same tables. Also the chunk layouts
 * and the aggregate slots the kernels fill. */
#ifndef EG_GEN_H
#define EG_GEN_H

#include <stdint.h>

#ifdef __CUDACC__
#define EG_FN static __host__ __device__ __forceinline__
#else
#define EG_FN static inline
#endif

/* Days since 1992-01-01. Orders are dated over TPC-H's range; lines ship 1..121 days later. */
enum {
  EG_ORDER_DAYS = 2406,  /* order dates 0 .. 2405 (1992-01-01 .. 1998-08-02) */
  EG_CURRENT_DAY = 1263, /* 1995-06-17: before it lines are shipped (F) and may be returned */
  EG_Q1_BASE_DAY = 2526, /* 1998-12-01: Q1's cutoff is this less a delta */
  EG_LINES_PER_ORDER = 4,
  EG_PRIORITIES = 5,
  EG_GROUPS = 6,     /* Q1 groups: return flag (A, N, R) x 2 + line status (F, O) */
  EG_AGG_WORDS = 24, /* one aggregate slot: Q1's 6 groups x {count, qty, price, disc_price}, or
                      * the join's 5 priorities x {count, disc_price} in its first 10 words */
  EG_LI_BYTES = 17,  /* bytes of one lineitem row over its columns */
  EG_ORD_BYTES = 7,  /* bytes of one orders row */
};

EG_FN uint64_t eg_mix(uint64_t x) { /* splitmix64's finalizer */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

typedef struct eg_order_row {
  uint32_t okey;
  uint16_t date;
  uint8_t prio; /* 0 (1-URGENT) .. 4 (5-LOW) */
} eg_order_row;

typedef struct eg_li_row {
  uint32_t okey, pkey, price; /* price: extended price in cents */
  uint16_t ship;              /* ship date */
  uint8_t qty, disc, group;   /* disc: percent 0..10; group: flag * 2 + status */
} eg_li_row;

/* Order keys are sparse, as in TPC-H: 8 of every 32 are used. */
EG_FN uint32_t eg_order_key(uint64_t o) { return (uint32_t)((o >> 3) * 32 + (o & 7) + 1); }

EG_FN eg_order_row eg_order(uint64_t o) {
  uint64_t h = eg_mix(o ^ 0x6f72646572730000ull);
  eg_order_row r = {eg_order_key(o), (uint16_t)(h % EG_ORDER_DAYS), (uint8_t)((h >> 32) % 5)};
  return r;
}

/* Line i belongs to order i / 4; its ship date follows that order's date. */
EG_FN eg_li_row eg_lineitem(uint64_t i) {
  uint64_t o = i / EG_LINES_PER_ORDER, h = eg_mix(i ^ 0x6c696e6500000000ull);
  eg_order_row ord = eg_order(o);
  uint32_t pkey = (uint32_t)((h & 0xfffff) % 200000) + 1;
  uint32_t qty = 1 + (uint32_t)((h >> 20) & 0xffff) % 50;
  uint32_t retail = 90000 + (pkey / 10) % 20001 + 100 * (pkey % 1000); /* TPC-H's, in cents */
  uint32_t ship = ord.date + 1 + (uint32_t)((h >> 44) & 0xfff) % 121;
  uint32_t receipt = ship + 1 + (uint32_t)((h >> 56) & 0x1f) % 30;
  uint32_t flag = receipt <= EG_CURRENT_DAY ? ((h >> 63) ? 2u : 0u) : 1u; /* R or A, else N */
  uint32_t status = ship > EG_CURRENT_DAY; /* O(pen) after the current day, else F */
  eg_li_row r = {ord.okey,
                 pkey,
                 qty * retail,
                 (uint16_t)ship,
                 (uint8_t)qty,
                 (uint8_t)(((h >> 36) & 0xff) % 11),
                 (uint8_t)(flag * 2 + status)};
  return r;
}

/* ---- chunk layouts: one block per chunk, a column after another (cap rows each, cap a
 * multiple of 256, so every column starts 256-byte aligned and loads of 4 rows are aligned) ---- */

typedef struct eg_li_cols {
  uint32_t *okey, *pkey, *price;
  uint16_t* ship;
  uint8_t *qty, *disc, *group;
} eg_li_cols;

EG_FN eg_li_cols eg_li_layout(void* chunk, uint64_t cap) {
  uint8_t* c = (uint8_t*)chunk;
  eg_li_cols l = {(uint32_t*)c,
                  (uint32_t*)(c + 4 * cap),
                  (uint32_t*)(c + 8 * cap),
                  (uint16_t*)(c + 12 * cap),
                  c + 14 * cap,
                  c + 15 * cap,
                  c + 16 * cap};
  return l;
}

typedef struct eg_ord_cols {
  uint32_t* okey;
  uint16_t* date;
  uint8_t* prio;
} eg_ord_cols;

EG_FN eg_ord_cols eg_ord_layout(void* chunk, uint64_t cap) {
  uint8_t* c = (uint8_t*)chunk;
  eg_ord_cols l = {(uint32_t*)c, (uint16_t*)(c + 4 * cap), c + 6 * cap};
  return l;
}

/* ---- queries ---- */

/* Q1 adds a passing row (ship <= cutoff) to its group's four words. */
EG_FN void eg_q1_add(uint64_t* slot, eg_li_row r, uint32_t cutoff) {
  if (r.ship > cutoff) return;
  uint64_t* g = slot + 4 * r.group;
  g[0] += 1, g[1] += r.qty, g[2] += r.price, g[3] += (uint64_t)r.price * (100u - r.disc);
}

/* The join: orders dated in [d0, d1) joined with lines shipped on or after s0, by priority. */
EG_FN int eg_order_passes(eg_order_row o, uint32_t d0, uint32_t d1) {
  return o.date >= d0 && o.date < d1;
}
EG_FN void eg_join_add(uint64_t* slot, uint32_t prio, eg_li_row r) {
  slot[2 * prio] += 1, slot[2 * prio + 1] += (uint64_t)r.price * (100u - r.disc);
}

/* The distributed join's part (device) of an order key: a mix whose bits are not eg_ht_home's,
 * so a device's keys still spread over its whole table. */
EG_FN uint32_t eg_part_of(uint32_t key, uint32_t nparts) {
  return (uint32_t)(eg_mix(key ^ 0x7061727400000000ull) % nparts);
}
/* A shuffled part travels as a chunk of its own: its rows' count rounded up to 4, so each of its
 * columns starts 4-byte aligned when parts lie back to back. */
EG_FN uint64_t eg_part_cap(uint64_t rows) { return (rows + 3) / 4 * 4; }

/* The join's hash table: pow2 slots of (order key << 32 | priority + 1), 0 empty, linear probing.
 */
EG_FN uint64_t eg_ht_home(uint32_t key, uint64_t mask) {
  return ((uint64_t)key * 0x9e3779b97f4a7c15ull >> 32) & mask;
}

#endif
