/* main.c: the devrt command line: `devrt info`, `devrt stats`, `devrt bench <suite>`, `devrt replay
 * LOG`, `devrt demo`; each takes --json and --help; `devrt --version`. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "core/parse.h"
#include "devrt/devrt.h"

bool cli_number(const char* what, const char* v, int lo, int hi, int* out) {
  uint64_t x;
  if (dv_parse_u64(v, strlen(v), 10, &x) && x >= (uint64_t)lo && x <= (uint64_t)hi) {
    *out = (int)x;
    return true;
  }
  fprintf(stderr, "%s \"%s\" is not a decimal number in [%d, %d]\n", what, v, lo, hi);
  return false;
}

/* text word-wrapped at 100 columns, each line indented. */
static void cli_wrap(FILE* f, const char* text, int indent) {
  int col = 0;
  for (const char* w = text; *w;) {
    int n = (int)strcspn(w, " ");
    if (col && col + 1 + n > 100) fputc('\n', f), col = 0;
    col += col ? fprintf(f, " %.*s", n, w) : fprintf(f, "%*s%.*s", indent, "", n, w);
    w += n + (w[n] == ' ');
  }
  fputc('\n', f);
}

enum { O_ORDINAL = 1, O_ROUNDS = 2, O_MAX = 4 };

/* Every command, for `devrt --help`; those with `run` parse the shared options here, the others
 * (replay, demo, bench demo) their own. */
static const struct command {
  const char *name, *args, *what;
  int (*run)(const cli_opts*);
  unsigned opts;
} commands[] = {
    {"info", "[--json] [--ordinal N]", "backend chosen and why; device facts; SM split dry runs",
     cli_info, O_ORDINAL},
    {"stats", "[--json] [--ordinal N]",
     "runs a built-in recorded workload; block tracking counters and the resource stack's figures",
     cli_stats, O_ORDINAL},
    {"bench device", "[--json] [--ordinal N] [--rounds R]",
     "device-layer calls through devrt vs the raw calls", bench_device, O_ORDINAL | O_ROUNDS},
    {"bench alloc", "[--json] [--ordinal N] [--rounds R]",
     "the resource stack vs the raw pool alloc/free pair", bench_alloc, O_ORDINAL | O_ROUNDS},
    {"bench launch", "[--json] [--ordinal N] [--rounds R]",
     "recorded launches vs raw launches, one stream and across two; fails if devrt inserts more "
     "waits than the minimum",
     bench_launch, O_ORDINAL | O_ROUNDS},
    {"bench sem", "[--json] [--ordinal N] [--rounds R]",
     "semaphores and the submission queue vs raw events: GPU->GPU hops, device->host wakes per "
     "completion mode (latency, CPU), host signal -> parked work, 32768-step chains, idle CPU; "
     "fails if any dependency went through the host (host_hops)",
     bench_sem, O_ORDINAL | O_ROUNDS},
    {"bench partition", "[--json] [--ordinal N] [--rounds R]",
     "a latency-critical stream of small kernels beside a saturating background kernel: in two "
     "partitions of one layout, on plain streams (critical at high priority), and alone: critical "
     "p50/p99 and background throughput; layout create/destroy vs the driver calls, partition "
     "stream acquire vs the runtime pool",
     bench_partition, O_ORDINAL | O_ROUNDS},
    {"bench scale", "[--json] [--ordinal N] [--rounds R] [--max N]",
     "per-call cost against the state devrt keeps (readers, streams, waiters, tags, live blocks, "
     "parked work, leases, uses): ns per unit at each size, largest/smallest ratio (goal <= 1.5)",
     bench_scale, O_ORDINAL | O_ROUNDS | O_MAX},
    {"bench multi", "[--json] [--ordinal N] [--rounds R]",
     "two devices (N, N+1): a semaphore chain hopping between them, a tracked peer copy, tracked "
     "all-reduces (NCCL) at 1 KiB, 1 MiB, 256 MiB, each vs the raw calls",
     bench_multi, O_ORDINAL | O_ROUNDS},
    {"bench graph", "[--json] [--ordinal N] [--rounds R]",
     "a captured region of 100 recorded launches replayed (devrt_graph_launch) vs the raw replay "
     "of the same launches, vs issuing the 100 recorded launches, a replay with its synchronize, "
     "and (cuda) temporaries allocated at capture vs CUDA graph memory nodes",
     bench_graph, O_ORDINAL | O_ROUNDS},
    {"bench demo", "[--json] [--rounds R] [--tenants N] [--scale S] ...",
     "the demo on partitions and on plain streams: scan speed vs a device copy, busy fraction, "
     "isolation, memory",
     NULL, 0},
    {"demo", "[--tenants N] [--scale S] [--plain] [--json] [--trace FILE] [--report DIR] ...",
     "the main job: a multi-tenant relational engine on devrt; every result checked against a CPU "
     "reference",
     NULL, 0},
    {"replay", "LOG [--stack full|nocache|async|simple] [--rounds R] [--ordinal N] [--json]",
     "replays an allocation log (devrt's or RMM's CSV) on one thread against each stack (or one): "
     "ops/s, peak reserved, peak reserved / peak live",
     NULL, 0},
};
enum { NCOMMANDS = sizeof commands / sizeof commands[0] };

/* `devrt --help` (prefix NULL), or the commands whose name starts with prefix ("bench "). */
static int usage(FILE* f, const char* prefix) {
  fprintf(f, "usage: devrt <command> [options]; devrt <command> --help; devrt --version\n");
  for (int i = 0; i < NCOMMANDS; i++) {
    if (prefix && strncmp(commands[i].name, prefix, strlen(prefix))) continue;
    fprintf(f, "  %s %s\n", commands[i].name, commands[i].args);
    cli_wrap(f, commands[i].what, 6);
  }
  if (!prefix)
    cli_wrap(f,
             "env: DEVRT_BACKEND=auto|cuda|host, DEVRT_STREAMS, DEVRT_STREAM_PRIORITY, "
             "DEVRT_POOL_RELEASE, DEVRT_HOST_WORKERS, DEVRT_HOST_DEVICES, DEVRT_CUDA_LIBRARY, "
             "DEVRT_BUDGET, DEVRT_CACHE, DEVRT_LOG, DEVRT_LOG_FORMAT, DEVRT_WAIT_SPIN_NS, "
             "DEVRT_COMPLETION (README.md)",
             0);
  return f == stderr ? 2 : 0;
}

static int help(const struct command* c) {
  printf("usage: devrt %s %s\n", c->name, c->args);
  cli_wrap(stdout, c->what, 2);
  printf("  --json        figures as one JSON document on stdout\n");
  if (c->opts & O_ORDINAL)
    printf("  --ordinal N   the device (0..%d, default 0)\n", DEVRT_MAX_ORDINALS - 1);
  if (c->opts & O_ROUNDS) printf("  --rounds R    repetitions (default: the suite's)\n");
  if (c->opts & O_MAX) printf("  --max N       caps the sizes measured (default: the suite's)\n");
  return 0;
}

static bool is_help(const char* a) { return !strcmp(a, "-h") || !strcmp(a, "--help"); }

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr, NULL);
  if (is_help(argv[1]) || !strcmp(argv[1], "help")) return usage(stdout, NULL);
  if (!strcmp(argv[1], "--version")) {
    printf("devrt %s (backends: %shost)\n", devrt_version(),
           devrt_built_with_cuda() ? "cuda, " : "");
    return 0;
  }
  if (!strcmp(argv[1], "replay")) return cli_replay(argc - 1, argv + 1); /* its own options */
  if (!strcmp(argv[1], "demo")) return cli_demo(argc - 1, argv + 1);
  bool bench = !strcmp(argv[1], "bench");
  if (bench && (argc < 3 || is_help(argv[2]))) return usage(argc < 3 ? stderr : stdout, "bench ");
  if (bench && !strcmp(argv[2], "demo")) return bench_demo(argc - 2, argv + 2);
  char name[64];
  snprintf(name, sizeof name, "%s%s%s", argv[1], bench ? " " : "", bench ? argv[2] : "");
  const struct command* c = NULL;
  for (int i = 0; i < NCOMMANDS && !c; i++)
    if (commands[i].run && !strcmp(commands[i].name, name)) c = &commands[i];
  if (!c) {
    fprintf(stderr, "devrt: unknown %s '%s' (devrt %s--help lists them)\n",
            bench ? "bench suite" : "command", bench ? argv[2] : argv[1], bench ? "bench " : "");
    return 2;
  }
  cli_opts o = {.ordinal = 0, .json = 0, .rounds = 0, .max = 0};
  char what[96];
  for (int i = bench ? 3 : 2; i < argc; i++) {
    const char* a = argv[i];
    int* num = !strcmp(a, "--ordinal") && (c->opts & O_ORDINAL) ? &o.ordinal
               : !strcmp(a, "--rounds") && (c->opts & O_ROUNDS) ? &o.rounds
               : !strcmp(a, "--max") && (c->opts & O_MAX)       ? &o.max
                                                                : NULL;
    if (is_help(a)) return help(c);
    if (!strcmp(a, "--json")) {
      o.json = 1;
    } else if (num && i + 1 < argc) {
      snprintf(what, sizeof what, "devrt %s: %s", c->name, a);
      if (!cli_number(what, argv[++i], num == &o.ordinal ? 0 : 1,
                      num == &o.ordinal ? DEVRT_MAX_ORDINALS - 1 : INT_MAX, num))
        return 2;
    } else {
      fprintf(stderr, "devrt %s: %s '%s' (devrt %s --help lists the options)\n", c->name,
              num ? "no value after" : "unknown option", a, c->name);
      return 2;
    }
  }
  return c->run(&o);
}
