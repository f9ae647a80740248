/* bench.h: the benchmark harness every `devrt bench` suite uses: a devrt operation and the raw
 * call it wraps, timed in interleaved rounds of the same run; median and spread of ns per op. */
#ifndef DEVRT_BENCH_H
#define DEVRT_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include "cli.h"
#include "devrt/status.h"

/* One timed body: performs `iters` operations; returns 0, or -1 after printing why it failed. */
typedef int (*bench_body)(void* ctx, int iters);

typedef struct bench_stat {
  double median, p10, p90;
} bench_stat;

typedef struct bench_suite {
  const cli_opts* opts;
  const char* suite;
  int rows;
  bench_stat devrt, raw; /* the last bench_pair's statistics (ns/op), for a suite's own footer */
} bench_suite;

uint64_t bench_now_ns(void);
/* Median, p10 and p90 of n values (sorts them). */
bench_stat bench_stat_of(double* v, int n);

/* Prints "bench <suite>: <what>: <STATUS>: <devrt_last_error()>" and returns -1. */
int bench_fail(const char* suite, const char* what, devrt_status s);
/* In a suite file that defines BENCH_SUITE: return bench_fail(...) when expr fails. */
#define TRY(what, expr)                                           \
  do {                                                            \
    devrt_status s_ = (expr);                                     \
    if (s_ != DEVRT_OK) return bench_fail(BENCH_SUITE, what, s_); \
  } while (0)

/* Begins a suite's report: header line (text) or the opening of the JSON document. */
void bench_begin(bench_suite* b, const cli_opts* o, const char* suite, const char* device,
                 const char* backend);
/* Times devrt_fn and raw_fn over `rounds` interleaved rounds of `iters` ops each (after one
 * warm-up round of each) and reports ns/op median, p10, p90 of each side, and the ratio and
 * overhead (devrt - raw) of each round against the raw round run beside it: median, p10, p90 (a
 * host that slows for a while slows both rounds of a pair), and the median ratio's 95% confidence
 * interval (order statistics; JSON `ratio_ci95`); a row whose raw rounds spread by more
 * than 25% (p90 over p10) is marked as timed on an unsteady host. sync (may be NULL) runs after
 * every round, outside the timed region. */
int bench_pair(bench_suite* b, const char* op, void* ctx, bench_body devrt_fn, bench_body raw_fn,
               int (*sync)(void* ctx), int iters, int rounds);
/* As bench_pair, with raw_fn timed over raw_iters ops a round (a slow raw side stays short). */
int bench_pair_iters(bench_suite* b, const char* op, void* ctx, bench_body devrt_fn,
                     bench_body raw_fn, int (*sync)(void* ctx), int iters, int raw_iters,
                     int rounds);
/* One row of bench_rows: bench_pair_iters's arguments, and the statistics it reported. */
typedef struct bench_row {
  const char* op;
  void* ctx;
  bench_body devrt_fn, raw_fn;
  int (*sync)(void* ctx);
  int iters, raw_iters;
  bench_stat devrt, raw; /* out */
} bench_row;
/* As bench_pair_iters for n rows timed in the same rounds: each round times every row in turn
 * (from a rotating start), so a host that changes speed for a while hits all of them alike and
 * each row's rounds span the whole run; reports the rows in order and fills their statistics. */
int bench_rows(bench_suite* b, bench_row* rows, int n, int rounds);
void bench_end(bench_suite* b);
/* Appends printf-style text to the string in buf (cap bytes in all): JSON fragments of a footer. */
void bench_cat(char* buf, size_t cap, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
/* Called from a body: ns of untimed setup in it (e.g. queuing work that a later call releases),
 * subtracted from the round's time. */
void bench_exclude(uint64_t ns);
/* As bench_end; JSON also gets `fields` (a fragment like "\"k\":1,\"m\":[]", may be NULL) after the
 * results array. Text output prints nothing more: the suite prints its own footer. */
void bench_end_fields(bench_suite* b, const char* fields);

#endif
