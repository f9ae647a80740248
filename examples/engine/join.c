/* join.c: the demo's distributed hash join over the job's devices (`--devices N` or `--ranks`):
 * orders joined with lineitem by order key, both shuffled by key with all-to-all. In rounds of a
 * chunk a device: generate the chunk, count its rows for each device, exchange the counts
 * (devrt_all_to_all), scatter the rows into one chunk per device, exchange them
 * (devrt_all_to_allv), then build (orders) or probe (lineitem) the device's hash table with what
 * it received. The partials are all-reduced and checked against the CPU reference on every
 * device. Owns the join's blocks; the streams are the distributed query's. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "engine.h"
#include "gen.h"

static const char* const TAG = "distributed";

/* One device's state for one join. */
typedef struct jdev {
  devrt_stream gen, work;  /* generate; everything else (use tracking orders the two) */
  devrt_block chunk;       /* the generated chunk (cap e->chunk_rows) */
  devrt_block ht, partial; /* its hash table (mask + 1 slots), its 24-word partial */
  uint64_t mask;
  devrt_block counts, recv_counts;
  uint64_t cnt[EG_MAX_RANKS * EG_MAX_DEVICES], rcnt[EG_MAX_RANKS * EG_MAX_DEVICES];
  uint64_t total[EG_AGG_WORDS];
} jdev;

static unsigned job_devices(const eg_engine* e) { return (unsigned)(e->nranks * e->nd); }

/* Copies `bytes` of host memory into block b on stream s (a tracked write), and waits. */
static int copy_in(eg_engine* e, eg_device* d, devrt_stream s, devrt_block b, const void* src,
                   size_t bytes) {
  CALL(e, "devrt_prepare_block_use", devrt_prepare_block_use(d->rt, b, s, DEVRT_ACCESS_WRITE));
  CALL(e, "devrt_memcpy_async", devrt_memcpy_async(d->rt, eg_block_ptr(e, d, b), src, bytes, s));
  CALL(e, "devrt_finish_block_use", devrt_finish_block_use(d->rt, b, s, DEVRT_ACCESS_WRITE));
  CALL(e, "devrt_stream_synchronize", devrt_stream_synchronize(d->rt, s));
  return 0;
}

static int read_back(eg_engine* e, eg_device* d, devrt_stream s, devrt_block b, void* dst,
                     size_t bytes) {
  if (eg_copy_to_host(e, d, s, b, dst, bytes)) return 1;
  CALL(e, "devrt_stream_synchronize", devrt_stream_synchronize(d->rt, s));
  return 0;
}

static devrt_block alloc(eg_engine* e, eg_device* d, devrt_stream s, size_t bytes) {
  devrt_block b = 0;
  if (devrt_block_alloc(d->rt, bytes ? bytes : 256, s, TAG, &b) != DEVRT_OK)
    eg_fail(e, "distributed join: devrt_block_alloc (%zu bytes): %s", bytes, devrt_last_error());
  return b;
}

/* Zeroes `words` of block b on stream s. */
static int zero(eg_engine* e, eg_device* d, devrt_stream s, devrt_block b, uint64_t words) {
  void* p = eg_block_ptr(e, d, b);
  uint64_t* none = NULL;
  devrt_block_use u = {b, DEVRT_ACCESS_WRITE};
  return p ? eg_dist_launch(e, d, s, EG_ZERO, (void*[]){&p, &words, &none}, &u, 1) : 1;
}

/* One round of one table (orders: build; lineitem: probe) on every local device: device i's rows
 * [first + lo_i, first + lo_i + rows_i). */
static int round_of(eg_engine* e, jdev* jd, const eg_variant* v, bool orders, const uint64_t* first,
                    const uint64_t* rows) {
  unsigned n = job_devices(e);
  uint32_t nparts = n, is_orders = orders;
  size_t rb = orders ? EG_ORD_BYTES : EG_LI_BYTES;
  uint64_t cap = e->chunk_rows, *none = NULL;
  for (int i = 0; i < e->nd; i++) { /* generate and count */
    eg_device* d = &e->devs[i];
    jdev* x = &jd[i];
    void *cp = eg_block_ptr(e, d, x->chunk), *np = eg_block_ptr(e, d, x->counts);
    devrt_block_use gu = {x->chunk, DEVRT_ACCESS_WRITE},
                    cu[] = {{x->chunk, DEVRT_ACCESS_READ}, {x->counts, DEVRT_ACCESS_WRITE}};
    if (!cp || !np || zero(e, d, x->work, x->counts, n)) return 1;
    if (rows[i] &&
        eg_dist_launch(e, d, x->gen, orders ? EG_GEN_ORD : EG_GEN_LI,
                       (void*[]){&cp, &cap, (void*)&first[i], (void*)&rows[i], &none}, &gu, 1))
      return 1;
    if (rows[i] && eg_dist_launch(e, d, x->work, EG_PART_COUNT,
                                  (void*[]){&cp, (void*)&rows[i], &nparts, &np}, cu, 2))
      return 1;
  }
  CALL(e, "devrt_group_start", devrt_group_start()); /* the counts: device j's for me */
  for (int i = 0; i < e->nd; i++)
    CALL(e, "devrt_all_to_all (counts)",
         devrt_all_to_all(e->devs[i].comm, jd[i].work, jd[i].counts, jd[i].recv_counts, 1,
                          DEVRT_UINT64));
  CALL(e, "devrt_group_end", devrt_group_end());
  devrt_block send[EG_MAX_DEVICES] = {0}, recv[EG_MAX_DEVICES] = {0}, meta[EG_MAX_DEVICES] = {0};
  size_t *so = calloc(4 * (size_t)n * (size_t)e->nd, sizeof *so), *m = calloc(3 * n, sizeof *m);
  int rc = so && m ? 0 : eg_fail(e, "distributed join: out of host memory");
  for (int i = 0; !rc && i < e->nd; i++) { /* the parts' layouts; scatter */
    eg_device* d = &e->devs[i];
    jdev* x = &jd[i];
    size_t *sc = so + 4 * (size_t)n * (size_t)i, *sof = sc + n, *rcn = sof + n, *rof = rcn + n;
    size_t sb = 0, rbytes = 0;
    rc = read_back(e, d, x->work, x->counts, x->cnt, n * 8) ||
         read_back(e, d, x->work, x->recv_counts, x->rcnt, n * 8);
    for (unsigned j = 0; !rc && j < n; j++) {
      sof[j] = sb, sc[j] = rb * eg_part_cap(x->cnt[j]), sb += sc[j];
      m[2 * j] = sof[j], m[2 * j + 1] = eg_part_cap(x->cnt[j]), m[2 * n + j] = 0;
      rof[j] = rbytes, rcn[j] = rb * eg_part_cap(x->rcnt[j]), rbytes += rcn[j];
    }
    if (rc || !(send[i] = alloc(e, d, x->work, sb)) || !(recv[i] = alloc(e, d, x->work, rbytes)) ||
        !(meta[i] = alloc(e, d, x->work, 3 * n * 8)) ||
        copy_in(e, d, x->work, meta[i], m, 3 * n * 8)) {
      rc = 1;
      break;
    }
    void *cp = eg_block_ptr(e, d, x->chunk), *mp = eg_block_ptr(e, d, meta[i]),
         *sp = eg_block_ptr(e, d, send[i]);
    devrt_block_use su[] = {{x->chunk, DEVRT_ACCESS_READ},
                            {meta[i], DEVRT_ACCESS_READ_WRITE},
                            {send[i], DEVRT_ACCESS_WRITE}};
    if (rows[i])
      rc = eg_dist_launch(e, d, x->work, EG_PART_SCATTER,
                          (void*[]){&cp, &cap, (void*)&rows[i], &is_orders, &nparts, &mp, &sp}, su,
                          3);
    e->f->dist.shuffle_bytes += sb;
  }
  if (!rc) { /* the rows: part j to device j */
    devrt_status st = devrt_group_start();
    for (int i = 0; i < e->nd && st == DEVRT_OK; i++) {
      size_t* sc = so + 4 * (size_t)n * (size_t)i;
      st = devrt_all_to_allv(e->devs[i].comm, jd[i].work, send[i], sc, sc + n, recv[i], sc + 2 * n,
                             sc + 3 * n, DEVRT_UINT8);
    }
    devrt_status end = devrt_group_end();
    if (st != DEVRT_OK || end != DEVRT_OK)
      rc = eg_fail(e, "distributed join: devrt_all_to_allv: %s", devrt_last_error());
  }
  for (int i = 0; !rc && i < e->nd; i++) { /* build or probe with every part received */
    eg_device* d = &e->devs[i];
    jdev* x = &jd[i];
    size_t* rof = so + 4 * (size_t)n * (size_t)i + 3 * n;
    void *hp = eg_block_ptr(e, d, x->ht), *pp = eg_block_ptr(e, d, x->partial);
    for (unsigned j = 0; !rc && j < n; j++) {
      if (!x->rcnt[j]) continue;
      uint64_t pcap = eg_part_cap(x->rcnt[j]);
      void* rp = (char*)eg_block_ptr(e, d, recv[i]) + rof[j];
      if (orders) {
        devrt_block_use u[] = {{recv[i], DEVRT_ACCESS_READ}, {x->ht, DEVRT_ACCESS_READ_WRITE}};
        rc = eg_dist_launch(
            e, d, x->work, EG_BUILD,
            (void*[]){&rp, &pcap, &x->rcnt[j], (void*)&v->d0, (void*)&v->d1, &hp, &x->mask, &none},
            u, 2);
      } else {
        devrt_block_use u[] = {{recv[i], DEVRT_ACCESS_READ},
                               {x->ht, DEVRT_ACCESS_READ},
                               {x->partial, DEVRT_ACCESS_READ_WRITE}};
        rc = eg_dist_launch(
            e, d, x->work, EG_PROBE,
            (void*[]){&rp, &pcap, &x->rcnt[j], (void*)&v->s0, &hp, &x->mask, &pp, &none}, u, 3);
      }
      e->f->dist.join_rows += x->rcnt[j];
    }
  }
  for (int i = 0; i < e->nd; i++) { /* deferred behind the work that uses them */
    devrt_block left[] = {send[i], recv[i], meta[i]};
    for (int k = 0; k < 3; k++)
      if (left[k]) devrt_block_free(e->devs[i].rt, left[k]);
  }
  free(so), free(m);
  return rc;
}

/* One table in rounds of a chunk a device: the job's device g takes rows [total*g/n,
 * total*(g+1)/n) of [first, first + total). Every device runs every round (a device with no rows
 * left sends empty parts), since each round's exchanges need all. */
static int table(eg_engine* e, jdev* jd, const eg_variant* v, bool orders) {
  unsigned n = job_devices(e);
  uint64_t total = orders ? v->orows : v->rows, base = orders ? v->ofirst : v->first;
  uint64_t per = (total + n - 1) / n, rounds = (per + e->chunk_rows - 1) / e->chunk_rows;
  for (uint64_t k = 0; k < rounds; k++) {
    uint64_t first[EG_MAX_DEVICES], rows[EG_MAX_DEVICES];
    for (int i = 0; i < e->nd; i++) {
      uint64_t g = (uint64_t)e->rank * (uint64_t)e->nd + (uint64_t)i;
      uint64_t lo = total * g / n, hi = total * (g + 1) / n, at = lo + k * e->chunk_rows;
      first[i] = base + at;
      rows[i] = at >= hi ? 0 : hi - at < e->chunk_rows ? hi - at : e->chunk_rows;
    }
    if (round_of(e, jd, v, orders, first, rows)) return 1;
  }
  return 0;
}

int eg_dist_join(eg_engine* e, const devrt_stream* gen, const devrt_stream* work,
                 const eg_variant* v, uint32_t query) {
  jdev jd[EG_MAX_DEVICES];
  memset(jd, 0, sizeof jd);
  unsigned n = job_devices(e);
  uint64_t slots = 1024;
  while (slots < 2 * v->passing_orders + 1) slots *= 2;
  int rc = 0;
  for (int i = 0; i < e->nd && !rc; i++) {
    eg_device* d = &e->devs[i];
    jdev* x = &jd[i];
    x->gen = gen[i], x->work = work[i], x->mask = slots - 1;
    size_t chunk = (size_t)e->chunk_rows * EG_LI_BYTES; /* room for either table's chunk */
    rc = !(x->chunk = alloc(e, d, x->gen, chunk)) || !(x->ht = alloc(e, d, x->work, slots * 8)) ||
         !(x->partial = alloc(e, d, x->work, EG_AGG_WORDS * 8)) ||
         !(x->counts = alloc(e, d, x->work, n * 8)) ||
         !(x->recv_counts = alloc(e, d, x->work, n * 8)) || zero(e, d, x->work, x->ht, slots) ||
         zero(e, d, x->work, x->partial, EG_AGG_WORDS);
  }
  if (!rc) rc = table(e, jd, v, true) || table(e, jd, v, false);
  if (!rc) { /* the partials combined, then every device's copy checked */
    CALL(e, "devrt_group_start", devrt_group_start());
    devrt_status st = DEVRT_OK;
    for (int i = 0; i < e->nd && st == DEVRT_OK; i++)
      st = devrt_all_reduce(e->devs[i].comm, jd[i].work, jd[i].partial, jd[i].partial, EG_AGG_WORDS,
                            DEVRT_UINT64, DEVRT_SUM);
    devrt_status end = devrt_group_end();
    if (st != DEVRT_OK || end != DEVRT_OK)
      rc = eg_fail(e, "distributed join %" PRIu32 ": devrt_all_reduce: %s", query,
                   devrt_last_error());
  }
  for (int i = 0; !rc && i < e->nd; i++) {
    rc = read_back(e, &e->devs[i], jd[i].work, jd[i].partial, jd[i].total, sizeof jd[i].total);
    e->f->dist.checked++;
    if (!rc) rc = eg_check_total(e, v, query, e->rank * e->nd + i, jd[i].total);
  }
  for (int i = 0; i < e->nd; i++) {
    devrt_block left[] = {jd[i].chunk, jd[i].ht, jd[i].partial, jd[i].counts, jd[i].recv_counts};
    for (int k = 0; k < 5; k++)
      if (left[k]) devrt_block_free(e->devs[i].rt, left[k]);
  }
  if (!rc) e->f->dist.joins++;
  return rc;
}
