/* stats.c: `devrt stats`: runs a small built-in recorded workload (producers and consumers across
 * streams, the blocks freed, a waiting reap) on the runtime's backend, then prints every
 * block-tracking counter and the runtime resource stack's figures, as text or JSON. */
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "json.h"
#include "devrt/devrt.h"

enum { NSTREAMS = 4, NBLOCKS = 8, NLAUNCHES = 64, NELEMS = 1024 };

/* Every uint64_t field of devrt_block_stats and of devrt_resource_figures, as X(struct, field). */
// clang-format off: one X a line
#define BLOCK_STATS(X, v)         \
  X(v, blocks_allocated)          \
  X(v, blocks_live)               \
  X(v, waits_inserted)            \
  X(v, waits_skipped_same_stream) \
  X(v, waits_skipped_complete)    \
  X(v, waits_coalesced)           \
  X(v, events_recorded)           \
  X(v, events_reused)             \
  X(v, events_created)            \
  X(v, deferred_frees)            \
  X(v, reaped_bytes)              \
  X(v, stale_refusals)            \
  X(v, refused_launches)          \
  X(v, launches)
// clang-format on
// clang-format off: one X a line
#define FIGURES(X, v)   \
  X(v, live_bytes)      \
  X(v, pending_bytes)   \
  X(v, cached_bytes)    \
  X(v, limit_bytes)     \
  X(v, available_bytes) \
  X(v, granularity)     \
  X(v, reaped_bytes)    \
  X(v, fallbacks)       \
  X(v, cache_hits)      \
  X(v, cache_misses)    \
  X(v, log_records)     \
  X(v, log_dropped)
// clang-format on

typedef struct work {
  devrt_runtime* rt;
  devrt_module* mod;
  devrt_kernel *fill, *copy;
  devrt_stream s[NSTREAMS];
  devrt_block blk[NBLOCKS];
  void* scratch;      /* an untracked buffer for the launch on a freed block to name */
  devrt_status stale; /* what that launch returned */
  uint64_t reaped;
} work;

#define W(name, expr)              \
  do {                             \
    *what = name;                  \
    devrt_status s_ = (expr);      \
    if (s_ != DEVRT_OK) return s_; \
  } while (0)

/* Launch i: even ones fill block k = i/2 on stream k; odd ones copy block k into block k+1 on
 * stream k+1 (read after another stream's write, and writes after other streams' reads). */
static devrt_status launch(work* w, int i, const char** what) {
  unsigned k = (unsigned)i / 2;
  devrt_block src = w->blk[k % NBLOCKS], dst = w->blk[(k + 1) % NBLOCKS];
  void *psrc, *pdst;
  W("block_ptr", devrt_block_ptr(w->rt, src, &psrc));
  W("block_ptr", devrt_block_ptr(w->rt, dst, &pdst));
  uint32_t value = k;
  uint64_t n = NELEMS;
  void* fill_args[] = {&psrc, &value, &n};
  void* copy_args[] = {&pdst, &psrc, &n};
  devrt_block_use uses[2] = {{src, DEVRT_ACCESS_WRITE}, {dst, DEVRT_ACCESS_WRITE}};
  devrt_launch_desc d = {.kernel = w->fill,
                         .grid = {4, 1, 1},
                         .block = {256, 1, 1},
                         .args = fill_args,
                         .uses = uses,
                         .nuses = 1,
                         .stream = w->s[k % NSTREAMS]};
  if (i % 2) {
    d.kernel = w->copy, d.args = copy_args, d.nuses = 2, d.stream = w->s[(k + 1) % NSTREAMS];
    uses[0].access = DEVRT_ACCESS_READ;
  }
  W("devrt_launch", devrt_launch(w->rt, &d));
  return DEVRT_OK;
}

static devrt_status run(work* w, const char** what) {
  W("module_load", devrt_module_load(w->rt, NULL, &w->mod));
  W("kernel_get", devrt_kernel_get(w->mod, "devrt_fill_u32", &w->fill));
  W("kernel_get", devrt_kernel_get(w->mod, "devrt_copy_u32", &w->copy));
  for (int i = 0; i < NSTREAMS; i++)
    W("stream_acquire", devrt_stream_acquire(w->rt, DEVRT_ACQUIRE_SHARE, &w->s[i]));
  for (int i = 0; i < NBLOCKS; i++)
    W("block_alloc",
      devrt_block_alloc(w->rt, NELEMS * 4, w->s[i % NSTREAMS], "devrt stats", &w->blk[i]));
  W("pool_alloc", devrt_pool_alloc(w->rt, NELEMS * 4, w->s[0], &w->scratch));
  for (int i = 0; i < NLAUNCHES; i++) {
    devrt_status s = launch(w, i, what);
    if (s != DEVRT_OK) return s;
  }
  devrt_block freed = w->blk[0];
  for (int i = 0; i < NBLOCKS; i++) {
    W("block_free", devrt_block_free(w->rt, w->blk[i]));
    w->blk[i] = DEVRT_BLOCK_NONE;
  }
  /* One launch on a freed block: refused before anything is enqueued (STALE_BLOCK expected). */
  uint32_t value = 0;
  uint64_t n = NELEMS;
  void* args[] = {&w->scratch, &value, &n};
  devrt_block_use use = {freed, DEVRT_ACCESS_WRITE};
  devrt_launch_desc d = {.stream = w->s[0],
                         .kernel = w->fill,
                         .grid = {1, 1, 1},
                         .block = {256, 1, 1},
                         .args = args,
                         .uses = &use,
                         .nuses = 1};
  w->stale = devrt_launch(w->rt, &d);
  W("reap_pending", devrt_reap_pending(w->rt, DEVRT_REAP_WAIT, &w->reaped));
  return DEVRT_OK;
}

static void cleanup(work* w) {
  for (int i = 0; i < NBLOCKS; i++)
    if (w->blk[i]) devrt_block_free(w->rt, w->blk[i]);
  if (w->scratch) devrt_pool_free(w->rt, w->scratch, w->s[0]);
  for (int i = 0; i < NSTREAMS; i++)
    if (w->s[i]) devrt_stream_synchronize(w->rt, w->s[i]);
  if (w->mod) devrt_module_unload(w->rt, w->mod);
  for (int i = 0; i < NSTREAMS; i++)
    if (w->s[i]) devrt_stream_release(w->rt, w->s[i]);
}

static int fail(const cli_opts* o, const char* what, devrt_status s) {
  if (o->json) {
    printf("{\"error\":\"%s\",\"call\":", devrt_status_name(s));
    json_str(what);
    printf(",\"message\":");
    json_str(devrt_last_error());
    printf("}\n");
  } else
    fprintf(stderr, "devrt stats: %s: %s: %s\n", what, devrt_status_name(s), devrt_last_error());
  return 1;
}

static void print_json(const work* w, const char* backend, const devrt_block_stats* bs,
                       const devrt_resource* stack, const devrt_resource_figures* f) {
  printf(
      "{\"workload\":{\"launches\":%d,\"streams\":%d,\"blocks\":%d,\"block_bytes\":%d,\"backend\":"
      "\"%s\","
      "\"stale_launch\":\"%s\",\"reaped_bytes\":%llu},\n \"block_stats\":{",
      NLAUNCHES, NSTREAMS, NBLOCKS, NELEMS * 4, backend, devrt_status_name(w->stale),
      (unsigned long long)w->reaped);
  const char* sep = "";
#define JSON_FIELD(v, x) printf("%s\"" #x "\":%llu", sep, (unsigned long long)(v)->x), sep = ",";
  BLOCK_STATS(JSON_FIELD, bs)
  printf("},\n \"resource\":{\"stack\":[");
  for (const devrt_resource* r = stack; r; r = devrt_resource_upstream(r)) {
    printf("%s", r == stack ? "" : ",");
    json_str(devrt_resource_name(r));
  }
  printf("]");
  FIGURES(JSON_FIELD, f)
#undef JSON_FIELD
  const devrt_memory_counter* c[2] = {&f->bytes, &f->count};
  for (int i = 0; i < 2; i++)
    printf(",\"%s\":{\"current\":%lld,\"peak\":%lld,\"total\":%lld}", i ? "count" : "bytes",
           (long long)c[i]->current, (long long)c[i]->peak, (long long)c[i]->total);
  printf("}}\n");
}

static void print_text(const work* w, const char* backend, const devrt_block_stats* bs,
                       const devrt_resource* stack, const devrt_resource_figures* f) {
  printf(
      "devrt stats: ran a built-in workload of %d recorded launches on backend %s\n"
      "  (%d streams, %d blocks of %d B; fills and copies alternating across the streams), then "
      "freed the\n"
      "  blocks, made one launch on a freed block (%s) and reaped with DEVRT_REAP_WAIT (%llu "
      "bytes)\n",
      NLAUNCHES, backend, NSTREAMS, NBLOCKS, NELEMS * 4, devrt_status_name(w->stale),
      (unsigned long long)w->reaped);
  printf("block tracking (devrt_block_stats):\n");
#define TEXT_FIELD(v, x) printf("  %-26s %llu\n", #x, (unsigned long long)(v)->x);
  BLOCK_STATS(TEXT_FIELD, bs)
  printf("resource stack (");
  for (const devrt_resource* r = stack; r; r = devrt_resource_upstream(r))
    printf("%s%s", r == stack ? "" : " -> ", devrt_resource_name(r));
  printf("):\n");
  FIGURES(TEXT_FIELD, f)
#undef TEXT_FIELD
  const devrt_memory_counter* c[2] = {&f->bytes, &f->count};
  for (int i = 0; i < 2; i++)
    printf("  %-26s current %lld, peak %lld, total %lld\n", i ? "count" : "bytes",
           (long long)c[i]->current, (long long)c[i]->peak, (long long)c[i]->total);
}

int cli_stats(const cli_opts* o) {
  work w;
  memset(&w, 0, sizeof w);
  const char* what = "runtime";
  devrt_status s = devrt_runtime_get(o->ordinal, &w.rt);
  if (s != DEVRT_OK) return fail(o, what, s);
  s = run(&w, &what);
  int rc = s != DEVRT_OK ? fail(o, what, s) : 0; /* said first: cleanup's calls clear the message */
  cleanup(&w);
  if (rc) return rc;
  devrt_runtime_info ri;
  devrt_block_stats bs;
  devrt_resource* stack;
  devrt_resource_figures f;
  if ((s = devrt_runtime_info_get(w.rt, &ri)) != DEVRT_OK) return fail(o, "runtime_info_get", s);
  if ((s = devrt_block_stats_get(w.rt, &bs)) != DEVRT_OK) return fail(o, "block_stats_get", s);
  if ((s = devrt_runtime_resource(w.rt, &stack)) != DEVRT_OK) return fail(o, "runtime_resource", s);
  if ((s = devrt_resource_query(stack, &f)) != DEVRT_OK) return fail(o, "resource_query", s);
  (o->json ? print_json : print_text)(&w, ri.backend_name, &bs, stack, &f);
  if (w.stale == DEVRT_ERR_STALE_BLOCK) return 0;
  fprintf(stderr, "devrt stats: the launch on a freed block returned %s, not STALE_BLOCK\n",
          devrt_status_name(w.stale));
  return 1;
}
