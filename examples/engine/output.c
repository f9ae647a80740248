/* output.c: what `devrt demo` prints: the live progress line (a terminal: one line redrawn; else
 * a plain line a second), the final table, and the same figures as JSON. With several devices
 * the table gains a line per device, a device column and the distributed query's line. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "engine.h"
#include "json.h"

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

eg_lat eg_lat_of(double* v, int n) {
  eg_lat l = {n, 0, 0, 0};
  if (n <= 0) return l;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  int p99 = (99 * n + 99) / 100 - 1;
  l.p50 = v[(n - 1) / 2], l.p99 = v[p99 < 0 ? 0 : p99], l.max = v[n - 1];
  return l;
}

const char* eg_bytes(char* buf, uint64_t bytes) {
  double v = (double)bytes;
  const char* unit = "B";
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB"};
  for (int i = 0; i < 4 && v >= 1024; i++) v /= 1024, unit = units[i];
  snprintf(buf, 16, unit[0] == 'B' ? "%.0f %s" : "%.1f %s", v, unit);
  return buf;
}

const char* eg_rate(char* buf, double v) {
  static const char* const units[] = {"", "k", "M", "G", "T"};
  int i = 0;
  while (v >= 1000 && i < 4) v /= 1000, i++;
  snprintf(buf, 16, "%.3g%s", v, units[i]);
  return buf;
}

void eg_progress(eg_engine* e, bool final) {
  char line[512], a[16], b[16];
  int phase = atomic_load(&e->phase), at = 0;
  uint64_t now = eg_now_ns(), since = phase == 0 ? e->t_alone0 : e->t_load0;
  at += snprintf(line + at, sizeof line - (size_t)at, "[%s %.1fs]",
                 phase == 0 ? "alone"
                 : final    ? "done"
                            : "load",
                 (double)(now - since) / 1e9);
  for (int i = 0; i < e->nt && at < (int)sizeof line - 64; i++) {
    eg_tenant* t = &e->t[i];
    uint64_t q = atomic_load(&t->queries_done), rows = atomic_load(&t->rows_done);
    double s = (double)(now - (t->interactive ? e->t_alone0 : e->t_load0)) / 1e9;
    at +=
        snprintf(line + at, sizeof line - (size_t)at, " %s t%d %s %" PRIu64 "q %sr/s", i ? "|" : "",
                 i, t->interactive ? "int" : "batch", q, eg_rate(a, s > 0 ? (double)rows / s : 0));
  }
  if (e->ndev)
    snprintf(line + at, sizeof line - (size_t)at, " | mem %s/%s",
             eg_bytes(a, e->dev[e->ndev - 1].live + e->dev[e->ndev - 1].pending +
                             e->dev[e->ndev - 1].cached),
             eg_bytes(b, e->devs[0].global_budget));
  if (e->o.progress)
    fprintf(stderr, "\r%s\x1b[K%s", line, final ? "\n" : "");
  else
    fprintf(stderr, "devrt demo: %s\n", line);
  fflush(stderr);
}

const char* eg_us(char* buf, const eg_lat* l, double v) {
  if (!l->n) return "-";
  if (v >= 1000)
    snprintf(buf, 16, "%.2f ms", v / 1000);
  else
    snprintf(buf, 16, "%.0f us", v);
  return buf;
}

void eg_print_table(const eg_figures* f, FILE* out) {
  char a[16], b[16], c[16], d[16];
  bool multi = f->devices > 1;
  if (multi)
    fprintf(out, "devrt demo: %s backend (%s), %d tenants on %d devices, %s\n", f->backend,
            f->device, f->tenants, f->devices, f->mode);
  else
    fprintf(out, "devrt demo: %s backend (%s), %d tenants on %s (%s)\n", f->backend, f->device,
            f->tenants, f->mode, f->layout);
  fprintf(out,
          "  lineitem %" PRIu64 " rows, orders %" PRIu64 " (scale %g), chunks of %" PRIu64
          " rows, %d in flight a tenant\n",
          f->lineitem_rows, f->orders_rows, f->scale, f->chunk_rows, f->credits);
  fprintf(out, "  global budget%s %s (the sub-budgets sum to %s), peak held %s\n",
          multi ? "s, all devices," : "", eg_bytes(a, f->global_budget), eg_bytes(b, f->sum_sub),
          eg_bytes(c, f->peak_held));
  for (int i = 0; multi && i < f->devices; i++) {
    const eg_device_figures* x = &f->d[i];
    fprintf(out, "  device %d (ordinal %d): %d tenants on %s; global budget %s, peak held %s\n", i,
            x->ordinal, x->tenants, x->tenants ? x->layout : "no layout",
            eg_bytes(a, x->global_budget), eg_bytes(b, x->peak_held));
  }
  fprintf(out, "\n%-6s %s%-11s %4s %8s %9s %7s %10s %10s %10s %10s %22s %8s\n", "tenant",
          multi ? "dev " : "", "kind", "SMs", "queries", "rows/s", "GB/s", "p50 alone", "p99 alone",
          "p50 load", "p99 load", "mem high / sub-budget", "retries");
  for (int i = 0; i < f->tenants; i++) {
    const eg_tenant_figures* t = &f->t[i];
    char la[4][16], mem[40], dev[8] = "";
    snprintf(mem, sizeof mem, "%s / %s", eg_bytes(a, t->mem_high), eg_bytes(b, t->sub_budget));
    if (multi) snprintf(dev, sizeof dev, "%-3d ", t->device);
    fprintf(out, "%-6d %s%-11s %4u %8" PRIu64 " %9s %7.2f %10s %10s %10s %10s %22s %8" PRIu64 "\n",
            i, dev, t->interactive ? "interactive" : "batch", t->sms, t->queries,
            eg_rate(d, t->rows_per_s), t->gb_per_s, eg_us(la[0], &t->alone, t->alone.p50),
            eg_us(la[1], &t->alone, t->alone.p99), eg_us(la[2], &t->load, t->load.p50),
            eg_us(la[3], &t->load, t->load.p99), mem, t->retries);
  }
  fprintf(out,
          "\nchecks: %" PRIu64 " queries, %" PRIu64
          " chunks compared with the CPU reference, %" PRIu64 " mismatches\n",
          f->checked_queries, f->checked_chunks, f->mismatches);
  for (int r = 0; f->nranks > 1 && r < f->nranks; r++) { /* --ranks: rank 0 shows every rank's */
    const eg_rank_figures* x = &f->ranks[r];
    fprintf(out,
            "rank %d: %s, %" PRIu64 " tenant queries, %" PRIu64 " queries and %" PRIu64
            " chunks checked, %" PRIu64 " mismatches; distributed: Q1 share %" PRIu64
            " rows, join %" PRIu64 " rows after %s shuffled, %" PRIu64 " results checked\n",
            r, x->ok ? "OK" : "FAILED", x->tenant_queries, x->checked_queries, x->checked_chunks,
            x->mismatches, x->dist_rows, x->join_rows, eg_bytes(a, x->shuffle_bytes),
            x->dist_checked);
  }
  if (f->nranks > 1)
    fprintf(out,
            "distributed over %d ranks: %" PRIu64 " Q1s (%s rows/s on this rank) and %" PRIu64
            " hash joins (orders and lineitem shuffled by key with all-to-all; %s rows/s on this "
            "rank); partials all-reduced between the processes, every rank's result compared "
            "with the CPU reference\n",
            f->nranks, f->dist.queries, eg_rate(d, f->dist.rows_per_s), f->dist.joins,
            eg_rate(a, f->dist.join_rows_per_s));
  if (multi)
    fprintf(out,
            "distributed over %d devices: %" PRIu64 " Q1s (%" PRIu64
            " chunks, %s rows/s) and %" PRIu64
            " hash joins (orders and lineitem shuffled by key with all-to-all; %s rows/s); "
            "partials combined by all-reduce, %" PRIu64
            " device results compared with the CPU reference\n",
            f->devices, f->dist.queries, f->dist.chunks, eg_rate(d, f->dist.rows_per_s),
            f->dist.joins, eg_rate(a, f->dist.join_rows_per_s), f->dist.checked);
  fprintf(out,
          "use tracking (the runtime%s): %" PRIu64 " waits inserted, %" PRIu64
          " skipped on the same stream, %" PRIu64 " coalesced\n",
          multi ? "s'" : "'s", f->blocks.waits_inserted, f->blocks.waits_skipped_same_stream,
          f->blocks.waits_coalesced);
  uint64_t retries = 0, held = 0;
  for (int i = 0; i < f->tenants; i++) retries += f->t[i].retries, held += f->t[i].held_back;
  fprintf(out,
          "queue: %" PRIu64 " submissions, %" PRIu64 " device waits, %" PRIu64
          " host hops, %" PRIu64 " OVER_BUDGET allocations retried, %" PRIu64
          " batch allocations put off to leave the interactive tenant's share\n",
          f->queue.submitted, f->queue.device_waits, f->queue.host_hops, retries, held);
  fprintf(out,
          "phases: interactive alone %.2f s, under load %.2f s; busy %.1f%% of the batch "
          "phase (device stamps%s)",
          f->alone_s, f->load_s, 100 * f->busy,
          f->thinned ? "; streams thinned, so a lower bound" : "");
  if (f->copy_gbs > 0)
    fprintf(out, "; Q1 scan %.1f GB/s, device copy %.1f GB/s", f->scan_gbs, f->copy_gbs);
  fputc('\n', out);
  eg_print_verdict(f, out);
}

void eg_print_verdict(const eg_figures* f, FILE* out) {
  fprintf(out, "%s%s\n", f->ok ? "OK: every check passed" : "FAILED: ", f->ok ? "" : f->error);
}

static void lat_json(FILE* out, const char* name, const eg_lat* l) {
  char a[32], b[32], c[32];
  fprintf(out, "\"%s\":{\"n\":%d,\"p50_us\":%s,\"p99_us\":%s,\"max_us\":%s}", name, l->n,
          json_num(a, "%.3f", l->n ? l->p50 : NAN), json_num(b, "%.3f", l->n ? l->p99 : NAN),
          json_num(c, "%.3f", l->n ? l->max : NAN));
}

void eg_print_json(const eg_figures* f, FILE* out) {
  char s[1200], a[32], b[32], c[32];
  fprintf(out, "{\"backend\":%s,", json_quote(s, sizeof s, f->backend));
  fprintf(out, "\"device\":%s,", json_quote(s, sizeof s, f->device));
  fprintf(out, "\"mode\":%s,", json_quote(s, sizeof s, f->mode));
  fprintf(out, "\"layout\":%s,", json_quote(s, sizeof s, f->layout));
  fprintf(out,
          "\"scale\":%s,\"lineitem_rows\":%" PRIu64 ",\"orders_rows\":%" PRIu64
          ",\"chunk_rows\":%" PRIu64 ",\"credits\":%d,",
          json_num(a, "%g", f->scale), f->lineitem_rows, f->orders_rows, f->chunk_rows, f->credits);
  fprintf(out,
          "\"memory\":{\"global_budget\":%" PRIu64 ",\"sub_budgets_sum\":%" PRIu64
          ",\"peak_held\":%" PRIu64 "},",
          f->global_budget, f->sum_sub, f->peak_held);
  fprintf(out, "\"tenants\":[");
  for (int i = 0; i < f->tenants; i++) {
    const eg_tenant_figures* t = &f->t[i];
    fprintf(
        out,
        "%s{\"id\":%d,\"device\":%d,\"kind\":\"%s\",\"sms\":%u,\"isolated\":%s,\"queries\":%" PRIu64
        ",\"rows\":%" PRIu64 ",\"bytes_scanned\":%" PRIu64 ",\"chunks\":%" PRIu64
        ",\"seconds\":%s,\"rows_per_s\":%s,\"gb_per_s\":%s,",
        i ? "," : "", i, t->device, t->interactive ? "interactive" : "batch", t->sms,
        t->isolated ? "true" : "false", t->queries, t->rows, t->bytes, t->chunks,
        json_num(a, "%.6f", t->seconds), json_num(b, "%.1f", t->rows_per_s),
        json_num(c, "%.4f", t->gb_per_s));
    lat_json(out, "alone", &t->alone);
    fputc(',', out);
    lat_json(out, "load", &t->load);
    fprintf(out,
            ",\"mem_high\":%" PRIu64 ",\"sub_budget\":%" PRIu64 ",\"over_budget_retries\":%" PRIu64
            ",\"held_back\":%" PRIu64 "}",
            t->mem_high, t->sub_budget, t->retries, t->held_back);
  }
  fprintf(out, "],\"devices\":[");
  for (int i = 0; i < f->devices; i++) {
    const eg_device_figures* x = &f->d[i];
    fprintf(out,
            "%s{\"index\":%d,\"ordinal\":%d,\"tenants\":%d,\"layout\":%s,\"global_budget\":%" PRIu64
            ",\"sub_budgets_sum\":%" PRIu64 ",\"peak_held\":%" PRIu64 "}",
            i ? "," : "", i, x->ordinal, x->tenants, json_quote(s, sizeof s, x->layout),
            x->global_budget, x->sum_sub, x->peak_held);
  }
  fprintf(out,
          "],\"distributed\":{\"queries\":%" PRIu64 ",\"chunks\":%" PRIu64 ",\"rows\":%" PRIu64
          ",\"device_results_checked\":%" PRIu64 ",\"seconds\":%s,\"rows_per_s\":%s,",
          f->dist.queries, f->dist.chunks, f->dist.rows, f->dist.checked,
          json_num(a, "%.6f", f->dist.seconds), json_num(b, "%.1f", f->dist.rows_per_s));
  fprintf(out,
          "\"joins\":%" PRIu64 ",\"join_rows\":%" PRIu64 ",\"shuffle_bytes\":%" PRIu64
          ",\"join_seconds\":%s,\"join_rows_per_s\":%s},",
          f->dist.joins, f->dist.join_rows, f->dist.shuffle_bytes,
          json_num(a, "%.6f", f->dist.join_seconds), json_num(b, "%.1f", f->dist.join_rows_per_s));
  fprintf(out,
          "\"checks\":{\"queries\":%" PRIu64 ",\"chunks\":%" PRIu64 ",\"mismatches\":%" PRIu64 "},",
          f->checked_queries, f->checked_chunks, f->mismatches);
  fprintf(out, "\"rank\":%d,\"nranks\":%d,\"ranks\":[", f->rank, f->nranks);
  for (int r = 0; f->nranks > 1 && r < f->nranks; r++) {
    const eg_rank_figures* x = &f->ranks[r];
    fprintf(out,
            "%s{\"rank\":%d,\"ok\":%s,\"tenant_queries\":%" PRIu64 ",\"checked_queries\":%" PRIu64
            ",\"checked_chunks\":%" PRIu64 ",\"mismatches\":%" PRIu64
            ",\"distributed\":{\"queries\":%" PRIu64 ",\"rows\":%" PRIu64
            ",\"device_results_checked\":%" PRIu64 ",\"seconds\":%s,\"joins\":%" PRIu64
            ",\"join_rows\":%" PRIu64 ",\"shuffle_bytes\":%" PRIu64 ",\"join_seconds\":%s}}",
            r ? "," : "", r, x->ok ? "true" : "false", x->tenant_queries, x->checked_queries,
            x->checked_chunks, x->mismatches, x->dist_queries, x->dist_rows, x->dist_checked,
            json_num(a, "%.6f", (double)x->dist_ns / 1e9), x->joins, x->join_rows, x->shuffle_bytes,
            json_num(b, "%.6f", (double)x->join_ns / 1e9));
  }
  fprintf(out, "],");
  fprintf(out,
          "\"use_tracking\":{\"waits_inserted\":%" PRIu64 ",\"waits_skipped_same_stream\":%" PRIu64
          ",\"waits_skipped_complete\":%" PRIu64 ",\"waits_coalesced\":%" PRIu64
          ",\"launches\":%" PRIu64 "},",
          f->blocks.waits_inserted, f->blocks.waits_skipped_same_stream,
          f->blocks.waits_skipped_complete, f->blocks.waits_coalesced, f->blocks.launches);
  fprintf(out,
          "\"queue\":{\"submitted\":%" PRIu64 ",\"issued_inline\":%" PRIu64 ",\"parked\":%" PRIu64
          ",\"device_waits\":%" PRIu64 ",\"failed\":%" PRIu64 ",\"host_hops\":%" PRIu64 "},",
          f->queue.submitted, f->queue.issued_inline, f->queue.parked, f->queue.device_waits,
          f->queue.failed, f->queue.host_hops);
  fprintf(out, "\"phases\":{\"alone_s\":%s,\"load_s\":%s,\"busy\":%s,\"thinned_streams\":%d},",
          json_num(a, "%.6f", f->alone_s), json_num(b, "%.6f", f->load_s),
          json_num(c, "%.4f", f->busy), f->thinned);
  fprintf(out, "\"scan_gb_per_s\":%s,\"copy_gb_per_s\":%s,",
          json_num(a, "%.2f", f->copy_gbs > 0 ? f->scan_gbs : NAN),
          json_num(b, "%.2f", f->copy_gbs > 0 ? f->copy_gbs : NAN));
  fprintf(out, "\"wall_s\":%s,\"ok\":%s,\"error\":%s}\n", json_num(a, "%.3f", f->wall_s),
          f->ok ? "true" : "false", json_quote(s, sizeof s, f->error));
}
