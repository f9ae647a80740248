/* slotset.h (internal): a set of stream slots (at most DV_SID_SLOTS) as an atomic bitmap under a
 * summary word, so a reaper visits only the slots that have something for it: one load when the
 * set is empty, two per member. Adds and takes are read-modify-writes of the slot's word, so of an
 * add and a take of one slot one comes second in that word's order and sees the first: a take
 * that removes an add also sees what the adder did before it (release, then acquire). */
#ifndef DEVRT_SLOTSET_H
#define DEVRT_SLOTSET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "spin.h"

#define DV_SLOTSET_WORDS 64 /* DV_SID_SLOTS / 64 */

typedef struct dv_slotset {
  _Atomic uint64_t top; /* bit j: w[j] may be non-empty (set by the add that fills it) */
  _Atomic uint64_t w[DV_SLOTSET_WORDS];
} dv_slotset;

static inline void dv_slotset_add(dv_slotset* s, unsigned i) {
  if (!atomic_fetch_or_explicit(&s->w[i / 64], 1ull << i % 64, memory_order_release))
    atomic_fetch_or_explicit(&s->top, 1ull << i / 64, memory_order_release);
}

/* Removes i; true if it was there. The take that empties a word clears its summary bit, then
 * looks at the word again: an add that refilled it and set the bit before the clear is seen then
 * (the clear read its bit), one after the clear sets it anew. (Two such takes can leave a bit
 * over an empty word: a scan then reads one word more, until the next take empties it.) */
static inline bool dv_slotset_take(dv_slotset* s, unsigned i) {
  uint64_t bit = 1ull << i % 64, top = 1ull << i / 64;
  uint64_t was = atomic_fetch_and_explicit(&s->w[i / 64], ~bit, memory_order_acq_rel);
  if (was == bit) {
    atomic_fetch_and_explicit(&s->top, ~top, memory_order_acq_rel);
    if (atomic_load_explicit(&s->w[i / 64], memory_order_acquire))
      atomic_fetch_or_explicit(&s->top, top, memory_order_release);
  }
  return was & bit;
}

static inline bool dv_slotset_has(dv_slotset* s, unsigned i) {
  return atomic_load_explicit(&s->w[i / 64], memory_order_acquire) >> i % 64 & 1;
}

/* The first member at or after i, or DV_SLOTSET_WORDS * 64 if none: a snapshot, for iteration
 * (members added meanwhile may or may not be found). */
static inline unsigned dv_slotset_next(dv_slotset* s, unsigned i) {
  while (i < DV_SLOTSET_WORDS * 64) {
    uint64_t t = atomic_load_explicit(&s->top, memory_order_acquire) >> i / 64;
    if (!t) break;
    if (t & 1) {
      uint64_t w = atomic_load_explicit(&s->w[i / 64], memory_order_acquire) >> i % 64;
      if (w) return i + (unsigned)__builtin_ctzll(w);
      t &= ~1ull;
      if (!t) break;
    }
    i = (i / 64 + (unsigned)__builtin_ctzll(t)) * 64;
  }
  return DV_SLOTSET_WORDS * 64;
}
#define DV_SLOTSET_FOR(i, s) \
  for (unsigned i = dv_slotset_next(s, 0); i < DV_SLOTSET_WORDS * 64; i = dv_slotset_next(s, i + 1))

#endif
