/* replay.c: `devrt replay LOG`: replays an allocation log (devrt's CSV, or RMM's, whose columns
 * Thread,Time,Action,Pointer,Size,Stream devrt's begins with) in log order on one thread against
 * a resource stack, reporting operations per second, peak reserved and peak reserved over peak
 * live. The log is parsed once into an array of operations whose frees name their allocation's
 * slot, so the timed loop does no lookups. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "cli.h"
#include "core/parse.h"
#include "devrt/devrt.h"
#include "json.h"

/* The devrt streams a replay uses: log stream i (by first appearance) replays on stream
 * i % MAX_STREAMS, the same one on every row. */
enum { MAX_STREAMS = 64 };

typedef struct rop {
  uint64_t size;
  uint32_t slot;   /* the allocation's index: where its replayed pointer is kept */
  uint16_t stream; /* the devrt stream's index (its log stream's, modulo MAX_STREAMS) */
  bool free;
} rop;

typedef struct rlog {
  rop* ops;
  size_t n, cap;
  size_t allocs, frees;         /* replayed */
  size_t unknown_frees;         /* frees of pointers the log never allocated (skipped) */
  size_t failures, others;      /* "allocate failure" and other rows, e.g. "reap" (skipped) */
  size_t unfreed;               /* allocations the log never frees (freed after each round) */
  uint64_t peak_live, sizes[2]; /* requested bytes live at once; smallest and largest request */
  uint32_t nstreams;            /* distinct log streams */
} rlog;

/* ---- during parsing, the log's live pointers (key: the address) and its streams (key: the
 * stream, slot: its index): linear probing ---- */
typedef struct pmap {
  uint64_t* key;
  uint64_t* size;
  uint32_t* slot; /* the value + 1; 0: the entry is empty */
  size_t cap, n;
} pmap;

static size_t pm_hash(const pmap* m, uint64_t k) {
  return (size_t)((k * 0x9e3779b97f4a7c15ull) >> 20) & (m->cap - 1);
}

static void pm_free(pmap* m) {
  free(m->key);
  free(m->size);
  free(m->slot);
}

static bool pm_grow(pmap* m) {
  pmap g = {calloc(m->cap * 2, 8), calloc(m->cap * 2, 8), calloc(m->cap * 2, 4), m->cap * 2, 0};
  if (!g.key || !g.size || !g.slot) return pm_free(&g), false;
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->slot[i]) continue;
    size_t h = pm_hash(&g, m->key[i]);
    while (g.slot[h]) h = (h + 1) & (g.cap - 1);
    g.key[h] = m->key[i];
    g.size[h] = m->size[i];
    g.slot[h] = m->slot[i];
    g.n++;
  }
  pm_free(m);
  *m = g;
  return true;
}

/* Where k is, or the empty entry where it would go. */
static size_t pm_find(const pmap* m, uint64_t k) {
  size_t h = pm_hash(m, k);
  while (m->slot[h] && m->key[h] != k) h = (h + 1) & (m->cap - 1);
  return h;
}

/* Removes the entry at h, moving later entries of its run back (no tombstones). */
static void pm_erase(pmap* m, size_t h) {
  size_t j = h;
  m->slot[h] = 0;
  m->n--;
  for (;;) {
    j = (j + 1) & (m->cap - 1);
    if (!m->slot[j]) return;
    size_t home = pm_hash(m, m->key[j]);
    if (((j - home) & (m->cap - 1)) >= ((j - h) & (m->cap - 1))) {
      m->key[h] = m->key[j];
      m->size[h] = m->size[j];
      m->slot[h] = m->slot[j];
      m->slot[j] = 0;
      h = j;
    }
  }
}

/* ---- parsing ---- */

/* Splits a CSV line in place into at most max fields (a quoted field unquoted, "" read as ");
 * returns the number found. */
static int csv_fields(char* line, char** f, int max) {
  int n = 0;
  for (char* p = line;; p++) {
    char* w = p;
    f[n++] = w;
    if (*p == '"') {
      for (p++; *p && (*p != '"' || p[1] == '"'); p++) {
        if (*p == '"') p++;
        *w++ = *p;
      }
      if (*p == '"') p++;
    } else {
      while (*p && *p != ',' && *p != '\r' && *p != '\n') w = ++p;
    }
    char c = *p;
    *w = 0;
    if (c != ',' || n == max) return n;
  }
}

/* A row's pointer (base 16: hex, 0x optional), size (10: decimal) or stream (0: decimal, or hex
 * after 0x). */
static bool parse_field(const char* s, unsigned base, uint64_t* out) {
  bool hex = base != 10 && s[0] == '0' && (s[1] | 0x20) == 'x';
  return dv_parse_u64(s + 2 * hex, strlen(s + 2 * hex), hex || base == 16 ? 16 : 10, out);
}

static int push(rlog* L, rop op) {
  if (L->n == L->cap) {
    size_t cap = L->cap ? L->cap * 2 : 4096;
    rop* ops = realloc(L->ops, cap * sizeof *ops);
    if (!ops) return -1;
    L->ops = ops;
    L->cap = cap;
  }
  L->ops[L->n++] = op;
  return 0;
}

/* The index of log stream `key` by first appearance, a new one counted in L; false when the
 * map cannot grow (or, as for allocations' slots, past 2^32 - 1 entries). */
static bool stream_index(pmap* sm, rlog* L, uint64_t key, uint32_t* out) {
  size_t h = pm_find(sm, key);
  if (!sm->slot[h] && L->nstreams == UINT32_MAX) return false;
  if (!sm->slot[h]) sm->key[h] = key, sm->slot[h] = ++L->nstreams, sm->n++;
  *out = sm->slot[h] - 1;
  return sm->n * 2 <= sm->cap || pm_grow(sm);
}

/* Reads `path` into L; prints why and returns -1 on a malformed log. */
static int parse_log(const char* path, rlog* L) {
  FILE* f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "devrt replay: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  enum { ACTION, POINTER, SIZE, STREAM, NCOLS };
  static const char* names[NCOLS] = {"Action", "Pointer", "Size", "Stream"};
  int col[NCOLS] = {-1, -1, -1, -1}, ncols = 0, rc = -1;
  char* line = NULL;
  size_t linecap = 0, lineno = 0;
  uint64_t live = 0;
  uint32_t slots = 0;
  pmap m = {calloc(1024, 8), calloc(1024, 8), calloc(1024, 4), 1024, 0};
  pmap sm = {calloc(64, 8), calloc(64, 8), calloc(64, 4), 64, 0};
  if (!m.key || !m.size || !m.slot || !sm.key || !sm.size || !sm.slot) goto oom;
  while (getline(&line, &linecap, f) > 0) {
    char* fld[32];
    lineno++;
    int n = csv_fields(line, fld, 32);
    if (lineno == 1) { /* the header: find the columns by name */
      for (int i = 0; i < n; i++)
        for (int c = 0; c < NCOLS; c++)
          if (!strcmp(fld[i], names[c])) col[c] = i;
      for (int c = 0; c < NCOLS; c++) {
        if (col[c] < 0) {
          fprintf(stderr,
                  "devrt replay: %s: the header has no %s column (want RMM's "
                  "Thread,Time,Action,Pointer,Size,Stream)\n",
                  path, names[c]);
          goto out;
        }
        if (col[c] >= ncols) ncols = col[c] + 1;
      }
      continue;
    }
    if (n == 1 && !fld[0][0]) continue; /* an empty line */
    if (n < ncols) {
      fprintf(stderr, "devrt replay: %s:%zu: %d fields, want at least %d\n", path, lineno, n,
              ncols);
      goto out;
    }
    const char* act = fld[col[ACTION]];
    bool alloc = !strcmp(act, "allocate");
    bool freeing = !strcmp(act, "free") || !strcmp(act, "deallocate");
    if (!alloc && !freeing) {
      if (!strcmp(act, "allocate failure"))
        L->failures++;
      else
        L->others++;
      continue;
    }
    static const unsigned base[NCOLS] = {0, 16, 10, 0};
    static const char* want[NCOLS] = {"", "hex digits, 0x optional", "decimal digits",
                                      "decimal digits, or hex after 0x"};
    uint64_t v[NCOLS] = {0};
    for (int c = POINTER; c < NCOLS; c++)
      if (!parse_field(fld[col[c]], base[c], &v[c])) {
        fprintf(stderr, "devrt replay: %s:%zu: %s \"%s\" does not parse (want %s)\n", path, lineno,
                names[c], fld[col[c]], want[c]);
        goto out;
      }
    uint64_t ptr = v[POINTER], size = v[SIZE];
    uint32_t si = 0;
    if (!stream_index(&sm, L, v[STREAM], &si)) goto oom;
    if (alloc && (!ptr || !size || size > DEVRT_MAX_ALLOC_SIZE)) {
      fprintf(stderr, "devrt replay: %s:%zu: an allocation of %" PRIu64 " bytes at %#" PRIx64 "\n",
              path, lineno, size, ptr);
      goto out;
    }
    rop op = {.size = size, .stream = (uint16_t)(si % MAX_STREAMS), .free = freeing};
    size_t h = pm_find(&m, ptr);
    if (alloc) {
      if (m.slot[h]) {
        fprintf(stderr, "devrt replay: %s:%zu: %#" PRIx64 " allocated again before its free\n",
                path, lineno, ptr);
        goto out;
      }
      if (slots == UINT32_MAX) goto oom;
      m.key[h] = ptr;
      m.size[h] = size;
      m.slot[h] = (op.slot = slots++) + 1;
      m.n++;
      live += size;
      if (live > L->peak_live) L->peak_live = live;
      if (!L->sizes[0] || size < L->sizes[0]) L->sizes[0] = size;
      if (size > L->sizes[1]) L->sizes[1] = size;
      L->allocs++;
      if (m.n * 2 > m.cap && !pm_grow(&m)) goto oom;
    } else {
      if (!m.slot[h]) {
        L->unknown_frees++;
        continue;
      }
      op.slot = m.slot[h] - 1;
      op.size = m.size[h]; /* the allocation's size, whatever the free's row says */
      live -= op.size;
      pm_erase(&m, h);
      L->frees++;
    }
    if (push(L, op)) goto oom;
  }
  if (lineno == 0) {
    fprintf(stderr, "devrt replay: %s is empty\n", path);
    goto out;
  }
  L->unfreed = m.n;
  rc = 0;
  goto out;
oom:
  fprintf(stderr, "devrt replay: out of host memory reading %s\n", path);
out:
  free(line);
  pm_free(&m);
  pm_free(&sm);
  fclose(f);
  return rc;
}

/* ---- replaying ---- */

static const char* const STACKS[] = {"full", "nocache", "async", "simple", "arena"};
enum { NSTACKS = 5 };

typedef struct replay {
  const rlog* L;
  devrt_runtime* rt;
  devrt_stream streams[MAX_STREAMS];
  void** ptrs; /* by slot */
} replay;

typedef struct result {
  bench_stat ops_per_s;
  uint64_t peak_held; /* the stack's live + pending + cached bytes, sampled after each alloc */
  uint64_t pool_high; /* the device pool's reserved high-water mark over the same pass */
  uint64_t reserved;  /* pool_high, or peak_held where the stack has no pool (simple) */
  uint64_t cache_hits, cache_misses;
} result;

#define RTRY(what, expr)                                                         \
  do {                                                                           \
    devrt_status s_ = (expr);                                                    \
    if (s_ != DEVRT_OK) {                                                        \
      fprintf(stderr, "devrt replay: %s: %s: %s\n", what, devrt_status_name(s_), \
              devrt_last_error());                                               \
      return -1;                                                                 \
    }                                                                            \
  } while (0)

/* One pass over the log; with `peak` set, samples the stack's held bytes after every allocation.
 * Allocations the log never frees stay in ptrs (finish() frees them). */
static int replay_pass(replay* R, devrt_resource* r, uint64_t* peak) {
  const rlog* L = R->L;
  for (size_t i = 0; i < L->n; i++) {
    const rop* o = &L->ops[i];
    devrt_stream s = R->streams[o->stream];
    if (o->free) {
      RTRY("deallocate", devrt_resource_deallocate(r, R->ptrs[o->slot], o->size, s));
      R->ptrs[o->slot] = NULL;
      continue;
    }
    RTRY("allocate", devrt_resource_allocate(r, o->size, s, "replay", &R->ptrs[o->slot]));
    if (peak) {
      devrt_resource_figures f;
      RTRY("query", devrt_resource_query(r, &f));
      uint64_t held = f.live_bytes + f.pending_bytes + f.cached_bytes;
      if (held > *peak) *peak = held;
    }
  }
  return 0;
}

/* Frees what the log left live and waits for every pending free (untimed). */
static int finish(replay* R, devrt_resource* r) {
  for (size_t i = 0; i < R->L->n; i++) {
    const rop* o = &R->L->ops[i];
    if (!o->free && R->ptrs[o->slot]) {
      RTRY("deallocate",
           devrt_resource_deallocate(r, R->ptrs[o->slot], o->size, R->streams[o->stream]));
      R->ptrs[o->slot] = NULL;
    }
  }
  RTRY("reap", devrt_resource_reap(r, DEVRT_REAP_WAIT, NULL));
  return 0;
}

/* Builds stack k: full is the runtime's own stack (borrowed, a reference taken); nocache is
 * budget (DEVICE, the device's size, waiting for pending frees) -> statistics -> async, arena the
 * same over the arena leaf; async and simple are the bare leaves. */
static int build(devrt_runtime* rt, int k, uint64_t total, devrt_resource** out) {
  devrt_resource *leaf = NULL, *stats = NULL;
  if (k == 0) {
    RTRY("devrt_runtime_resource", devrt_runtime_resource(rt, out));
    RTRY("retain", devrt_resource_retain(*out));
    return 0;
  }
  if (k == 3) {
    RTRY("devrt_simple_resource_create", devrt_simple_resource_create(rt, out));
    return 0;
  }
  if (k == 4)
    RTRY("devrt_arena_resource_create", devrt_arena_resource_create(rt, &leaf));
  else
    RTRY("devrt_async_resource_create", devrt_async_resource_create(rt, &leaf));
  if (k == 2) {
    *out = leaf;
    return 0;
  }
  devrt_status s = devrt_statistics_resource_create(leaf, &stats);
  devrt_resource_release(leaf);
  RTRY("devrt_statistics_resource_create", s);
  /* Waiting for pending frees before refusing: the replay measures reserve and speed, and a
   * stream that runs behind the replay (the host backend's) would otherwise refuse logs whose
   * live bytes fit. */
  devrt_budget_options bo = {
      .limit_bytes = total, .scope = DEVRT_BUDGET_DEVICE, .wait_for_pending = true};
  s = devrt_budget_create(stats, &bo, out);
  devrt_resource_release(stats);
  RTRY("devrt_budget_create", s);
  return 0;
}

/* Gives everything back to the device and restarts the pool's high-water mark. */
static int drain(devrt_runtime* rt, devrt_resource* r) {
  RTRY("trim", devrt_resource_trim(r, NULL));
  RTRY("reap", devrt_resource_reap(r, DEVRT_REAP_WAIT, NULL));
  RTRY("devrt_pool_trim", devrt_pool_trim(rt, 0));
  RTRY("devrt_pool_reset_high", devrt_pool_reset_high(rt));
  return 0;
}

/* One stack: an untimed pass that samples the peaks, one warm-up pass, then `rounds` timed. */
static int run_stack(replay* R, int k, uint64_t total, int rounds, result* out) {
  devrt_resource* r = NULL;
  if (build(R->rt, k, total, &r)) return -1;
  int rc = -1;
  double* v = calloc((size_t)rounds, sizeof *v);
  devrt_pool_stats ps;
  devrt_resource_figures f;
  memset(out, 0, sizeof *out);
  if (!v || drain(R->rt, r) || replay_pass(R, r, &out->peak_held)) goto done;
  if (devrt_pool_stats_get(R->rt, &ps) == DEVRT_OK) out->pool_high = ps.reserved_high;
  out->reserved = k == 3 ? out->peak_held : out->pool_high;
  if (finish(R, r) || replay_pass(R, r, NULL) || finish(R, r)) goto done;
  for (int i = 0; i < rounds; i++) {
    uint64_t t0 = bench_now_ns();
    if (replay_pass(R, r, NULL)) goto done;
    uint64_t t = bench_now_ns() - t0;
    v[i] = (double)R->L->n / ((double)(t ? t : 1) / 1e9);
    if (finish(R, r)) goto done;
  }
  out->ops_per_s = bench_stat_of(v, rounds);
  if (devrt_resource_query(r, &f) == DEVRT_OK) {
    out->cache_hits = f.cache_hits;
    out->cache_misses = f.cache_misses;
  }
  rc = drain(R->rt, r);
done:
  if (rc) finish(R, r);
  free(v);
  devrt_resource_release(r);
  return rc;
}

static void mib(char* buf, uint64_t b) { snprintf(buf, 32, "%.1f MiB", (double)b / 1048576.0); }

static int usage(FILE* f) {
  fprintf(f,
          "usage: devrt replay LOG [--stack full|nocache|async|simple|arena] [--rounds R] "
          "[--ordinal N] [--json]\n");
  if (f == stdout)
    printf(
        "  replays an allocation log (devrt's or RMM's CSV) on one thread against each stack\n"
        "  LOG           the log (docs/python.md: Replay)\n"
        "  --stack S     one stack: full (the runtime's), nocache, async (the pool), simple "
        "(cuMemAlloc), arena (nocache over the arena leaf)\n"
        "  --rounds R    timed passes a stack (1..1000, default 5)\n"
        "  --ordinal N   the device (0..%d, default 0)\n"
        "  --json        figures as one JSON document on stdout\n",
        DEVRT_MAX_ORDINALS - 1);
  return f == stdout ? 0 : 2;
}

int cli_replay(int argc, char** argv) {
  const char* path = NULL;
  int only = -1, rounds = 5, ordinal = 0, json = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      return usage(stdout);
    } else if (!strcmp(argv[i], "--json")) {
      json = 1;
    } else if (!strcmp(argv[i], "--stack") && i + 1 < argc) {
      for (only = NSTACKS; only-- > 0 && strcmp(argv[i + 1], STACKS[only]);) continue;
      if (only < 0) {
        fprintf(stderr,
                "devrt replay: unknown stack '%s' (full, nocache, async, simple or arena)\n",
                argv[i + 1]);
        return 2;
      }
      i++;
    } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      if (!cli_number("devrt replay: --rounds", argv[++i], 1, 1000, &rounds)) return 2;
    } else if (!strcmp(argv[i], "--ordinal") && i + 1 < argc) {
      if (!cli_number("devrt replay: --ordinal", argv[++i], 0, DEVRT_MAX_ORDINALS - 1, &ordinal))
        return 2;
    } else if (argv[i][0] == '-' || path) {
      fprintf(stderr, "devrt replay: unexpected argument '%s' (devrt replay --help)\n", argv[i]);
      return 2;
    } else {
      path = argv[i];
    }
  }
  if (!path) return usage(stderr);
  rlog L = {0};
  if (parse_log(path, &L)) return free(L.ops), 1;
  if (!L.allocs) {
    fprintf(stderr, "devrt replay: %s holds no allocation to replay\n", path);
    return free(L.ops), 1;
  }
  replay R = {.L = &L, .ptrs = calloc(L.allocs, sizeof(void*))};
  if (!R.ptrs) {
    fprintf(stderr, "devrt replay: no host memory for %zu allocations' pointers\n", L.allocs);
    return free(L.ops), 1;
  }
  devrt_runtime_info ri;
  devrt_device_info di;
  result res[NSTACKS];
  int rc = 1, nstreams = L.nstreams < MAX_STREAMS ? (int)L.nstreams : MAX_STREAMS, got = 0;
  devrt_status s = devrt_runtime_get(ordinal, &R.rt);
  if (s == DEVRT_OK) s = devrt_runtime_info_get(R.rt, &ri);
  if (s == DEVRT_OK) s = devrt_device_info_get(R.rt, &di);
  while (s == DEVRT_OK && got < nstreams)
    if ((s = devrt_stream_acquire(R.rt, DEVRT_ACQUIRE_SHARE, &R.streams[got])) == DEVRT_OK) got++;
  if (s != DEVRT_OK) {
    fprintf(stderr, "devrt replay: %s: %s\n", devrt_status_name(s), devrt_last_error());
    goto out;
  }
  for (int k = 0; k < NSTACKS; k++)
    if ((only < 0 || only == k) && run_stack(&R, k, di.total_memory, rounds, &res[k])) goto out;
  char a[32], b[32], c[64];
  if (json) {
    printf("{\"command\":\"replay\",\"log\":%s,\"backend\":%s,", json_quote(c, sizeof c, path),
           json_quote(a, sizeof a, ri.backend_name));
    printf("\"device\":");
    json_str(di.name);
    printf(
        ",\"operations\":%zu,\"allocations\":%zu,\"frees\":%zu,\"streams\":%u,"
        "\"skipped\":{\"unknown_frees\":%zu,\"allocate_failures\":%zu,\"other_rows\":%zu},"
        "\"unfreed\":%zu,\"peak_live_bytes\":%" PRIu64 ",\"smallest\":%" PRIu64
        ",\"largest\":%" PRIu64 ",\"rounds\":%d,\"results\":[",
        L.n, L.allocs, L.frees, L.nstreams, L.unknown_frees, L.failures, L.others, L.unfreed,
        L.peak_live, L.sizes[0], L.sizes[1], rounds);
    for (int k = 0, first = 1; k < NSTACKS; k++) {
      if (only >= 0 && only != k) continue;
      const result* x = &res[k];
      printf("%s{\"stack\":\"%s\",\"ops_per_s\":{\"median\":%s,", first ? "" : ",", STACKS[k],
             json_num(a, "%.0f", x->ops_per_s.median));
      printf("\"p10\":%s,", json_num(a, "%.0f", x->ops_per_s.p10));
      printf("\"p90\":%s},\"peak_reserved_bytes\":%" PRIu64 ",\"peak_held_bytes\":%" PRIu64
             ",\"pool_reserved_high\":%" PRIu64 ",\"reserved_over_live\":%s,\"cache_hits\":%" PRIu64
             ",\"cache_misses\":%" PRIu64 "}",
             json_num(b, "%.0f", x->ops_per_s.p90), x->reserved, x->peak_held, x->pool_high,
             json_num(c, "%.4f", (double)x->reserved / (double)L.peak_live), x->cache_hits,
             x->cache_misses);
      first = 0;
    }
    printf("]}\n");
  } else {
    mib(a, L.peak_live);
    printf(
        "devrt replay %s on %s (%s): %zu operations (%zu allocations, %zu frees), %u "
        "streams, peak live %s\n",
        path, di.name, ri.backend_name, L.n, L.allocs, L.frees, L.nstreams, a);
    if (L.unknown_frees || L.failures || L.others || L.unfreed)
      printf(
          "  skipped: %zu frees of unknown pointers, %zu allocate failures, %zu other rows; "
          "%zu allocations never freed (freed after each round)\n",
          L.unknown_frees, L.failures, L.others, L.unfreed);
    printf("  %-8s %14s %23s %14s %14s\n", "stack", "ops/s median", "p10 .. p90", "peak reserved",
           "reserved/live");
    for (int k = 0; k < NSTACKS; k++) {
      if (only >= 0 && only != k) continue;
      const result* x = &res[k];
      mib(a, x->reserved);
      snprintf(c, sizeof c, "%.0f .. %.0f", x->ops_per_s.p10, x->ops_per_s.p90);
      printf("  %-8s %14.0f %23s %14s %14.3f\n", STACKS[k], x->ops_per_s.median, c, a,
             (double)x->reserved / (double)L.peak_live);
    }
    printf(
        "  (%d timed rounds a stack after a warm-up; peak reserved: the device pool's "
        "high-water mark, the stack's own held bytes for simple)\n",
        rounds);
  }
  rc = 0;
out:
  for (int i = 0; i < got; i++) devrt_stream_release(R.rt, R.streams[i]);
  free(R.ptrs);
  free(L.ops);
  return rc;
}
