/* info.c: `devrt info`: which backend was chosen and why, the device's facts, the groups a few
 * SM split sizes would give and the partitions a few layouts would give (the driver's dry
 * runs, devrt_layout_plan_get), as text or JSON. */
#include <stdio.h>
#include "cli.h"
#include "devrt/devrt.h"
#include "json.h"

static const unsigned split_sizes[] = {8, 16, 32, 64};
#define NSPLIT (sizeof split_sizes / sizeof split_sizes[0])

/* Example layouts for a GPU, and the same shapes at the host backend's scale (a few workers). */
static const unsigned uneven_16[] = {16}, uneven_16_40[] = {16, 40}, uneven_2[] = {2},
                      uneven_2_4[] = {2, 4};
typedef struct example {
  const char* what;
  devrt_layout_spec spec;
} example;
static const example gpu_layouts[] = {
    {"2 x >=16 SMs + remainder", {.groups = 2, .min_sms = 16}},
    {"16 SMs + remainder", {.sm_counts = uneven_16, .count = 1}},
    {"16, 40 SMs, remainder merged",
     {.sm_counts = uneven_16_40, .count = 2, .remainder = DEVRT_REMAINDER_MERGE}},
    {"as many x >=8 SMs as fit", {.min_sms = 8}},
};
static const example host_layouts[] = {
    {"2 x >=2 workers + remainder", {.groups = 2, .min_sms = 2}},
    {"2 workers + remainder", {.sm_counts = uneven_2, .count = 1}},
    {"2, 4 workers, remainder merged",
     {.sm_counts = uneven_2_4, .count = 2, .remainder = DEVRT_REMAINDER_MERGE}},
    {"as many x >=1 worker as fit", {.min_sms = 1}},
};
#define NLAYOUT (sizeof gpu_layouts / sizeof gpu_layouts[0])

/* One plan: "16 16 100" (text) or "[16,16,100]" (JSON). */
static void print_plan(const devrt_layout_plan* p, int json) {
  printf(json ? "[" : "");
  for (unsigned i = 0; i < p->partitions; i++)
    printf("%s%u", i ? (json ? "," : " ") : "", p->sm_counts[i]);
  printf(json ? "]" : "");
}

/* The peer matrix: every pair of the backend's devices (up to 16), through their process-wide
 * runtimes: which can reach each other and over what link (devrt_peer_query). */
#define MAXPEER 16
typedef struct pair {
  int a, b;
  devrt_status st;
  char msg[256]; /* devrt_last_error() of a failure, kept: later calls clear it */
  devrt_peer_info pi;
} pair;

static int peer_pairs(devrt_runtime* rt, pair* out, int* ndev) {
  int n = 0, k = 0;
  if (devrt_peer_count(rt, &n) != DEVRT_OK) n = 1;
  *ndev = n = n > MAXPEER ? MAXPEER : n;
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n; b++) {
      devrt_runtime *ra, *rb;
      pair* p = &out[k++];
      p->a = a, p->b = b;
      p->st = devrt_runtime_get(a, &ra);
      if (p->st == DEVRT_OK) p->st = devrt_runtime_get(b, &rb);
      if (p->st == DEVRT_OK) p->st = devrt_peer_query(ra, rb, &p->pi);
      if (p->st != DEVRT_OK) snprintf(p->msg, sizeof p->msg, "%s", devrt_last_error());
    }
  return k;
}

int cli_info(const cli_opts* o) {
  devrt_runtime* rt;
  devrt_status s = devrt_runtime_get(o->ordinal, &rt);
  if (s != DEVRT_OK) {
    if (o->json) {
      printf("{\"error\":\"%s\",\"message\":", devrt_status_name(s));
      json_str(devrt_last_error());
      printf("}\n");
    } else
      fprintf(stderr, "devrt info: %s: %s\n", devrt_status_name(s), devrt_last_error());
    return 1;
  }
  devrt_runtime_info ri;
  devrt_device_info d;
  devrt_runtime_info_get(rt, &ri);
  devrt_device_info_get(rt, &d);
  devrt_split_result sp[NSPLIT][2];
  devrt_status ss[NSPLIT][2];
  for (unsigned i = 0; i < NSPLIT; i++)
    for (unsigned f = 0; f < 2; f++)
      ss[i][f] = d.green_contexts && split_sizes[i] <= (unsigned)d.sm_count
                     ? devrt_device_split_query(rt, split_sizes[i],
                                                f ? DEVRT_SPLIT_IGNORE_COSCHEDULING : 0, &sp[i][f])
                     : DEVRT_ERR_UNSUPPORTED;
  bool host = ri.backend == DEVRT_BACKEND_HOST; /* a device that CPU threads emulate */
  const example* layouts = host ? host_layouts : gpu_layouts;
  devrt_layout_plan lp[NLAYOUT];
  devrt_status ls[NLAYOUT];
  char lmsg[NLAYOUT][256]; /* a failure's message, kept: later calls clear it */
  for (unsigned i = 0; i < NLAYOUT; i++)
    if ((ls[i] = devrt_layout_plan_get(rt, &layouts[i].spec, &lp[i])) != DEVRT_OK)
      snprintf(lmsg[i], sizeof lmsg[i], "%s", devrt_last_error());
  static pair pairs[MAXPEER * (MAXPEER - 1) / 2];
  int ndev = 1, npairs = peer_pairs(rt, pairs, &ndev);
  if (o->json) {
    printf("{\"devrt\":\"%s\",\"built_with_cuda\":%s,\"backend\":\"%s\",\"backend_reason\":",
           devrt_version(), devrt_built_with_cuda() ? "true" : "false", ri.backend_name);
    json_str(ri.backend_reason);
    printf(",\n \"device\":{\"ordinal\":%d,\"name\":", d.ordinal);
    json_str(d.name);
    if (host)
      printf(",\"emulated\":true,\"compute_capability\":null,\"driver_version\":null");
    else
      printf(",\"emulated\":false,\"compute_capability\":\"%d.%d\",\"driver_version\":%d",
             d.cc_major, d.cc_minor, d.driver_version);
    printf(
        ",\"sm_count\":%d,"
        "\"total_memory\":%llu,\"memory_pools\":%s,\"green_contexts\":%s,"
        "\"green_ctx_streams\":%s,\"structured_split\":%s,\"min_partition_sms\":%u,\"sm_"
        "alignment\":%u,"
        "\"stream_priorities\":[%d,%d],\"stream_pool_size\":%u,\n  \"splits\":[",
        d.sm_count, (unsigned long long)d.total_memory, d.memory_pools ? "true" : "false",
        d.green_contexts ? "true" : "false", d.green_ctx_streams ? "true" : "false",
        d.structured_split ? "true" : "false", d.min_partition_sms, d.sm_alignment,
        d.priority_least, d.priority_greatest, ri.stream_pool_size);
    int first = 1;
    for (unsigned i = 0; i < NSPLIT; i++)
      for (unsigned f = 0; f < 2; f++)
        if (ss[i][f] == DEVRT_OK) {
          printf(
              "%s{\"min_sms\":%u,\"ignore_coscheduling\":%s,\"groups\":%u,\"sms_per_group\":%u,"
              "\"remainder_sms\":%u}",
              first ? "" : ",", split_sizes[i], f ? "true" : "false", sp[i][f].groups,
              sp[i][f].sms_per_group, sp[i][f].remainder_sms);
          first = 0;
        }
    printf("]},\n \"layouts\":[");
    for (unsigned i = 0; i < NLAYOUT; i++) {
      printf("%s{\"spec\":\"%s\",\"status\":\"%s\",\"isolated\":%s,\"sm_counts\":", i ? "," : "",
             layouts[i].what, devrt_status_name(ls[i]),
             ls[i] == DEVRT_OK && lp[i].isolated ? "true" : "false");
      if (ls[i] == DEVRT_OK)
        print_plan(&lp[i], 1);
      else {
        printf("[],\"message\":");
        json_str(lmsg[i]);
      }
      printf(",\"idle_sms\":%u}", ls[i] == DEVRT_OK ? lp[i].idle_sms : 0);
    }
    printf("],\n \"peers\":{\"devices\":%d,\"pairs\":[", ndev);
    for (int i = 0; i < npairs; i++) {
      const devrt_peer_info* q = &pairs[i].pi;
      printf("%s{\"a\":%d,\"b\":%d,\"status\":\"%s\"", i ? "," : "", pairs[i].a, pairs[i].b,
             devrt_status_name(pairs[i].st));
      if (pairs[i].st != DEVRT_OK) {
        printf(",\"message\":");
        json_str(pairs[i].msg);
      } else
        printf(
            ",\"can_access\":%s,\"link\":\"%s\",\"performance_rank\":%d,"
            "\"native_atomics\":%s,\"enabled\":%s",
            q->can_access ? "true" : "false", q->link, q->performance_rank,
            q->native_atomics ? "true" : "false", q->enabled ? "true" : "false");
      printf("}");
    }
    printf("]}}\n");
    return 0;
  }
  printf("devrt %s (built %s the cuda backend)\n", devrt_version(),
         devrt_built_with_cuda() ? "with" : "without");
  printf("backend: %s\n  why: %s\n", ri.backend_name, ri.backend_reason);
  printf("device %d: %s\n", d.ordinal, d.name);
  if (host) {
    printf(
        "  emulated by CPU threads: %d workers stand for SMs (DEVRT_HOST_WORKERS), streams are\n"
        "  threads, memory is host memory (%.1f GiB); stream pool %u; layouts split the workers\n",
        d.sm_count, (double)d.total_memory / (1u << 30), ri.stream_pool_size);
  } else {
    printf("  compute capability %d.%d, %d SMs, %.1f GiB, driver %d\n", d.cc_major, d.cc_minor,
           d.sm_count, (double)d.total_memory / (1u << 30), d.driver_version);
    printf("  memory pools: %s; stream priorities %d (least) .. %d (greatest); stream pool %u\n",
           d.memory_pools ? "yes" : "no", d.priority_least, d.priority_greatest,
           ri.stream_pool_size);
    printf("  green contexts: %s", d.green_contexts ? "yes" : "no");
  }
  if (!host && d.green_contexts)
    printf(" (min partition %u SMs, alignment %u; green-ctx streams %s; structured split %s)",
           d.min_partition_sms, d.sm_alignment, d.green_ctx_streams ? "yes" : "no",
           d.structured_split ? "yes" : "no (CUDA 13.1)");
  if (!host) printf("\n");
  for (unsigned i = 0; i < NSPLIT; i++)
    if (!host && ss[i][0] == DEVRT_OK) {
      printf("  split min %2u SMs -> %2u groups of %u, remainder %u", split_sizes[i],
             sp[i][0].groups, sp[i][0].sms_per_group, sp[i][0].remainder_sms);
      if (ss[i][1] == DEVRT_OK)
        printf(" (ignoring co-scheduling: %u of %u, rem %u)", sp[i][1].groups,
               sp[i][1].sms_per_group, sp[i][1].remainder_sms);
      printf("\n");
    }
  for (unsigned i = 0; i < NLAYOUT; i++) {
    printf("  layout %-30s -> ", layouts[i].what);
    if (ls[i] != DEVRT_OK)
      printf("%s: %s", devrt_status_name(ls[i]), lmsg[i]);
    else {
      print_plan(&lp[i], 0);
      if (lp[i].idle_sms) printf(", %u idle", lp[i].idle_sms);
      printf(" (catch-all %u)", lp[i].catch_all);
    }
    printf("\n");
  }
  printf("peers: %d device(s)%s\n", ndev, npairs ? " (devrt_peer_enable enables a pair)" : "");
  for (int i = 0; i < npairs; i++) {
    const devrt_peer_info* q = &pairs[i].pi;
    if (pairs[i].st != DEVRT_OK)
      printf("  %d <-> %d: %s: %s\n", pairs[i].a, pairs[i].b, devrt_status_name(pairs[i].st),
             pairs[i].msg);
    else if (q->performance_rank >= 0)
      printf("  %d <-> %d: %s, performance rank %d, native atomics %s\n", pairs[i].a, pairs[i].b,
             q->link, q->performance_rank, q->native_atomics ? "yes" : "no");
    else
      printf("  %d <-> %d: %s\n", pairs[i].a, pairs[i].b, q->link);
  }
  return 0;
}
