/* test_fault_sweep.c: the fault sweep. The workload (workload.c) runs on the host backend in two
 * configurations (the default stack with the caching layer and completion by blocking sync; the
 * arena leaf, completion by host functions, bounded statistics peaks; PyTorch's entry points
 * on the process-wide runtime of ordinal 0 in the same configuration), once each to count
 * every backend entry's calls, then once per injection point (every call of every entry that can
 * fail, or points spread over them), each in a process of its own with a watchdog: the call must
 * fail with a status whose message names the entry, nothing may crash or hang, the semaphores
 * behind it must fail with that root cause, and after cleanup nothing is left (bytes, blocks,
 * streams; LeakSanitizer at exit under ASan). Prints the points survived per entry.
 * usage: test_fault_sweep [MAX_POINTS (default 1000; 0: every call)] [JOBS (default 2)]
 *        test_fault_sweep --point CONFIG ENTRY N   (one point, in this process) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "backend/fault.h"
#include "fault/workload.h"

enum { WATCHDOG_S = 120, SURVIVED = 0, FAILED = 1, NOT_REACHED = 2, CONFIGS = 2 };

static devrt_status config_of(int config, devrt_config* out) {
  devrt_config cfg;
  devrt_status st = devrt_config_init(&cfg);
  cfg.backend = DEVRT_BACKEND_HOST;
  cfg.stream_pool_size = 4;
  cfg.partition_streams = 16;
  cfg.host_workers = 4;
  cfg.budget_bytes = 64ull << 20;
  cfg.wait_spin_ns = 0; /* waits poll no event while spinning: fewer calls that vary run to run */
  cfg.cache = config == 0;
  cfg.arena = config == 1;
  cfg.completion = config == 0 ? DEVRT_COMPLETION_SYNC : DEVRT_COMPLETION_HOSTFN;
  cfg.stats_peak_bound = config == 1;
  *out = cfg;
  return st;
}

static devrt_status create(int config, wl* w, devrt_runtime** out) {
  devrt_config cfg;
  devrt_status st = config_of(config, &cfg);
  if (st == DEVRT_OK) st = devrt_runtime_create(&cfg, out);
  if (st != DEVRT_OK && !strstr(devrt_last_error(), "injected fault")) {
    fprintf(stderr, "devrt_runtime_create: %s: %s\n", devrt_status_name(st), devrt_last_error());
    w->errors++;
  }
  return st;
}

/* Destroys rt after checking that it drained (the fault may fail the first attempts). */
static void destroy(wl* w, devrt_runtime* rt) {
  wl_drained(w, rt);
  devrt_status st = DEVRT_ERR_INVALID_STATE;
  for (int i = 0; i < 3 && st != DEVRT_OK; i++) st = devrt_runtime_destroy(rt);
  if (st != DEVRT_OK) {
    fprintf(stderr, "devrt_runtime_destroy: %s: %s\n", devrt_status_name(st), devrt_last_error());
    w->errors++;
  }
}

/* One run on fresh runtimes of `config`, `op`'s nth call failing (op NULL: none). Returns
 * SURVIVED, FAILED or NOT_REACHED (the call was never made). */
static int once(int config, const char* op, uint64_t nth) {
  dv_fault_enable();
  dv_op o = op ? dv_op_find(op) : DV_OP_COUNT;
  unsigned usual = dv_op_usual_failure(o);
  if (op && dv_fault_inject(o, nth, DEVRT_OK) != DEVRT_OK) return FAILED;
  wl w = {.seed = (uint32_t)nth,
          .layout = true,
          .exclusive = true,
          .fault_op = op,
          .fault_statuses = 1u << usual | 1u << DEVRT_ERR_ABORTED | 1u << DEVRT_ERR_DEVICE_LOST};
  devrt_runtime *rt = NULL, *other = NULL, *fw = NULL, *torch = NULL;
  devrt_config c0;
  if (config_of(config, &c0) || devrt_configure(0, &c0)) return FAILED; /* ordinal 0: torch's */
  if (create(config, &w, &rt) == DEVRT_OK && create(config, &w, &other) == DEVRT_OK &&
      create(config, &w, &fw) == DEVRT_OK) {
    w.rt = rt, w.other = other, w.framework = fw;
    wl_run(&w);
  }
  if (other) destroy(&w, other);
  if (rt) destroy(&w, rt);
  /* fw's streams stay imported by ordinal 0's runtime for the process: neither is destroyed */
  if (fw && devrt_runtime_get(0, &torch) == DEVRT_OK) wl_drained(&w, torch);
  if (w.errors || w.corruptions) {
    fprintf(stderr, "point %d %s#%llu: %u errors, %u corruptions\n", config, op ? op : "(none)",
            (unsigned long long)nth, w.errors, w.corruptions);
    return FAILED;
  }
  return op && dv_fault_fired() == 0 ? NOT_REACHED : SURVIVED;
}

/* The counting run of `config`, in a child: every entry's calls come back through a pipe. */
static int count_calls(int config, uint64_t calls[DV_OP_COUNT]) {
  int fd[2];
  if (pipe(fd)) return 1;
  pid_t pid = fork();
  if (pid == 0) {
    alarm(WATCHDOG_S);
    close(fd[0]);
    int rc = once(config, NULL, 0);
    uint64_t c[DV_OP_COUNT];
    for (unsigned i = 0; i < DV_OP_COUNT; i++) c[i] = dv_fault_calls((dv_op)i);
    if (write(fd[1], c, sizeof c) != (ssize_t)sizeof c) rc = FAILED;
    exit(rc);
  }
  close(fd[1]);
  ssize_t got = read(fd[0], calls, DV_OP_COUNT * sizeof calls[0]);
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return got == (ssize_t)(DV_OP_COUNT * sizeof calls[0]) && WIFEXITED(status) &&
                 WEXITSTATUS(status) == SURVIVED
             ? 0
             : 1;
}

typedef struct point {
  int config;
  dv_op op;
  uint64_t nth;
  pid_t pid;
} point;

int main(int argc, char** argv) {
  if (argc == 5 && !strcmp(argv[1], "--point")) { /* one point, in this process (debugging) */
    int rc = once(atoi(argv[2]), argv[3], strtoull(argv[4], NULL, 10));
    printf("config %s: %s call %s: %s\n", argv[2], argv[3], argv[4],
           rc == SURVIVED      ? "survived"
           : rc == NOT_REACHED ? "not reached"
                               : "FAILED");
    return rc == FAILED;
  }
  unsigned max = argc > 1 ? (unsigned)atoi(argv[1]) : 1000, jobs = argc > 2 ? atoi(argv[2]) : 2;
  if (jobs < 1) jobs = 1;
  uint64_t calls[CONFIGS][DV_OP_COUNT] = {{0}}, total = 0;
  for (int k = 0; k < CONFIGS; k++) {
    if (count_calls(k, calls[k])) {
      fprintf(stderr, "the workload failed without a fault (configuration %d)\n", k);
      return 1;
    }
    for (unsigned i = 0; i < DV_OP_COUNT; i++)
      if (dv_op_can_fail((dv_op)i)) total += calls[k][i];
  }

  /* Every call of every entry, or about `max` points spread over each entry's calls (its first
   * and last call included). */
  point* pts = calloc(total + CONFIGS * DV_OP_COUNT, sizeof *pts);
  unsigned n = 0;
  for (int k = 0; k < CONFIGS; k++)
    for (unsigned i = 0; i < DV_OP_COUNT; i++) {
      uint64_t c = calls[k][i];
      if (!dv_op_can_fail((dv_op)i) || !c) continue;
      uint64_t m = max && total > max ? (c * max + total - 1) / total : c;
      if (m < 2 && c >= 2) m = 2;
      for (uint64_t j = 0; j < m; j++)
        pts[n++] = (point){k, (dv_op)i, m == 1 ? 1 : 1 + j * (c - 1) / (m - 1), 0};
    }
  printf(
      "%llu calls of entries that can fail in %d configurations; %u injection points, %u at a "
      "time\n",
      (unsigned long long)total, CONFIGS, n, jobs);
  fflush(stdout);

  unsigned survived[DV_OP_COUNT] = {0}, missed[DV_OP_COUNT] = {0}, failed[DV_OP_COUNT] = {0},
           points[DV_OP_COUNT] = {0}, running = 0, bad = 0;
  for (unsigned next = 0, done = 0; done < n;) {
    while (running < jobs && next < n) {
      point* p = &pts[next++];
      fflush(NULL);
      if ((p->pid = fork()) == 0) {
        alarm(WATCHDOG_S);
        exit(once(p->config, dv_op_name(p->op), p->nth));
      }
      running++;
    }
    int status = 0;
    pid_t pid = wait(&status);
    unsigned i = 0;
    while (i < next && pts[i].pid != pid) i++;
    if (pid < 0 || i == next) return 1;
    running--, done++;
    point* p = &pts[i];
    points[p->op]++;
    if (WIFEXITED(status) && WEXITSTATUS(status) == SURVIVED) {
      survived[p->op]++;
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == NOT_REACHED) {
      missed[p->op]++;
    } else {
      failed[p->op]++, bad++;
      fprintf(stderr,
              "FAILED: configuration %d, %s call %llu: %s %d (rerun: %s --point %d %s %llu)\n",
              p->config, dv_op_name(p->op), (unsigned long long)p->nth,
              WIFSIGNALED(status)
                  ? (WTERMSIG(status) == SIGALRM ? "hung (watchdog), signal" : "crashed, signal")
                  : "exit",
              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), argv[0], p->config,
              dv_op_name(p->op), (unsigned long long)p->nth);
    }
  }

  printf("%-18s %8s %8s %9s %11s %7s\n", "entry", "calls", "points", "survived", "not reached",
         "failed");
  unsigned all = 0, uncalled = 0;
  for (unsigned i = 0; i < DV_OP_COUNT; i++) {
    uint64_t c = 0;
    for (int k = 0; k < CONFIGS; k++) c += calls[k][i];
    const char* why = !dv_op_can_fail((dv_op)i) ? "  (cannot fail: counted only)"
                      : !c                      ? "  (not called by the workload)"
                                                : "";
    uncalled += dv_op_can_fail((dv_op)i) && !c;
    printf("%-18s %8llu %8u %9u %11u %7u%s\n", dv_op_name((dv_op)i), (unsigned long long)c,
           points[i], survived[i], missed[i], failed[i], why);
    all += survived[i];
  }
  printf(
      "survived %u of %u injection points (not reached: the run made fewer calls of that entry "
      "than the counting run); %u failed; %u entries that can fail not called\n",
      all, n, bad, uncalled);
  free(pts);
  return bad ? 1 : 0;
}
