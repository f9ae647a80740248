/* test_arena.c: the arena leaf: freed memory of one size serves another (split and merge, no new
 * pages), the account's figures exact in pages, a free on another stream pending until its event
 * completes, trim unmapping the free end, a budget over it, refused input, and the memory
 * usable by the device (a fill read back). Threads: stress/test_arena_stress.c. */
#include <stdatomic.h>
#include "memory/account.h"
#include "test.h"

enum { KIB = 1024, MIB = 1024 * 1024 };

static devrt_stream acquire(devrt_runtime* rt) {
  devrt_stream s = 0;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s));
  return s;
}

static uint64_t held(devrt_resource* r) {
  devrt_resource_figures f = t_figures(r);
  return f.live_bytes + f.pending_bytes + f.cached_bytes;
}

/* Blocks of two sizes freed, then one of their sum: it takes their merged space. */
static void split_and_merge(devrt_runtime* rt, devrt_resource* r, devrt_stream s) {
  void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  REQUIRE_OK(devrt_resource_allocate(r, 3 * MIB, s, "a", &a));
  REQUIRE_OK(devrt_resource_allocate(r, 3 * MIB / 2, s, "b", &b));
  CHECK((char*)b == (char*)a + 3 * MIB); /* split from the same pages, in address order */
  devrt_resource_figures f = t_figures(r);
  CHECK(f.live_bytes == 9 * MIB / 2 && f.pending_bytes == 0);
  CHECK((f.live_bytes + f.cached_bytes) % f.granularity == 0 && f.granularity == 512);
  uint64_t before = held(r);
  CHECK_OK(devrt_resource_deallocate(r, a, 3 * MIB, s));
  CHECK_OK(devrt_resource_deallocate(r, b, 3 * MIB / 2, s));
  CHECK(t_figures(r).live_bytes == 0 && t_figures(r).cached_bytes == before);
  REQUIRE_OK(devrt_resource_allocate(r, 9 * MIB / 2, s, "c", &c));
  CHECK(c == a && held(r) == before); /* the merged space; no page mapped */
  REQUIRE_OK(devrt_resource_allocate(r, 1000, s, "small", &d)); /* the small blocks' range */
  CHECK((uintptr_t)d % 256 == 0 && t_figures(r).live_bytes == 9 * MIB / 2 + 1024);
  CHECK_OK(devrt_resource_deallocate(r, c, 9 * MIB / 2, s));
  CHECK_OK(devrt_resource_deallocate(r, d, 1000, s));
  (void)rt;
}

/* More than a look's worth (64) of too-small free blocks ahead of a free end that fits: the end
 * is taken, with no page mapped (on a fresh arena: its small blocks' range is all that is held). */
static void end_fits(devrt_runtime* rt, devrt_stream s) {
  enum { N = 80 };
  devrt_resource* r = t_arena(rt);
  void *a[N], *b[N], *fill[64], *x = NULL, *y = NULL;
  unsigned nfill = 0;
  for (int i = 0; i < N; i++) {
    REQUIRE_OK(devrt_resource_allocate(r, 4096, s, NULL, &a[i]));
    REQUIRE_OK(devrt_resource_allocate(r, 512, s, NULL, &b[i])); /* keeps the 4096s apart */
  }
  uint64_t tail = held(r) - N * 4608ull;
  while (tail > 4608 + MIB && nfill < 64) { /* 2 MiB pages: fill all but the last MiB */
    REQUIRE_OK(devrt_resource_allocate(r, MIB, s, NULL, &fill[nfill++]));
    tail -= MIB;
  }
  if (tail > 4608) REQUIRE_OK(devrt_resource_allocate(r, tail - 4608, s, NULL, &y));
  for (int i = 0; i < N; i++) CHECK_OK(devrt_resource_deallocate(r, a[i], 4096, s));
  uint64_t before = held(r);
  CHECK_OK(devrt_resource_allocate(r, 4608, s, NULL, &x)); /* only the end holds 4608 */
  CHECK(held(r) == before);
  if (x) CHECK_OK(devrt_resource_deallocate(r, x, 4608, s));
  if (y) CHECK_OK(devrt_resource_deallocate(r, y, tail - 4608, s));
  for (unsigned i = 0; i < nfill; i++) CHECK_OK(devrt_resource_deallocate(r, fill[i], MIB, s));
  for (int i = 0; i < N; i++) CHECK_OK(devrt_resource_deallocate(r, b[i], 512, s));
  CHECK(t_figures(r).live_bytes == 0);
  CHECK_OK(devrt_resource_release(r));
}

/* The memory is the device's: a fill on the stream, read back by a copy. */
static void usable(devrt_runtime* rt, devrt_resource* r, devrt_stream s) {
  unsigned char* p = NULL;
  unsigned char back[4096];
  REQUIRE_OK(devrt_resource_allocate(r, 5 * MIB, s, NULL, (void**)&p));
  CHECK_OK(devrt_memset_async(rt, p, 0x5a, 5 * MIB, s));
  CHECK_OK(devrt_memcpy_async(rt, back, p + 5 * MIB - sizeof back, sizeof back, s));
  CHECK_OK(devrt_stream_synchronize(rt, s));
  bool ok = true;
  for (size_t i = 0; i < sizeof back; i++) ok &= back[i] == 0x5a;
  CHECK(ok);
  CHECK_OK(devrt_resource_deallocate(r, p, 5 * MIB, s));
}

/* A free on another stream is pending until its event is seen complete; then its space serves
 * the allocating stream again. */
static void cross_stream(devrt_runtime* rt, devrt_resource* r, devrt_stream s, devrt_stream t) {
  void *a = NULL, *b = NULL;
  uint64_t n = 0;
  REQUIRE_OK(devrt_resource_allocate(r, 2 * MIB, s, "x", &a));
  CHECK_OK(devrt_resource_deallocate(r, a, 2 * MIB, t));
  CHECK(t_figures(r).pending_bytes == 2 * MIB && t_figures(r).live_bytes == 0);
  CHECK_STATUS(devrt_resource_deallocate(r, a, 2 * MIB, t), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_OK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &n));
  CHECK(n == 2 * MIB && t_figures(r).pending_bytes == 0);
  REQUIRE_OK(devrt_resource_allocate(r, 2 * MIB, s, "y", &b));
  CHECK(b == a);
  CHECK_OK(devrt_resource_deallocate(r, b, 2 * MIB, s));
  (void)rt;
}

/* Refused input: no runtime or out, size 0, a foreign pointer, a wrong size, a double free. */
static void refused(devrt_runtime* rt, devrt_resource* r, devrt_stream s) {
  void* p = NULL;
  int x = 0;
  CHECK_STATUS(devrt_arena_resource_create(NULL, &r), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_arena_resource_create(rt, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_resource_allocate(r, 0, s, NULL, &p), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_resource_deallocate(r, &x, 4, s), DEVRT_ERR_INVALID_ARGUMENT);
  REQUIRE_OK(devrt_resource_allocate(r, 4096, s, NULL, &p));
  CHECK_STATUS(devrt_resource_deallocate(r, p, 4095, s), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "does not match") != NULL);
  CHECK_STATUS(devrt_resource_deallocate(r, (char*)p + 512, 512, s), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_OK(devrt_resource_deallocate(r, p, 4096, s));
  CHECK_STATUS(devrt_resource_deallocate(r, p, 4096, s), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "double free") != NULL);
  /* past a range with no budget over it: the leaf's own refusal */
  CHECK_STATUS(devrt_resource_allocate(r, (size_t)1 << 50, s, NULL, &p),
               DEVRT_ERR_DEVICE_ALLOC_FAILED);
  CHECK(strstr(devrt_last_error(), "do not fit") != NULL);
}

/* Trim gives back the free pages at each range's end, and only those. */
static _Atomic int gate;
static void wait_gate(void* u) {
  (void)u;
  while (!atomic_load(&gate)) t_sleep_ms(1);
}

/* Trim takes the free pages at each range's end at once, and gives them back once the stream has
 * passed it: work queued before the free may still use them, and the trim does not wait for it. */
static void trim(devrt_runtime* rt, devrt_resource* r, devrt_stream s) {
  void *a = NULL, *b = NULL;
  uint64_t n = 0, m = 0;
  REQUIRE_OK(devrt_resource_allocate(r, 6 * MIB, s, NULL, &a));
  REQUIRE_OK(devrt_resource_allocate(r, 6 * MIB, s, NULL, &b));
  atomic_store(&gate, 0);
  REQUIRE_OK(devrt_stream_host_func(rt, s, wait_gate, NULL)); /* b's last use, held */
  CHECK_OK(devrt_resource_deallocate(r, b, 6 * MIB, s));
  uint64_t before = held(r);
  CHECK_OK(devrt_resource_trim(r, &n)); /* returns with the stream held */
  devrt_resource_figures f = t_figures(r);
  CHECK(n >= 6 * MIB && held(r) == before && f.pending_bytes == n);
  CHECK_OK(devrt_resource_reap(r, 0, &m));
  CHECK(held(r) == before); /* not passed yet */
  atomic_store(&gate, 1);
  CHECK_OK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &m));
  CHECK(m == n && held(r) == before - n && held(r) >= 6 * MIB && t_figures(r).pending_bytes == 0);
  /* trimmed pages a later allocation needs come back while still mapped (stream order) */
  REQUIRE_OK(devrt_resource_allocate(r, 6 * MIB, s, NULL, &b));
  CHECK_OK(devrt_resource_deallocate(r, b, 6 * MIB, s));
  CHECK_OK(devrt_resource_trim(r, &n));
  REQUIRE_OK(devrt_resource_allocate(r, 6 * MIB, s, NULL, &b));
  f = t_figures(r);
  CHECK(f.live_bytes == 12 * MIB && f.live_bytes + f.pending_bytes + f.cached_bytes == held(r));
  CHECK_OK(devrt_resource_deallocate(r, b, 6 * MIB, s));
  CHECK_OK(devrt_resource_deallocate(r, a, 6 * MIB, s));
  CHECK_OK(devrt_resource_trim(r, &n));
  CHECK_OK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &m));
  CHECK(held(r) == 0 && t_figures(r).cached_bytes == 0 && t_figures(r).pending_bytes == 0);
}

/* The runtime's stack with DEVRT_ARENA: the budget admits pages, and freed space is reused
 * under it without new pages. */
static void budget(void) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.arena = true;
  cfg.budget_bytes = 8 * MIB;
  devrt_runtime* rt = t_runtime_cfg(&cfg);
  devrt_resource* top = NULL;
  REQUIRE_OK(devrt_runtime_resource(rt, &top));
  devrt_resource* leaf = top;
  while (devrt_resource_upstream(leaf)) leaf = devrt_resource_upstream(leaf);
  CHECK(!strcmp(devrt_resource_name(leaf), "arena"));
  devrt_stream s = acquire(rt);
  void *a = NULL, *b = NULL;
  REQUIRE_OK(devrt_resource_allocate(top, 6 * MIB, s, NULL, &a));
  CHECK_STATUS(devrt_resource_allocate(top, 3 * MIB, s, NULL, &b), DEVRT_ERR_OVER_BUDGET);
  CHECK_STATUS(devrt_resource_allocate(top, (size_t)1 << 50, s, NULL, &b), DEVRT_ERR_OVER_BUDGET);
  CHECK_OK(devrt_resource_deallocate(top, a, 6 * MIB, s));
  CHECK_OK(devrt_resource_allocate(top, 3 * MIB, s, NULL, &b));
  CHECK_OK(devrt_resource_allocate(top, 3 * MIB, s, NULL, &a));
  CHECK_OK(devrt_resource_deallocate(top, a, 3 * MIB, s));
  CHECK_OK(devrt_resource_deallocate(top, b, 3 * MIB, s));
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_runtime_destroy(rt));
}

int main(void) {
  devrt_runtime* rt = t_runtime();
  devrt_resource* r = t_arena(rt);
  devrt_stream s = acquire(rt), t = acquire(rt);
  end_fits(rt, s);
  split_and_merge(rt, r, s);
  usable(rt, r, s);
  cross_stream(rt, r, s, t);
  refused(rt, r, s);
  trim(rt, r, s);
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_stream_release(rt, t));
  CHECK_OK(devrt_resource_release(r));
  budget();
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
