/* distributed.c: the demo's query over several devices (`devrt demo --devices N|all`, or one
 * device per process with `--ranks`, the processes a launcher started): a Q1 whose lineitem
 * chunks are split between the devices, each device summing its share into one 24-word
 * partial aggregate in a devrt block, the partials combined by devrt's all-reduce (collective.h:
 * NCCL on cuda, host collectives on the host backend), and every device's copy of the result
 * checked against the CPU reference. Owns the devices' peer links and communicators, and the
 * query's streams and blocks. Nothing in between goes through the host: the launches on the
 * generate, scan, reduce and read streams are ordered by devrt's use tracking of the blocks. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "engine.h"
#include "gen.h"

static const char* const TAG = "distributed"; /* statistics and logs: not a tenant's */

enum { GEN, SCAN, REDUCE, READ, NSTREAMS }; /* a device's streams for the query */

/* One device's part of a distributed query. */
typedef struct dist_dev {
  devrt_stream s[NSTREAMS];
  devrt_block buf[2]; /* chunk buffers, generated into in turn */
  devrt_block partial;
  uint64_t total[EG_AGG_WORDS]; /* its copy of the all-reduced result, on the host */
} dist_dev;

/* The Q1's two chunks and partial, or the join's: its chunk, hash table, partial and counts, and
 * a round's send, receive (at worst every device's whole chunk) and layouts. */
uint64_t eg_dist_bytes(const eg_engine* e) {
  uint64_t q1 = 2 * eg_charge(EG_LI_BYTES * e->chunk_rows) + eg_charge(EG_AGG_WORDS * 8);
  uint64_t n = (uint64_t)(e->nranks * e->nd), slots = 1024, chunk = EG_LI_BYTES * e->chunk_rows;
  for (int k = e->nq1; k < e->nq1 + e->njoin; k++)
    while (slots < 2 * e->var[k].passing_orders + 1) slots *= 2;
  uint64_t join = eg_charge(chunk) + eg_charge(slots * 8) + eg_charge(EG_AGG_WORDS * 8) +
                  2 * eg_charge(n * 8) + eg_charge(chunk + n * 4 * EG_LI_BYTES) +
                  eg_charge(n * (chunk + 4 * EG_LI_BYTES)) + eg_charge(3 * n * 8);
  return q1 > join ? q1 : join;
}

/* Without NCCL on the cuda backend, fails naming DEVRT_NCCL_LIBRARY (devrt's message names the
 * paths tried); else links every pair of devices (peer access) and makes one communicator each. */
int eg_dist_setup(eg_engine* e) {
  if (e->o.ranks) { /* one device, one rank of the job: the id from rank 0 (DEVRT_RENDEZVOUS) */
    CALL(e, "devrt_comm_create_from_env",
         devrt_comm_create_from_env(e->devs[0].rt, &e->devs[0].comm));
    return 0;
  }
  devrt_runtime* rts[EG_MAX_DEVICES];
  devrt_comm* comms[EG_MAX_DEVICES];
  for (int i = 0; i < e->nd; i++) rts[i] = e->devs[i].rt;
  int version = 0;
  if (devrt_comm_version(rts[0], &version) != DEVRT_OK)
    return eg_fail(e,
                   "--devices %d: the distributed query's all-reduce needs NCCL, which could not "
                   "be loaded; set DEVRT_NCCL_LIBRARY to the path of libnccl.so.2 (%s)",
                   e->nd, devrt_last_error());
  for (int i = 0; i < e->nd; i++)
    for (int j = i + 1; j < e->nd; j++)
      CALL(e, "devrt_peer_enable", devrt_peer_enable(rts[i], rts[j]));
  CALL(e, "devrt_comms_create", devrt_comms_create((unsigned)e->nd, rts, comms));
  for (int i = 0; i < e->nd; i++) e->devs[i].comm = comms[i];
  return 0;
}

int eg_dist_launch(eg_engine* e, eg_device* d, devrt_stream s, eg_stage st, void** args,
                   const devrt_block_use* uses, unsigned nuses) {
  unsigned grid = (unsigned)d->di.sm_count * (e->cuda ? 4 : 1);
  devrt_launch_desc ld = {.stream = s,
                          .kernel = d->k[st],
                          .grid = {grid ? grid : 1},
                          .block = {256},
                          .args = args,
                          .uses = uses,
                          .nuses = nuses};
  CALL(e, eg_stage_names[st], devrt_launch(d->rt, &ld));
  return 0;
}

/* Device d's share of v: chunks [k0, k1) generated into the two buffers in turn (gen stream) and
 * scanned into its partial (scan stream). Tracking orders each scan after its generate, and each
 * generate after the scan that last read its buffer. */
static int scan_share(eg_engine* e, eg_device* d, dist_dev* x, const eg_variant* v) {
  unsigned i = (unsigned)(e->rank * e->nd + d->index), n = (unsigned)(e->nranks * e->nd);
  unsigned k0 = v->nchunks * i / n, k1 = v->nchunks * (i + 1) / n; /* the job's device i of n */
  uint64_t cap = v->chunk_rows, words = EG_AGG_WORDS, *none = NULL;
  CALL(e, "devrt_block_alloc (partial)",
       devrt_block_alloc(d->rt, words * 8, x->s[SCAN], TAG, &x->partial));
  void* part = eg_block_ptr(e, d, x->partial);
  if (!part) return 1;
  devrt_block_use zu = {x->partial, DEVRT_ACCESS_WRITE};
  if (eg_dist_launch(e, d, x->s[SCAN], EG_ZERO, (void*[]){&part, &words, &none}, &zu, 1)) return 1;
  for (int b = 0; b < 2; b++)
    CALL(e, "devrt_block_alloc (chunk)",
         devrt_block_alloc(d->rt, EG_LI_BYTES * cap, x->s[GEN], TAG, &x->buf[b]));
  for (unsigned k = k0; k < k1; k++) {
    devrt_block buf = x->buf[(k - k0) % 2];
    uint64_t first = v->first + (uint64_t)k * cap;
    uint64_t rows = v->first + v->rows - first < cap ? v->first + v->rows - first : cap;
    void* cp = eg_block_ptr(e, d, buf);
    if (!cp) return 1;
    devrt_block_use gu = {buf, DEVRT_ACCESS_WRITE};
    if (eg_dist_launch(e, d, x->s[GEN], EG_GEN_LI, (void*[]){&cp, &cap, &first, &rows, &none}, &gu,
                       1))
      return 1;
    devrt_block_use su[] = {{buf, DEVRT_ACCESS_READ}, {x->partial, DEVRT_ACCESS_READ_WRITE}};
    if (eg_dist_launch(e, d, x->s[SCAN], EG_SCAN_Q1,
                       (void*[]){&cp, &cap, &rows, (void*)&v->cutoff, &part, &none}, su, 2))
      return 1;
    e->f->dist.rows += rows, e->f->dist.chunks++; /* the main thread's own */
  }
  for (int b = 0; b < 2; b++) { /* deferred behind the scans that read them */
    CALL(e, "devrt_block_free (chunk)", devrt_block_free(d->rt, x->buf[b]));
    x->buf[b] = 0;
  }
  return 0;
}

/* One distributed query of variant v: every device's share, the all-reduce of the partials (in
 * place, on each device's reduce stream, one group), then each device's result read on its read
 * stream and checked. */
static int dist_query(eg_engine* e, dist_dev* dd, const eg_variant* v, uint32_t query) {
  for (int i = 0; i < e->nd; i++)
    if (scan_share(e, &e->devs[i], &dd[i], v)) return 1;
  CALL(e, "devrt_group_start", devrt_group_start());
  devrt_status st = DEVRT_OK;
  for (int i = 0; i < e->nd && st == DEVRT_OK; i++)
    st = devrt_all_reduce(e->devs[i].comm, dd[i].s[REDUCE], dd[i].partial, dd[i].partial,
                          EG_AGG_WORDS, DEVRT_UINT64, DEVRT_SUM);
  devrt_status end = devrt_group_end();
  if (st != DEVRT_OK || end != DEVRT_OK)
    return eg_fail(e, "distributed query %" PRIu32 ": devrt_all_reduce: %s: %s", query,
                   devrt_status_name(st != DEVRT_OK ? st : end), devrt_last_error());
  for (int i = 0; i < e->nd; i++) /* the reads wait for the all-reduce by tracking */
    if (eg_copy_to_host(e, &e->devs[i], dd[i].s[READ], dd[i].partial, dd[i].total,
                        sizeof dd[i].total))
      return 1;
  for (int i = 0; i < e->nd; i++) {
    eg_device* d = &e->devs[i];
    CALL(e, "devrt_stream_synchronize", devrt_stream_synchronize(d->rt, dd[i].s[READ]));
    CALL(e, "devrt_block_free (partial)", devrt_block_free(d->rt, dd[i].partial));
    dd[i].partial = 0;
    e->f->dist.checked++;
    if (eg_check_total(e, v, query, i, dd[i].total)) return 1;
  }
  e->f->dist.queries++;
  return 0;
}

/* Every full-table Q1 variant once, as a distributed query. */
int eg_dist_run(eg_engine* e) {
  dist_dev dd[EG_MAX_DEVICES];
  memset(dd, 0, sizeof dd);
  int rc = 0;
  for (int i = 0; i < e->nd; i++) {
    /* The tenants' frees are retired, so their bytes are back under the budgets. */
    CALL(e, "devrt_reap_pending", devrt_reap_pending(e->devs[i].rt, DEVRT_REAP_WAIT, NULL));
    for (int s = 0; s < NSTREAMS; s++)
      CALL(e, "devrt_stream_acquire",
           devrt_stream_acquire(e->devs[i].rt, DEVRT_ACQUIRE_WAIT, &dd[i].s[s]));
  }
  uint64_t t0 = eg_now_ns();
  for (int q = 0; q < e->nq1 && !rc; q++) rc = dist_query(e, dd, &e->var[q], (uint32_t)q);
  eg_dist_figures* f = &e->f->dist;
  f->seconds = (double)(eg_now_ns() - t0) / 1e9;
  f->rows_per_s = f->seconds > 0 ? (double)f->rows / f->seconds : 0;
  devrt_stream gen[EG_MAX_DEVICES], work[EG_MAX_DEVICES];
  for (int i = 0; i < e->nd; i++) gen[i] = dd[i].s[GEN], work[i] = dd[i].s[SCAN];
  t0 = eg_now_ns();
  for (int q = e->nq1; q < e->nq1 + e->njoin && !rc; q++)
    rc = eg_dist_join(e, gen, work, &e->var[q], (uint32_t)q);
  f->join_seconds = (double)(eg_now_ns() - t0) / 1e9;
  f->join_rows_per_s = f->join_seconds > 0 ? (double)f->join_rows / f->join_seconds : 0;
  for (int i = 0; i < e->nd; i++) { /* after a failure too: nothing left running or allocated */
    eg_device* d = &e->devs[i];
    for (int s = 0; s < NSTREAMS; s++)
      if (dd[i].s[s] && devrt_stream_synchronize(d->rt, dd[i].s[s]) != DEVRT_OK)
        rc = eg_fail(e, "distributed: devrt_stream_synchronize: %s", devrt_last_error());
    devrt_block left[] = {dd[i].buf[0], dd[i].buf[1], dd[i].partial};
    for (int b = 0; b < 3; b++)
      if (left[b]) devrt_block_free(d->rt, left[b]);
    for (int s = 0; s < NSTREAMS; s++)
      if (dd[i].s[s]) devrt_stream_release(d->rt, dd[i].s[s]);
  }
  return rc;
}

/* --ranks: every rank's figures (its tenants' checks and its share of the distributed queries)
 * all-gathered into rank 0's report. Each rank calls it once, after its queries. */
int eg_dist_gather(eg_engine* e) {
  eg_device* d = &e->devs[0];
  eg_figures* f = e->f;
  eg_rank_figures mine = {!atomic_load(&e->failed),
                          0,
                          atomic_load(&e->checked_queries),
                          atomic_load(&e->checked_chunks),
                          atomic_load(&e->mismatches),
                          f->dist.queries,
                          f->dist.checked,
                          f->dist.rows,
                          (uint64_t)(f->dist.seconds * 1e9),
                          f->dist.joins,
                          f->dist.join_rows,
                          f->dist.shuffle_bytes,
                          (uint64_t)(f->dist.join_seconds * 1e9)};
  for (int i = 0; i < e->nt; i++) mine.tenant_queries += atomic_load(&e->t[i].queries_done);
  size_t words = sizeof mine / 8, n = (size_t)e->nranks;
  devrt_stream s;
  devrt_block b[2] = {0, 0};
  int rc = 1;
  CALL(e, "devrt_stream_acquire", devrt_stream_acquire(d->rt, DEVRT_ACQUIRE_WAIT, &s));
  if (devrt_block_alloc(d->rt, sizeof mine, s, TAG, &b[0]) == DEVRT_OK &&
      devrt_block_alloc(d->rt, sizeof mine * n, s, TAG, &b[1]) == DEVRT_OK &&
      devrt_memcpy_async(d->rt, eg_block_ptr(e, d, b[0]), &mine, sizeof mine, s) == DEVRT_OK &&
      devrt_stream_synchronize(d->rt, s) == DEVRT_OK &&
      devrt_all_gather(d->comm, s, b[0], b[1], words, DEVRT_UINT64) == DEVRT_OK)
    rc = eg_copy_to_host(e, d, s, b[1], f->ranks, sizeof mine * n);
  else
    eg_fail(e, "--ranks: gathering every rank's figures: %s", devrt_last_error());
  if (devrt_stream_synchronize(d->rt, s) != DEVRT_OK && !rc)
    rc = eg_fail(e, "--ranks: devrt_stream_synchronize: %s", devrt_last_error());
  for (int k = 0; k < 2; k++)
    if (b[k]) devrt_block_free(d->rt, b[k]);
  devrt_stream_release(d->rt, s);
  for (int r = 0; !rc && e->rank == 0 && r < e->nranks; r++) /* rank 0's verdict is the job's */
    if (!f->ranks[r].ok) rc = eg_fail(e, "rank %d failed (its own output says why)", r);
  return rc;
}
