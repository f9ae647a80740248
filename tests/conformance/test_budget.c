/* test_budget.c: the budget: exact limit, rollback on upstream failure, live/pending/available
 * through alloc/free/reap, release only once the free completed, the pressure ladder (reap, trim,
 * wait), fallback callbacks, nested sub-budgets, the runtime's default stack, and sizes above
 * DEVRT_MAX_ALLOC_SIZE refused before anything counts them. */
#include "devrt/torch.h"
#include "test.h"

#define MiB (1ull << 20)

static devrt_resource* budget_over(devrt_resource* up, uint64_t limit, devrt_budget_scope scope,
                                   bool wait, devrt_fallback_fn fb, void* user) {
  devrt_budget_options o = {.limit_bytes = limit,
                            .scope = scope,
                            .wait_for_pending = wait,
                            .fallback = fb,
                            .fallback_user = user};
  devrt_resource* b = NULL;
  REQUIRE_OK(devrt_budget_create(up, &o, &b));
  return b;
}

static devrt_resource_figures fig(devrt_resource* r) {
  devrt_resource_figures f;
  REQUIRE_OK(devrt_resource_query(r, &f));
  return f;
}

/* A slow kernel that keeps `p` busy on s for ms milliseconds. */
static void keep_busy(devrt_runtime* rt, devrt_stream s, void* p, unsigned ms) {
  uint32_t v = 1;
  uint64_t n = 64, delay = (uint64_t)ms * 1000000ull;
  void* args[] = {&p, &v, &n, &delay};
  REQUIRE_OK(t_launch(rt, s, "devrt_slow_fill_u32", 1, 32, args));
}

typedef struct {
  devrt_resource* r;
  void* held;
  size_t size;
  devrt_stream s;
  int calls;
} spill;
static bool spill_one(void* user, size_t size, const char* tag, devrt_status why) {
  spill* sp = user;
  (void)size, (void)tag;
  sp->calls++;
  if (why != DEVRT_ERR_OVER_BUDGET || !sp->held) return false;
  devrt_resource_deallocate(sp->r, sp->held, sp->size, sp->s);
  devrt_resource_reap(sp->r, DEVRT_REAP_WAIT, NULL); /* spilled: the bytes are really back */
  sp->held = NULL;
  return true;
}

static bool same(devrt_resource* r, const devrt_resource_figures* was) {
  devrt_resource_figures f = fig(r);
  return !memcmp(&f, was, sizeof f);
}

/* Sizes above DEVRT_MAX_ALLOC_SIZE, those within a granule of SIZE_MAX too (their rounding once
 * wrapped to a charge of 0, and they reached the pool), are INVALID_ARGUMENT naming the size and
 * the bound, before any layer counts them: through the runtime's stack, a DEVICE budget over
 * caching and async and a THROUGH budget built by hand, devrt_block_alloc, a queued allocation
 * and devrt_torch_alloc. No figure moves. A free of such a size is refused too. The bound itself
 * is a size: the budgets refuse it. */
static void huge_sizes(devrt_runtime* rt, devrt_stream s) {
  const size_t huge[] = {SIZE_MAX,       SIZE_MAX - 1,    SIZE_MAX - 255,
                         SIZE_MAX - 256, SIZE_MAX - 4095, (size_t)DEVRT_MAX_ALLOC_SIZE + 1};
  devrt_resource *top, *leaf, *cache, *leaf2, *ptop;
  REQUIRE_OK(devrt_runtime_resource(rt, &top));
  REQUIRE_OK(devrt_async_resource_create(rt, &leaf));
  REQUIRE_OK(devrt_caching_resource_create(leaf, NULL, &cache));
  REQUIRE_OK(devrt_async_resource_create(rt, &leaf2));
  devrt_resource* r[] = {top, budget_over(cache, 64 * MiB, DEVRT_BUDGET_DEVICE, true, NULL, NULL),
                         budget_over(leaf2, 64 * MiB, DEVRT_BUDGET_THROUGH, true, NULL, NULL)};
  devrt_runtime* proc; /* devrt_torch_alloc's: the process-wide runtime of device 0 */
  REQUIRE_OK(devrt_runtime_get(0, &proc));
  REQUIRE_OK(devrt_runtime_resource(proc, &ptop));
  devrt_resource_figures was[3] = {fig(r[0]), fig(r[1]), fig(r[2])}, pwas = fig(ptop);
  for (size_t i = 0; i < sizeof huge / sizeof *huge; i++) {
    char named[64];
    snprintf(named, sizeof named, "size %zu not in [1, DEVRT_MAX_ALLOC_SIZE", huge[i]);
    void* p = NULL;
    for (int k = 0; k < 3; k++) {
      CHECK_STATUS(devrt_resource_allocate(r[k], huge[i], s, "huge", &p),
                   DEVRT_ERR_INVALID_ARGUMENT);
      CHECK(!p && strstr(devrt_last_error(), named));
    }
    devrt_block b = 0;
    CHECK_STATUS(devrt_block_alloc(rt, huge[i], s, "huge", &b), DEVRT_ERR_INVALID_ARGUMENT);
    CHECK(!b && strstr(devrt_last_error(), named));
    devrt_submission sub = {.stream = s,
                            .kind = DEVRT_WORK_ALLOC,
                            .alloc = {.size = huge[i], .tag = "huge", .out = &b}};
    CHECK_STATUS(devrt_queue_submit(rt, &sub), DEVRT_ERR_INVALID_ARGUMENT);
    CHECK(!b && strstr(devrt_last_error(), "DEVRT_MAX_ALLOC_SIZE"));
    CHECK(devrt_torch_alloc(huge[i], 0, NULL) == NULL);
    CHECK(strstr(devrt_last_error(), "devrt_torch_alloc") && strstr(devrt_last_error(), named));
  }
  for (int k = 0; k < 3; k++) CHECK(same(r[k], &was[k]));
  CHECK(same(ptop, &pwas));
  for (int k = 0; k < 3; k++) { /* a free of such a size is refused too; the block stays live */
    void* p = NULL;
    REQUIRE_OK(devrt_resource_allocate(r[k], 4096, s, "small", &p));
    CHECK_STATUS(devrt_resource_deallocate(r[k], p, SIZE_MAX, s), DEVRT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(devrt_last_error(), "size 18446744073709551615 not in [1, DEVRT_MAX_ALLOC_SIZE"));
    CHECK_OK(devrt_resource_deallocate(r[k], p, 4096, s));
  }
  for (int k = 0; k < 3; k++) {
    void* p = NULL;
    CHECK_STATUS(devrt_resource_allocate(r[k], DEVRT_MAX_ALLOC_SIZE, s, "bound", &p),
                 DEVRT_ERR_OVER_BUDGET);
    CHECK_OK(devrt_resource_reap(r[k], DEVRT_REAP_WAIT, NULL)); /* what the ladder's trim freed */
  }
  CHECK(fig(r[1]).live_bytes == 0 && fig(r[2]).live_bytes == 0);
  devrt_resource_release(r[1]);
  devrt_resource_release(r[2]);
  devrt_resource_release(cache);
  devrt_resource_release(leaf);
  devrt_resource_release(leaf2);
}

int main(void) {
  devrt_runtime* rt = t_runtime();
  devrt_stream s;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s));
  devrt_resource* leaf;
  REQUIRE_OK(devrt_async_resource_create(rt, &leaf));
  uint64_t g = fig(leaf).granularity;
  printf("granularity %llu bytes\n", (unsigned long long)g);
  CHECK(g >= 256 && (g & (g - 1)) == 0);

  /* Exact limit accepted, one byte more refused, nothing changed by the refusal. */
  uint64_t limit = 4 * MiB;
  devrt_resource* b = budget_over(leaf, limit, DEVRT_BUDGET_DEVICE, false, NULL, NULL);
  void *p, *q;
  CHECK_OK(devrt_resource_allocate(b, limit, s, "exact", &p));
  CHECK(fig(b).live_bytes == limit && fig(b).available_bytes == 0);
  CHECK_STATUS(devrt_resource_allocate(b, 1, s, "one-more", &q), DEVRT_ERR_OVER_BUDGET);
  const char* m = devrt_last_error();
  CHECK(strstr(m, "one-more") && strstr(m, "live 4194304") && strstr(m, "limit 4194304") &&
        strstr(m, "pending"));
  CHECK(fig(b).live_bytes == limit);

  /* Free: live -> pending; available returns only when the free is observed complete. */
  CHECK_OK(devrt_resource_deallocate(b, p, limit, s));
  devrt_resource_figures f = fig(b);
  CHECK(f.live_bytes == 0 && f.pending_bytes == limit && f.available_bytes == 0);
  uint64_t reaped = 0;
  CHECK_OK(devrt_resource_reap(b, DEVRT_REAP_WAIT, &reaped));
  f = fig(b);
  CHECK(reaped == limit && f.pending_bytes == 0 && f.available_bytes == limit);

  /* Rounding: the budget charges what the pool really hands out. */
  CHECK_OK(devrt_resource_allocate(b, 1, s, "tiny", &p));
  CHECK(fig(b).live_bytes == g);
  CHECK_OK(devrt_resource_deallocate(b, p, 1, s));
  CHECK_OK(devrt_resource_reap(b, DEVRT_REAP_WAIT, NULL));

  /* Rollback when the upstream fails. */
  rt->be->fault_arm(rt->dev, DV_FAULT_ALLOC, 1);
  CHECK_STATUS(devrt_resource_allocate(b, MiB, s, "fault", &p), DEVRT_ERR_DEVICE_ALLOC_FAILED);
  f = fig(b);
  CHECK(f.live_bytes == 0 && f.available_bytes == limit);

  /* Released only when the free completed: a slow kernel holds the block; without waiting the
   * budget refuses, with wait_for_pending it waits for the free and succeeds. */
  CHECK_OK(devrt_resource_allocate(b, limit, s, "busy", &p));
  keep_busy(rt, s, p, 200);
  CHECK_OK(devrt_resource_deallocate(b, p, limit, s));
  CHECK_STATUS(devrt_resource_allocate(b, MiB, s, "while-busy", &q), DEVRT_ERR_OVER_BUDGET);
  CHECK(fig(b).pending_bytes == limit);
  /* bw, stacked over leaf that b owns, counts only what passes through it (available: its whole
   * limit), while leaf still refuses past b's limit; bw's ladder then waits for the free. */
  devrt_resource* bw = budget_over(leaf, limit, DEVRT_BUDGET_THROUGH, true, NULL, NULL);
  CHECK(fig(bw).available_bytes == limit && fig(bw).live_bytes == 0);
  CHECK_OK(devrt_resource_allocate(bw, MiB, s, "waited", &q));
  CHECK(fig(bw).pending_bytes == 0);
  CHECK_OK(devrt_resource_deallocate(bw, q, MiB, s));
  CHECK_OK(devrt_resource_reap(bw, DEVRT_REAP_WAIT, NULL));
  devrt_resource_release(bw);

  /* Fallback: runs on OVER_BUDGET, the allocation is retried when it returns true; counted. */
  spill sp = {b, NULL, 3 * MiB, s, 0};
  devrt_resource* bf = budget_over(leaf, limit, DEVRT_BUDGET_THROUGH, false, spill_one, &sp);
  sp.r = bf;
  CHECK_OK(devrt_resource_allocate(bf, 3 * MiB, s, "held", &sp.held));
  CHECK_OK(devrt_resource_allocate(bf, 2 * MiB, s, "needs-spill", &q));
  CHECK(sp.calls == 1 && fig(bf).fallbacks == 1 && sp.held == NULL);
  void* r2;
  CHECK_STATUS(devrt_resource_allocate(bf, 3 * MiB, s, "no-spill-left", &r2),
               DEVRT_ERR_OVER_BUDGET);
  CHECK(sp.calls == 2 && fig(bf).fallbacks == 2);
  CHECK_OK(devrt_resource_deallocate(bf, q, 2 * MiB, s));
  CHECK_OK(devrt_resource_reap(bf, DEVRT_REAP_WAIT, NULL));
  devrt_resource_release(bf);

  devrt_resource_release(b); /* the parent below owns leaf's account from here on */

  /* Nested: a 2 MiB child under a 5 MiB parent refuses 4 MiB; the parent refuses the child when
   * the parent is full although the child has room. */
  devrt_resource* parent = budget_over(leaf, 5 * MiB, DEVRT_BUDGET_DEVICE, false, NULL, NULL);
  devrt_resource *child, *bad;
  CHECK_OK(devrt_budget_create_child(parent, 2 * MiB, &child));
  CHECK_STATUS(devrt_budget_create_child(parent, 6 * MiB, &bad), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_budget_create_child(leaf, MiB, &bad), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_resource_allocate(child, 4 * MiB, s, "too-big-for-child", &p),
               DEVRT_ERR_OVER_BUDGET);
  CHECK(strstr(devrt_last_error(), "sub-budget"));
  void* big;
  CHECK_OK(devrt_resource_allocate(parent, 4 * MiB, s, "sibling", &big));
  CHECK_STATUS(devrt_resource_allocate(child, 2 * MiB, s, "parent-full", &p),
               DEVRT_ERR_OVER_BUDGET);
  CHECK(fig(child).live_bytes == 0);
  CHECK_OK(devrt_resource_allocate(child, MiB, s, "fits", &p));
  CHECK(fig(child).live_bytes == MiB && fig(parent).live_bytes == 5 * MiB);
  CHECK_OK(devrt_resource_deallocate(child, p, MiB, s));
  CHECK_OK(devrt_resource_deallocate(parent, big, 4 * MiB, s));
  CHECK_OK(devrt_resource_reap(parent, DEVRT_REAP_WAIT, NULL));
  CHECK(fig(child).live_bytes == 0 && fig(parent).live_bytes == 0 &&
        fig(parent).available_bytes == 5 * MiB);
  devrt_resource_release(child);
  devrt_resource_release(parent);

  /* Trim under pressure: cached blocks are given back (their frees are stream-ordered, so the
   * budget waits for them: wait_for_pending) and a new size fits. */
  devrt_resource *cache, *leaf2; /* a stack of its own: b still owns leaf's account */
  REQUIRE_OK(devrt_async_resource_create(rt, &leaf2));
  REQUIRE_OK(devrt_caching_resource_create(leaf2, NULL, &cache));
  devrt_resource_release(leaf2); /* cache holds it */
  devrt_resource* bc = budget_over(cache, 4 * MiB, DEVRT_BUDGET_DEVICE, true, NULL, NULL);
  void* blocks[4];
  for (int i = 0; i < 4; i++) CHECK_OK(devrt_resource_allocate(bc, MiB, s, "cached", &blocks[i]));
  for (int i = 0; i < 4; i++) CHECK_OK(devrt_resource_deallocate(bc, blocks[i], MiB, s));
  f = fig(bc);
  CHECK(f.cached_bytes >= 4 * MiB && f.live_bytes == 0 && f.available_bytes == 0);
  CHECK_OK(devrt_resource_allocate(bc, 3 * MiB, s, "after-trim", &p));
  CHECK(fig(bc).cached_bytes < 4 * MiB);
  CHECK_OK(devrt_resource_deallocate(bc, p, 3 * MiB, s));
  CHECK_OK(devrt_resource_trim(bc, NULL));
  CHECK_OK(devrt_resource_reap(bc, DEVRT_REAP_WAIT, NULL));
  f = fig(bc);
  CHECK(f.cached_bytes == 0 && f.pending_bytes == 0 && f.live_bytes == 0);
  devrt_resource_release(bc);
  devrt_resource_release(cache);

  /* Who counts the device is the builder's choice: one DEVICE budget a stack at a time (the
   * refusal names the one that has it), THROUGH ones beside it. */
  devrt_resource* dev = budget_over(leaf, limit, DEVRT_BUDGET_DEVICE, false, NULL, NULL);
  devrt_budget_options twice = {.limit_bytes = limit, .scope = DEVRT_BUDGET_DEVICE};
  CHECK_STATUS(devrt_budget_create(leaf, &twice, &bad), DEVRT_ERR_INVALID_STATE);
  CHECK(strstr(devrt_last_error(), "already has a DEVICE budget (budget)"));
  devrt_resource* through = budget_over(leaf, MiB, DEVRT_BUDGET_THROUGH, false, NULL, NULL);
  CHECK_OK(devrt_resource_allocate(dev, 2 * MiB, s, "device", &p));
  CHECK(fig(through).live_bytes == 0 && fig(dev).live_bytes == 2 * MiB);
  CHECK_OK(devrt_resource_deallocate(dev, p, 2 * MiB, s));
  devrt_resource_release(dev);
  CHECK_OK(devrt_budget_create(leaf, &twice, &dev)); /* free again once the first is gone */
  devrt_resource_release(dev);
  devrt_resource_release(through);
  twice.scope = (devrt_budget_scope)7;
  CHECK_STATUS(devrt_budget_create(leaf, &twice, &bad), DEVRT_ERR_INVALID_ARGUMENT);

  /* Bad input. */
  devrt_budget_options zero = {0};
  CHECK_STATUS(devrt_budget_create(leaf, &zero, &bad), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_budget_create(leaf, NULL, &bad), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_budget_create(NULL, &zero, &bad), DEVRT_ERR_INVALID_ARGUMENT);
  devrt_resource_release(leaf);

  /* The runtime's default stack: budget -> statistics -> caching -> async, limit from the config.
   */
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.budget_percent = 50;
  devrt_runtime* rt2 = t_runtime_cfg(&cfg);
  devrt_resource* top;
  REQUIRE_OK(devrt_runtime_resource(rt2, &top));
  const char* want[] = {"budget", "statistics", "caching", "async"};
  devrt_resource* layer = top;
  for (int i = 0; i < 4; i++, layer = devrt_resource_upstream(layer))
    CHECK(layer && !strcmp(devrt_resource_name(layer), want[i]));
  CHECK(layer == NULL);
  CHECK(fig(top).limit_bytes == rt2->info.total_memory / 100 * 50);
  devrt_stream s2;
  REQUIRE_OK(devrt_stream_acquire(rt2, DEVRT_ACQUIRE_FAIL, &s2));
  CHECK_OK(devrt_resource_allocate(top, MiB, s2, "default", &p));
  CHECK_OK(devrt_resource_deallocate(top, p, MiB, s2));
  CHECK_OK(devrt_reap_pending(rt2, DEVRT_REAP_WAIT, &reaped));
  CHECK_STATUS(devrt_runtime_set_resource(rt2, top), DEVRT_ERR_INVALID_STATE);
  CHECK_OK(devrt_stream_release(rt2, s2));
  CHECK_OK(devrt_runtime_destroy(rt2));

  /* The default stack under a 1 MiB budget: what the cache holds is idle memory that the
   * budget's own trim gives back, and the allocation that needed it gets it (the trim's frees
   * are waited for, not left pending). */
  for (int round = 0; round < 20; round++) {
    REQUIRE_OK(devrt_config_init(&cfg));
    cfg.budget_bytes = MiB, cfg.cache = true;
    devrt_runtime* rt3 = t_runtime_cfg(&cfg);
    REQUIRE_OK(devrt_runtime_resource(rt3, &top));
    devrt_stream s3;
    REQUIRE_OK(devrt_stream_acquire(rt3, DEVRT_ACQUIRE_FAIL, &s3));
    void* small[16];
    for (int i = 0; i < 16; i++)
      CHECK_OK(devrt_resource_allocate(top, 64 << 10, s3, "small", &small[i]));
    for (int i = 0; i < 16; i++) CHECK_OK(devrt_resource_deallocate(top, small[i], 64 << 10, s3));
    CHECK_OK(devrt_reap_pending(rt3, DEVRT_REAP_WAIT, NULL));
    p = NULL;
    CHECK_OK(devrt_resource_allocate(top, 512 << 10, s3, "after the trim", &p));
    if (p) CHECK_OK(devrt_resource_deallocate(top, p, 512 << 10, s3));
    CHECK_OK(devrt_stream_release(rt3, s3));
    CHECK_OK(devrt_runtime_destroy(rt3));
  }

  huge_sizes(rt, s);
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
