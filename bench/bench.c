/* bench.c: timing, statistics and text/JSON reporting shared by the benchmark suites. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench.h"
#include "json.h"

uint64_t bench_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int bench_fail(const char* suite, const char* what, devrt_status s) {
  fprintf(stderr, "bench %s: %s: %s: %s\n", suite, what, devrt_status_name(s), devrt_last_error());
  return -1;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

bench_stat bench_stat_of(double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  bench_stat s = {v[n / 2], v[n / 10], v[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1]};
  return s;
}

void bench_begin(bench_suite* b, const cli_opts* o, const char* suite, const char* device,
                 const char* backend) {
  b->opts = o;
  b->suite = suite;
  b->rows = 0;
  char dev[512];
  if (o->json)
    printf("{\"suite\":\"%s\",\"backend\":\"%s\",\"device\":%s,\"unit\":\"ns/op\",\"results\":[",
           suite, backend, json_quote(dev, sizeof dev, device));
  else
    printf(
        "devrt bench %s on %s (%s backend); ns per op: median [p10, p90] over rounds; ratio and "
        "overhead: of\n"
        "each round against the raw round beside it, median [p10, p90] and the median's 95%% "
        "interval\n"
        "%-28s %28s %28s %22s %11s %9s\n",
        suite, device, backend, "op", "devrt", "raw", "ratio", "ratio ci95", "overhead");
}

static uint64_t excluded; /* untimed setup inside the current body (bench_exclude) */
/* A row whose raw rounds spread wider than this (p90 / p10) was timed on a host that changed
 * speed during it (the raw call itself doubling for a while): it is marked, not dropped. */
#define UNSTEADY 1.25

void bench_exclude(uint64_t ns) { excluded += ns; }

static int timed_round(void* ctx, bench_body fn, int (*sync)(void*), int iters, double* out) {
  excluded = 0;
  uint64_t t0 = bench_now_ns();
  if (fn(ctx, iters)) return -1;
  uint64_t t1 = bench_now_ns();
  if (sync && sync(ctx)) return -1;
  *out = (double)(t1 - t0 - excluded) / iters;
  return 0;
}

int bench_pair(bench_suite* b, const char* op, void* ctx, bench_body devrt_fn, bench_body raw_fn,
               int (*sync)(void*), int iters, int rounds) {
  return bench_pair_iters(b, op, ctx, devrt_fn, raw_fn, sync, iters, iters, rounds);
}

int bench_pair_iters(bench_suite* b, const char* op, void* ctx, bench_body devrt_fn,
                     bench_body raw_fn, int (*sync)(void*), int iters, int raw_iters, int rounds) {
  bench_row w = {.op = op,
                 .ctx = ctx,
                 .devrt_fn = devrt_fn,
                 .raw_fn = raw_fn,
                 .sync = sync,
                 .iters = iters,
                 .raw_iters = raw_iters};
  return bench_rows(b, &w, 1, rounds);
}

/* One row's report from its per-round times d (devrt) and r (raw); q and o are scratch. */
static void report(bench_suite* b, bench_row* w, int rounds, double* d, double* r, double* q,
                   double* o) {
  for (int i = 0; i < rounds; i++) q[i] = d[i] / r[i], o[i] = d[i] - r[i];
  bench_stat sd = bench_stat_of(d, rounds), sr = bench_stat_of(r, rounds),
             sq = bench_stat_of(q, rounds), so = bench_stat_of(o, rounds);
  /* The median ratio's 95% confidence interval: the order statistics n/2 -+ 0.98 sqrt(n) of the
   * sorted ratios (distribution-free). */
  int k = (int)ceil(0.98 * sqrt(rounds)), lo = rounds / 2 - k, hi = rounds / 2 + k;
  double ci_lo = q[lo < 0 ? 0 : lo], ci_hi = q[hi >= rounds ? rounds - 1 : hi];
  b->devrt = w->devrt = sd, b->raw = w->raw = sr;
  bool steady = sr.p90 <= UNSTEADY * sr.p10;
  if (b->opts->json) {
    char n[12][32]; /* every measured number through json_num: a ratio over a zero time is null */
    printf(
        "%s\n "
        "{\"op\":\"%s\",\"iters\":%d,\"raw_iters\":%d,\"rounds\":%d,\"devrt\":{\"median\":%s,"
        "\"p10\":%s,\"p90\":%s},"
        "\"raw\":{\"median\":%s,\"p10\":%s,\"p90\":%s},\"ratio\":%s,\"ratio_p10\":%s,\"ratio_p90\":"
        "%s,"
        "\"ratio_ci95\":[%s,%s],\"overhead_ns\":%s,\"raw_steady\":%s}",
        b->rows ? "," : "", w->op, w->iters, w->raw_iters, rounds,
        json_num(n[0], "%.1f", sd.median), json_num(n[1], "%.1f", sd.p10),
        json_num(n[2], "%.1f", sd.p90), json_num(n[3], "%.1f", sr.median),
        json_num(n[4], "%.1f", sr.p10), json_num(n[5], "%.1f", sr.p90),
        json_num(n[6], "%.4g", sq.median), json_num(n[7], "%.4g", sq.p10),
        json_num(n[8], "%.4g", sq.p90), json_num(n[9], "%.4g", ci_lo),
        json_num(n[10], "%.4g", ci_hi), json_num(n[11], "%.1f", so.median),
        steady ? "true" : "false");
  } else
    printf(
        "%-28s %9.1f [%7.1f, %7.1f] %9.1f [%7.1f, %7.1f] %7.3f [%5.3f, %5.3f] %5.3f-%5.3f "
        "%+8.1f%s\n",
        w->op, sd.median, sd.p10, sd.p90, sr.median, sr.p10, sr.p90, sq.median, sq.p10, sq.p90,
        ci_lo, ci_hi, so.median, steady ? "" : "  (unsteady host)");
  b->rows++;
}

int bench_rows(bench_suite* b, bench_row* w, int n, int rounds) {
  double* d = malloc(sizeof(double) * (size_t)rounds * (2 * (size_t)n + 2));
  double *r = d + (size_t)rounds * n, *q = r + (size_t)rounds * n,
         *o = q + rounds; /* per row and round: devrt, raw */
  double warm;
  int rc = 0;
  for (int j = 0; !rc && j < n; j++)
    rc = timed_round(w[j].ctx, w[j].devrt_fn, w[j].sync, w[j].iters, &warm) ||
         timed_round(w[j].ctx, w[j].raw_fn, w[j].sync, w[j].raw_iters, &warm);
  for (int i = 0; !rc && i < rounds; i++)
    for (int k = 0; !rc && k < n;
         k++) { /* rows in turn, from a rotating start; each row's two sides
                    swap order every round (by i alone: with an even n, i + k
                    would give a row the same order in every round) */
      bench_row* x = &w[(i + k) % n];
      double *dx = &d[(size_t)(x - w) * rounds + i], *rx = &r[(size_t)(x - w) * rounds + i];
      rc = (i & 1) ? (timed_round(x->ctx, x->raw_fn, x->sync, x->raw_iters, rx) ||
                      timed_round(x->ctx, x->devrt_fn, x->sync, x->iters, dx))
                   : (timed_round(x->ctx, x->devrt_fn, x->sync, x->iters, dx) ||
                      timed_round(x->ctx, x->raw_fn, x->sync, x->raw_iters, rx));
    }
  for (int j = 0; !rc && j < n; j++)
    report(b, &w[j], rounds, d + (size_t)j * rounds, r + (size_t)j * rounds, q, o);
  free(d);
  return rc ? -1 : 0;
}

void bench_cat(char* buf, size_t cap, const char* fmt, ...) {
  size_t len = strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + len, cap - len, fmt, ap);
  va_end(ap);
}

void bench_end(bench_suite* b) { bench_end_fields(b, NULL); }

void bench_end_fields(bench_suite* b, const char* fields) {
  if (b->opts->json) printf("\n]%s%s}\n", fields ? "," : "", fields ? fields : "");
}
