/* main.c: the devrt command line: `devrt info`, `devrt stats`, `devrt bench <suite>`, `devrt replay
 * LOG`; each takes --json. */
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

static int usage(FILE* f) {
  fprintf(
      f,
      "usage: devrt <command> [options]\n"
      "  info [--json] [--ordinal N]     backend chosen and why; device facts; SM split dry runs\n"
      "  stats [--json] [--ordinal N]    runs a built-in recorded workload; block tracking "
      "counters\n"
      "                                  and the resource stack's figures\n"
      "  bench device [--json] [--ordinal N] [--rounds R]\n"
      "                                  device-layer calls through devrt vs the raw calls\n"
      "  bench alloc [--json] [--ordinal N] [--rounds R]\n"
      "                                  the resource stack vs the raw pool alloc/free pair\n"
      "  bench launch [--json] [--ordinal N] [--rounds R]\n"
      "                                  recorded launches vs raw launches, one stream and across "
      "two;\n"
      "                                  fails if devrt inserts more waits than the minimum\n"
      "  bench sem [--json] [--ordinal N] [--rounds R]\n"
      "                                  semaphores and the submission queue vs raw events: "
      "GPU->GPU\n"
      "                                  hops, device->host wakes per completion mode (latency, "
      "CPU),\n"
      "                                  host signal -> parked work, 32768-step chains, idle CPU;\n"
      "                                  fails if any dependency went through the host "
      "(host_hops)\n"
      "  bench partition [--json] [--ordinal N] [--rounds R]\n"
      "                                  a latency-critical stream of small kernels beside a "
      "saturating\n"
      "                                  background kernel: in two partitions of one layout, on "
      "plain\n"
      "                                  streams (critical at high priority), and alone: critical "
      "p50/p99\n"
      "                                  and background throughput; layout create/destroy vs the "
      "driver\n"
      "                                  calls, partition stream acquire vs the runtime pool\n"
      "  demo [--tenants N] [--scale S] [--plain] [--json] [--trace FILE] [--report DIR] ...\n"
      "                                  the main job: a multi-tenant relational engine on devrt "
      "(devrt\n"
      "                                  demo --help); every result checked against a CPU "
      "reference\n"
      "  bench demo [--json] [--rounds R] [--tenants N] [--scale S] ...\n"
      "                                  the demo on partitions and on plain streams: scan speed "
      "vs a\n"
      "                                  device copy, busy fraction, isolation, memory\n"
      "  bench scale [--json] [--ordinal N] [--rounds R] [--max N]\n"
      "                                  per-call cost against the state devrt keeps (readers, "
      "streams,\n"
      "                                  waiters, tags, live blocks, parked work, leases, uses): "
      "ns per\n"
      "                                  unit at each size, largest/smallest ratio (goal <= 1.5); "
      "--max\n"
      "                                  caps the sizes\n"
      "  bench multi [--json] [--ordinal N] [--rounds R]\n"
      "                                  two devices (N, N+1): a semaphore chain hopping between "
      "them,\n"
      "                                  a tracked peer copy, tracked all-reduces (NCCL) at 1 KiB, "
      "1 MiB,\n"
      "                                  256 MiB, each vs the raw calls\n"
      "  replay LOG [--stack full|nocache|async|simple] [--rounds R] [--ordinal N] [--json]\n"
      "                                  replays an allocation log (devrt's or RMM's CSV) on "
      "one\n"
      "                                  thread against each stack (or one): ops/s, peak "
      "reserved,\n"
      "                                  peak reserved / peak live\n"
      "env: DEVRT_BACKEND=auto|cuda|host, DEVRT_STREAMS, DEVRT_STREAM_PRIORITY, "
      "DEVRT_POOL_RELEASE,\n"
      "     DEVRT_HOST_WORKERS, DEVRT_HOST_DEVICES, DEVRT_CUDA_LIBRARY, DEVRT_BUDGET, "
      "DEVRT_CACHE,\n"
      "     DEVRT_LOG, DEVRT_LOG_FORMAT, DEVRT_WAIT_SPIN_NS, DEVRT_COMPLETION\n");
  return f == stderr ? 2 : 0;
}

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help"))
    return usage(stdout);
  if (!strcmp(argv[1], "replay")) return cli_replay(argc - 1, argv + 1); /* its own options */
  if (!strcmp(argv[1], "demo")) return cli_demo(argc - 1, argv + 1);
  if (!strcmp(argv[1], "bench") && argc > 2 && !strcmp(argv[2], "demo"))
    return bench_demo(argc - 2, argv + 2);
  cli_opts o = {.ordinal = 0, .json = 0, .rounds = 0, .max = 0};
  int first = !strcmp(argv[1], "bench") ? 3 : 2;
  if (first > argc) return usage(stderr);
  for (int i = first; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) {
      o.json = 1;
    } else if (!strcmp(argv[i], "--ordinal") && i + 1 < argc) {
      if (!cli_number("devrt: --ordinal", argv[++i], 0, DEVRT_MAX_ORDINALS - 1, &o.ordinal))
        return usage(stderr);
    } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      if (!cli_number("devrt: --rounds", argv[++i], 1, INT_MAX, &o.rounds)) return usage(stderr);
    } else if (!strcmp(argv[i], "--max") && i + 1 < argc) {
      if (!cli_number("devrt: --max", argv[++i], 1, INT_MAX, &o.max)) return usage(stderr);
    } else {
      fprintf(stderr, "devrt: unknown option '%s'\n", argv[i]);
      return usage(stderr);
    }
  }
  if (!strcmp(argv[1], "info")) return cli_info(&o);
  if (!strcmp(argv[1], "stats")) return cli_stats(&o);
  if (!strcmp(argv[1], "bench")) {
    if (!strcmp(argv[2], "device")) return bench_device(&o);
    if (!strcmp(argv[2], "alloc")) return bench_alloc(&o);
    if (!strcmp(argv[2], "launch")) return bench_launch(&o);
    if (!strcmp(argv[2], "sem")) return bench_sem(&o);
    if (!strcmp(argv[2], "partition")) return bench_partition(&o);
    if (!strcmp(argv[2], "scale")) return bench_scale(&o);
    if (!strcmp(argv[2], "multi")) return bench_multi(&o);
    fprintf(stderr, "devrt: unknown bench suite '%s'\n", argv[2]);
    return usage(stderr);
  }
  fprintf(stderr, "devrt: unknown command '%s'\n", argv[1]);
  return usage(stderr);
}
