/* bench_multi.c: `devrt bench multi`: two devices (ordinals N and N+1; two host devices on the
 * host backend) against the raw calls their work stands for: a semaphore chain hopping between
 * the devices vs an event ping-pong across them, a tracked peer copy vs cuMemcpyPeerAsync, and a
 * tracked all-reduce (grouped over the devices) vs the same NCCL calls raw at 1 KiB and 1 MiB
 * (issued back to back, and each waited for: its latency) and 256 MiB, and a tracked all-to-all
 * (a shuffle of 64 MiB a device) vs NCCL's sends and receives raw over the same buffers. One
 * device: the cross-device rows are left out and the collectives run on one rank. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include "bench.h"
#include "json.h"
#include "runtime/runtime.h"
#include "multi/nccl.h"

#define BENCH_SUITE "multi"
#define ELEMS 32u /* the hop's tiny kernel: devrt_fill_u32 over ELEMS u32s */
#define HOPS 200  /* chain steps per round */

typedef struct dev {
  devrt_runtime* rt;
  devrt_stream st;
  dv_stream* ds;
  devrt_module* mod;
  devrt_launch_desc desc; /* the tiny kernel, no uses */
  void* out;
  void* args[3];
  dv_module* rmod;
  dv_kernel* rk;
  dv_event* ev;
  devrt_comm* comm;
  dv_nccl_comm_t raw;
  devrt_block ar;
  void* arp;
  devrt_block a2a[2]; /* the all-to-all's send and recv */
  char* a2ap[2];
} dev;

typedef struct mctx {
  dev d[2];
  int ndev;
  bool host;
  uint32_t value;
  uint64_t n;
  devrt_semaphore* s; /* of d[0]; both devices' submissions wait on it and signal it */
  uint64_t sv;
  devrt_block x, y; /* the copy: d[0]'s x into d[1]'s y, on d[1]'s stream */
  void *xp, *yp;
  size_t bytes;
  const dv_nccl* lib;
  size_t count; /* the all-reduce's floats */
} mctx;

static const unsigned grid1[3] = {1, 1, 1}, block1[3] = {ELEMS, 1, 1};

static int sync_all(void* p) {
  mctx* c = p;
  for (int i = 0; i < c->ndev; i++)
    TRY("stream_synchronize", devrt_stream_synchronize(c->d[i].rt, c->d[i].st));
  return 0;
}

/* ---- the hop: step i on device i % 2 waits s >= base + i and signals s = base + i + 1 ---- */
static int d_hop(void* p, int n) {
  mctx* c = p;
  uint64_t base = c->sv;
  for (int i = 0; i < n; i++) {
    dev* d = &c->d[i & 1];
    devrt_semaphore_value w = {c->s, base + i}, s = {c->s, base + i + 1};
    devrt_submission sub = {.stream = d->st,
                            .waits = &w,
                            .nwaits = 1,
                            .signals = &s,
                            .nsignals = 1,
                            .kind = DEVRT_WORK_LAUNCH,
                            .launch = d->desc};
    TRY("devrt_queue_submit", devrt_queue_submit(d->rt, &sub));
  }
  c->sv = base + n;
  devrt_status st;
  while ((st = devrt_semaphore_wait(c->s, c->sv, 0)) == DEVRT_ERR_TIMEOUT) {}
  TRY("devrt_semaphore_wait", st);
  return 0;
}

static int r_hop(void* p, int n) { /* launch, record, the other device's stream waits */
  mctx* c = p;
  const dv_backend* be = c->d[0].rt->be;
  for (int i = 0; i < n; i++) {
    dev *d = &c->d[i & 1], *o = &c->d[(i & 1) ^ 1];
    TRY("launch", be->launch(d->ds, d->rk, grid1, block1, 0, d->args));
    TRY("event_record", be->event_record(d->ev, d->ds));
    if (i + 1 < n) TRY("stream_wait", be->stream_wait(o->ds, d->ev));
  }
  TRY("event_sync", be->event_sync(c->d[(n - 1) & 1].ev));
  return 0;
}

/* ---- the copy (the bodies end with a synchronize: the rows time bandwidth) ---- */
static int d_copy(void* p, int n) {
  mctx* c = p;
  for (int i = 0; i < n; i++)
    TRY("devrt_block_copy", devrt_block_copy(c->d[1].rt, c->d[1].st, c->y, 0, c->x, 0, c->bytes));
  TRY("stream_synchronize", devrt_stream_synchronize(c->d[1].rt, c->d[1].st));
  return 0;
}

static int r_copy(void* p, int n) {
  mctx* c = p;
  const dv_backend* be = c->d[1].rt->be;
  for (int i = 0; i < n; i++)
    TRY("memcpy_peer",
        be->memcpy_peer(c->d[1].ds, c->yp, c->d[1].rt->dev, c->xp, c->d[0].rt->dev, c->bytes));
  TRY("stream_sync", be->stream_sync(c->d[1].ds));
  return 0;
}

/* ---- the all-reduce: in place, float sums, one call per device in a group. The rate rows issue
 * n back to back and synchronize once; the latency rows wait for each before issuing the next. */
static int d_reduce_one(mctx* c) {
  TRY("devrt_group_start", devrt_group_start());
  for (int k = 0; k < c->ndev; k++)
    TRY("devrt_all_reduce", devrt_all_reduce(c->d[k].comm, c->d[k].st, c->d[k].ar, c->d[k].ar,
                                             c->count, DEVRT_FLOAT32, DEVRT_SUM));
  TRY("devrt_group_end", devrt_group_end());
  return 0;
}

/* A raw NCCL call: a failure is reported with NCCL's code and text. */
#define NCCL_TRY(l, what, comm, expr)                                                             \
  do {                                                                                            \
    dv_nccl_result r_ = (expr);                                                                   \
    if (r_) return bench_fail(BENCH_SUITE, what, dv_nccl_fail(l, r_, comm, what, "(the bench)")); \
  } while (0)

static int r_reduce_one(mctx* c) {
  const dv_nccl* l = c->lib;
  NCCL_TRY(l, "ncclGroupStart", NULL, l->GroupStart());
  for (int k = 0; k < c->ndev; k++) {
    dev* d = &c->d[k];
    NCCL_TRY(l, "ncclAllReduce", d->raw,
             l->AllReduce(d->arp, d->arp, c->count, DEVRT_FLOAT32, DEVRT_SUM, d->raw,
                          d->rt->be->stream_native(d->ds)));
  }
  NCCL_TRY(l, "ncclGroupEnd", NULL, l->GroupEnd());
  return 0;
}

static int r_sync(mctx* c) {
  for (int k = 0; k < c->ndev; k++) TRY("stream_sync", c->d[k].rt->be->stream_sync(c->d[k].ds));
  return 0;
}

static int d_reduce(void* p, int n) {
  for (int i = 0; i < n; i++)
    if (d_reduce_one(p)) return 1;
  return sync_all(p);
}

static int r_reduce(void* p, int n) {
  for (int i = 0; i < n; i++)
    if (r_reduce_one(p)) return 1;
  return r_sync(p);
}

static int d_reduce_wait(void* p, int n) {
  for (int i = 0; i < n; i++)
    if (d_reduce_one(p) || sync_all(p)) return 1;
  return 0;
}

static int r_reduce_wait(void* p, int n) {
  for (int i = 0; i < n; i++)
    if (r_reduce_one(p) || r_sync(p)) return 1;
  return 0;
}

/* ---- the all-to-all: one call per device in a group, count floats a part ---- */
static int d_shuffle(void* p, int n) {
  mctx* c = p;
  for (int i = 0; i < n; i++) {
    TRY("devrt_group_start", devrt_group_start());
    for (int k = 0; k < c->ndev; k++)
      TRY("devrt_all_to_all", devrt_all_to_all(c->d[k].comm, c->d[k].st, c->d[k].a2a[0],
                                               c->d[k].a2a[1], c->count, DEVRT_FLOAT32));
    TRY("devrt_group_end", devrt_group_end());
  }
  return sync_all(c);
}

static int r_shuffle(void* p, int n) {
  mctx* c = p;
  const dv_nccl* l = c->lib;
  size_t part = c->count * 4;
  for (int i = 0; i < n; i++) {
    NCCL_TRY(l, "ncclGroupStart", NULL, l->GroupStart());
    for (int k = 0; k < c->ndev; k++) {
      dev* d = &c->d[k];
      void* s = d->rt->be->stream_native(d->ds);
      for (int j = 0; j < c->ndev; j++) {
        NCCL_TRY(l, "ncclSend", d->raw,
                 l->Send(d->a2ap[0] + part * j, c->count, DEVRT_FLOAT32, j, d->raw, s));
        NCCL_TRY(l, "ncclRecv", d->raw,
                 l->Recv(d->a2ap[1] + part * j, c->count, DEVRT_FLOAT32, j, d->raw, s));
      }
    }
    NCCL_TRY(l, "ncclGroupEnd", NULL, l->GroupEnd());
  }
  return r_sync(c);
}

/* ---- setup ---- */
static int open_dev(mctx* c, int i, int ordinal) {
  dev* d = &c->d[i];
  devrt_config cfg;
  TRY("config_init", devrt_config_init(&cfg));
  cfg.ordinal = ordinal;
  if (cfg.host_devices < (unsigned)(ordinal | 1) + 1) /* the host backend gets two devices */
    cfg.host_devices = (unsigned)(ordinal | 1) + 1;
  TRY("runtime_create", devrt_runtime_create(&cfg, &d->rt));
  TRY("acquire", devrt_stream_acquire(d->rt, DEVRT_ACQUIRE_FAIL, &d->st));
  TRY("stream", dv_stream_get(d->rt, d->st, &d->ds, "bench multi"));
  devrt_kernel* k;
  TRY("module_load", devrt_module_load(d->rt, NULL, &d->mod));
  TRY("kernel_get", devrt_kernel_get(d->mod, "devrt_fill_u32", &k));
  TRY("pool_alloc", devrt_pool_alloc(d->rt, ELEMS * 4, d->st, &d->out));
  d->args[0] = &d->out, d->args[1] = &c->value, d->args[2] = &c->n;
  d->desc = (devrt_launch_desc){.kernel = k, .grid = {1}, .block = {ELEMS}, .args = d->args};
  TRY("module_load", d->rt->be->module_load(d->rt->dev, NULL, &d->rmod));
  TRY("kernel_get", d->rt->be->kernel_get(d->rmod, "devrt_fill_u32", &d->rk));
  TRY("event_create", d->rt->be->event_create(d->rt->dev, 0, &d->ev));
  return 0;
}

static void close_dev(dev* d) {
  if (!d->rt) return;
  if (d->st) devrt_stream_synchronize(d->rt, d->st);
  if (d->ar) devrt_block_free(d->rt, d->ar);
  for (int i = 0; i < 2; i++)
    if (d->a2a[i]) devrt_block_free(d->rt, d->a2a[i]);
  if (d->comm) devrt_comm_destroy(d->comm);
  if (d->ev) d->rt->be->event_destroy(d->rt->dev, d->ev);
  if (d->rmod) d->rt->be->module_unload(d->rt->dev, d->rmod);
  if (d->out) devrt_pool_free(d->rt, d->out, d->st);
  if (d->mod) devrt_module_unload(d->rt, d->mod);
  if (d->st) devrt_stream_synchronize(d->rt, d->st), devrt_stream_release(d->rt, d->st);
  devrt_reap_pending(d->rt, DEVRT_REAP_WAIT, NULL);
  devrt_runtime_destroy(d->rt);
}

/* The all-reduce buffers of count floats (devrt's comms and the raw ones over the same devices). */
static int reduce_setup(mctx* c, size_t count) {
  c->count = count;
  for (int k = 0; k < c->ndev; k++) {
    dev* d = &c->d[k];
    if (d->ar) TRY("block_free", devrt_block_free(d->rt, d->ar));
    d->ar = 0;
    TRY("block_alloc", devrt_block_alloc(d->rt, count * 4, d->st, "all-reduce", &d->ar));
    TRY("block_ptr", devrt_block_ptr(d->rt, d->ar, &d->arp));
    TRY("memset", devrt_memset_async(d->rt, d->arp, 0, count * 4, d->st));
  }
  return sync_all(c);
}

/* The all-to-all's buffers: `bytes` a device, in nranks parts. */
static int shuffle_setup(mctx* c, size_t bytes) {
  c->count = bytes / 4 / (size_t)c->ndev;
  for (int k = 0; k < c->ndev; k++)
    for (int i = 0; i < 2; i++) {
      dev* d = &c->d[k];
      TRY("block_alloc", devrt_block_alloc(d->rt, bytes, d->st, "all-to-all", &d->a2a[i]));
      TRY("block_ptr", devrt_block_ptr(d->rt, d->a2a[i], (void**)&d->a2ap[i]));
      TRY("memset", devrt_memset_async(d->rt, d->a2ap[i], 0, bytes, d->st));
    }
  return sync_all(c);
}

int bench_multi(const cli_opts* o) {
  mctx c;
  memset(&c, 0, sizeof c);
  c.value = 7, c.n = ELEMS;
  int rc = open_dev(&c, 0, o->ordinal);
  int count = 0;
  if (!rc) TRY("peer_count", devrt_peer_count(c.d[0].rt, &count));
  c.ndev = count > o->ordinal + 1 ? 2 : 1;
  if (!rc && c.ndev == 2) rc = open_dev(&c, 1, o->ordinal + 1);
  if (!rc && c.ndev == 2) TRY("peer_enable", devrt_peer_enable(c.d[0].rt, c.d[1].rt));
  c.host = c.d[0].rt && dv_is_host(c.d[0].rt->be);
  devrt_device_info di;
  memset(&di, 0, sizeof di);
  if (!rc) devrt_device_info_get(c.d[0].rt, &di);
  char devname[320];
  snprintf(devname, sizeof devname, "%d x %s", c.ndev, di.name);
  int rounds = o->rounds > 0 ? o->rounds : 21;
  bench_suite b;
  double copy_gbs[2] = {0, 0}, red_ratio[3] = {0, 0, 0}, lat_ratio[2] = {0, 0}, hop_ratio = 0,
         copy_ratio = 0, a2a_ratio = 0;
  static const size_t red_bytes[3] = {1024, 1 << 20, 256u << 20};
  static const char* const red_name[3] = {"all_reduce_1KiB", "all_reduce_1MiB",
                                          "all_reduce_256MiB"};
  static const char* const lat_name[2] = {"all_reduce_1KiB_latency", "all_reduce_1MiB_latency"};
  const char* skipped = NULL;
  if (!rc) {
    bench_begin(&b, o, "multi", devname, c.d[0].rt->be->name);
    if (c.ndev == 2) {
      TRY("semaphore_create", devrt_semaphore_create(c.d[0].rt, 0, &c.s));
      rc = sync_all(&c) ||
           bench_pair(&b, "sem_hop_cross_device", &c, d_hop, r_hop, sync_all, HOPS, 4 * rounds + 1);
      hop_ratio = b.devrt.median / b.raw.median;
      c.bytes = c.host ? (4u << 20) : (64u << 20);
      if (!rc) {
        TRY("block_alloc", devrt_block_alloc(c.d[0].rt, c.bytes, c.d[0].st, "x", &c.x));
        TRY("block_alloc", devrt_block_alloc(c.d[1].rt, c.bytes, c.d[1].st, "y", &c.y));
        TRY("block_ptr", devrt_block_ptr(c.d[0].rt, c.x, &c.xp));
        TRY("block_ptr", devrt_block_ptr(c.d[1].rt, c.y, &c.yp));
        rc = sync_all(&c) || bench_pair(&b, c.host ? "peer_copy_4MiB" : "peer_copy_64MiB", &c,
                                        d_copy, r_copy, sync_all, c.host ? 4 : 16, rounds);
        copy_gbs[0] = c.bytes / b.devrt.median, copy_gbs[1] = c.bytes / b.raw.median;
        copy_ratio = copy_gbs[0] / copy_gbs[1];
      }
    }
    if (!rc && c.host) {
      skipped = "the all-reduce rows need NCCL (cuda backend)";
    } else if (!rc) {
      devrt_status st = dv_nccl_get(&c.lib);
      if (st != DEVRT_OK) skipped = devrt_last_error();
      devrt_runtime* rts[2] = {c.d[0].rt, c.d[1].rt};
      devrt_comm* comms[2] = {NULL, NULL};
      if (!skipped) TRY("devrt_comms_create", devrt_comms_create((unsigned)c.ndev, rts, comms));
      int devs[2] = {c.d[0].rt->cfg.ordinal, c.ndev == 2 ? c.d[1].rt->cfg.ordinal : 0};
      dv_nccl_comm_t raw[2] = {NULL, NULL};
      if (!skipped) NCCL_TRY(c.lib, "ncclCommInitAll", NULL, c.lib->CommInitAll(raw, c.ndev, devs));
      for (int k = 0; !skipped && k < c.ndev; k++) c.d[k].comm = comms[k], c.d[k].raw = raw[k];
      static const int iters[3] = {200, 50, 4};
      for (int i = 0; !skipped && !rc && i < 3; i++) {
        rc = reduce_setup(&c, red_bytes[i] / 4) ||
             bench_pair(&b, red_name[i], &c, d_reduce, r_reduce, sync_all, iters[i],
                        i == 2 ? (rounds < 7 ? rounds : 7) : rounds);
        red_ratio[i] = b.devrt.median / b.raw.median;
        if (rc || i == 2) continue;
        rc = bench_pair(&b, lat_name[i], &c, d_reduce_wait, r_reduce_wait, sync_all, 50, rounds);
        lat_ratio[i] = b.devrt.median / b.raw.median;
      }
      if (!skipped && !rc) {
        rc = shuffle_setup(&c, 64u << 20) ||
             bench_pair(&b, "all_to_all_64MiB", &c, d_shuffle, r_shuffle, sync_all, 8, rounds);
        a2a_ratio = b.devrt.median / b.raw.median;
      }
      for (int k = 0; !skipped && k < c.ndev; k++) c.lib->CommDestroy(raw[k]);
    }
    char fields[768] = "";
    bench_cat(fields, sizeof fields,
              "\"devices\":%d,\"goals\":{\"sem_hop_ratio_max\":1.20,\"peer_copy_bandwidth_"
              "ratio_min\":0.97,\"all_reduce_small_ratio_max\":1.10,\"all_reduce_large_"
              "bandwidth_ratio_min\":0.98,\"all_to_all_bandwidth_ratio_min\":0.95}",
              c.ndev);
    if (c.ndev == 2)
      bench_cat(fields, sizeof fields,
                ",\"peer_copy_gb_per_s\":{\"devrt\":%.2f,\"raw\":%.2f,\"ratio\":%.4f}", copy_gbs[0],
                copy_gbs[1], copy_ratio);
    if (skipped) {
      char q[600];
      bench_cat(fields, sizeof fields, ",\"skipped\":%s", json_quote(q, sizeof q, skipped));
    }
    bench_end_fields(&b, fields);
    if (!o->json) {
      if (c.ndev == 2)
        printf(
            "goals: sem_hop_cross_device <= 1.20x raw (%.3f); peer copy bandwidth >= 0.97x raw "
            "(%.1f vs %.1f GB/s: %.3f)\n",
            hop_ratio, copy_gbs[0], copy_gbs[1], copy_ratio);
      else
        printf("one device: the cross-device rows need two\n");
      if (skipped)
        printf("all-reduce rows skipped: %s\n", skipped);
      else
        printf(
            "goals: all-reduce <= 1.10x raw latency at 1 KiB (%.3f; 1 MiB %.3f; issued back to "
            "back %.3f and %.3f), >= 0.98x raw bandwidth at 256 MiB (time ratio %.3f, i.e. "
            "%.3fx bandwidth)\n",
            lat_ratio[0], lat_ratio[1], red_ratio[0], red_ratio[1], red_ratio[2],
            red_ratio[2] > 0 ? 1 / red_ratio[2] : 0);
      if (!skipped)
        printf("goal: all-to-all >= 0.95x raw bandwidth at 64 MiB a device (%.3fx)\n",
               a2a_ratio > 0 ? 1 / a2a_ratio : 0);
    }
  }
  if (c.x) devrt_block_free(c.d[0].rt, c.x);
  if (c.y) devrt_block_free(c.d[1].rt, c.y);
  if (c.s) devrt_semaphore_destroy(c.s);
  if (c.ndev == 2 && c.d[1].rt) devrt_peer_disable(c.d[0].rt, c.d[1].rt);
  close_dev(&c.d[1]);
  close_dev(&c.d[0]);
  return rc ? 1 : 0;
}
