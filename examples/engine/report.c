/* report.c: `devrt demo --report DIR`: DIR/index.html, one page that opens in any browser with no
 * network: inline SVG (no scripts) of memory over time (each tenant's live bytes from the logging
 * layer, the device's pending and cached bytes, against the global budget), a timeline per stream
 * from the device stamps, the interactive tenant's latency histogram alone and under load, and
 * the final table. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "engine.h"

enum { W = 960, PLOT_W = 820, LEFT = 90, TOP = 44 };

static const char* const palette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                      "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
static const char* const stage_color[EG_NSTAGES] = {"#4e79a7", "#76b7b2", "#f28e2b",
                                                    "#59a14f", "#e15759", "#b07aa1",
                                                    "#bab0ac", "#edc948", "#9c755f"};

/* s with &, <, >, " escaped (XML and HTML text and attributes). */
static void put_text(FILE* f, const char* s) {
  for (; *s; s++) {
    if (*s == '&')
      fputs("&amp;", f);
    else if (*s == '<')
      fputs("&lt;", f);
    else if (*s == '>')
      fputs("&gt;", f);
    else if (*s == '"')
      fputs("&quot;", f);
    else
      fputc(*s, f);
  }
}

/* A step of 1, 2 or 5 times a power of ten giving at most about 6 ticks up to max. */
static double tick_step(double max) {
  if (!(max > 0)) return 1;
  double p = pow(10, floor(log10(max / 6))), steps[] = {1, 2, 5, 10};
  for (int i = 0; i < 4; i++)
    if (max / (steps[i] * p) <= 6) return steps[i] * p;
  return 10 * p;
}

static void svg_open(FILE* f, const char* id, int h, const char* title) {
  fprintf(f,
          "<h2>%s</h2>\n<svg id=\"%s\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
          "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n",
          title, id, W, h, W, h);
}

/* Axes: x from 0 to xmax (label xl, ticks in its unit), y from 0 to ymax (scaled by yscale for
 * its tick labels). */
static void axes(FILE* f, int h, double xmax, const char* xl, double ymax, double yscale,
                 const char* yl) {
  int bottom = h - 30;
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", LEFT, bottom,
          LEFT + PLOT_W, bottom);
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", LEFT, TOP, LEFT,
          bottom);
  double xs = tick_step(xmax), ys = tick_step(ymax / yscale);
  for (double x = 0; xmax > 0 && x <= xmax * 1.0001; x += xs)
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n",
            LEFT + x / xmax * PLOT_W, bottom + 14, x);
  for (double y = 0; ymax > 0 && y * yscale <= ymax * 1.0001; y += ys) {
    double py = bottom - y * yscale / ymax * (bottom - TOP);
    fprintf(f,
            "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n<line x1=\"%d\" y1=\"%.1f\" "
            "x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>\n",
            LEFT - 6, py + 4, y, LEFT, py, LEFT + PLOT_W, py);
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", LEFT + PLOT_W / 2,
          bottom + 27, xl);
  fprintf(
      f,
      "<text x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\" text-anchor=\"middle\">%s</text>\n",
      (TOP + bottom) / 2, (TOP + bottom) / 2, yl);
}

static void legend(FILE* f, int i, const char* color, const char* name, bool dashed) {
  int x = LEFT + 10 + (i % 4) * 200, y = 12 + (i / 4) * 14;
  if (dashed)
    fprintf(
        f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-dasharray=\"4 3\"/>",
        x, y - 4, x + 14, y - 4, color);
  else
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"9\" fill=\"%s\"/>", x, y - 8, color);
  fprintf(f, "<text x=\"%d\" y=\"%d\">", x + 18, y);
  put_text(f, name);
  fputs("</text>\n", f);
}

/* ---- memory over time ---- */

enum { NT_MAX = EG_MAX_TENANTS + 2, POINTS = 400 };

static void memory_chart(FILE* f, const eg_engine* e) {
  int h = 300, bottom = h - 30;
  uint64_t t0 = e->t_alone0, t1 = e->t_load1 > t0 ? e->t_load1 : t0 + 1;
  double span = (double)(t1 - t0) / 1e9, ymax = (double)e->devs[0].global_budget * 1.1;
  svg_open(f, "memory", h,
           "Memory over time: each tenant's live bytes (logging layer), the device's "
           "pending and cached bytes, against the global budget");
  axes(f, h, span, "seconds", ymax, 1 << 20, "MiB");
  /* Resampled: at each point, each tenant's last logged live figure and the last device sample,
   * stacked: tenants, then pending, then cached. */
  double y[NT_MAX][POINTS + 1];
  size_t li = 0, di = 0;
  uint64_t live[EG_MAX_TENANTS] = {0}, pend = 0, cached = 0;
  for (int p = 0; p <= POINTS; p++) {
    uint64_t t = t0 + (uint64_t)((double)(t1 - t0) * p / POINTS);
    for (; li < e->nlive && e->live[li].t <= t; li++) live[e->live[li].tenant] = e->live[li].live;
    for (; di < e->ndev && e->dev[di].t <= t; di++)
      pend = e->dev[di].pending, cached = e->dev[di].cached;
    double acc = 0;
    for (int i = 0; i < e->nt; i++) y[i][p] = acc += (double)live[i];
    y[e->nt][p] = acc += (double)pend;
    y[e->nt + 1][p] = acc += (double)cached;
  }
  for (int s = e->nt + 1; s >= 0; s--) { /* top layer first: each covers the ones below it */
    const char* color = s < e->nt ? palette[s % 10] : s == e->nt ? "#d3d3d3" : "#f0e0b0";
    fprintf(f, "<polygon fill=\"%s\" stroke=\"none\" points=\"%d,%d", color, LEFT, bottom);
    for (int p = 0; p <= POINTS; p++)
      fprintf(f, " %.1f,%.1f", LEFT + (double)p / POINTS * PLOT_W,
              bottom - y[s][p] / ymax * (bottom - TOP));
    fprintf(f, " %d,%d\"/>\n", LEFT + PLOT_W, bottom);
  }
  double by = bottom - (double)e->devs[0].global_budget / ymax * (bottom - TOP);
  fprintf(f,
          "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#c00\" "
          "stroke-dasharray=\"6 4\"/>\n",
          LEFT, by, LEFT + PLOT_W, by);
  if (e->t_load0 > t0) {
    double x = LEFT + (double)(e->t_load0 - t0) / (double)(t1 - t0) * PLOT_W;
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#666\" "
            "stroke-dasharray=\"2 2\"/><text x=\"%.1f\" y=\"%d\">batch tenants start</text>\n",
            x, TOP, x, bottom, x + 4, TOP + 10);
  }
  char name[48];
  int k = 0;
  for (int i = 0; i < e->nt; i++, k++) {
    snprintf(name, sizeof name, "tenant %d live (%s)", i, i ? "batch" : "interactive");
    legend(f, k, palette[i % 10], name, false);
  }
  legend(f, k++, "#d3d3d3", "pending (freed, not yet complete)", false);
  legend(f, k++, "#f0e0b0", "cached (caching layer)", false);
  legend(f, k, "#c00", "global budget", true);
  fputs("</svg>\n", f);
}

/* ---- the per-stream timeline ---- */

static void timeline_chart(FILE* f, const eg_engine* e) {
  uint64_t t0 = UINT64_MAX, t1 = 0;
  for (int i = 0; i < e->nt; i++)
    for (size_t r = 0; r < e->t[i].nrecs; r++) {
      const eg_launch_rec* x = &e->t[i].recs[r];
      if (!x->end) continue;
      if (x->start < t0) t0 = x->start;
      if (x->end > t1) t1 = x->end;
    }
  int row = 16, h = TOP + 20 + e->nt * (EG_STAMPED * row + 10) + 40;
  svg_open(f, "timeline", h, "Streams: each launch from its device start to its end");
  if (t1 <= t0) {
    fputs("<text x=\"100\" y=\"60\">no device stamps were read</text></svg>\n", f);
    return;
  }
  axes(f, h, (double)(t1 - t0) / 1e9, "seconds (device stamps, on the host clock)", 0, 1, "");
  double scale = PLOT_W / (double)(t1 - t0);
  for (int i = 0; i < e->nt; i++) {
    const eg_tenant* t = &e->t[i];
    int y0 = TOP + 20 + i * (EG_STAMPED * row + 10);
    for (int s = 0; s < EG_STAMPED; s++) {
      int y = y0 + s * row;
      fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">t%d %s</text>\n", LEFT - 6, y + 11, i,
              eg_stream_names[s]);
      if (t->stamp_stride[s] > 1)
        fprintf(f, "<text x=\"%d\" y=\"%d\">1 in %u</text>\n", LEFT + PLOT_W + 4, y + 11,
                t->stamp_stride[s]);
      /* Launches of one stream run in order: runs of one stage closer than half a pixel are one
       * rectangle, so the page stays small whatever the number of launches. */
      double rx0 = -1, rx1 = -1;
      int rs = -1;
      for (size_t r = 0; r <= t->nrecs; r++) {
        const eg_launch_rec* x = r < t->nrecs ? &t->recs[r] : NULL;
        if (x && (x->stream != s || !x->end)) continue;
        double a = x ? LEFT + (double)(x->start - t0) * scale : 0,
               b = x ? LEFT + (double)(x->end - t0) * scale : 0;
        if (x && x->stage == rs && a <= rx1 + 0.5) {
          if (b > rx1) rx1 = b;
          continue;
        }
        if (rs >= 0)
          fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"/>\n", rx0,
                  y, rx1 - rx0 > 0.3 ? rx1 - rx0 : 0.3, row - 3, stage_color[rs]);
        if (x) rx0 = a, rx1 = b, rs = x->stage;
      }
    }
  }
  for (int s = 0; s <= EG_ZERO; s++) /* the tenants' stages (the shuffle's are not stamped) */
    legend(f, s, stage_color[s], eg_stage_names[s], false);
  fputs("</svg>\n", f);
  if (e->f->thinned)
    fprintf(f,
            "<p id=\"thinned\">Each stream stamps %u launches (--stamps). A stream marked "
            "&ldquo;1 in N&rdquo; ran more launches than that: every Nth is drawn, evenly over "
            "the whole run, and the busy figure, counted from the stamps, is a lower bound.</p>\n",
            e->t[0].stamp_cap);
}

/* ---- the interactive tenant's latency ---- */

static void latency_chart(FILE* f, const eg_engine* e, const eg_figures* fg) {
  const eg_tenant* t = &e->t[0];
  int h = 280, bottom = h - 30, bins = 40;
  double lo = INFINITY, hi = 0;
  for (size_t k = 0; k < t->nalone; k++)
    lo = fmin(lo, t->lat_alone[k]), hi = fmax(hi, t->lat_alone[k]);
  for (size_t k = 0; k < t->nload; k++)
    lo = fmin(lo, t->lat_load[k]), hi = fmax(hi, t->lat_load[k]);
  svg_open(f, "latency", h, "Interactive tenant: query latency (submit to result on the host)");
  if (!(hi > 0)) {
    fputs("<text x=\"100\" y=\"60\">no interactive queries</text></svg>\n", f);
    return;
  }
  double l0 = log10(lo * 0.95), l1 = log10(hi * 1.05);
  unsigned count[2][64] = {{0}};
  unsigned top = 1;
  for (int s = 0; s < 2; s++) {
    const double* v = s ? t->lat_load : t->lat_alone;
    size_t n = s ? t->nload : t->nalone;
    for (size_t k = 0; k < n; k++) {
      int b = (int)((log10(v[k]) - l0) / (l1 - l0) * bins);
      b = b < 0 ? 0 : b >= bins ? bins - 1 : b;
      if (++count[s][b] > top) top = count[s][b];
    }
  }
  axes(f, h, 0, "", top, 1, "queries");
  double bw = (double)PLOT_W / bins;
  for (int b = 0; b < bins; b++)
    for (int s = 0; s < 2; s++) {
      double hh = (double)count[s][b] / top * (bottom - TOP);
      fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
              LEFT + b * bw + s * bw / 2, bottom - hh, bw / 2 - 0.5, hh, s ? "#e15759" : "#4e79a7");
    }
  for (double d = pow(10, floor(l0)); d <= pow(10, l1); d *= 10) /* decades of microseconds */
    for (int m = 1; m <= 5; m += 4) {
      double x = LEFT + (log10(d * m) - l0) / (l1 - l0) * PLOT_W;
      if (x < LEFT || x > LEFT + PLOT_W) continue;
      fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g %s</text>\n", x, bottom + 14,
              d * m >= 1000 ? d * m / 1000 : d * m, d * m >= 1000 ? "ms" : "us");
    }
  const eg_lat* l[2] = {&fg->t[0].alone, &fg->t[0].load};
  for (int s = 0; s < 2; s++) {
    if (!l[s]->n) continue;
    double x = LEFT + (log10(l[s]->p99) - l0) / (l1 - l0) * PLOT_W;
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" "
            "stroke-dasharray=\"4 3\"/>\n",
            x, TOP, x, bottom, s ? "#e15759" : "#4e79a7");
  }
  char name[64];
  snprintf(name, sizeof name, "alone: %d queries (dashed: p99)", l[0]->n);
  legend(f, 0, "#4e79a7", name, false);
  snprintf(name, sizeof name, "under load: %d queries", l[1]->n);
  legend(f, 1, "#e15759", name, false);
  fputs("</svg>\n", f);
}

/* ---- the page ---- */

static void cell(FILE* f, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void cell(FILE* f, const char* fmt, ...) {
  char buf[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fputs("<td>", f);
  put_text(f, buf);
  fputs("</td>", f);
}

/* The terminal's table (output.c), with its numbers in the same form. */
static void table(FILE* f, const eg_figures* fg) {
  fputs(
      "<h2>Tenants</h2>\n<table id=\"summary\">\n<tr><th>tenant</th><th>kind</th><th>SMs</th>"
      "<th>queries</th><th>rows/s</th><th>GB/s</th><th>p50 alone</th><th>p99 alone</th>"
      "<th>p50 load</th><th>p99 load</th><th>mem high / sub-budget</th><th>retries</th></tr>\n",
      f);
  char a[16], b[16];
  for (int i = 0; i < fg->tenants; i++) {
    const eg_tenant_figures* t = &fg->t[i];
    fputs("<tr>", f);
    cell(f, "%d", i);
    cell(f, "%s", t->interactive ? "interactive" : "batch");
    cell(f, "%u", t->sms);
    cell(f, "%" PRIu64, t->queries);
    cell(f, "%s", eg_rate(a, t->rows_per_s));
    cell(f, "%.2f", t->gb_per_s);
    cell(f, "%s", eg_us(a, &t->alone, t->alone.p50));
    cell(f, "%s", eg_us(a, &t->alone, t->alone.p99));
    cell(f, "%s", eg_us(a, &t->load, t->load.p50));
    cell(f, "%s", eg_us(a, &t->load, t->load.p99));
    cell(f, "%s / %s", eg_bytes(a, t->mem_high), eg_bytes(b, t->sub_budget));
    cell(f, "%" PRIu64, t->retries);
    fputs("</tr>\n", f);
  }
  fputs("</table>\n", f);
  char c[16];
  fprintf(f,
          "<p id=\"totals\">Checked: %" PRIu64 " queries, %" PRIu64 " chunks, %" PRIu64
          " mismatches. Use tracking: %" PRIu64 " waits inserted. Queue: %" PRIu64
          " submissions, %" PRIu64 " device waits, %" PRIu64
          " host hops. Global budget %s (sub-budgets sum to %s), peak held %s. Batch phase busy "
          "%.1f%%%s.</p>\n",
          fg->checked_queries, fg->checked_chunks, fg->mismatches, fg->blocks.waits_inserted,
          fg->queue.submitted, fg->queue.device_waits, fg->queue.host_hops,
          eg_bytes(a, fg->global_budget), eg_bytes(b, fg->sum_sub), eg_bytes(c, fg->peak_held),
          100 * fg->busy, fg->thinned ? " (streams thinned, so a lower bound)" : "");
}

int eg_write_report(eg_engine* e, const eg_figures* fg, const char* dir) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return eg_fail(e, "--report: cannot create %s: %s", dir, strerror(errno));
  char path[4096];
  snprintf(path, sizeof path, "%s/index.html", dir);
  FILE* f = fopen(path, "w");
  if (!f) return eg_fail(e, "--report: cannot write %s: %s", path, strerror(errno));
  fputs(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<title>devrt demo report</title>\n<style>body{font-family:sans-serif;margin:24px;"
      "color:#222}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
      "text-align:right}th{background:#f4f4f4}h2{font-size:16px;margin-top:28px}"
      ".ok{color:#080}.failed{color:#c00}</style></head><body>\n<h1>devrt demo</h1>\n",
      f);
  fputs("<p id=\"run\">", f);
  char line[1024];
  snprintf(line, sizeof line,
           "%s backend (%s); %d tenants on %s (%s); lineitem %" PRIu64 " rows, orders %" PRIu64
           ", chunks of %" PRIu64 " rows, %d in flight a tenant; %.2f s.",
           fg->backend, fg->device, fg->tenants, fg->mode, fg->layout, fg->lineitem_rows,
           fg->orders_rows, fg->chunk_rows, fg->credits, fg->wall_s);
  put_text(f, line);
  fprintf(f, " <b class=\"%s\" id=\"verdict\">%s</b></p>\n", fg->ok ? "ok" : "failed",
          fg->ok ? "every check passed" : "FAILED");
  table(f, fg);
  memory_chart(f, e);
  timeline_chart(f, e);
  latency_chart(f, e, fg);
  fputs("</body></html>\n", f);
  if (fclose(f) != 0) return eg_fail(e, "--report: writing %s failed: %s", path, strerror(errno));
  return 0;
}
