/* reference.c: the queries a run asks (variants of the Q1 and join shapes, with their row ranges
 * and chunking), their CPU reference computed from the same generator as the kernels (one pass
 * over the rows on several threads), and the checks of a query's slots (or of a distributed
 * query's all-reduced result) against it. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "engine.h"
#include "gen.h"

enum { NQ1 = 4, NJOIN = 4, NINTER = 8, MAX_THREADS = 16 };

static unsigned chunks_of(uint64_t rows, uint64_t chunk) {
  return (unsigned)((rows + chunk - 1) / chunk);
}

static void add_variant(eg_engine* e, eg_variant v) {
  v.nchunks = chunks_of(v.rows, v.chunk_rows);
  if (v.kind == EG_JOIN) {
    v.ofirst = v.first / EG_LINES_PER_ORDER;
    v.orows = (v.first + v.rows + EG_LINES_PER_ORDER - 1) / EG_LINES_PER_ORDER - v.ofirst;
    v.ochunks = chunks_of(v.orows, v.chunk_rows);
    snprintf(v.name, sizeof v.name, "join(orders %u..%u, ship>=%u)", v.d0, v.d1, v.s0);
  } else {
    snprintf(v.name, sizeof v.name, "Q1(ship<=%u, rows %" PRIu64 "+%" PRIu64 ")", v.cutoff, v.first,
             v.rows);
  }
  e->var[e->nvar++] = v;
}

typedef struct part_ctx { /* one thread's share of the reference pass */
  const eg_engine* e;
  uint64_t lo, hi, olo, ohi;
  uint64_t** ref;   /* per variant, as eg_variant.ref */
  uint64_t* orders; /* per variant: passing orders */
} part_ctx;

static void* ref_part(void* arg) {
  part_ctx* c = arg;
  const eg_engine* e = c->e;
  for (uint64_t i = c->lo; i < c->hi; i++) {
    eg_li_row r = eg_lineitem(i);
    eg_order_row o = eg_order(i / EG_LINES_PER_ORDER);
    for (int k = 0; k < e->nvar; k++) {
      const eg_variant* v = &e->var[k];
      if (i - v->first >= v->rows) continue;
      uint64_t* slot = c->ref[k] + (i - v->first) / v->chunk_rows * EG_AGG_WORDS;
      if (v->kind == EG_Q1)
        eg_q1_add(slot, r, v->cutoff);
      else if (eg_order_passes(o, v->d0, v->d1) && r.ship >= v->s0)
        eg_join_add(slot, o.prio, r);
    }
  }
  for (uint64_t i = c->olo; i < c->ohi; i++) {
    eg_order_row o = eg_order(i);
    for (int k = 0; k < e->nvar; k++) {
      const eg_variant* v = &e->var[k];
      c->orders[k] +=
          v->kind == EG_JOIN && i - v->ofirst < v->orows && eg_order_passes(o, v->d0, v->d1);
    }
  }
  return NULL;
}

/* The reference: each thread sums a contiguous share of the rows into its own slots. */
static int reference(eg_engine* e) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int n = cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (int)cpus;
  part_ctx c[MAX_THREADS];
  pthread_t th[MAX_THREADS];
  int started = 0, rc = 0;
  for (int p = 0; p < n; p++) {
    c[p] = (part_ctx){e,
                      e->li_rows * p / n,
                      e->li_rows * (p + 1) / n,
                      e->ord_rows * p / n,
                      e->ord_rows * (p + 1) / n,
                      calloc((size_t)e->nvar, sizeof(uint64_t*)),
                      calloc((size_t)e->nvar, sizeof(uint64_t))};
    bool ok = c[p].ref && c[p].orders;
    for (int k = 0; ok && k < e->nvar; k++)
      ok = (c[p].ref[k] = calloc((size_t)e->var[k].nchunks * EG_AGG_WORDS, 8)) != NULL;
    if (!ok || pthread_create(&th[p], NULL, ref_part, &c[p])) {
      rc = eg_fail(e, "reference: out of host memory or threads");
      break;
    }
    started++;
  }
  for (int p = 0; p < started; p++) pthread_join(th[p], NULL);
  for (int p = 0; p <= started && p < n; p++) {
    for (int k = 0; k < e->nvar; k++) {
      eg_variant* v = &e->var[k];
      for (size_t w = 0; p < started && w < (size_t)v->nchunks * EG_AGG_WORDS; w++) {
        v->ref[w] += c[p].ref[k][w];
        v->ref[v->nchunks * EG_AGG_WORDS + w % EG_AGG_WORDS] += c[p].ref[k][w];
      }
      if (p < started) v->passing_orders += c[p].orders[k];
      if (c[p].ref) free(c[p].ref[k]);
    }
    free(c[p].ref);
    free(c[p].orders);
  }
  return rc;
}

int eg_plan(eg_engine* e) {
  uint64_t n = e->li_rows, ch = e->chunk_rows, ich = e->ichunk_rows;
  e->var = calloc(NQ1 + NJOIN + NINTER, sizeof *e->var);
  if (!e->var) return eg_fail(e, "out of host memory");
  static const uint32_t q1_delta[NQ1] = {60, 75, 90, 120};
  for (int k = 0; k < NQ1; k++)
    add_variant(
        e, (eg_variant){
               .kind = EG_Q1, .rows = n, .chunk_rows = ch, .cutoff = EG_Q1_BASE_DAY - q1_delta[k]});
  for (uint32_t k = 0; k < NJOIN; k++)
    add_variant(e, (eg_variant){.kind = EG_JOIN,
                                .rows = n,
                                .chunk_rows = ch,
                                .d0 = 600 * k,
                                .d1 = 600 * k + 365,
                                .s0 = 600 * k + 60});
  /* The interactive tenant's small Q1s: two chunks each, spread over the table. */
  for (uint64_t k = 0; k < NINTER; k++) {
    uint64_t first = n / NINTER * k / 4 * 4, rows = n - first < 2 * ich ? n - first : 2 * ich;
    add_variant(e, (eg_variant){.kind = EG_Q1,
                                .first = first,
                                .rows = rows,
                                .chunk_rows = ich,
                                .cutoff = EG_Q1_BASE_DAY - 90 - 10 * (uint32_t)k});
  }
  e->nq1 = NQ1, e->njoin = NJOIN, e->ninter = NINTER;
  for (int k = 0; k < e->nvar; k++)
    if (!(e->var[k].ref = calloc((size_t)(e->var[k].nchunks + 1) * EG_AGG_WORDS, 8)))
      return eg_fail(e, "out of host memory");
  return reference(e);
}

void eg_plan_free(eg_engine* e) {
  for (int k = 0; e->var && k < e->nvar; k++) free(e->var[k].ref);
  free(e->var);
  e->var = NULL;
}

static const char* const q1_groups[EG_GROUPS] = {"A/F", "A/O", "N/F", "N/O", "R/F", "R/O"};
static const char* const q1_fields[4] = {"count", "sum_qty", "sum_price", "sum_disc_price"};
static const char* const priorities[EG_PRIORITIES] = {"1-URGENT", "2-HIGH", "3-MEDIUM",
                                                      "4-NOT SPECIFIED", "5-LOW"};

/* Word w of v's aggregate, named ("group A/F sum_price", "2-HIGH revenue"), in buf (48 bytes). */
static const char* word_name(char* buf, const eg_variant* v, unsigned w) {
  if (v->kind == EG_Q1)
    snprintf(buf, 48, "group %s %s", q1_groups[w / 4 % EG_GROUPS], q1_fields[w % 4]);
  else if (w < 2 * EG_PRIORITIES)
    snprintf(buf, 48, "%s %s", priorities[w / 2], w % 2 ? "revenue" : "count");
  else
    snprintf(buf, 48, "unused word %u", w);
  return buf;
}

int eg_check_total(eg_engine* e, const eg_variant* v, uint32_t query, int device,
                   const uint64_t* total) {
  const uint64_t* want = v->ref + (size_t)v->nchunks * EG_AGG_WORDS;
  for (unsigned w = 0; w < EG_AGG_WORDS; w++) {
    if (total[w] == want[w]) continue;
    char what[48];
    atomic_fetch_add(&e->mismatches, 1);
    return eg_fail(e,
                   "check failed: distributed query %" PRIu32
                   " %s, device %d's all-reduced "
                   "result: %s is %" PRIu64 ", the reference %" PRIu64,
                   query, v->name, device, word_name(what, v, w), total[w], want[w]);
  }
  return 0;
}

int eg_check(eg_engine* e, const eg_tenant* t, const eg_variant* v, uint32_t query,
             const uint64_t* slots) {
  atomic_fetch_add(&e->checked_queries, 1);
  atomic_fetch_add(&e->checked_chunks, v->nchunks);
  for (unsigned k = 0; k <= v->nchunks; k++)
    for (unsigned w = 0; w < EG_AGG_WORDS; w++) {
      uint64_t got = slots[k * EG_AGG_WORDS + w], want = v->ref[k * EG_AGG_WORDS + w];
      if (got == want) continue;
      atomic_fetch_add(&e->mismatches, 1);
      char where[48], what[48];
      if (k < v->nchunks)
        snprintf(where, sizeof where, "chunk %u of %u", k, v->nchunks);
      else
        snprintf(where, sizeof where, "the merged result");
      word_name(what, v, w);
      return eg_fail(e,
                     "check failed: tenant %d (%s), query %" PRIu32 " %s, %s: %s is %" PRIu64
                     ", the reference %" PRIu64,
                     t->id, t->interactive ? "interactive" : "batch", query, v->name, where, what,
                     got, want);
    }
  return 0;
}
