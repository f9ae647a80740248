/* spin.h: the short lock devrt's record tables, free lists and per-slot event state use (one
 * atomic exchange to take, a plain store to give back: a pthread mutex costs two locked
 * instructions; sections are a few probes or pointer moves, so waiters yield after a short spin),
 * and the unit of memory that different threads' written data must not share. */
#ifndef DEVRT_SPIN_H
#define DEVRT_SPIN_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "error.h" /* DV_ASSERT */

/* What threads that write must not share: two 64-byte lines, as the adjacent-line prefetcher
 * of x86 cores moves lines in pairs (one line apart, two threads' counters still bounce). */
#ifndef DV_LINE
#define DV_LINE 128
#endif
/* Zeroed host memory in whole DV_LINE units, DV_LINE-aligned: records and tables that different
 * threads write, or that a hot path reads line by line, share no unit with anything else. */
static inline void* dv_zalloc_lines(size_t size) {
  size = (size + DV_LINE - 1) / DV_LINE * DV_LINE;
  void* p = aligned_alloc(DV_LINE, size);
  return p ? memset(p, 0, size) : NULL;
}

typedef _Atomic bool dv_spin;
/* Out of line, so every lock site stays one exchange and a branch. */
static __attribute__((noinline, cold, unused)) void dv_spin_wait(dv_spin* l) {
  do
    for (unsigned n = 0; atomic_load_explicit(l, memory_order_relaxed);)
      if (++n % 64 == 0) sched_yield();
  while (atomic_exchange_explicit(l, true, memory_order_acquire));
}
static inline void dv_spin_lock(dv_spin* l) {
  if (__builtin_expect(atomic_exchange_explicit(l, true, memory_order_acquire), 0)) dv_spin_wait(l);
}
static inline void dv_spin_unlock(dv_spin* l) {
  DV_ASSERT(atomic_load_explicit(l, memory_order_relaxed)); /* held: unlocked once */
  atomic_store_explicit(l, false, memory_order_release);    /* pairs with dv_spin_lock's acquire */
}
/* Whether some thread holds l (for asserts of "under l": the lock keeps no owner). */
static inline bool dv_spin_held(dv_spin* l) {
  return atomic_load_explicit(l, memory_order_relaxed);
}

#endif
