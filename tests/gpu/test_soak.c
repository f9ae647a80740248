/* test_soak.c: the soak. Threads run the reliability workload (tests/fault/workload.c) without
 * faults on one runtime of the backend DEVRT_BACKEND names, every result checked, for a set time
 * (each thread keeps the layout its first run made); then: the pool's reserved bytes and the
 * process's resident memory after warm-up and at the end (growth under 1%, checked on cuda for
 * runs of a minute or more), and the process's CPU while idle once the threads stopped (under 1%
 * of a core). A GPU run without a GPU exits 77 (test.h).
 * usage: test_soak [--minutes M (default 10)] [--seconds S] [--threads T (default 16)]
 *                  [--every S (progress every S seconds, default 60)]
 *                  [--report-only (growth and idle CPU reported, not checked: under a tool)] */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include "fault/workload.h"
#include "test.h"

static devrt_runtime *rt, *other;
static double deadline;
static unsigned nthreads = 16;

static double now_s(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double resident_bytes(void) {
  long pages = 0, rss = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (f && fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
  if (f) fclose(f);
  return (double)rss * (double)sysconf(_SC_PAGESIZE);
}

static double reserved_bytes(void) {
  devrt_pool_stats ps = {0};
  CHECK_OK(devrt_pool_stats_get(rt, &ps));
  return (double)ps.reserved_current;
}

typedef struct soaker {
  pthread_t th;
  wl w;
  unsigned runs;
} soaker;

static void* soak(void* arg) {
  soaker* s = arg;
  while (now_s(CLOCK_MONOTONIC) < deadline) {
    s->w.seed = s->w.seed * 31 + 1;
    wl_run(&s->w);
    s->runs++;
  }
  wl_finish(&s->w); /* the thread's layout, kept across its runs */
  return NULL;
}

int main(int argc, char** argv) {
  double seconds = 600, every = 60;
  bool resource_checks = true;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--minutes") && i + 1 < argc)
      seconds = 60 * atof(argv[++i]);
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      nthreads = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--every") && i + 1 < argc)
      every = atof(argv[++i]);
    else if (!strcmp(argv[i], "--report-only"))
      resource_checks = false;
    else {
      fprintf(stderr,
              "usage: %s [--minutes M] [--seconds S] [--threads T] [--every S] "
              "[--report-only]\n",
              argv[0]);
      return 2;
    }
  }
  if (nthreads < 1 || nthreads > 256 || seconds <= 0 || every <= 0) return 2;
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.stream_pool_size = 2 * nthreads + 8;   /* each run holds two */
  cfg.partition_streams = 8 * nthreads + 16; /* a layout's 3 partitions x 2, and 2 imports */
  rt = t_runtime_cfg(&cfg);
  cfg.stream_pool_size = nthreads + 4;
  other = t_runtime_cfg(&cfg); /* its streams are imported into rt */
  devrt_device_info di;
  REQUIRE_OK(devrt_device_info_get(rt, &di));

  soaker* s = calloc(nthreads, sizeof *s);
  double start = now_s(CLOCK_MONOTONIC), warm = seconds >= 60 ? seconds / 5 : seconds / 3;
  deadline = start + seconds;
  for (unsigned i = 0; i < nthreads; i++) {
    /* Each thread's layout is made by its first run and kept: every green context made and
     * destroyed leaks about 1.6 MB of host memory inside the driver (docs/reliability.md). */
    s[i].w = (wl){.rt = rt, .other = other, .seed = i + 1, .layout = true, .keep_layout = true};
    REQUIRE_OK(pthread_create(&s[i].th, NULL, soak, &s[i]) ? DEVRT_ERR_BACKEND_ERROR : DEVRT_OK);
  }
  t_sleep_ms((unsigned)(warm * 1000));
  double res0 = reserved_bytes(), rss0 = resident_bytes();
  for (double t = warm + every; t < seconds; t += every) { /* progress, and the figures' course */
    t_sleep_ms((unsigned)(every * 1000));
    devrt_resource* top = NULL;
    devrt_resource_figures f = {0};
    CHECK_OK(devrt_runtime_resource(rt, &top));
    CHECK_OK(devrt_resource_query(top, &f));
    printf(
        "  %4.0f s: pool reserved %.0f B, resident %.0f B; stack live %llu, pending %llu, "
        "cached %llu B\n",
        t, reserved_bytes(), resident_bytes(), (unsigned long long)f.live_bytes,
        (unsigned long long)f.pending_bytes, (unsigned long long)f.cached_bytes);
    fflush(stdout);
  }
  unsigned runs = 0, errors = 0, corruptions = 0;
  uint64_t calls = 0;
  for (unsigned i = 0; i < nthreads; i++) {
    pthread_join(s[i].th, NULL);
    runs += s[i].runs, errors += s[i].w.errors, corruptions += s[i].w.corruptions;
    calls += s[i].w.calls;
  }
  double res1 = reserved_bytes(), rss1 = resident_bytes(), ran = now_s(CLOCK_MONOTONIC) - start;
  wl w = {.rt = rt};
  wl_drained(&w, rt);
  wl_drained(&w, other);
  errors += w.errors;

  /* Idle: the runtimes are alive with nothing to do. */
  t_sleep_ms(1000);
  double cpu0 = now_s(CLOCK_PROCESS_CPUTIME_ID), wall0 = now_s(CLOCK_MONOTONIC);
  t_sleep_ms(3000);
  double idle = (now_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0) / (now_s(CLOCK_MONOTONIC) - wall0);

  /* On the host backend the pool is host memory and its figures the caching layer's high-water
   * mark, which keeps rising with the host's own scheduling delays: reported, not checked. */
  bool checked = resource_checks && seconds >= 60 && t_is_cuda(rt);
  double gres = res0 > 0 ? (res1 - res0) / res0 : 0, grss = (rss1 - rss0) / rss0;
  printf("soak: %s (%s), %u threads, %.0f s: %u runs, %llu calls, %u errors, %u corruptions\n",
         t_is_cuda(rt) ? "cuda" : "host", di.name, nthreads, ran, runs, (unsigned long long)calls,
         errors, corruptions);
  printf("pool reserved: %.0f B after warm-up (%.0f s), %.0f B at the end: %+.2f%%\n", res0, warm,
         res1, 100 * gres);
  printf("resident: %.0f B after warm-up, %.0f B at the end: %+.2f%%%s\n", rss0, rss1, 100 * grss,
         checked ? "" : " (not checked: the host backend, a run under a minute, or asked)");
  printf("idle CPU over 3 s after the threads stopped: %.3f%% of a core\n", 100 * idle);
  CHECK(runs >= nthreads && errors == 0 && corruptions == 0);
  if (checked) CHECK(gres < 0.01 && grss < 0.01);
  if (resource_checks) CHECK(idle < 0.01);
  free(s);
  CHECK_OK(devrt_runtime_destroy(other));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
