/* collective.c: communicators and collectives as recorded work (devrt/collective.h). A collective
 * is a launch split in two: its blocks are pinned and its waits issued, the work is enqueued
 * (NCCL's call, several of them between ncclGroupStart and ncclGroupEnd for a group, or the host
 * backend's own version), and only then is its end marked on the blocks. The host version: each
 * rank's stream runs a host function that meets the other ranks' on the group's instance of that
 * collective; the last to arrive computes every rank's result. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../block/block.h"
#include "multi.h"

/* DV_ARG_CHECK for a call named at run time: INVALID_ARGUMENT, "<call>: <what>". */
#define CALL_CHECK(cond, call, fmt, ...) \
  if (!(cond)) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: " fmt, call, ##__VA_ARGS__)
#include "nccl.h"

#define COMM_MAGIC 0x636f6d6d756e6963ull /* "communic" */

typedef enum ckind { C_ALL_REDUCE, C_BROADCAST, C_ALL_GATHER, C_REDUCE_SCATTER } ckind;
static const char* const cname[] = {"devrt_all_reduce", "devrt_broadcast", "devrt_all_gather",
                                    "devrt_reduce_scatter"};
static const char* const nccl_name[] = {"ncclAllReduce", "ncclBroadcast", "ncclAllGather",
                                        "ncclReduceScatter"};
static const size_t dsize[DEVRT_DTYPE_COUNT_] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

/* ---- the host version ---- */

typedef struct hinst hinst;
typedef struct hrank { /* one rank's part of one collective */
  struct hgroup* g;
  hinst* in;
  const void* send;
  void* recv;
} hrank;
struct hinst { /* one collective of the group (the seq-th of each rank) */
  uint64_t seq;
  ckind kind;
  size_t count;
  devrt_dtype dt;
  devrt_redop op;
  int root, issued, arrived, left;
  bool done;
  hinst* next;
  hrank r[]; /* nranks */
};
typedef struct hgroup {
  pthread_mutex_t mu; /* everything below */
  pthread_cond_t cv;
  int nranks, joined, refs;
  devrt_comm_id id; /* devrt_comm_create's groups: the id they are registered under */
  bool registered;  /* on the pending list until every rank has joined */
  struct hgroup* next;
  hinst* insts; /* collectives some rank issued and not every rank has left */
} hgroup;

static pthread_mutex_t pending_mu = PTHREAD_MUTEX_INITIALIZER;
static hgroup* pending; /* devrt_comm_create groups still waiting for ranks (pending_mu) */

static hgroup* hgroup_new(int nranks) {
  hgroup* g = calloc(1, sizeof *g);
  if (!g) return NULL;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->nranks = nranks;
  return g;
}

static void hgroup_unref(hgroup* g) {
  pthread_mutex_lock(&g->mu);
  bool last = --g->refs == 0;
  pthread_mutex_unlock(&g->mu);
  if (!last) return;
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
  free(g);
}

/* d op= s over n elements; integers add and multiply as unsigned (wrapping, as on a GPU). */
#define COMBINE(T, U)                                                       \
  do {                                                                      \
    T* x = d;                                                               \
    const T* y = s;                                                         \
    for (size_t i = 0; i < n; i++)                                          \
      x[i] = op == DEVRT_MAX    ? (y[i] > x[i] ? y[i] : x[i])               \
             : op == DEVRT_MIN  ? (y[i] < x[i] ? y[i] : x[i])               \
             : op == DEVRT_PROD ? (T)((U)x[i] * (U)y[i])                    \
                                : (T)((U)x[i] + (U)y[i]); /* SUM and AVG */ \
  } while (0)
static void combine(void* d, const void* s, size_t n, devrt_dtype dt, devrt_redop op) {
  switch (dt) {
    case DEVRT_INT8:
      COMBINE(int8_t, uint8_t);
      break;
    case DEVRT_UINT8:
      COMBINE(uint8_t, uint8_t);
      break;
    case DEVRT_INT32:
      COMBINE(int32_t, uint32_t);
      break;
    case DEVRT_UINT32:
      COMBINE(uint32_t, uint32_t);
      break;
    case DEVRT_INT64:
      COMBINE(int64_t, uint64_t);
      break;
    case DEVRT_UINT64:
      COMBINE(uint64_t, uint64_t);
      break;
    case DEVRT_FLOAT32:
      COMBINE(float, float);
      break;
    case DEVRT_FLOAT64:
      COMBINE(double, double);
      break;
    default:
      break; /* 16-bit floats are refused before anything is issued */
  }
}
#define DIVIDE(T)                                           \
  do {                                                      \
    T* x = d;                                               \
    for (size_t i = 0; i < n; i++) x[i] = (T)(x[i] / (T)k); \
  } while (0)
static void divide(void* d, size_t n, devrt_dtype dt, int k) {
  switch (dt) {
    case DEVRT_INT8:
      DIVIDE(int8_t);
      break;
    case DEVRT_UINT8:
      DIVIDE(uint8_t);
      break;
    case DEVRT_INT32:
      DIVIDE(int32_t);
      break;
    case DEVRT_UINT32:
      DIVIDE(uint32_t);
      break;
    case DEVRT_INT64:
      DIVIDE(int64_t);
      break;
    case DEVRT_UINT64:
      DIVIDE(uint64_t);
      break;
    case DEVRT_FLOAT32:
      DIVIDE(float);
      break;
    case DEVRT_FLOAT64:
      DIVIDE(double);
      break;
    default:
      break;
  }
}

/* Every rank's result, by the last rank to arrive (g->mu held; the others wait). Results go to a
 * scratch buffer first, as a rank's recv may be its send (in place). */
static void compute(hgroup* g, hinst* in) {
  int n = g->nranks;
  size_t e = dsize[in->dt], part = in->count * e;
  size_t total = in->kind == C_ALL_GATHER ? part * (size_t)n : part;
  char* t = malloc(in->kind == C_REDUCE_SCATTER ? part * (size_t)n : total);
  if (!t) return; /* out of host memory: results stay unwritten */
  switch (in->kind) {
    case C_ALL_REDUCE:
    case C_REDUCE_SCATTER: { /* reduce-scatter: reduce all nranks parts, then rank r takes part r */
      size_t len = in->kind == C_ALL_REDUCE ? part : part * (size_t)n;
      memcpy(t, in->r[0].send, len);
      for (int k = 1; k < n; k++) combine(t, in->r[k].send, len / e, in->dt, in->op);
      if (in->op == DEVRT_AVG) divide(t, len / e, in->dt, n);
      for (int k = 0; k < n; k++)
        memcpy(in->r[k].recv, in->kind == C_ALL_REDUCE ? t : t + part * (size_t)k, part);
      break;
    }
    case C_BROADCAST:
      memcpy(t, in->r[in->root].send, part);
      for (int k = 0; k < n; k++) memcpy(in->r[k].recv, t, part);
      break;
    case C_ALL_GATHER:
      for (int k = 0; k < n; k++) memcpy(t + part * (size_t)k, in->r[k].send, part);
      for (int k = 0; k < n; k++) memcpy(in->r[k].recv, t, total);
      break;
  }
  free(t);
}

/* A rank's stream reached its part of a collective: meet the other ranks there. */
static void host_meet(void* user) {
  hrank* r = user;
  hgroup* g = r->g;
  hinst* in = r->in;
  pthread_mutex_lock(&g->mu);
  if (++in->arrived == g->nranks) {
    compute(g, in);
    in->done = true;
    pthread_cond_broadcast(&g->cv);
  }
  while (!in->done) pthread_cond_wait(&g->cv, &g->mu);
  if (++in->left == g->nranks) { /* the last one out unlinks it */
    hinst** p = &g->insts;
    while (*p != in) p = &(*p)->next;
    *p = in->next;
    free(in);
  }
  pthread_mutex_unlock(&g->mu);
}

/* ---- communicators ---- */

struct devrt_comm {
  _Atomic uint64_t magic;
  devrt_runtime* rt;
  int rank, nranks;
  dv_nccl_comm_t nccl;  /* cuda */
  hgroup* g;            /* host */
  _Atomic uint64_t seq; /* host: this rank's collectives issued (ranks meet by number) */
};

static bool is_host(devrt_runtime* rt) { return dv_is_host(rt->be); }

static bool comm_ok(devrt_comm* c) { /* acquire: pairs with the creating calls' release */
  return c && atomic_load_explicit(&c->magic, memory_order_acquire) == COMM_MAGIC;
}

static devrt_comm* comm_new(devrt_runtime* rt, int rank, int nranks) {
  devrt_comm* c = calloc(1, sizeof *c);
  if (c) c->rt = rt, c->rank = rank, c->nranks = nranks;
  return c;
}

devrt_status devrt_comm_version(devrt_runtime* rt, int* out) {
  DV_RT_CHECK(rt, "devrt_comm_version");
  DV_ARG_CHECK(out, "devrt_comm_version", "out is NULL");
  if (is_host(rt)) {
    *out = 0;
    return DEVRT_OK;
  }
  const dv_nccl* n;
  DV_CHECK(dv_nccl_get(&n));
  *out = n->version;
  return DEVRT_OK;
}

devrt_status devrt_comm_id_create(devrt_runtime* rt, devrt_comm_id* out) {
  DV_RT_CHECK(rt, "devrt_comm_id_create");
  DV_ARG_CHECK(out, "devrt_comm_id_create", "out is NULL");
  _Static_assert(sizeof(devrt_comm_id) == sizeof(dv_nccl_id), "an id is NCCL's unique id");
  memset(out, 0, sizeof *out);
  if (is_host(rt)) { /* unique within the process: the only scope of host groups */
    static _Atomic uint64_t next;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t v[4] = {atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) + 1,
                     (uint64_t)getpid(), (uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec};
    memcpy(out->bytes, "devrt-host", 10);
    memcpy(out->bytes + 16, v, sizeof v);
    return DEVRT_OK;
  }
  const dv_nccl* n;
  DV_CHECK(dv_nccl_get(&n));
  dv_nccl_result r = n->GetUniqueId((dv_nccl_id*)(void*)out);
  return r ? dv_nccl_fail(n, r, NULL, "ncclGetUniqueId", "(devrt_comm_id_create)") : DEVRT_OK;
}

devrt_status devrt_comms_create(unsigned n, devrt_runtime* const* rts, devrt_comm** comms) {
  dv_error_clear();
  DV_ARG_CHECK(n >= 1 && n <= 4096 && rts && comms, "devrt_comms_create",
               "%u runtimes (1..4096) at %p into %p", n, (const void*)rts, (void*)comms);
  for (unsigned i = 0; i < n; i++) {
    DV_ARG_CHECK(dv_rt_ok(rts[i]), "devrt_comms_create", "runtime %u (%p) is NULL or destroyed", i,
                 (void*)rts[i]);
    DV_ARG_CHECK(rts[i]->be == rts[0]->be, "devrt_comms_create",
                 "runtime %u is on the %s backend, runtime 0 on %s", i, rts[i]->be->name,
                 rts[0]->be->name);
    for (unsigned k = 0; k < i; k++)
      DV_ARG_CHECK(rts[k] != rts[i], "devrt_comms_create", "runtimes %u and %u are one", k, i);
  }
  devrt_comm** c = calloc(n, sizeof *c);
  int* devs = calloc(n, sizeof *devs);
  dv_nccl_comm_t* nc = calloc(n, sizeof *nc);
  hgroup* g = is_host(rts[0]) ? hgroup_new((int)n) : NULL;
  devrt_status st =
      c && devs && nc && (g || !is_host(rts[0]))
          ? DEVRT_OK
          : dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_comms_create: out of host memory");
  for (unsigned i = 0; st == DEVRT_OK && i < n; i++) {
    devs[i] = rts[i]->cfg.ordinal;
    if (!(c[i] = comm_new(rts[i], (int)i, (int)n)))
      st = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_comms_create: out of host memory");
  }
  const dv_nccl* lib = NULL;
  if (st == DEVRT_OK && !g && (st = dv_nccl_get(&lib)) == DEVRT_OK) {
    dv_nccl_result r = lib->CommInitAll(nc, (int)n, devs);
    if (r) st = dv_nccl_fail(lib, r, NULL, "ncclCommInitAll", "(%u devices, first %d)", n, devs[0]);
  }
  for (unsigned i = 0; i < n; i++) {
    if (st == DEVRT_OK) {
      c[i]->nccl = nc[i], c[i]->g = g;
      atomic_store_explicit(&c[i]->magic, COMM_MAGIC, memory_order_release); /* pairs: comm_ok */
      comms[i] = c[i];
    } else {
      free(c ? c[i] : NULL);
    }
  }
  if (g) g->refs = g->joined = st == DEVRT_OK ? (int)n : 1;
  if (st != DEVRT_OK && g) hgroup_unref(g);
  free(c), free(devs), free(nc);
  return st;
}

/* A host rank joins the group `id` names (created by its first rank), and waits for the rest. */
static devrt_status host_join(const devrt_comm_id* id, int nranks, int rank, hgroup** out) {
  pthread_mutex_lock(&pending_mu);
  hgroup* g = pending;
  while (g && memcmp(&g->id, id, sizeof *id)) g = g->next;
  devrt_status st = DEVRT_OK;
  if (!g && (g = hgroup_new(nranks)) != NULL) {
    g->id = *id, g->registered = true, g->next = pending, pending = g;
  }
  if (!g)
    st = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_comm_create: out of host memory");
  else if (g->nranks != nranks)
    st = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                 "devrt_comm_create: the group of this id has %d ranks, this call says %d",
                 g->nranks, nranks);
  if (st == DEVRT_OK) {
    pthread_mutex_lock(&g->mu);
    g->refs++;
    if (++g->joined == nranks) { /* complete: off the pending list */
      hgroup** p = &pending;
      while (*p != g) p = &(*p)->next;
      *p = g->next, g->registered = false;
      pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
  }
  pthread_mutex_unlock(&pending_mu);
  if (st != DEVRT_OK) return st;
  pthread_mutex_lock(&g->mu);
  while (g->joined < nranks) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
  (void)rank;
  *out = g;
  return DEVRT_OK;
}

devrt_status devrt_comm_create(devrt_runtime* rt, const devrt_comm_id* id, int nranks, int rank,
                               devrt_comm** out) {
  DV_RT_CHECK(rt, "devrt_comm_create");
  DV_ARG_CHECK(id && out, "devrt_comm_create", "id or out is NULL");
  DV_ARG_CHECK(nranks >= 1 && rank >= 0 && rank < nranks, "devrt_comm_create",
               "rank %d of %d ranks (0 <= rank < nranks)", rank, nranks);
  devrt_comm* c = comm_new(rt, rank, nranks);
  if (!c) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_comm_create: out of host memory");
  devrt_status st;
  if (is_host(rt) && memcmp(id->bytes, "devrt-host", 10))
    st = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                 "devrt_comm_create: the id is not one devrt_comm_id_create made on the host "
                 "backend");
  else if (is_host(rt)) {
    st = host_join(id, nranks, rank, &c->g);
  } else {
    const dv_nccl* n = NULL;
    dv_nccl_id nid;
    memcpy(&nid, id, sizeof nid);
    if ((st = dv_nccl_get(&n)) == DEVRT_OK && (st = rt->be->device_enter(rt->dev)) == DEVRT_OK) {
      dv_nccl_result r = n->CommInitRank(&c->nccl, nranks, nid, rank);
      rt->be->device_leave(rt->dev);
      if (r)
        st = dv_nccl_fail(n, r, NULL, "ncclCommInitRank", "(rank %d of %d, device %d)", rank,
                          nranks, rt->cfg.ordinal);
    }
  }
  if (st != DEVRT_OK) {
    free(c);
    return st;
  }
  atomic_store_explicit(&c->magic, COMM_MAGIC, memory_order_release); /* pairs: comm_ok */
  *out = c;
  return DEVRT_OK;
}

devrt_status devrt_comm_destroy(devrt_comm* c) {
  uint64_t m = COMM_MAGIC;
  dv_error_clear();
  /* acquire: pairs with the creating call's release; one destroy wins */
  DV_ARG_CHECK(c && atomic_compare_exchange_strong_explicit(&c->magic, &m, 0, memory_order_acquire,
                                                            memory_order_relaxed),
               "devrt_comm_destroy", "communicator %p is NULL or destroyed", (void*)c);
  devrt_status st = DEVRT_OK;
  if (c->g) {
    hgroup_unref(c->g);
  } else {
    const dv_nccl* n;
    if ((st = dv_nccl_get(&n)) == DEVRT_OK) {
      dv_nccl_result r = n->CommDestroy(c->nccl);
      if (r) st = dv_nccl_fail(n, r, NULL, "ncclCommDestroy", "(rank %d)", c->rank);
    }
  }
  free(c);
  return st;
}

devrt_status devrt_comm_info(devrt_comm* c, int* rank, int* nranks, devrt_runtime** rt) {
  dv_error_clear();
  DV_ARG_CHECK(comm_ok(c), "devrt_comm_info", "communicator %p is NULL or destroyed", (void*)c);
  if (rank) *rank = c->rank;
  if (nranks) *nranks = c->nranks;
  if (rt) *rt = c->rt;
  return DEVRT_OK;
}

/* ---- collectives ---- */

/* One collective call: checked, then issued in two steps around its work. */
typedef struct cop {
  devrt_comm* c;
  ckind kind;
  devrt_stream stream;
  dv_stream* s;
  const void* send;
  void* recv;
  size_t count;
  devrt_dtype dt;
  devrt_redop op;
  int root;
  devrt_block_use u[2];
  dv_work k; /* its two blocks' tracking, from pin to finish */
  bool pinned;
} cop;

/* This thread's group (devrt_group_start .. _end): nesting depth and the calls deferred to its end
 * (NCCL's group state is per thread too). */
static _Thread_local unsigned depth;
static _Thread_local cop** deferred;
static _Thread_local unsigned ndeferred, capdeferred;

/* Pins o's blocks and issues its waits on its stream (a launch's steps 2-3). */
static devrt_status cop_pin(cop* o, const char* call) {
  DV_CHECK(dv_work_init(&o->k, o->c->rt, DV_SID_SLOT(o->stream), call, o->u, 2));
  DV_CHECK(dv_uses_pin(&o->k));
  devrt_status st = dv_waits_issue(&o->k, o->s);
  if (st != DEVRT_OK) {
    dv_counts_flush(o->c->rt, o->k.slot, &o->k.c);
    dv_uses_finish(&o->k, NULL, NULL, true);
    return st;
  }
  o->pinned = true;
  return DEVRT_OK;
}

/* Marks o's end on its blocks and unpins them (ok), or only unpins them after its stream was
 * synchronized (the work failed, maybe half enqueued: nothing untracked is left running). */
static devrt_status cop_finish(cop* o, bool ok) {
  devrt_runtime* rt = o->c->rt;
  dv_pev *ev = NULL, *old = NULL;
  devrt_status st = DEVRT_OK;
  if (ok) {
    o->k.c.launches = 1;
    if ((st = dv_pev_mark(rt, o->k.slot, &ev, &old, &o->k.c)) != DEVRT_OK) ok = false;
  } else {
    dv_counts_flush(rt, o->k.slot, &o->k.c);
  }
  if (!ok) DV_KEEP_ERROR(rt->be->stream_sync(o->s));
  dv_uses_finish(&o->k, ev, old, true);
  o->pinned = false;
  return st;
}

/* Enqueues o's work (between pin and finish). */
static devrt_status cop_work(cop* o, const dv_nccl* lib) {
  devrt_comm* c = o->c;
  devrt_runtime* rt = c->rt;
  if (c->g) {
    hgroup* g = c->g;
    uint64_t seq = atomic_fetch_add_explicit(&c->seq, 1, memory_order_relaxed); /* g->mu orders */
    pthread_mutex_lock(&g->mu);
    hinst* in = g->insts;
    while (in && in->seq != seq) in = in->next;
    if (!in && (in = calloc(1, sizeof *in + (size_t)g->nranks * sizeof(hrank))) != NULL) {
      in->seq = seq, in->kind = o->kind, in->count = o->count, in->dt = o->dt, in->op = o->op;
      in->root = o->root, in->next = g->insts, g->insts = in;
    }
    if (in) in->r[c->rank] = (hrank){g, in, o->send, o->recv};
    pthread_mutex_unlock(&g->mu);
    if (!in) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "%s: out of host memory", cname[o->kind]);
    return rt->be->host_func(o->s, host_meet, &in->r[c->rank]);
  }
  void* native = rt->be->stream_native(o->s);
  DV_CHECK(rt->be->device_enter(rt->dev));
  dv_nccl_result r = 0;
  switch (o->kind) {
    case C_ALL_REDUCE:
      r = lib->AllReduce(o->send, o->recv, o->count, (int)o->dt, (int)o->op, c->nccl, native);
      break;
    case C_BROADCAST:
      r = lib->Broadcast(o->send, o->recv, o->count, (int)o->dt, o->root, c->nccl, native);
      break;
    case C_ALL_GATHER:
      r = lib->AllGather(o->send, o->recv, o->count, (int)o->dt, c->nccl, native);
      break;
    case C_REDUCE_SCATTER:
      r = lib->ReduceScatter(o->send, o->recv, o->count, (int)o->dt, (int)o->op, c->nccl, native);
      break;
  }
  rt->be->device_leave(rt->dev);
  return r ? dv_nccl_fail(lib, r, c->nccl, nccl_name[o->kind], "(rank %d, %zu elements)", c->rank,
                          o->count)
           : DEVRT_OK;
}

/* Issues n calls: pins all, enqueues all (in one NCCL group when `grouped`), marks all. */
static devrt_status run(cop** ops, unsigned n, bool grouped) {
  const dv_nccl* lib = NULL;
  devrt_status st = DEVRT_OK;
  unsigned pinned = 0;
  for (; st == DEVRT_OK && pinned < n; pinned++) {
    st = cop_pin(ops[pinned], cname[ops[pinned]->kind]);
    if (st != DEVRT_OK) break;
  }
  bool nccl = false;
  for (unsigned i = 0; i < n; i++) nccl |= !ops[i]->c->g;
  nccl &= st == DEVRT_OK;
  if (nccl) st = dv_nccl_get(&lib);
  if (st == DEVRT_OK && nccl && grouped && lib->GroupStart())
    st = dv_fail(DEVRT_ERR_BACKEND_ERROR, "devrt_group_end: ncclGroupStart failed");
  bool started = st == DEVRT_OK && nccl && grouped;
  for (unsigned i = 0; st == DEVRT_OK && i < n; i++) st = cop_work(ops[i], lib);
  if (started) {
    dv_nccl_result r = lib->GroupEnd(); /* closes the group even after a failed call */
    if (r && st == DEVRT_OK) st = dv_nccl_fail(lib, r, NULL, "ncclGroupEnd", "(%u calls)", n);
  }
  for (unsigned i = 0; i < pinned; i++) DV_ALSO(st, cop_finish(ops[i], st == DEVRT_OK));
  return st;
}

/* Checks one call and issues it now, or defers it to the thread's group end. */
static devrt_status collective(cop* o, const char* call) {
  devrt_comm* c = o->c;
  CALL_CHECK(comm_ok(c), call, "communicator %p is NULL or destroyed", (void*)c);
  devrt_runtime* rt = c->rt;
  DV_CHECK(dv_stream_get(rt, o->stream, &o->s, call));
  CALL_CHECK(o->count, call, "count is 0");
  CALL_CHECK((unsigned)o->dt < DEVRT_DTYPE_COUNT_ && (unsigned)o->op < DEVRT_REDOP_COUNT_, call,
             "dtype %d or op %d is unknown", (int)o->dt, (int)o->op);
  CALL_CHECK(o->root >= 0 && o->root < c->nranks, call, "root %d of %d ranks", o->root, c->nranks);
  if (c->g && (o->dt == DEVRT_FLOAT16 || o->dt == DEVRT_BFLOAT16))
    return dv_fail(DEVRT_ERR_UNSUPPORTED, "%s: the host collectives have no 16-bit floats", call);
  size_t e = dsize[o->dt], k = (size_t)c->nranks;
  CALL_CHECK(o->count <= SIZE_MAX / e / k, call, "count %zu is too large", o->count);
  size_t part = o->count * e;
  size_t need_send = o->kind == C_REDUCE_SCATTER ? part * k : part;
  size_t need_recv = o->kind == C_ALL_GATHER ? part * k : part;
  devrt_runtime* owner;
  void *sp, *rp;
  size_t ss, rs;
  DV_CHECK(dv_block_find(rt, o->u[0].block, call, &owner, &sp, &ss));
  DV_CHECK(dv_block_find(rt, o->u[1].block, call, &owner, &rp, &rs));
  CALL_CHECK(ss >= need_send && rs >= need_recv, call,
             "send holds %zu bytes and recv %zu; %zu and %zu are needed", ss, rs, need_send,
             need_recv);
  o->send = sp, o->recv = rp;
  if (depth == 0) return run(&o, 1, false);
  if (ndeferred == capdeferred) {
    unsigned cap = capdeferred ? 2 * capdeferred : 8;
    cop** v = realloc(deferred, cap * sizeof *v);
    if (!v) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "%s: out of host memory", call);
    deferred = v, capdeferred = cap;
  }
  cop* copy = malloc(sizeof *copy);
  if (!copy) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "%s: out of host memory", call);
  memcpy(copy, o, offsetof(cop, k));
  deferred[ndeferred++] = copy;
  return DEVRT_OK;
}

devrt_status devrt_group_start(void) {
  dv_error_clear();
  DV_ARG_CHECK(depth < 1024, "devrt_group_start", "groups nested %u deep", depth);
  depth++;
  return DEVRT_OK;
}

devrt_status devrt_group_end(void) {
  dv_error_clear();
  if (!depth) return dv_fail(DEVRT_ERR_INVALID_STATE, "devrt_group_end: no group was started");
  if (--depth) return DEVRT_OK;
  devrt_status st = ndeferred ? run(deferred, ndeferred, true) : DEVRT_OK;
  for (unsigned i = 0; i < ndeferred; i++) free(deferred[i]);
  free(deferred);
  deferred = NULL, ndeferred = capdeferred = 0;
  return st;
}

devrt_status devrt_all_reduce(devrt_comm* c, devrt_stream stream, devrt_block send,
                              devrt_block recv, size_t count, devrt_dtype dt, devrt_redop op) {
  cop o = {.c = c,
           .kind = C_ALL_REDUCE,
           .stream = stream,
           .count = count,
           .dt = dt,
           .op = op,
           .u = {{send, DEVRT_ACCESS_READ}, {recv, DEVRT_ACCESS_WRITE}}};
  return collective(&o, "devrt_all_reduce");
}

devrt_status devrt_broadcast(devrt_comm* c, devrt_stream stream, devrt_block send, devrt_block recv,
                             size_t count, devrt_dtype dt, int root) {
  cop o = {.c = c,
           .kind = C_BROADCAST,
           .stream = stream,
           .count = count,
           .dt = dt,
           .root = root,
           .u = {{send, DEVRT_ACCESS_READ}, {recv, DEVRT_ACCESS_WRITE}}};
  return collective(&o, "devrt_broadcast");
}

devrt_status devrt_all_gather(devrt_comm* c, devrt_stream stream, devrt_block send,
                              devrt_block recv, size_t count, devrt_dtype dt) {
  cop o = {.c = c,
           .kind = C_ALL_GATHER,
           .stream = stream,
           .count = count,
           .dt = dt,
           .u = {{send, DEVRT_ACCESS_READ}, {recv, DEVRT_ACCESS_WRITE}}};
  return collective(&o, "devrt_all_gather");
}

devrt_status devrt_reduce_scatter(devrt_comm* c, devrt_stream stream, devrt_block send,
                                  devrt_block recv, size_t count, devrt_dtype dt, devrt_redop op) {
  cop o = {.c = c,
           .kind = C_REDUCE_SCATTER,
           .stream = stream,
           .count = count,
           .dt = dt,
           .op = op,
           .u = {{send, DEVRT_ACCESS_READ}, {recv, DEVRT_ACCESS_WRITE}}};
  return collective(&o, "devrt_reduce_scatter");
}
