/* cli.c: `devrt demo` (one run of the engine: the table, or --json; --trace, --report) and `devrt
 * bench demo` (runs on partitions and on plain streams, repeated: scan speed against a device
 * copy, busy fraction, isolation, memory; median and spread). Each parses its own options. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "bench.h"
#include "cli.h"
#include "engine.h"
#include "json.h"

static int usage(FILE* f, bool bench) {
  fprintf(f,
          "usage: devrt %s [options]\n"
          "  --tenants N     tenants (2..%d, default 4): tenant 0 interactive, the rest batch\n"
          "  --scale S       TPC-H scale factor, 6 M lineitem rows each (GPU 10, host 0.25)\n"
          "  --chunk ROWS    rows per chunk, rounded up to 256 (GPU 16777216, host 32768)\n"
          "  --credits N     chunks a tenant may have in flight (default 4)\n"
          "  --queries N     queries per batch tenant (host default 4)\n"
          "  --seconds S     batch tenants start queries for S seconds (GPU default 3)\n"
          "  --alone N       interactive queries before the batch tenants start (GPU 1000, host "
          "20); the first tenth warm up and are not sampled\n"
          "  --ordinal N     device ordinal\n"
          "  --graphs        the interactive tenant's queries as CUDA graph replays, captured at\n"
          "                  setup (%s)\n"
          "  --json          figures as JSON on stdout\n",
          bench ? "bench demo" : "demo", EG_MAX_TENANTS,
          bench ? "an arm beside host-issued launches, on partitions" : "default: host-issued");
  if (bench)
    fprintf(f,
            "  --rounds R      repetitions, each on partitions and on plain streams (1..64; "
            "default 5, host 3)\n");
  else
    fprintf(
        f,
        "  --devices N|all devices to spread the tenants over (default 1), from --ordinal;\n"
        "                  with several, a distributed Q1 combines them by all-reduce\n"
        "  --ranks         one rank of a job torchrun, mpirun or srun started (one device\n"
        "                  each: --ordinal + the local rank; DEVRT_RENDEZVOUS, docs/demo.md);\n"
        "                  a distributed Q1 over every rank, the report from rank 0\n"
        "  --plain         partitions of plain streams instead of green contexts\n"
        "  --quiet         no progress output or table: the verdict line alone\n"
        "  --trace FILE    Chrome trace-event JSON (Perfetto, chrome://tracing)\n"
        "  --report DIR    DIR/index.html: memory, timeline, latency, the table\n"
        "  --stamps N      launches a stream stamps for the timeline (64..4194304; GPU 262144,\n"
        "                  host 8192); beyond, every 2nd, 4th, ... evenly over the whole run\n");
  fprintf(f, "counts are decimal digits; S is a decimal number in (0, 10000]\n");
  return f == stderr ? 2 : 0;
}

/* S of --scale and --seconds: digits, optionally a point and more digits, in (0, 1e4]. */
static bool cli_decimal(const char* what, const char* v, double* out) {
  size_t n = strspn(v, "0123456789"), m = v[n] == '.' ? strspn(v + n + 1, "0123456789") : 0;
  double d = n && (!v[n] || (m && !v[n + 1 + m])) ? strtod(v, NULL) : 0;
  if (d > 0 && d <= 1e4) {
    *out = d;
    return true;
  }
  fprintf(stderr, "%s \"%s\" is not a decimal number in (0, 10000]\n", what, v);
  return false;
}

/* Makes path's folders (all of it, for --report's folder) and proves the file the run will write
 * there can be written: opened for appending, and removed again if that made it. 0, or 2 after
 * saying why. */
static int check_output(const char* opt, const char* path, bool folder) {
  char dir[4096], file[4200];
  snprintf(dir, sizeof dir, "%s", path);
  snprintf(file, sizeof file, folder ? "%s/index.html" : "%s", path);
  char* end = folder ? dir + strlen(dir) : strrchr(dir, '/');
  for (char* p = dir + 1; end && p <= end; p++) {
    if (*p && *p != '/') continue;
    char c = *p;
    *p = '\0';
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
      fprintf(stderr, "devrt demo: %s %s: cannot create %s: %s\n", opt, path, dir, strerror(errno));
      return 2;
    }
    *p = c;
  }
  bool existed = access(file, F_OK) == 0;
  FILE* f = fopen(file, "a");
  if (!f) {
    fprintf(stderr, "devrt demo: %s %s: cannot write %s: %s\n", opt, path, file, strerror(errno));
    return 2;
  }
  fclose(f);
  if (!existed) unlink(file);
  return 0;
}

/* Parses the options both commands share and those of one: 0, 1 after --help, else 2. */
static int parse(int argc, char** argv, bool bench, eg_options* o, int* rounds) {
  const char* cmd = bench ? "devrt bench demo" : "devrt demo";
  char what[64];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    struct {
      const char* name;
      int lo, hi, *out;
    } counts[] = {{"--tenants", 2, EG_MAX_TENANTS, &o->tenants},
                  {"--credits", 1, 1 << 30, &o->credits},
                  {"--queries", 1, 1 << 30, &o->queries},
                  {"--alone", 1, 1 << 30, &o->alone},
                  {"--ordinal", 0, DEVRT_MAX_ORDINALS - 1, &o->ordinal},
                  {"--chunk", 1, 1 << 30, NULL},
                  {bench ? "--rounds" : "--stamps", bench ? 1 : 64, bench ? 64 : 1 << 22,
                   bench ? rounds : &o->stamps}};
    int k = 0, n = sizeof counts / sizeof counts[0], chunk;
    while (k < n && strcmp(a, counts[k].name)) k++;
    snprintf(what, sizeof what, "%s: %s", cmd, a);
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout, bench);
      return 1;
    } else if (!strcmp(a, "--json")) {
      o->json = true;
    } else if (!strcmp(a, "--graphs")) {
      o->graphs = true;
    } else if (!bench && !strcmp(a, "--plain")) {
      o->plain = true;
    } else if (!bench && !strcmp(a, "--quiet")) {
      o->quiet = true;
    } else if (!bench && !strcmp(a, "--ranks")) {
      o->ranks = true;
    } else if (k < n || !strcmp(a, "--scale") || !strcmp(a, "--seconds") ||
               (!bench &&
                (!strcmp(a, "--devices") || !strcmp(a, "--trace") || !strcmp(a, "--report")))) {
      if (!v) {
        fprintf(stderr, "%s: no value after %s (%s --help lists the options)\n", cmd, a, cmd);
        return 2;
      }
      i++;
      if (!strcmp(a, "--trace") || !strcmp(a, "--report")) {
        *(!strcmp(a, "--trace") ? &o->trace_path : &o->report_dir) = v;
      } else if (!strcmp(a, "--devices")) {
        if (!strcmp(v, "all"))
          o->devices = EG_ALL_DEVICES;
        else if (!cli_number("devrt demo: --devices (all or a count)", v, 1, EG_MAX_DEVICES,
                             &o->devices))
          return 2;
      } else if (k == n) {
        if (!cli_decimal(what, v, !strcmp(a, "--scale") ? &o->scale : &o->seconds)) return 2;
      } else if (!cli_number(what, v, counts[k].lo, counts[k].hi,
                             counts[k].out ? counts[k].out : &chunk)) {
        return 2;
      } else if (!counts[k].out) {
        o->chunk_rows = (uint64_t)chunk;
      }
    } else {
      fprintf(stderr, "%s: unknown option '%s' (%s --help lists the options)\n", cmd, a, cmd);
      return 2;
    }
  }
  if (o->ranks && o->devices != 0 && o->devices != 1) {
    fprintf(stderr, "%s: --ranks runs one device per rank; --devices cannot be added\n", cmd);
    return 2;
  }
  if (o->trace_path && check_output("--trace", o->trace_path, false)) return 2;
  if (o->report_dir && check_output("--report", o->report_dir, true)) return 2;
  return 0;
}

int cli_demo(int argc, char** argv) {
  eg_options o = {0};
  int rounds = 0, rc = parse(argc, argv, false, &o, &rounds);
  if (rc) return rc == 1 ? 0 : rc;
  o.progress = !o.quiet && isatty(STDERR_FILENO);
  eg_figures* f = malloc(sizeof *f);
  if (!f) return 1;
  rc = eg_run(&o, f);
  if (f->rank > 0) /* --ranks: rank 0 reports every rank's figures; the others their failure */
    fprintf(stderr, f->ok ? "" : "devrt demo: rank %d: FAILED: %s\n", f->rank, f->error);
  else if (o.json)
    eg_print_json(f, stdout);
  else if (!f->started) /* nothing ran: no table of zeros, the reason alone */
    fprintf(stderr, "devrt demo: cannot run: %s\n", f->error);
  else if (!o.quiet)
    eg_print_table(f, stdout);
  else
    eg_print_verdict(f, f->ok ? stdout : stderr);
  free(f);
  return rc;
}

/* ---- bench demo ---- */

enum {
  F_SCAN,
  F_COPY,
  F_RATIO,
  F_BUSY,
  F_BUSY_PLAIN,
  F_ISO,
  F_ISO_PLAIN,
  F_PEAK,
  F_PEAK_PLAIN,
  F_TENANT,
  F_RETRIES,
  F_P50_ALONE, /* the interactive tenant's latency on partitions, host-issued (us) */
  F_P99_ALONE,
  F_P50_LOAD,
  F_P99_LOAD,
  F_G_P50_ALONE, /* the same with --graphs: its queries as graph replays */
  F_G_P99_ALONE,
  F_G_P50_LOAD,
  F_G_P99_LOAD,
  F_ISO_GRAPHS,
  NF
};
enum { NF_HOST = F_G_P50_ALONE }; /* the figures of a run without --graphs */
static const char* const fig_names[NF] = {"scan_gb_per_s",
                                          "copy_gb_per_s",
                                          "scan_over_copy",
                                          "busy",
                                          "busy_plain",
                                          "isolation",
                                          "isolation_plain",
                                          "peak_over_budget",
                                          "peak_over_budget_plain",
                                          "tenant_high_over_sub",
                                          "over_budget_retries",
                                          "interactive_p50_alone_us",
                                          "interactive_p99_alone_us",
                                          "interactive_p50_load_us",
                                          "interactive_p99_load_us",
                                          "graphs_p50_alone_us",
                                          "graphs_p99_alone_us",
                                          "graphs_p50_load_us",
                                          "graphs_p99_load_us",
                                          "isolation_graphs"};

static double iso(const eg_figures* f) {
  const eg_tenant_figures* t = &f->t[0];
  return t->alone.n && t->load.n && t->alone.p99 > 0 ? t->load.p99 / t->alone.p99 : NAN;
}

static double tenant_high(const eg_figures* f) {
  double m = 0;
  for (int i = 0; i < f->tenants; i++)
    if (f->t[i].sub_budget && (double)f->t[i].mem_high / (double)f->t[i].sub_budget > m)
      m = (double)f->t[i].mem_high / (double)f->t[i].sub_budget;
  return m;
}

static uint64_t retries(const eg_figures* f) {
  uint64_t n = 0;
  for (int i = 0; i < f->tenants; i++) n += f->t[i].retries;
  return n;
}

int bench_demo(int argc, char** argv) {
  eg_options o = {0};
  int rounds = 0, rc = parse(argc, argv, true, &o, &rounds);
  if (rc) return rc == 1 ? 0 : rc;
  o.quiet = true;
  eg_figures *fp = malloc(sizeof *fp), *fq = malloc(sizeof *fq), *fg = malloc(sizeof *fg);
  double* v[NF];
  bool have = fp && fq && fg;
  int nf = o.graphs ? NF : NF_HOST;
  for (int k = 0; k < NF; k++) have = (v[k] = calloc(64, sizeof(double))) != NULL && have;
  if (!have) return 1;
  for (int r = 0; r < (rounds ? rounds : 64) && !rc; r++) {
    eg_options p = o, q = o, g = o; /* partitions, plain streams, partitions with graphs */
    p.measure = true, q.plain = true, p.graphs = q.graphs = false;
    if (eg_run(&p, fp) || eg_run(&q, fq) || (o.graphs && eg_run(&g, fg))) {
      fprintf(stderr, "bench demo: round %d failed: %s\n", r,
              !fp->ok   ? fp->error
              : !fq->ok ? fq->error
                        : fg->error);
      rc = 1;
      break;
    }
    if (!rounds) rounds = !strcmp(fp->backend, "cuda") ? 5 : 3;
    if (rounds > 64) rounds = 64;
    double x[NF] = {fp->scan_gbs,
                    fp->copy_gbs,
                    fp->scan_gbs / fp->copy_gbs,
                    fp->busy,
                    fq->busy,
                    iso(fp),
                    iso(fq),
                    (double)fp->peak_held / (double)fp->global_budget,
                    (double)fq->peak_held / (double)fq->global_budget,
                    tenant_high(fp) > tenant_high(fq) ? tenant_high(fp) : tenant_high(fq),
                    (double)(retries(fp) + retries(fq)),
                    fp->t[0].alone.p50,
                    fp->t[0].alone.p99,
                    fp->t[0].load.p50,
                    fp->t[0].load.p99,
                    o.graphs ? fg->t[0].alone.p50 : NAN,
                    o.graphs ? fg->t[0].alone.p99 : NAN,
                    o.graphs ? fg->t[0].load.p50 : NAN,
                    o.graphs ? fg->t[0].load.p99 : NAN,
                    o.graphs ? iso(fg) : NAN};
    for (int k = 0; k < NF; k++) v[k][r] = x[k];
  }
  if (!rc) {
    bench_stat s[NF];
    for (int k = 0; k < nf; k++) s[k] = bench_stat_of(v[k], rounds);
    bool scan_ok = s[F_RATIO].median >= 0.70, busy_ok = s[F_BUSY].median >= 0.90,
         iso_ok = s[F_ISO].median <= 1.5;
    if (o.json) {
      char d[600], a[32], b[32], c[32];
      printf(
          "{\"suite\":\"demo\",\"backend\":\"%s\",\"device\":%s,\"rounds\":%d,\"tenants\":%d,"
          "\"scale\":%s,\"figures\":{",
          fp->backend, json_quote(d, sizeof d, fp->device), rounds, fp->tenants,
          json_num(a, "%g", fp->scale));
      for (int k = 0; k < nf; k++)
        printf("%s\"%s\":{\"median\":%s,\"p10\":%s,\"p90\":%s}", k ? "," : "", fig_names[k],
               json_num(a, "%.4g", s[k].median), json_num(b, "%.4g", s[k].p10),
               json_num(c, "%.4g", s[k].p90));
      printf(
          "},\"goals\":{\"scan_over_copy_min\":0.7,\"busy_min\":0.9,\"isolation_max\":1.5,"
          "\"scan_met\":%s,\"busy_met\":%s,\"isolation_met\":%s}}\n",
          scan_ok ? "true" : "false", busy_ok ? "true" : "false", iso_ok ? "true" : "false");
    } else {
#define MS(k) s[k].median, s[k].p10, s[k].p90
      printf(
          "devrt bench demo on %s (%s backend): %d tenants, scale %g, %d rounds, each on "
          "partitions and on plain streams; median [p10, p90]\n",
          fp->device, fp->backend, fp->tenants, fp->scale, rounds);
      printf(
          "scan       Q1 scan %.1f [%.1f, %.1f] GB/s, device copy %.1f [%.1f, %.1f] GB/s "
          "(read + write): %.3f [%.3f, %.3f] of the copy; goal >= 0.70: %s\n",
          MS(F_SCAN), MS(F_COPY), MS(F_RATIO), scan_ok ? "met" : "missed");
      printf(
          "busy       kernels cover %.3f [%.3f, %.3f] of the batch phase (plain streams %.3f "
          "[%.3f, %.3f]); goal >= 0.90: %s\n",
          MS(F_BUSY), MS(F_BUSY_PLAIN), busy_ok ? "met" : "missed");
      printf(
          "isolation  interactive p99 under load / alone: partitions %.2f [%.2f, %.2f], plain "
          "streams %.2f [%.2f, %.2f]; goal <= 1.5 with partitions: %s\n",
          MS(F_ISO), MS(F_ISO_PLAIN), iso_ok ? "met" : "missed");
      printf(
          "memory     peak held / global budget %.3f [%.3f, %.3f] (plain %.3f [%.3f, %.3f]); "
          "largest tenant high-water / sub-budget %.3f [%.3f, %.3f]; OVER_BUDGET retries "
          "%.0f [%.0f, %.0f] a round\n",
          MS(F_PEAK), MS(F_PEAK_PLAIN), MS(F_TENANT), MS(F_RETRIES));
      printf(
          "latency    interactive queries on partitions, host-issued: p50/p99 alone %.0f/%.0f us, "
          "under load %.0f/%.0f us\n",
          s[F_P50_ALONE].median, s[F_P99_ALONE].median, s[F_P50_LOAD].median, s[F_P99_LOAD].median);
      if (o.graphs)
        printf(
            "graphs     as graph replays: p50/p99 alone %.0f/%.0f us, under load %.0f/%.0f us; "
            "isolation %.2f [%.2f, %.2f]; p50 alone %.3fx host-issued\n",
            s[F_G_P50_ALONE].median, s[F_G_P99_ALONE].median, s[F_G_P50_LOAD].median,
            s[F_G_P99_LOAD].median, MS(F_ISO_GRAPHS),
            s[F_G_P50_ALONE].median / s[F_P50_ALONE].median);
#undef MS
    }
  }
  for (int k = 0; k < NF; k++) free(v[k]);
  free(fp), free(fq), free(fg);
  return rc;
}
