/* test_partition.c: SM partition layouts (partition.h). Plans follow the split rules (rounding,
 * remainder policies, refusals) and predict what create builds; each partition's kernels run
 * only on its own SMs (devrt_record_smid), disjoint from its siblings', while separately created
 * layouts overlap and are never reported disjoint; graphs captured on a partition stream keep
 * its SMs (cuda); sub-budgets, fallback and plain streams, activation, teardown refusals, stale,
 * foreign and NULL handles, cross-partition use tracking and semaphores, concurrent creation, and
 * creation leaving the caller's current context alone (cuda). */
#include <pthread.h>
#include "launch_util.h"
#ifdef DEVRT_HAVE_CUDA
#include "driver/cuda_driver.h"
#endif

#define MiB ((size_t)1 << 20)
enum { MAXID = 1024, N = 256 };
#define DELAY (30 * MS)

static devrt_runtime* rt;
static devrt_device_info dinfo;
static unsigned DEV, MINP, ALIGN, BLOCKS;
static bool cuda;
static kernels K;
static devrt_kernel* smid_k;
#ifdef DEVRT_HAVE_CUDA
static const dv_driver* D;
#endif

typedef struct smset {
  unsigned char in[MAXID];
  unsigned n, lo, hi; /* distinct ids, smallest, largest */
} smset;

static unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
static unsigned rup(unsigned v, unsigned a) { return a ? (v + a - 1) / a * a : v; }

static devrt_partition_stats pstats(void) {
  devrt_partition_stats s;
  memset(&s, 0, sizeof s);
  CHECK_OK(devrt_partition_stats_get(rt, &s));
  return s;
}

static devrt_layout_info linfo(devrt_layout* L) {
  devrt_layout_info i;
  memset(&i, 0, sizeof i);
  CHECK_OK(devrt_layout_info_get(rt, L, &i));
  return i;
}

static devrt_partition* part(devrt_layout* L, unsigned i) {
  devrt_partition* p = NULL;
  REQUIRE_OK(devrt_layout_partition(rt, L, i, &p));
  return p;
}

static devrt_partition_info pinfo(devrt_partition* p) {
  devrt_partition_info i;
  memset(&i, 0, sizeof i);
  CHECK_OK(devrt_partition_info_get(rt, p, &i));
  return i;
}

static devrt_stream pstream(devrt_partition* p) {
  devrt_stream s = 0;
  REQUIRE_OK(devrt_partition_stream_acquire(rt, p, DEVRT_ACQUIRE_FAIL, &s));
  return s;
}

static bool disjoint(devrt_partition* a, devrt_partition* b) {
  bool d = false;
  CHECK_OK(devrt_partitions_disjoint(rt, a, b, &d));
  return d;
}

/* Creates a layout, checking that creation leaves the caller's current context alone (cuda) and
 * that the live count rises by one. */
static devrt_status mk_layout(const devrt_layout_spec* sp, devrt_layout** out) {
  devrt_partition_stats before = pstats();
#ifdef DEVRT_HAVE_CUDA
  CUcontext c0 = NULL, c1 = NULL;
  if (cuda) D->cuCtxGetCurrent(&c0);
#endif
  *out = NULL;
  devrt_status st = devrt_layout_create(rt, sp, out);
#ifdef DEVRT_HAVE_CUDA
  if (cuda) {
    D->cuCtxGetCurrent(&c1);
    CHECK(c0 == c1); /* created or refused, the caller's current context is unchanged */
  }
#endif
  devrt_partition_stats after;
  DV_KEEP_ERROR(after = pstats()); /* a refusal's message stays for the caller's check */
  if (st == DEVRT_OK) {
    CHECK(*out != NULL);
    CHECK(after.layouts_live == before.layouts_live + 1 &&
          after.layouts_created == before.layouts_created + 1);
  } else {
    CHECK(after.layouts_live == before.layouts_live &&
          after.layouts_created == before.layouts_created);
  }
  return st;
}

static void rm_layout(devrt_layout* L) {
  uint64_t live = pstats().layouts_live;
  CHECK_OK(devrt_layout_destroy(rt, L));
  CHECK(pstats().layouts_live == live - 1);
}

/* Launches devrt_record_smid (BLOCKS blocks) on launch_s (0: the runtime picks) into a block
 * allocated on alloc_s, and collects the distinct SM ids. */
static devrt_status record(devrt_stream alloc_s, devrt_stream launch_s, smset* set) {
  memset(set, 0, sizeof *set);
  set->lo = ~0u;
  devrt_block b = 0;
  devrt_status st = devrt_block_alloc(rt, BLOCKS * sizeof(uint32_t), alloc_s, "smid", &b);
  if (st) return st;
  void* p = bptr(rt, b);
  void* args[] = {&p};
  devrt_block_use u[] = {{b, DEVRT_ACCESS_WRITE}};
  devrt_launch_desc d = {.stream = launch_s,
                         .kernel = smid_k,
                         .grid = {BLOCKS},
                         .block = {32},
                         .args = args,
                         .uses = u,
                         .nuses = 1};
  uint32_t* ids = calloc(BLOCKS, sizeof *ids);
  if (!ids) abort();
  st = devrt_launch(rt, &d);
  if (!st) st = b_read(rt, alloc_s, b, ids, BLOCKS * sizeof *ids);
  for (unsigned i = 0; !st && i < BLOCKS; i++) {
    CHECK(ids[i] < MAXID);
    if (ids[i] >= MAXID || set->in[ids[i]]) continue;
    set->in[ids[i]] = 1, set->n++;
    if (ids[i] < set->lo) set->lo = ids[i];
    if (ids[i] > set->hi) set->hi = ids[i];
  }
  free(ids);
  devrt_status f = devrt_block_free(rt, b);
  return st ? st : f;
}

static unsigned overlap(const smset* a, const smset* b) {
  unsigned n = 0;
  for (unsigned i = 0; i < MAXID; i++) n += a->in[i] && b->in[i];
  return n;
}

static bool subset(const smset* a, const smset* of) {
  for (unsigned i = 0; i < MAXID; i++)
    if (a->in[i] && !of->in[i]) return false;
  return true;
}

/* ---- what a spec should give (the device's split rules) ---- */

typedef struct expect {
  devrt_status status;
  unsigned nreq; /* requested groups (even form, groups 0: as many as fit) */
  unsigned req[DEVRT_MAX_PARTITIONS], grant[DEVRT_MAX_PARTITIONS];
  unsigned fit, per; /* even form: what the driver's dry run gives */
} expect;

static unsigned grant_of(unsigned req) {
  unsigned g = rup(umax(umax(req, MINP), 1), ALIGN);
  return g > DEV ? DEV : g; /* a group of the whole device is not rounded past it */
}

static expect expect_of(const devrt_layout_spec* sp) {
  expect e;
  memset(&e, 0, sizeof e);
  if (sp->sm_counts) {
    unsigned sum = 0;
    e.nreq = sp->count;
    for (unsigned i = 0; i < sp->count; i++) {
      e.req[i] = sp->sm_counts[i];
      e.grant[i] = grant_of(sp->sm_counts[i]);
      sum += sp->sm_counts[i];
    }
    e.status = sum > DEV ? DEVRT_ERR_INVALID_ARGUMENT : DEVRT_OK;
    return e;
  }
  if (sp->min_sms > DEV) {
    e.status = DEVRT_ERR_INVALID_ARGUMENT;
    return e;
  }
  devrt_split_result r;
  REQUIRE_OK(devrt_device_split_query(rt, sp->min_sms, 0, &r));
  e.fit = r.groups, e.per = r.sms_per_group;
  e.nreq = sp->groups ? sp->groups : r.groups;
  e.status = e.nreq > r.groups ? DEVRT_ERR_OUT_OF_RESOURCES : DEVRT_OK;
  for (unsigned i = 0; i < e.nreq && i < DEVRT_MAX_PARTITIONS; i++)
    e.req[i] = sp->min_sms, e.grant[i] = r.sms_per_group;
  return e;
}

static void print_plan(const char* what, devrt_status st, const devrt_layout_plan* p) {
  printf("%-28s %-17s %u partitions [", what, devrt_status_name(st), p->partitions);
  for (unsigned i = 0; i < p->partitions && i < DEVRT_MAX_PARTITIONS; i++)
    printf("%s%u", i ? " " : "", p->sm_counts[i]);
  printf("] idle %u, catch-all %u%s\n", p->idle_sms, p->catch_all,
         p->remainder_partition ? ", remainder" : "");
}

/* The split rules and the exact plan for an isolated layout of `sp`. */
static void check_plan(const devrt_layout_spec* sp, const devrt_layout_plan* p, const expect* e) {
  unsigned n = e->nreq;
  CHECK(p->device_sms == DEV);
  CHECK(p->isolated && p->fallback_reason[0] == 0);
  CHECK(!p->structured_split || dinfo.structured_split);
  CHECK(p->partitions >= 1 && p->partitions <= DEVRT_MAX_PARTITIONS);
  if (p->partitions < 1 || p->partitions > DEVRT_MAX_PARTITIONS) return;
  /* The invariants: groups of at least what was asked and the minimum, aligned unless the
   * whole device, SMs accounted for, the catch-all the last. */
  unsigned sum = 0;
  for (unsigned i = 0; i < p->partitions; i++) {
    sum += p->sm_counts[i];
    CHECK(p->sm_counts[i] >= 1);
    if (i < n) {
      CHECK(p->sm_counts[i] >= e->req[i] && p->sm_counts[i] >= MINP);
      bool merged = sp->remainder == DEVRT_REMAINDER_MERGE && i == n - 1;
      if (!merged) CHECK(p->sm_counts[i] % ALIGN == 0 || p->sm_counts[i] == DEV);
    }
  }
  CHECK(sum + p->idle_sms == DEV);
  CHECK(p->catch_all == p->partitions - 1);
  /* The exact plan. */
  unsigned granted = 0;
  for (unsigned i = 0; i < n; i++) granted += e->grant[i];
  CHECK(granted <= DEV);
  unsigned left = granted <= DEV ? DEV - granted : 0;
  unsigned want_parts = n + (sp->remainder == DEVRT_REMAINDER_PARTITION && left > 0);
  CHECK(p->partitions == want_parts);
  CHECK(p->remainder_partition == (want_parts == n + 1));
  CHECK(p->idle_sms == (sp->remainder == DEVRT_REMAINDER_IDLE ? left : 0));
  for (unsigned i = 0; i < n && i < p->partitions; i++) {
    unsigned want = e->grant[i] + (sp->remainder == DEVRT_REMAINDER_MERGE && i == n - 1 ? left : 0);
    if (p->sm_counts[i] != want) {
      fprintf(stderr, "  partition %u: %u SMs, want %u\n", i, p->sm_counts[i], want);
      CHECK(p->sm_counts[i] == want);
    }
  }
  if (want_parts == n + 1 && p->partitions == n + 1) CHECK(p->sm_counts[n] == left);
}

/* ---- 1. plans ---- */

typedef struct named_spec {
  const char* name;
  devrt_layout_spec spec;
} named_spec;

static unsigned u_8_16[] = {8, 16}, u_9_12_3[] = {9, 12, 3}, u_16_8[] = {16, 8}, u_4_4[] = {4, 4},
                u_dev[1];

static named_spec specs[16];
static unsigned nspecs;

static void build_specs(void) {
  u_dev[0] = DEV;
  named_spec s[] = {
      {"even 2 x 8", {.groups = 2, .min_sms = 8}},
      {"even 3 x 9", {.groups = 3, .min_sms = 9}},
      {"even 4 x 8 merge", {.groups = 4, .min_sms = 8, .remainder = DEVRT_REMAINDER_MERGE}},
      {"even 2 x 8 idle", {.groups = 2, .min_sms = 8, .remainder = DEVRT_REMAINDER_IDLE}},
      {"even all x dev/8", {.groups = 0, .min_sms = DEV / 8}},
      {"even 1 x dev", {.groups = 1, .min_sms = DEV}},
      {"uneven 8,16", {.sm_counts = u_8_16, .count = 2}},
      {"uneven 9,12,3", {.sm_counts = u_9_12_3, .count = 3}},
      {"uneven 16,8 merge", {.sm_counts = u_16_8, .count = 2, .remainder = DEVRT_REMAINDER_MERGE}},
      {"uneven 4,4 idle", {.sm_counts = u_4_4, .count = 2, .remainder = DEVRT_REMAINDER_IDLE}},
      {"uneven dev", {.sm_counts = u_dev, .count = 1}},
  };
  nspecs = sizeof s / sizeof *s;
  memcpy(specs, s, sizeof s);
}

static void test_plans(void) {
  for (unsigned i = 0; i < nspecs; i++) {
    const devrt_layout_spec* sp = &specs[i].spec;
    expect e = expect_of(sp);
    devrt_layout_plan p;
    memset(&p, 0xa5, sizeof p);
    devrt_status st = devrt_layout_plan_get(rt, sp, &p);
    print_plan(specs[i].name, st, &p);
    CHECK_STATUS(st, e.status);
    if (st == DEVRT_OK && e.status == DEVRT_OK) check_plan(sp, &p, &e);
    if (sp->groups) {
      devrt_split_result r;
      CHECK_OK(devrt_device_split_query(rt, sp->min_sms, 0, &r));
      for (unsigned g = 0; g < sp->groups && g < p.partitions && st == DEVRT_OK; g++)
        if (!(sp->remainder == DEVRT_REMAINDER_MERGE && g == sp->groups - 1))
          CHECK(p.sm_counts[g] == r.sms_per_group);
    }
  }
  /* A zeroed spec is the even form with every default: as many groups of the minimum as fit. */
  devrt_layout_spec zero_spec;
  memset(&zero_spec, 0, sizeof zero_spec);
  expect ez = expect_of(&zero_spec);
  devrt_layout_plan pz;
  memset(&pz, 0, sizeof pz);
  devrt_status sz = devrt_layout_plan_get(rt, &zero_spec, &pz);
  print_plan("zeroed spec", sz, &pz);
  CHECK_OK(sz);
  if (sz == DEVRT_OK) check_plan(&zero_spec, &pz, &ez);
  /* Every size from 1 to the device, as one uneven group: rounded up to the alignment. */
  for (unsigned n = 1; n <= DEV; n += cuda ? 7 : 1) {
    devrt_layout_spec sp = {.sm_counts = &n, .count = 1, .remainder = DEVRT_REMAINDER_IDLE};
    devrt_layout_plan p;
    memset(&p, 0, sizeof p);
    if (rup(umax(n, MINP), ALIGN) > DEV)
      continue; /* rounded past the device: not a rule of its own */
    CHECK_OK(devrt_layout_plan_get(rt, &sp, &p));
    expect e = expect_of(&sp);
    check_plan(&sp, &p, &e);
  }

  /* The driver gives fewer groups than asked: OUT_OF_RESOURCES, the plan shows what it would give.
   */
  devrt_split_result r;
  REQUIRE_OK(devrt_device_split_query(rt, 8, 0, &r));
  devrt_layout_spec more = {.groups = r.groups + 1, .min_sms = 8};
  devrt_layout_plan p;
  memset(&p, 0, sizeof p);
  devrt_status st = devrt_layout_plan_get(rt, &more, &p);
  print_plan("even (fit+1) x 8", st, &p);
  CHECK_STATUS(st, DEVRT_ERR_OUT_OF_RESOURCES);
  CHECK(p.partitions >= r.groups && p.partitions <= r.groups + 1 && p.device_sms == DEV);
  for (unsigned i = 0; i < r.groups && i < DEVRT_MAX_PARTITIONS; i++)
    CHECK(p.sm_counts[i] == r.sms_per_group);

  /* Larger than the device: INVALID_ARGUMENT with a message. */
  unsigned big[] = {DEV, 1}, huge[] = {DEV + 1};
  devrt_layout_spec too_big[] = {
      {.sm_counts = big, .count = 2},
      {.sm_counts = huge, .count = 1},
      {.groups = 1, .min_sms = DEV + 1},
      {.groups = 0, .min_sms = DEV + 1},
  };
  for (unsigned i = 0; i < sizeof too_big / sizeof *too_big; i++) {
    CHECK_STATUS(devrt_layout_plan_get(rt, &too_big[i], &p), DEVRT_ERR_INVALID_ARGUMENT);
  }

  /* Malformed specs. */
  unsigned two[] = {8, 8}, zero[] = {8, 0};
  devrt_layout_spec bad[] = {
      {.groups = 2, .min_sms = 8, .sm_counts = two, .count = 2}, /* both forms */
      {.sm_counts = two, .count = 0},                            /* a list of no groups */
      {.sm_counts = NULL, .count = 2},                           /* a count with no list */
      {.sm_counts = zero, .count = 2},                           /* a group of 0 SMs */
      {.groups = 2, .min_sms = 8, .remainder = (devrt_remainder)7},
      {.groups = 2, .min_sms = 8, .flags = 1u << 20}, /* an unknown flag */
  };
  for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
    devrt_status s = devrt_layout_plan_get(rt, &bad[i], &p);
    if (s != DEVRT_ERR_INVALID_ARGUMENT) fprintf(stderr, "  malformed spec %u\n", i);
    CHECK_STATUS(s, DEVRT_ERR_INVALID_ARGUMENT);
  }
  /* ... and create refuses them too, leaving nothing. */
  devrt_layout* L = NULL;
  CHECK_STATUS(mk_layout(&bad[1], &L), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mk_layout(&too_big[0], &L), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mk_layout(&more, &L), DEVRT_ERR_OUT_OF_RESOURCES);

  /* CUDA 13.1's balanced workqueues: unsupported in this build, for plan and create. */
  devrt_layout_spec wq = {.groups = 2, .min_sms = 8, .flags = DEVRT_LAYOUT_WORKQUEUE_BALANCED};
  CHECK_STATUS(devrt_layout_plan_get(rt, &wq, &p), DEVRT_ERR_UNSUPPORTED);
  CHECK_STATUS(mk_layout(&wq, &L), DEVRT_ERR_UNSUPPORTED);
  CHECK(L == NULL);

  /* Plain streams on request: the plan says not isolated. */
  devrt_layout_spec plain = {.groups = 2, .min_sms = 8, .flags = DEVRT_LAYOUT_PLAIN_STREAMS};
  memset(&p, 0, sizeof p);
  CHECK_OK(devrt_layout_plan_get(rt, &plain, &p));
  CHECK(!p.isolated && p.fallback_reason[0] != 0 && p.device_sms == DEV);

  /* Without co-scheduling: finer groups on Hopper, and the plan still adds up. */
  devrt_layout_spec fine = {.groups = 2, .min_sms = 2, .flags = DEVRT_LAYOUT_IGNORE_COSCHEDULING};
  memset(&p, 0, sizeof p);
  CHECK_OK(devrt_layout_plan_get(rt, &fine, &p));
  print_plan("even 2 x 2 ignore-cosched", DEVRT_OK, &p);
  unsigned sum = 0;
  for (unsigned i = 0; i < p.partitions && i < DEVRT_MAX_PARTITIONS; i++) sum += p.sm_counts[i];
  CHECK(sum + p.idle_sms == DEV && p.partitions >= 2 && p.sm_counts[0] >= 2 && p.sm_counts[1] >= 2);
  if (cuda && dinfo.cc_major == 9) CHECK(p.sm_counts[0] < MINP && p.sm_counts[0] % 2 == 0);
}

/* ---- 2. + 3. plans predict create; kernels stay on their partition's SMs ---- */

/* Records where each partition's kernel runs: only its own SMs, all of them, disjoint from its
 * siblings', and devrt_partitions_disjoint agrees. sets: one per partition (may be NULL). */
static void check_isolation(devrt_layout* L, const devrt_layout_plan* plan, smset* sets) {
  unsigned n = plan->partitions;
  smset* s = sets ? sets : calloc(n, sizeof *s);
  if (!s) abort();
  unsigned off = 0;
  for (unsigned i = 0; i < n; i++) {
    devrt_partition* p = part(L, i);
    devrt_partition_info pi = pinfo(p);
    devrt_stream st = pstream(p);
    devrt_partition* back = NULL;
    CHECK_OK(devrt_stream_partition(rt, st, &back));
    CHECK(back == p);
#ifdef DEVRT_HAVE_CUDA
    if (cuda && D->cuStreamGetGreenCtx) {
      void* native = NULL;
      CUgreenCtx g = NULL;
      CHECK_OK(devrt_stream_native(rt, st, &native));
      CHECK(D->cuStreamGetGreenCtx((CUstream)native, &g) == CUDA_SUCCESS && g != NULL);
    }
#endif
    CHECK_OK(record(st, st, &s[i]));
    CHECK(s[i].n >= 1 && s[i].n <= pi.sm_count);
    CHECK(s[i].n == pi.sm_count); /* BLOCKS blocks reach every SM of the partition */
    if (!cuda)
      CHECK(s[i].lo == off && s[i].hi == off + pi.sm_count - 1); /* host: workers in id order */
    off += pi.sm_count;
    CHECK_OK(devrt_stream_release(rt, st));
  }
  unsigned pairs = 0, clashes = 0;
  for (unsigned i = 0; i < n; i++)
    for (unsigned j = 0; j < n; j++) {
      devrt_partition *a = part(L, i), *b = part(L, j);
      bool d = disjoint(a, b);
      CHECK(d == (i != j));
      if (i < j) pairs++, clashes += overlap(&s[i], &s[j]) != 0;
    }
  CHECK(clashes == 0);
  printf("  %u partitions: SM sets of sizes", n);
  for (unsigned i = 0; i < n; i++) printf(" %u", s[i].n);
  printf(", %u of %u pairs overlap\n", clashes, pairs);
  if (!sets) free(s);
}

static void test_create_matches_plan(void) {
  for (unsigned k = 0; k < nspecs; k++) {
    const devrt_layout_spec* sp = &specs[k].spec;
    devrt_layout_plan plan;
    memset(&plan, 0, sizeof plan);
    if (devrt_layout_plan_get(rt, sp, &plan) != DEVRT_OK) continue;
    devrt_layout* L = NULL;
    CHECK_OK(mk_layout(sp, &L));
    if (!L) continue;
    printf("%s:\n", specs[k].name);
    devrt_layout_info li = linfo(L);
    CHECK(!li.active && li.create_ms > 0.0 && li.create_ms < 60000.0);
    const devrt_layout_plan* b = &li.plan;
    CHECK(b->partitions == plan.partitions && b->idle_sms == plan.idle_sms &&
          b->device_sms == plan.device_sms);
    CHECK(b->catch_all == plan.catch_all && b->isolated &&
          b->remainder_partition == plan.remainder_partition);
    CHECK(b->fallback_reason[0] == 0);
    for (unsigned i = 0; i < plan.partitions && i < DEVRT_MAX_PARTITIONS; i++)
      CHECK(b->sm_counts[i] == plan.sm_counts[i]);
    for (unsigned i = 0; i < plan.partitions; i++) {
      devrt_partition_info pi = pinfo(part(L, i));
      CHECK(pi.index == i && pi.sm_count == plan.sm_counts[i] && pi.isolated);
      CHECK(pi.catch_all == (i == plan.catch_all));
      CHECK(pi.remainder == (plan.remainder_partition && i == plan.partitions - 1));
      CHECK(pi.cluster_capable);
      /* 0 streams: 4 each, or a fair share of the slots kept for partitions when 4 do not fit */
      unsigned kept = rt->cfg.partition_streams;
      if (4 * plan.partitions <= kept)
        CHECK(pi.streams == 4);
      else
        CHECK(pi.streams >= 1 && pi.streams < 4 && pi.streams * plan.partitions <= kept);
      CHECK(pi.streams_in_use == 0);
      CHECK(pi.memory.live_bytes == 0);
    }
    devrt_partition* p = NULL;
    CHECK_STATUS(devrt_layout_partition(rt, L, plan.partitions, &p), DEVRT_ERR_INVALID_ARGUMENT);
    check_isolation(L, &plan, NULL);
    rm_layout(L);
  }

#ifdef DEVRT_HAVE_CUDA
  if (cuda) { /* with a context current (the primary), creation leaves that one current */
    CUdevice dev = 0;
    CUcontext primary = NULL, cur = NULL;
    devrt_layout* Lc = NULL;
    REQUIRE_OK(D->cuDeviceGet(&dev, dinfo.ordinal) == CUDA_SUCCESS ? DEVRT_OK
                                                                   : DEVRT_ERR_BACKEND_ERROR);
    REQUIRE_OK(D->cuDevicePrimaryCtxRetain(&primary, dev) == CUDA_SUCCESS
                   ? DEVRT_OK
                   : DEVRT_ERR_BACKEND_ERROR);
    CHECK(D->cuCtxPushCurrent(primary) == CUDA_SUCCESS);
    CHECK_OK(mk_layout(&specs[0].spec, &Lc)); /* mk_layout compares before and after */
    D->cuCtxGetCurrent(&cur);
    CHECK(cur == primary);
    if (Lc) rm_layout(Lc);
    D->cuCtxGetCurrent(&cur);
    CHECK(cur == primary);
    CUcontext popped = NULL;
    CHECK(D->cuCtxPopCurrent(&popped) == CUDA_SUCCESS && popped == primary);
    D->cuDevicePrimaryCtxRelease(dev);
  }
#endif

  /* Without co-scheduling: partitions are not cluster-capable, and still isolated. */
  devrt_layout_spec fine = {.groups = 2, .min_sms = 2, .flags = DEVRT_LAYOUT_IGNORE_COSCHEDULING};
  devrt_layout* L = NULL;
  CHECK_OK(mk_layout(&fine, &L));
  if (L) {
    devrt_layout_info li = linfo(L);
    printf("even 2 x 2 ignore-cosched:\n");
    for (unsigned i = 0; i < li.plan.partitions; i++) {
      devrt_partition_info pi = pinfo(part(L, i));
      CHECK(!pi.cluster_capable && pi.isolated && pi.sm_count == li.plan.sm_counts[i]);
    }
    check_isolation(L, &li.plan, NULL);
    rm_layout(L);
  }

  /* Stream pool size and priorities per partition. */
  int prio[] = {dinfo.priority_greatest, dinfo.priority_least};
  devrt_layout_spec ps = {.groups = 2, .min_sms = 8, .streams = 2, .priorities = prio};
  CHECK_OK(mk_layout(&ps, &L));
  if (L) {
    devrt_layout_info li = linfo(L);
    CHECK(li.plan.partitions >= 2);
    for (unsigned i = 0; i < li.plan.partitions; i++) {
      devrt_partition_info pi = pinfo(part(L, i));
      CHECK(pi.streams == 2);
      CHECK(pi.priority == (i < 2 ? prio[i] : rt->cfg.stream_priority));
    }
    devrt_partition* p0 = part(L, 0);
    devrt_stream a = pstream(p0), b = pstream(p0), c = 0;
    CHECK(a != b);
    CHECK_STATUS(devrt_partition_stream_acquire(rt, p0, DEVRT_ACQUIRE_FAIL, &c),
                 DEVRT_ERR_OUT_OF_RESOURCES);
    CHECK(pinfo(p0).streams_in_use == 2);
    CHECK(pinfo(part(L, 1)).streams_in_use == 0); /* another partition's pool is its own */
    CHECK_OK(devrt_partition_stream_acquire(rt, p0, DEVRT_ACQUIRE_SHARE, &c));
    CHECK_OK(devrt_stream_release(rt, c));
    CHECK_OK(devrt_stream_release(rt, b));
    CHECK(pinfo(p0).streams_in_use == 1);
    CHECK_OK(devrt_partition_stream_acquire(rt, p0, DEVRT_ACQUIRE_FAIL, &c));
    CHECK_OK(devrt_stream_release(rt, c));
    CHECK_OK(devrt_stream_release(rt, a));
    CHECK(pinfo(p0).streams_in_use == 0);
    rm_layout(L);
  }
}

/* ---- 4. + 5. separately created layouts overlap; graphs keep their partition's SMs ---- */

static void test_two_layouts(void) {
  unsigned c[] = {16, 16};
  devrt_layout_spec sp = {.sm_counts = c, .count = 2};
  devrt_layout *A = NULL, *B = NULL;
  REQUIRE_OK(mk_layout(&sp, &A));
  REQUIRE_OK(mk_layout(&sp, &B));
  devrt_layout_info ai = linfo(A), bi = linfo(B);
  printf("two layouts of uneven 16,16:\n");
  smset* sa = calloc(ai.plan.partitions, sizeof *sa);
  smset* sb = calloc(bi.plan.partitions, sizeof *sb);
  if (!sa || !sb) abort();
  check_isolation(A, &ai.plan, sa);
  check_isolation(B, &bi.plan, sb);
  devrt_partition *a0 = part(A, 0), *a1 = part(A, 1), *b0 = part(B, 0), *b1 = part(B, 1);
  CHECK(!disjoint(a0, b0) && !disjoint(b0, a0) && !disjoint(a0, b1) && !disjoint(a1, b0));
  CHECK(disjoint(a0, a1) && disjoint(b1, b0));
  unsigned ov = overlap(&sa[0], &sb[0]);
  printf("  partition 0 of each: %u and %u SMs, %u in common (separate splits, same SMs)\n",
         sa[0].n, sb[0].n, ov);
  CHECK(ov > 0);

#ifdef DEVRT_HAVE_CUDA
  if (cuda && D->has_graphs && D->cuStreamGetGreenCtx) {
    /* A graph captured on a partition stream, launched on a runtime pool stream: its kernel still
     * runs on the partition's SMs. */
    devrt_stream ps = pstream(a0), s = s_get(rt);
    void *pn = NULL, *sn = NULL, *buf = NULL;
    REQUIRE_OK(devrt_stream_native(rt, ps, &pn));
    REQUIRE_OK(devrt_stream_native(rt, s, &sn));
    CUgreenCtx g = (CUgreenCtx)1;
    CHECK(D->cuStreamGetGreenCtx((CUstream)sn, &g) == CUDA_SUCCESS &&
          g == NULL); /* a pool stream */
    REQUIRE_OK(devrt_pool_alloc(rt, BLOCKS * sizeof(uint32_t), s, &buf));
    CHECK_OK(devrt_memset_async(rt, buf, 0xff, BLOCKS * sizeof(uint32_t), s));
    CHECK_OK(devrt_stream_synchronize(rt, s));
    dv_module* m = NULL;
    dv_kernel* k = NULL;
    REQUIRE_OK(rt->be->module_load(rt->dev, NULL, &m));
    REQUIRE_OK(rt->be->kernel_get(m, "devrt_record_smid", &k));
    void* args[] = {&buf};
    unsigned grid[3] = {BLOCKS, 1, 1}, block[3] = {32, 1, 1};
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    CHECK(D->cuStreamBeginCapture((CUstream)pn, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
    CHECK_OK(rt->be->launch((dv_stream*)pn, k, grid, block, 0, args));
    CHECK(D->cuStreamEndCapture((CUstream)pn, &graph) == CUDA_SUCCESS && graph);
    /* Instantiation needs a current context; devrt never makes one current, so push the primary. */
    CUdevice dev;
    CUcontext primary = NULL, popped = NULL;
    REQUIRE_OK(D->cuDeviceGet(&dev, dinfo.ordinal) == CUDA_SUCCESS &&
                       D->cuDevicePrimaryCtxRetain(&primary, dev) == CUDA_SUCCESS
                   ? DEVRT_OK
                   : DEVRT_ERR_BACKEND_ERROR);
    D->cuCtxPushCurrent(primary);
    CUresult ri =
        graph ? D->cuGraphInstantiateWithFlags(&exec, graph, 0) : CUDA_ERROR_INVALID_VALUE;
    CUresult rl = exec ? D->cuGraphLaunch(exec, (CUstream)sn) : CUDA_ERROR_INVALID_VALUE;
    D->cuCtxPopCurrent(&popped);
    D->cuDevicePrimaryCtxRelease(dev);
    if (ri != CUDA_SUCCESS || rl != CUDA_SUCCESS)
      printf("  graph: instantiate %d, launch %d\n", (int)ri, (int)rl);
    CHECK(ri == CUDA_SUCCESS && rl == CUDA_SUCCESS && popped == primary);
    CHECK_OK(devrt_stream_synchronize(rt, s));
    uint32_t* ids = calloc(BLOCKS, sizeof *ids);
    if (!ids) abort();
    CHECK_OK(devrt_memcpy_async(rt, ids, buf, BLOCKS * sizeof *ids, s));
    CHECK_OK(devrt_stream_synchronize(rt, s));
    smset gs;
    memset(&gs, 0, sizeof gs);
    unsigned outside = 0;
    for (unsigned i = 0; i < BLOCKS; i++) {
      if (ids[i] >= MAXID) {
        outside++;
        continue;
      }
      if (!gs.in[ids[i]]) gs.in[ids[i]] = 1, gs.n++;
      outside += !sa[0].in[ids[i]];
    }
    printf(
        "  graph captured on partition 0, launched on a pool stream: %u distinct SMs, %u blocks "
        "outside the partition\n",
        gs.n, outside);
    CHECK(outside == 0 && gs.n >= 1 && gs.n <= pinfo(a0).sm_count);
    free(ids);
    if (exec) D->cuGraphExecDestroy(exec);
    if (graph) D->cuGraphDestroy(graph);
    rt->be->module_unload(rt->dev, m);
    CHECK_OK(devrt_pool_free(rt, buf, s));
    CHECK_OK(devrt_stream_synchronize(rt, s));
    CHECK_OK(devrt_stream_release(rt, s));
    CHECK_OK(devrt_stream_release(rt, ps));
  }
#endif
  free(sa);
  free(sb);
  rm_layout(A);
  rm_layout(B);
}

/* ---- 6. sub-budgets ---- */

static void test_budgets(void) {
  unsigned c[] = {8, 8};
  devrt_layout_spec sp = {.sm_counts = c, .count = 2};
  devrt_layout* L = NULL;
  REQUIRE_OK(mk_layout(&sp, &L));
  devrt_partition *p0 = part(L, 0), *p1 = part(L, 1);
  devrt_stream s0 = pstream(p0), s1 = pstream(p1);
  CHECK_OK(devrt_partition_set_budget(rt, p0, MiB));
  CHECK(pinfo(p0).memory.limit_bytes == MiB);
  devrt_block big = 0, b0 = 0, b1 = 0;
  CHECK_STATUS(devrt_block_alloc(rt, 2 * MiB, s0, "p0-too-big", &big), DEVRT_ERR_OVER_BUDGET);
  CHECK(pinfo(p0).memory.live_bytes == 0);
  CHECK_OK(devrt_block_alloc(rt, MiB / 2, s0, "p0-half", &b0));
  CHECK_OK(devrt_block_alloc(rt, 2 * MiB, s1, "p1-two", &b1)); /* the sibling's share is its own */
  devrt_partition_info i0 = pinfo(p0), i1 = pinfo(p1);
  printf("sub-budgets: p0 limit %llu live %llu, p1 live %llu\n",
         (unsigned long long)i0.memory.limit_bytes, (unsigned long long)i0.memory.live_bytes,
         (unsigned long long)i1.memory.live_bytes);
  CHECK(i0.memory.live_bytes >= MiB / 2 && i0.memory.live_bytes <= MiB);
  CHECK(i1.memory.live_bytes >= 2 * MiB && i1.memory.live_bytes < 3 * MiB);
  /* The partition's resource is the same sub-budget. */
  devrt_resource *r0 = NULL, *r1 = NULL;
  CHECK_OK(devrt_partition_resource(rt, p0, &r0));
  CHECK_OK(devrt_partition_resource(rt, p1, &r1));
  if (r0 && r1) {
    devrt_resource_figures f;
    memset(&f, 0, sizeof f);
    CHECK_OK(devrt_resource_query(r0, &f));
    CHECK(f.limit_bytes == MiB && f.live_bytes == i0.memory.live_bytes);
    void* q = NULL;
    CHECK_STATUS(devrt_resource_allocate(r0, MiB, s0, "p0-resource", &q), DEVRT_ERR_OVER_BUDGET);
    CHECK_OK(devrt_resource_allocate(r1, MiB, s1, "p1-resource", &q));
    CHECK(pinfo(p1).memory.live_bytes >= 3 * MiB);
    if (q) CHECK_OK(devrt_resource_deallocate(r1, q, MiB, s1));
  }
  /* Lowered below its live bytes: later allocations are refused. */
  CHECK_OK(devrt_partition_set_budget(rt, p0, MiB / 4));
  CHECK_STATUS(devrt_block_alloc(rt, 4096, s0, "p0-after-lowering", &big), DEVRT_ERR_OVER_BUDGET);
  CHECK_OK(devrt_block_alloc(rt, 4096, s1, "p1-still-fine", &big));
  CHECK_OK(devrt_block_free(rt, big));

  /* Teardown refusals: held streams, then live bytes. */
  CHECK_STATUS(devrt_layout_destroy(rt, L), DEVRT_ERR_INVALID_STATE);
  CHECK_OK(devrt_stream_release(rt, s0));
  CHECK_OK(devrt_stream_release(rt, s1));
  CHECK_STATUS(devrt_layout_destroy(rt, L), DEVRT_ERR_INVALID_STATE); /* b0 and b1 are live */
  CHECK_OK(devrt_block_free(rt, b0));
  CHECK_STATUS(devrt_layout_destroy(rt, L), DEVRT_ERR_INVALID_STATE); /* b1 is */
  CHECK(pinfo(p0).memory.live_bytes == 0);
  CHECK_OK(devrt_block_free(rt, b1));
  CHECK(pinfo(p1).memory.live_bytes == 0);
  rm_layout(L);
}

/* Frees through the memory stack on a partition stream, then the layout (and its streams) goes:
 * the stack must not keep using the destroyed streams (here: the second layout's streams reuse
 * the slots, then the runtime's teardown releases what the stack holds). A runtime of its own, so
 * that teardown happens here. */
static void test_frees_outlive_streams(void) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.host_workers = 32;
  devrt_runtime* r = t_runtime_cfg(&cfg);
  unsigned c[] = {8, 8};
  devrt_layout_spec sp = {.sm_counts = c, .count = 2};
  for (int round = 1; round >= 0; round--) {
    devrt_layout* L = NULL;
    REQUIRE_OK(devrt_layout_create(r, &sp, &L));
    devrt_partition* p = NULL;
    devrt_stream s = 0;
    devrt_resource* res = NULL;
    devrt_block b = 0;
    void* q = NULL;
    REQUIRE_OK(devrt_layout_partition(r, L, 0, &p));
    REQUIRE_OK(devrt_partition_stream_acquire(r, p, DEVRT_ACQUIRE_FAIL, &s));
    CHECK_OK(devrt_partition_resource(r, p, &res));
    if (res) CHECK_OK(devrt_resource_allocate(res, MiB, s, "teardown", &q));
    if (q) CHECK_OK(devrt_resource_deallocate(res, q, MiB, s));
    if (round) { /* and a block (its frees go through the runtime's own stream) */
      CHECK_OK(devrt_block_alloc(r, MiB, s, "teardown", &b));
      CHECK_OK(devrt_block_free(r, b));
    }
    CHECK_OK(devrt_stream_synchronize(r, s));
    CHECK_OK(devrt_stream_release(r, s));
    CHECK_OK(devrt_layout_destroy(r, L));
  }
  printf("frees on partition streams outlive their layout: tearing the runtime down\n");
  CHECK_OK(devrt_runtime_destroy(r));
}

/* A user's layer takes part through its vtable: a pass-through that counts retired streams. */
typedef struct retire_counter {
  devrt_resource r;
  unsigned retired;
  devrt_stream watch;
  bool seen;
} retire_counter;
static devrt_status rc_alloc(devrt_resource* r, size_t n, devrt_stream s, const char* tag,
                             void** out) {
  return devrt_resource_allocate(r->upstream, n, s, tag, out);
}
static devrt_status rc_free(devrt_resource* r, void* p, size_t n, devrt_stream s) {
  return devrt_resource_deallocate(r->upstream, p, n, s);
}
static void rc_retired(devrt_resource* r, devrt_stream s) {
  retire_counter* c = (retire_counter*)r;
  c->retired++, c->seen |= s == c->watch;
}
static void rc_destroy(devrt_resource* r) { (void)r; }
static const devrt_resource_vtable rc_vt = {.allocate = rc_alloc,
                                            .deallocate = rc_free,
                                            .destroy = rc_destroy,
                                            .stream_retired = rc_retired};

/* A stack the caller built (caching over an async pool) keeps per-stream state too: once a
 * layout's streams are gone, it must not record on them (its trim closes every stream's epoch). */
static void test_own_stack_outlives_streams(void) {
  devrt_resource *a = NULL, *c = NULL;
  REQUIRE_OK(devrt_async_resource_create(rt, &a));
  REQUIRE_OK(devrt_caching_resource_create(a, NULL, &c));
  retire_counter rc = {0};
  REQUIRE_OK(devrt_resource_init(&rc.r, &rc_vt, "retire-counter", rt, c));
  unsigned n[] = {8, 8};
  devrt_layout_spec sp = {.sm_counts = n, .count = 2};
  devrt_layout* L = NULL;
  REQUIRE_OK(mk_layout(&sp, &L));
  devrt_stream s = pstream(part(L, 0));
  rc.watch = s;
  void *q = NULL, *q2 = NULL;
  CHECK_OK(devrt_resource_allocate(c, MiB, s, "own", &q));
  CHECK_OK(devrt_resource_allocate(a, MiB, s, "own", &q2));
  if (q) CHECK_OK(devrt_resource_deallocate(c, q, MiB, s));   /* cached on the partition's stream */
  if (q2) CHECK_OK(devrt_resource_deallocate(a, q2, MiB, s)); /* pending on it */
  CHECK_OK(devrt_stream_release(rt, s));
  rm_layout(L);
  printf("a user layer was told of %u retired streams\n", rc.retired);
  CHECK(rc.retired >= 2 && rc.seen);       /* every stream of both partitions, s among them */
  CHECK_OK(devrt_resource_release(&rc.r)); /* leaves c, which the caller still holds */
  uint64_t released = 0, reaped = 0;
  CHECK_OK(devrt_resource_trim(c, &released)); /* closed no epoch on the destroyed stream */
  CHECK(released == MiB);
  CHECK_OK(devrt_resource_reap(a, DEVRT_REAP_WAIT, &reaped));
  devrt_resource_figures f;
  CHECK_OK(devrt_resource_query(a, &f));
  CHECK(f.live_bytes == 0 && f.pending_bytes == 0);
  CHECK_OK(devrt_resource_release(c));
  CHECK_OK(devrt_resource_release(a));
}

/* ---- 7. fallback and plain streams ---- */

static void check_plain(devrt_layout* L, unsigned requested, unsigned partitions,
                        const char* what) {
  devrt_layout_info li = linfo(L);
  printf("%s: isolated %d, reason \"%s\"\n", what, li.plan.isolated, li.plan.fallback_reason);
  CHECK(!li.plan.isolated && li.plan.fallback_reason[0] != 0);
  /* the requested partitions, or as many as the split would have given (with its remainder) */
  CHECK(li.plan.partitions == requested || li.plan.partitions == partitions);
  CHECK(li.plan.device_sms == DEV && li.plan.catch_all == li.plan.partitions - 1);
  for (unsigned i = 0; i < li.plan.partitions; i++) {
    devrt_partition_info pi = pinfo(part(L, i));
    CHECK(!pi.isolated && pi.sm_count == DEV && li.plan.sm_counts[i] == DEV);
  }
  devrt_partition *p0 = part(L, 0), *p1 = part(L, 1);
  CHECK(!disjoint(p0, p1) && !disjoint(p0, p0));
  /* Its streams are ordinary streams that work. */
  devrt_stream s = pstream(p0);
  devrt_partition* back = NULL;
  CHECK_OK(devrt_stream_partition(rt, s, &back));
  CHECK(back == p0);
  smset set;
  CHECK_OK(record(s, s, &set));
  CHECK(set.n >= 1 && set.n <= DEV);
#ifdef DEVRT_HAVE_CUDA
  if (cuda && D->cuStreamGetGreenCtx) {
    void* native = NULL;
    CUgreenCtx g = (CUgreenCtx)1;
    CHECK_OK(devrt_stream_native(rt, s, &native));
    CHECK(D->cuStreamGetGreenCtx((CUstream)native, &g) == CUDA_SUCCESS && g == NULL);
  }
#endif
  CHECK_OK(devrt_stream_release(rt, s));
}

static void test_fallback(void) {
  unsigned c[] = {8, 8};
  devrt_layout_spec sp = {.sm_counts = c, .count = 2};
  devrt_layout_plan plan;
  memset(&plan, 0, sizeof plan);
  REQUIRE_OK(devrt_layout_plan_get(rt, &sp, &plan));
  devrt_partition_stats st0 = pstats();
  devrt_layout* L = NULL;
  /* Refused green contexts, no fallback allowed: UNSUPPORTED, nothing left (first or later). */
  for (unsigned nth = 1; nth <= 2; nth++) {
    rt->be->fault_arm(rt->dev, DV_FAULT_GREEN, nth);
    CHECK_STATUS(mk_layout(&sp, &L), DEVRT_ERR_UNSUPPORTED);
    CHECK(L == NULL);
    rt->be->fault_arm(rt->dev, DV_FAULT_GREEN, 0);
  }
  devrt_partition_stats st1 = pstats();
  CHECK(st1.layouts_live == st0.layouts_live && st1.fallbacks == st0.fallbacks);
  /* Allowed: plain streams, reported and counted. */
  sp.flags = DEVRT_LAYOUT_ALLOW_FALLBACK;
  for (unsigned nth = 1; nth <= 2; nth++) {
    rt->be->fault_arm(rt->dev, DV_FAULT_GREEN, nth);
    CHECK_OK(mk_layout(&sp, &L));
    rt->be->fault_arm(rt->dev, DV_FAULT_GREEN, 0);
    if (!L) continue;
    check_plain(L, 2, plan.partitions,
                nth == 1 ? "fallback (first green refused)" : "fallback (second green refused)");
    rm_layout(L);
  }
  devrt_partition_stats st2 = pstats();
  CHECK(st2.fallbacks == st1.fallbacks + 2 && st2.plain == st1.plain);
  /* Allowed but not needed: isolated, not counted. */
  CHECK_OK(mk_layout(&sp, &L));
  if (L) {
    CHECK(linfo(L).plan.isolated);
    rm_layout(L);
  }
  CHECK(pstats().fallbacks == st2.fallbacks);
  /* Plain streams on purpose. */
  sp.flags = DEVRT_LAYOUT_PLAIN_STREAMS;
  CHECK_OK(mk_layout(&sp, &L));
  if (L) {
    check_plain(L, 2, plan.partitions, "plain streams");
    rm_layout(L);
  }
  devrt_partition_stats st3 = pstats();
  CHECK(st3.plain == st2.plain + 1 && st3.fallbacks == st2.fallbacks);
  CHECK(st3.layouts_live == st0.layouts_live);
}

/* ---- 8. activation, teardown, stale, foreign and NULL handles ---- */

static void test_activation(void) {
  unsigned c[] = {8, 8};
  /* IDLE: no remainder partition, so the catch-all is the last requested one (8 SMs) */
  devrt_layout_spec sp = {.sm_counts = c, .count = 2, .remainder = DEVRT_REMAINDER_IDLE};
  devrt_layout* L = NULL;
  REQUIRE_OK(mk_layout(&sp, &L));
  devrt_layout_info li = linfo(L);
  CHECK(li.plan.partitions == 2 && li.plan.catch_all == 1 && !li.plan.remainder_partition);
  devrt_partition* ca = part(L, li.plan.catch_all);
  CHECK(pinfo(ca).catch_all && !pinfo(part(L, 0)).catch_all);
  devrt_stream before = s_get(rt); /* held across activation: keeps its place */
  devrt_stream cas = pstream(ca);
  smset caset, via0;
  CHECK_OK(record(cas, cas, &caset));

  CHECK_OK(devrt_layout_activate(rt, L));
  CHECK(linfo(L).active);
  devrt_stream s = s_get(rt);
  devrt_partition* p = (devrt_partition*)1;
  CHECK_OK(devrt_stream_partition(rt, s, &p));
  CHECK(p == ca);
  p = (devrt_partition*)1;
  CHECK_OK(devrt_stream_partition(rt, before, &p));
  CHECK(p == NULL);
  /* A launch naming stream 0 runs on the catch-all partition. */
  CHECK_OK(record(cas, 0, &via0));
  CHECK(via0.n >= 1 && subset(&via0, &caset));
  printf("active layout: stream 0 launch ran on %u SMs, all in the catch-all partition's %u\n",
         via0.n, caset.n);
  CHECK_STATUS(devrt_layout_destroy(rt, L), DEVRT_ERR_INVALID_STATE); /* active */
  CHECK_OK(devrt_stream_release(rt, s));

  CHECK_OK(devrt_layout_activate(rt, NULL));
  CHECK(!linfo(L).active);
  s = s_get(rt);
  p = (devrt_partition*)1;
  CHECK_OK(devrt_stream_partition(rt, s, &p));
  CHECK(p == NULL);
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_stream_release(rt, before));

  CHECK_STATUS(devrt_layout_destroy(rt, L), DEVRT_ERR_INVALID_STATE); /* cas is held */
  CHECK_OK(devrt_stream_release(rt, cas));

  /* Foreign and made-up handles: refused, and the layout is untouched. */
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.host_workers = 32;
  devrt_runtime* rt2 = t_runtime_cfg(&cfg);
  devrt_layout_info i2;
  devrt_partition_info pi2;
  devrt_partition* p0 = part(L, 0);
  devrt_partition* p1 = part(L, 1);
  CHECK_STATUS(devrt_layout_info_get(rt2, L, &i2), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partition_info_get(rt2, p0, &pi2), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_activate(rt2, L), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_destroy(rt2, L), DEVRT_ERR_INVALID_ARGUMENT);
  devrt_stream ps = pstream(p0);
  CHECK_STATUS(devrt_stream_partition(rt2, ps, &p), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_OK(devrt_stream_release(rt, ps));
  CHECK_OK(devrt_runtime_destroy(rt2));
  static char fake[256];
  CHECK_STATUS(devrt_layout_info_get(rt, (devrt_layout*)fake, &i2), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partition_info_get(rt, (devrt_partition*)fake, &pi2),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_destroy(rt, (devrt_layout*)fake), DEVRT_ERR_INVALID_ARGUMENT);
  bool d = false;
  CHECK_STATUS(devrt_partitions_disjoint(rt, p0, (devrt_partition*)fake, &d),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(linfo(L).plan.partitions == li.plan.partitions);

  /* NULLs. */
  devrt_layout_plan plan;
  devrt_layout* L2 = NULL;
  devrt_resource* r = NULL;
  devrt_partition_stats pst;
  devrt_stream os = 0;
  CHECK_STATUS(devrt_layout_plan_get(NULL, &sp, &plan), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_plan_get(rt, NULL, &plan), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_plan_get(rt, &sp, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_create(NULL, &sp, &L2), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_create(rt, NULL, &L2), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_create(rt, &sp, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_destroy(NULL, L), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_destroy(rt, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_activate(NULL, L), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_info_get(rt, NULL, &i2), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_info_get(rt, L, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_partition(rt, NULL, 0, &p), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_partition(rt, L, 0, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partition_info_get(rt, NULL, &pi2), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partition_info_get(rt, p0, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partition_stream_acquire(rt, NULL, DEVRT_ACQUIRE_FAIL, &os),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partition_stream_acquire(rt, p0, DEVRT_ACQUIRE_FAIL, NULL),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_stream_partition(rt, 0, &p), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_stream_partition(rt, ps, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_stream_partition(NULL, ps, &p), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_stream_partition(rt, ps, &p), DEVRT_ERR_INVALID_ARGUMENT); /* released */
  CHECK_STATUS(devrt_partition_set_budget(rt, NULL, MiB), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partition_resource(rt, NULL, &r), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partition_resource(rt, p0, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partitions_disjoint(rt, NULL, p1, &d), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partitions_disjoint(rt, p0, p1, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partition_stats_get(NULL, &pst), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partition_stats_get(rt, NULL), DEVRT_ERR_INVALID_ARGUMENT);

  /* Destroyed: every handle of it is stale. */
  rm_layout(L);
  CHECK_STATUS(devrt_layout_info_get(rt, L, &i2), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_partition(rt, L, 0, &p), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_activate(rt, L), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_layout_destroy(rt, L), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partition_info_get(rt, p0, &pi2), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partition_stream_acquire(rt, p0, DEVRT_ACQUIRE_FAIL, &os),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partition_set_budget(rt, p0, MiB), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partition_resource(rt, p0, &r), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_partitions_disjoint(rt, p0, p1, &d), DEVRT_ERR_INVALID_ARGUMENT);
  /* ... and no layout is active (a refused activation changed nothing). */
  s = s_get(rt);
  p = (devrt_partition*)1;
  CHECK_OK(devrt_stream_partition(rt, s, &p));
  CHECK(p == NULL);
  CHECK_OK(devrt_stream_release(rt, s));
}

/* ---- 9. cross-partition producer / consumer ---- */

static void test_cross_partition(void) {
  unsigned c[] = {8, 8};
  devrt_layout_spec sp = {.sm_counts = c, .count = 2};
  devrt_layout* L = NULL;
  REQUIRE_OK(mk_layout(&sp, &L));
  devrt_stream sa = pstream(part(L, 0)), sb = pstream(part(L, 1));
  devrt_block x = 0, y = 0, z = 0;
  REQUIRE_OK(devrt_block_alloc(rt, N * 4, sa, "x", &x));
  REQUIRE_OK(devrt_block_alloc(rt, N * 4, sb, "y", &y));
  REQUIRE_OK(devrt_block_alloc(rt, N * 4, sb, "z", &z));
  CHECK_OK(k_fill(rt, &K, sa, x, 0, N, 0, true));
  CHECK_OK(k_fill(rt, &K, sb, y, 0, N, 0, true));
  CHECK_OK(k_fill(rt, &K, sb, z, 0, N, 0, true));
  CHECK_OK(devrt_stream_synchronize(rt, sa));
  CHECK_OK(devrt_stream_synchronize(rt, sb));
  /* RAW: a slow writer on partition A, a reader on partition B. */
  CHECK_OK(k_fill(rt, &K, sa, x, 0xc0ffee, N, DELAY, true));
  CHECK_OK(k_copy(rt, &K, sb, y, x, N, 0, true));
  uint64_t raw = b_wrong(rt, sb, y, N, 0xc0ffee);
  /* WAR: a slow reader on B, then a writer on A. */
  CHECK_OK(k_copy(rt, &K, sb, z, x, N, DELAY, true));
  CHECK_OK(k_fill(rt, &K, sa, x, 7, N, 0, true));
  uint64_t war = b_wrong(rt, sb, z, N, 0xc0ffee);
  CHECK_OK(devrt_stream_synchronize(rt, sa));
  uint64_t last = b_wrong(rt, sa, x, N, 7);
  printf("cross-partition: RAW %llu wrong, WAR %llu wrong, final %llu wrong\n",
         (unsigned long long)raw, (unsigned long long)war, (unsigned long long)last);
  CHECK(raw == 0 && war == 0 && last == 0);
  /* A semaphore across partitions: the consumer on B is queued first, waiting for the value the
   * slow writer on A signals. Both launches are untracked: only the semaphore orders them. */
  devrt_semaphore* sem = NULL;
  REQUIRE_OK(devrt_semaphore_create(rt, 0, &sem));
  void *px = bptr(rt, x), *pz = bptr(rt, z);
  uint32_t v = 0xbeef;
  uint64_t n = N, delay = DELAY;
  void *fargs[] = {&px, &v, &n, &delay}, *cargs[] = {&pz, &px, &n};
  devrt_semaphore_value one = {sem, 1};
  devrt_submission cons = {
      .stream = sb,
      .waits = &one,
      .nwaits = 1,
      .kind = DEVRT_WORK_LAUNCH,
      .launch = {.kernel = K.copy, .grid = {1, 1, 1}, .block = {256, 1, 1}, .args = cargs}};
  devrt_submission prod = {
      .stream = sa,
      .signals = &one,
      .nsignals = 1,
      .kind = DEVRT_WORK_LAUNCH,
      .launch = {.kernel = K.slow_fill, .grid = {1, 1, 1}, .block = {256, 1, 1}, .args = fargs}};
  CHECK_OK(devrt_queue_submit(rt, &cons));
  CHECK_OK(devrt_queue_submit(rt, &prod));
  CHECK_OK(devrt_semaphore_wait(sem, 1, 10 * 1000 * MS));
  CHECK_OK(devrt_stream_synchronize(rt, sb));
  uint64_t hop = b_wrong(rt, sb, z, N, 0xbeef);
  printf("cross-partition semaphore (consumer queued first): %llu wrong\n",
         (unsigned long long)hop);
  CHECK(hop == 0);
  CHECK_OK(devrt_semaphore_destroy(sem));
  CHECK_OK(devrt_block_free(rt, x));
  CHECK_OK(devrt_block_free(rt, y));
  CHECK_OK(devrt_block_free(rt, z));
  CHECK_OK(devrt_stream_release(rt, sa));
  CHECK_OK(devrt_stream_release(rt, sb));
  rm_layout(L);
}

/* ---- concurrent creation (thread-safe) ---- */

enum { THREADS = 4, ROUNDS = 3 };
static _Atomic unsigned thread_failures;

static void* creator(void* arg) {
  (void)arg;
  unsigned c[] = {8, 8};
  devrt_layout_spec sp = {.sm_counts = c, .count = 2, .streams = 1};
  for (int i = 0; i < ROUNDS; i++) {
    devrt_layout* L = NULL;
    devrt_layout_info li;
    if (devrt_layout_create(rt, &sp, &L) != DEVRT_OK ||
        devrt_layout_info_get(rt, L, &li) != DEVRT_OK || !li.plan.isolated ||
        devrt_layout_destroy(rt, L) != DEVRT_OK) {
      fprintf(stderr, "creator: %s\n", devrt_last_error());
      atomic_fetch_add(&thread_failures, 1);
    }
  }
  return NULL;
}

static void test_concurrent(void) {
  devrt_partition_stats st0 = pstats();
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&th[i], NULL, creator, NULL)) abort();
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  devrt_partition_stats st1 = pstats();
  CHECK(thread_failures == 0);
  CHECK(st1.layouts_created == st0.layouts_created + THREADS * ROUNDS &&
        st1.layouts_live == st0.layouts_live);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* progress survives a crash */
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.host_workers = 32;
  rt = t_runtime_cfg(&cfg);
  cuda = t_is_cuda(rt);
  REQUIRE_OK(devrt_device_info_get(rt, &dinfo));
  DEV = (unsigned)dinfo.sm_count, MINP = dinfo.min_partition_sms,
  ALIGN = dinfo.sm_alignment ? dinfo.sm_alignment : 1;
  BLOCKS = cuda ? 2048 : 64;
  printf("device: %s, %u SMs, green %d, min partition %u, alignment %u, structured split %d\n",
         dinfo.name, DEV, dinfo.green_contexts, MINP, ALIGN, dinfo.structured_split);
  if (!dinfo.green_contexts) { /* nothing to partition: only plain streams */
    devrt_layout_spec sp = {.groups = 2, .min_sms = 1};
    devrt_layout_plan p;
    CHECK_STATUS(devrt_layout_plan_get(rt, &sp, &p), DEVRT_ERR_UNSUPPORTED);
    CHECK_OK(devrt_runtime_destroy(rt));
    return t_done();
  }
  CHECK(DEV >= 32); /* the specs below assume room for them */
#ifdef DEVRT_HAVE_CUDA
  if (cuda) {
    REQUIRE_OK(dv_driver_get(&D));
    CHECK(D->has_graphs && D->cuStreamGetGreenCtx != NULL); /* what the checks below use */
  }
#endif
  k_load(rt, &K);
  REQUIRE_OK(devrt_kernel_get(K.mod, "devrt_record_smid", &smid_k));
  build_specs();

  devrt_partition_stats st0 = pstats();
  test_plans();
  test_create_matches_plan();
  test_two_layouts();
  test_budgets();
  test_fallback();
  test_activation();
  test_cross_partition();
  test_concurrent();
  test_frees_outlive_streams();
  test_own_stack_outlives_streams();
  devrt_partition_stats st1 = pstats();
  printf("stats: %llu layouts created, %llu live, %llu fallbacks, %llu plain\n",
         (unsigned long long)st1.layouts_created, (unsigned long long)st1.layouts_live,
         (unsigned long long)st1.fallbacks, (unsigned long long)st1.plain);
  CHECK(st1.layouts_live == st0.layouts_live);

  CHECK_OK(devrt_module_unload(rt, K.mod));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
