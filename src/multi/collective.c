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
#include "../launch/launch.h"
#include "hostxp.h"
#include "multi.h"

#include "nccl.h"

#define COMM_MAGIC 0x636f6d6d756e6963ull /* "communic" */

typedef enum ckind {
  C_ALL_REDUCE,
  C_BROADCAST,
  C_ALL_GATHER,
  C_REDUCE_SCATTER,
  C_ALL_TO_ALL,
  C_ALL_TO_ALLV,
  C_SEND,
  C_RECV
} ckind;
static const char* const cname[] = {"devrt_all_reduce",     "devrt_broadcast",  "devrt_all_gather",
                                    "devrt_reduce_scatter", "devrt_all_to_all", "devrt_all_to_allv",
                                    "devrt_send",           "devrt_recv"};
static const char* const nccl_name[] = {
    "ncclAllReduce",     "ncclBroadcast",     "ncclAllGather", "ncclReduceScatter",
    "ncclSend/ncclRecv", "ncclSend/ncclRecv", "ncclSend",      "ncclRecv"};
static const size_t dsize[DEVRT_DTYPE_COUNT_] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

/* ---- the host version ---- */

/* One rank's input to a host collective: its send bytes and, for all-to-allv, its send counts and
 * offsets (elements, nranks each). */
typedef struct hpart {
  const char* p;
  const size_t *cnt, *off;
} hpart;

/* One rank's part of one host collective or message, from its issue to the end of the host
 * function its stream runs; owns `v`. */
typedef struct hcall {
  struct hgroup* g; /* in-process group, or */
  dv_xp* xp;        /* ranks in processes */
  int rank, nranks;
  ckind kind;
  size_t count;
  devrt_dtype dt;
  devrt_redop op;
  int root;     /* broadcast: the root; send and receive: the peer */
  uint64_t seq; /* the comm's collective, or the pair's message, by number */
  const char* send;
  char* recv;
  size_t* v;     /* all-to-allv: vbuf (set by host_run), else NULL */
  uint64_t runs; /* recorded in a capture: the replays that ran it (seq's low half); its stream's */
  bool kept;     /* recorded in a capture: the op's copy, run by every replay (not freed) */
  unsigned nv;   /* all-to-allv: 4 nranks (send counts, send offsets, recv counts, recv offsets) */
  size_t vbuf[];
} hcall;

/* A captured call's seq: its own range, apart from issued calls' (which count from 1): the
 * comm's captured calls by number in the high half, the replays that ran it in the low. */
#define CAPTURED_SEQ (1ull << 63)

typedef struct hinst { /* one in-process collective (the seq-th of each rank) */
  uint64_t seq;
  int arrived, computed, left; /* ranks at each of its two meetings, and past them */
  struct hinst* next;
  hpart in[]; /* nranks */
} hinst;
typedef struct hmsg { /* one in-process message, sent and not yet received */
  int src, dst;
  uint64_t seq;
  size_t len;
  struct hmsg* next;
  char data[];
} hmsg;
typedef struct hgroup {
  pthread_mutex_t mu; /* everything below */
  pthread_cond_t cv;
  int nranks, joined, refs;
  devrt_comm_id id; /* devrt_comm_create's groups: the id they are registered under */
  bool registered;  /* on the pending list until every rank has joined */
  struct hgroup* next;
  hinst* insts; /* collectives some rank reached and not every rank has left */
  hmsg* msgs;   /* messages sent and not received */
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
  DV_ASSERT(!g->insts); /* a comm is destroyed once its work has completed */
  for (hmsg *m = g->msgs, *nx; m; m = nx) nx = m->next, free(m); /* sent, never received */
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

/* The bytes a rank of h's collective reads from its send block, and writes to its recv. */
static size_t send_bytes(const hcall* h) {
  size_t part = h->count * dsize[h->dt], n = (size_t)h->nranks, end = 0;
  switch (h->kind) {
    case C_REDUCE_SCATTER:
    case C_ALL_TO_ALL:
      return part * n;
    case C_BROADCAST:
      return h->rank == h->root ? part : 0;
    case C_ALL_TO_ALLV:
      for (size_t j = 0; j < n; j++)
        if (h->v[j] && h->v[n + j] + h->v[j] > end) end = h->v[n + j] + h->v[j];
      return end * dsize[h->dt];
    default:
      return part;
  }
}
static size_t recv_bytes(const hcall* h) {
  size_t part = h->count * dsize[h->dt], n = (size_t)h->nranks;
  return h->kind == C_ALL_GATHER || h->kind == C_ALL_TO_ALL ? part * n : part;
}

/* Rank h->rank's result from every rank's input in[0..nranks), into out. */
static void result(const hcall* h, const hpart* in, char* out) {
  int n = h->nranks, k = h->rank;
  size_t e = dsize[h->dt], part = h->count * e;
  switch (h->kind) {
    case C_ALL_REDUCE:
    case C_REDUCE_SCATTER: { /* reduce-scatter: rank k reduces part k of every rank's send */
      size_t at = h->kind == C_REDUCE_SCATTER ? part * (size_t)k : 0;
      memcpy(out, in[0].p + at, part);
      for (int j = 1; j < n; j++) combine(out, in[j].p + at, h->count, h->dt, h->op);
      if (h->op == DEVRT_AVG) divide(out, h->count, h->dt, n);
      break;
    }
    case C_BROADCAST:
      memcpy(out, in[h->root].p, part);
      break;
    case C_ALL_GATHER:
      for (int j = 0; j < n; j++) memcpy(out + part * (size_t)j, in[j].p, part);
      break;
    case C_ALL_TO_ALL:
      for (int j = 0; j < n; j++) memcpy(out + part * (size_t)j, in[j].p + part * (size_t)k, part);
      break;
    case C_ALL_TO_ALLV: { /* what rank j sends to k lands where k receives from j (the shorter) */
      const size_t *rcnt = h->v + 2 * (size_t)n, *roff = h->v + 3 * (size_t)n;
      for (int j = 0; j < n; j++) {
        size_t c = in[j].cnt[k] < rcnt[j] ? in[j].cnt[k] : rcnt[j];
        memcpy(out + roff[j] * e, in[j].p + in[j].off[k] * e, c * e);
      }
      break;
    }
    default:
      DV_ASSERT(!"a message is no collective");
  }
}

/* Waits under g->mu until *count reaches the group's size, having added this rank. */
static void meet(hgroup* g, int* count) {
  if (++*count == g->nranks) pthread_cond_broadcast(&g->cv);
  while (*count < g->nranks) pthread_cond_wait(&g->cv, &g->mu);
}

/* An in-process collective: every rank's input is published in the instance; each computes its
 * own result (into scratch when it is in place: another rank may still read its send), and
 * writes it once every rank is done reading. */
static void inproc_collective(hcall* h) {
  hgroup* g = h->g;
  size_t rb = recv_bytes(h);
  bool inplace = h->recv < h->send + send_bytes(h) && h->send < h->recv + rb;
  char* out = inplace ? malloc(rb) : h->recv;
  pthread_mutex_lock(&g->mu);
  hinst* in = g->insts;
  while (in && in->seq != h->seq) in = in->next;
  if (!in && (in = calloc(1, sizeof *in + (size_t)g->nranks * sizeof(hpart))) != NULL)
    in->seq = h->seq, in->next = g->insts, g->insts = in;
  if (!in || !out) { /* out of host memory: the other ranks wait for this one for good */
    pthread_mutex_unlock(&g->mu);
    fprintf(stderr, "devrt: %s on host rank %d: out of host memory\n", cname[h->kind], h->rank);
    if (inplace) free(out);
    return;
  }
  size_t n = (size_t)h->nranks;
  in->in[h->rank] = (hpart){h->send, h->v, h->v ? h->v + n : NULL};
  meet(g, &in->arrived);
  pthread_mutex_unlock(&g->mu);
  result(h, in->in, out); /* the inputs stay until every rank has computed */
  pthread_mutex_lock(&g->mu);
  meet(g, &in->computed);
  if (++in->left == g->nranks) { /* the last one out unlinks it */
    hinst** p = &g->insts;
    while (*p != in) p = &(*p)->next;
    *p = in->next;
    free(in);
  }
  pthread_mutex_unlock(&g->mu);
  if (inplace) memcpy(h->recv, out, rb), free(out);
}

/* Ranks in processes: each publishes a copy of its input (with its counts and offsets), then
 * computes its own result straight into recv. */
static devrt_status xproc_collective(hcall* h) {
  size_t n = (size_t)h->nranks, hb = h->v ? 2 * n * sizeof(size_t) : 0;
  dv_xp_view* v = calloc(n, sizeof *v);
  hpart* in = calloc(n, sizeof *in);
  devrt_status st = v && in ? dv_xp_exchange(h->xp, h->seq, h->v, hb, h->send, send_bytes(h), v)
                            : dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "out of host memory");
  if (st == DEVRT_OK) {
    for (size_t j = 0; j < n; j++) {
      const size_t* a = v[j].data;
      in[j] = (hpart){(const char*)v[j].data + hb, hb ? a : NULL, hb ? a + n : NULL};
    }
    result(h, in, h->recv);
    dv_xp_release(h->xp, v);
  }
  free(v), free(in);
  return st;
}

/* An in-process message: sent eagerly (copied), received once it is there. */
static void inproc_message(hcall* h) {
  hgroup* g = h->g;
  size_t len = h->count * dsize[h->dt];
  bool send = h->kind == C_SEND;
  int src = send ? h->rank : h->root, dst = send ? h->root : h->rank;
  hmsg* m = send ? malloc(sizeof *m + len) : NULL;
  if (send && !m) {
    fprintf(stderr, "devrt: devrt_send on host rank %d: out of host memory\n", h->rank);
    return;
  }
  if (m) *m = (hmsg){src, dst, h->seq, len, NULL}, memcpy(m->data, h->send, len);
  pthread_mutex_lock(&g->mu);
  if (send) { /* at the tail: a pair's messages stay in order */
    hmsg** p = &g->msgs;
    while (*p) p = &(*p)->next;
    *p = m;
    pthread_cond_broadcast(&g->cv);
  } else {
    hmsg** p;
    for (;;) {
      for (p = &g->msgs; *p && ((*p)->src != src || (*p)->dst != dst || (*p)->seq != h->seq);)
        p = &(*p)->next;
      if (*p) break;
      pthread_cond_wait(&g->cv, &g->mu);
    }
    m = *p, *p = m->next;
  }
  pthread_mutex_unlock(&g->mu);
  if (!send) memcpy(h->recv, m->data, len < m->len ? len : m->len), free(m);
}

/* What a rank's stream runs for h; frees h unless a capture recorded it (then each replay's run
 * meets the other ranks' runs of the same captured call by number). */
static void host_run(void* user) {
  hcall* h = user;
  devrt_status st = DEVRT_OK;
  h->v = h->nv ? h->vbuf : NULL; /* h may be the op's copy */
  uint64_t seq = h->seq;
  if (h->kept) h->seq = seq + h->runs++; /* the replays of one graph are ordered by its uses */
  size_t len = h->count * dsize[h->dt];
  if (h->kind == C_SEND || h->kind == C_RECV) {
    if (h->g)
      inproc_message(h);
    else if (h->kind == C_SEND)
      st = dv_xp_send(h->xp, h->root, h->seq, h->send, len);
    else
      st = dv_xp_recv(h->xp, h->root, h->seq, h->recv, len);
  } else if (h->g) {
    inproc_collective(h);
  } else {
    st = xproc_collective(h);
  }
  if (st != DEVRT_OK) /* a host function has no caller to fail: its result stays unwritten */
    fprintf(stderr, "devrt: %s on host rank %d: %s\n", cname[h->kind], h->rank, devrt_last_error());
  if (h->kept)
    h->seq = seq;
  else
    free(h);
}

/* ---- communicators ---- */

struct devrt_comm {
  _Atomic uint64_t magic;
  devrt_runtime* rt;
  int rank, nranks;
  dv_nccl_comm_t nccl;       /* cuda */
  hgroup* g;                 /* host, ranks in this process */
  dv_xp* xp;                 /* host, ranks in processes */
  _Atomic uint64_t seq;      /* host: this rank's collectives issued (ranks meet by number) */
  _Atomic uint64_t* sent;    /* host: messages issued to each rank, then from each, then the same
                              * two recorded in captures (nranks each) */
  _Atomic uint64_t captured; /* host: this rank's collectives recorded in captures */
  _Atomic unsigned graphs;   /* captured calls that graphs hold (comm_graph_drop): no destroy */
};

static bool is_host(devrt_runtime* rt) { return dv_is_host(rt->be); }

static bool comm_ok(devrt_comm* c) { /* acquire: pairs with the creating calls' release */
  return c && atomic_load_explicit(&c->magic, memory_order_acquire) == COMM_MAGIC;
}

static devrt_comm* comm_new(devrt_runtime* rt, int rank, int nranks) {
  devrt_comm* c = calloc(1, sizeof *c);
  if (c && is_host(rt) && !(c->sent = calloc(4 * (size_t)nranks, sizeof *c->sent))) {
    free(c);
    return NULL;
  }
  if (c) c->rt = rt, c->rank = rank, c->nranks = nranks;
  return c;
}
static void comm_free(devrt_comm* c) {
  if (c) free(c->sent);
  free(c);
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

devrt_status dv_comm_id_for_processes(devrt_runtime* rt, devrt_comm_id* out) {
  DV_CHECK(devrt_comm_id_create(rt, out));
  if (is_host(rt)) out->bytes[10] = 'x'; /* "devrt-hostx": devrt_comm_create joins through hostxp */
  return DEVRT_OK;
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
      comm_free(c ? c[i] : NULL);
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
  DV_ARG_CHECK(nranks >= 1 && nranks <= 1 << 20 && rank >= 0 && rank < nranks, "devrt_comm_create",
               "rank %d of %d ranks (0 <= rank < nranks <= 2^20)", rank, nranks);
  devrt_comm* c = comm_new(rt, rank, nranks);
  if (!c) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_comm_create: out of host memory");
  devrt_status st;
  if (is_host(rt) && memcmp(id->bytes, "devrt-host", 10))
    st = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                 "devrt_comm_create: the id is not one devrt_comm_id_create made on the host "
                 "backend");
  else if (is_host(rt) && id->bytes[10] == 'x') {
    st = dv_xp_join(id, sizeof *id, nranks, rank, &c->xp);
  } else if (is_host(rt)) {
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
    comm_free(c);
    return st;
  }
  atomic_store_explicit(&c->magic, COMM_MAGIC, memory_order_release); /* pairs: comm_ok */
  *out = c;
  return DEVRT_OK;
}

devrt_status devrt_comm_destroy(devrt_comm* c) {
  uint64_t m = COMM_MAGIC;
  dv_error_clear();
  /* acquire: pairs with comm_graph_drop's release (the graph's end before this destroy) */
  unsigned held = comm_ok(c) ? atomic_load_explicit(&c->graphs, memory_order_acquire) : 0;
  if (held)
    return dv_fail(DEVRT_ERR_INVALID_STATE,
                   "devrt_comm_destroy: graphs hold %u collectives of communicator %p (rank %d): "
                   "destroy them first",
                   held, (void*)c, c->rank);
  /* acquire: pairs with the creating call's release; one destroy wins */
  DV_ARG_CHECK(c && atomic_compare_exchange_strong_explicit(&c->magic, &m, 0, memory_order_acquire,
                                                            memory_order_relaxed),
               "devrt_comm_destroy", "communicator %p is NULL or destroyed", (void*)c);
  devrt_status st = DEVRT_OK;
  if (c->g) {
    hgroup_unref(c->g);
  } else if (c->xp) {
    dv_xp_leave(c->xp);
  } else {
    const dv_nccl* n;
    if ((st = dv_nccl_get(&n)) == DEVRT_OK) {
      dv_nccl_result r = n->CommDestroy(c->nccl);
      if (r) st = dv_nccl_fail(n, r, NULL, "ncclCommDestroy", "(rank %d)", c->rank);
    }
  }
  comm_free(c);
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
  const char* send;
  char* recv;
  size_t count;
  devrt_dtype dt;
  devrt_redop op;
  int root;  /* broadcast: the root; send and receive: the peer */
  size_t* v; /* all-to-allv: its four arrays, copied (owned by the call) */
  devrt_block_use u[2];
  unsigned nu;     /* uses: 2, or 1 for a send or a receive */
  dv_capture* cap; /* the calling thread's capture of stream: recorded (s is the capture's) */
  dv_work k;       /* its blocks' tracking, from pin to finish */
  bool pinned;
} cop;

/* This thread's group (devrt_group_start .. _end): nesting depth and the calls deferred to its end
 * (NCCL's group state is per thread too). */
static _Thread_local unsigned depth;
static _Thread_local cop** deferred;
static _Thread_local unsigned ndeferred, capdeferred;

/* Pins o's blocks and issues its waits on its stream (a launch's steps 2-3). */
static devrt_status cop_pin(cop* o, const char* call) {
  DV_CHECK(dv_work_init(&o->k, o->c->rt, DV_SID_SLOT(o->stream), call, o->u, o->nu));
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

/* The host version of o: a host function on its stream (host_run) with its own copy of the call. */
static devrt_status host_work(cop* o) {
  devrt_comm* c = o->c;
  size_t n = (size_t)c->nranks, nv = o->v ? 4 * n : 0, size = sizeof(hcall) + nv * sizeof(size_t);
  hcall* h = malloc(size);
  if (!h) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "%s: out of host memory", cname[o->kind]);
  /* relaxed: the ranks meet by number, and a comm's calls come in one order (the contract), a
   * capture's in the order they are recorded */
  _Atomic uint64_t* ctr = o->kind == C_SEND   ? &c->sent[o->root]
                          : o->kind == C_RECV ? &c->sent[n + (size_t)o->root]
                                              : NULL;
  if (o->cap) ctr = ctr ? ctr + 2 * n : &c->captured;
  uint64_t seq = atomic_fetch_add_explicit(ctr ? ctr : &c->seq, 1, memory_order_relaxed) + 1;
  *h = (hcall){.g = c->g,
               .xp = c->xp,
               .rank = c->rank,
               .nranks = c->nranks,
               .kind = o->kind,
               .count = o->count,
               .dt = o->dt,
               .op = o->op,
               .root = o->root,
               .seq = o->cap ? CAPTURED_SEQ | seq << 32 : seq,
               .send = o->send,
               .recv = o->recv,
               .kept = o->cap != NULL,
               .nv = (unsigned)nv};
  if (nv) memcpy(h->vbuf, o->v, nv * sizeof *h->vbuf);
  /* recorded: the capture's op keeps its own copy for every replay */
  devrt_status st = c->rt->be->host_func(o->s, host_run, h, o->cap ? size : 0);
  if (st != DEVRT_OK || o->cap) free(h);
  return st;
}

/* NCCL's send and receive of count elements at p, to or from peer. */
static dv_nccl_result p2p(const dv_nccl* lib, const cop* o, bool send, const char* p, size_t count,
                          int peer, void* native) {
  return send ? lib->Send(p, count, (int)o->dt, peer, o->c->nccl, native)
              : lib->Recv((void*)p, count, (int)o->dt, peer, o->c->nccl, native);
}

/* NCCL's all-to-all: a send and a receive per rank with a part, in one NCCL group. */
static dv_nccl_result all_to_all(const dv_nccl* lib, const cop* o, void* native) {
  size_t n = (size_t)o->c->nranks, e = dsize[o->dt];
  dv_nccl_result r = lib->GroupStart();
  for (size_t j = 0; !r && j < n; j++) {
    size_t sc = o->v ? o->v[j] : o->count, so = o->v ? o->v[n + j] : o->count * j;
    size_t rc = o->v ? o->v[2 * n + j] : o->count, ro = o->v ? o->v[3 * n + j] : o->count * j;
    if (sc) r = p2p(lib, o, true, o->send + so * e, sc, (int)j, native);
    if (!r && rc) r = p2p(lib, o, false, o->recv + ro * e, rc, (int)j, native);
  }
  dv_nccl_result end = lib->GroupEnd(); /* closes the group even after a failed call */
  return r ? r : end;
}

/* Enqueues o's work (between pin and finish). */
static devrt_status cop_work(cop* o, const dv_nccl* lib) {
  devrt_comm* c = o->c;
  devrt_runtime* rt = c->rt;
  if (is_host(rt)) return host_work(o);
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
    case C_ALL_TO_ALL:
    case C_ALL_TO_ALLV:
      r = all_to_all(lib, o, native);
      break;
    case C_SEND:
    case C_RECV:
      r = p2p(lib, o, o->kind == C_SEND, o->kind == C_SEND ? o->send : o->recv, o->count, o->root,
              native);
      break;
  }
  rt->be->device_leave(rt->dev);
  return r ? dv_nccl_fail(lib, r, c->nccl, nccl_name[o->kind], "(rank %d, %zu elements)", c->rank,
                          o->count)
           : DEVRT_OK;
}

/* A graph holds a captured call of comm p until it is destroyed. release: pairs with the
 * destroy's acquire. */
static void comm_graph_drop(void* p) {
  devrt_comm* c = p;
  atomic_fetch_sub_explicit(&c->graphs, 1, memory_order_release);
}

/* Records n calls on streams the calling thread captures (devrt/graph.h; a group's ranks may
 * be in captures of their own): their uses join their captures' and each communicator is held by
 * its graph; no wait or mark. */
static DV_NOINLINE devrt_status record(cop** ops, unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    cop* o = ops[i];
    dv_slot* sl = &o->c->rt->slots[DV_SID_SLOT(o->stream)];
    /* a group's calls are recorded at its end: each capture must still be the one it named */
    if (!o->cap || sl->cap != o->cap || !dv_capture_mine(sl))
      return dv_fail(DEVRT_ERR_INVALID_STATE,
                     "%s: a group's calls must all be recorded in captures still running at "
                     "devrt_group_end, or none (stream %#" PRIx64 ")",
                     cname[o->kind], o->stream);
  }
  for (unsigned i = 0; i < n; i++) {
    cop* o = ops[i];
    DV_CHECK(dv_capture_add(o->c->rt, o->cap, o->u, o->nu, cname[o->kind]));
    DV_CHECK(dv_capture_hold(o->cap, comm_graph_drop, o->c));
    atomic_fetch_add_explicit(&o->c->graphs, 1, memory_order_relaxed); /* the graph's, as above */
  }
  return DEVRT_OK;
}

/* Issues n calls: pins all, enqueues all (in one NCCL group when `grouped`), marks all; or, in a
 * capture, records them. */
static devrt_status run(cop** ops, unsigned n, bool grouped) {
  const dv_nccl* lib = NULL;
  devrt_status st = DEVRT_OK;
  unsigned pinned = 0;
  bool captured = false;
  for (unsigned i = 0; i < n; i++) captured |= ops[i]->cap != NULL;
  if (captured && (st = record(ops, n)) != DEVRT_OK) return st;
  if (captured) pinned = n; /* nothing to pin: the graph's launch tracks the uses */
  for (; st == DEVRT_OK && pinned < n; pinned++) {
    st = cop_pin(ops[pinned], cname[ops[pinned]->kind]);
    if (st != DEVRT_OK) break;
  }
  bool nccl = false;
  for (unsigned i = 0; i < n; i++) nccl |= !is_host(ops[i]->c->rt);
  nccl &= st == DEVRT_OK;
  if (nccl) st = dv_nccl_get(&lib);
  if (st == DEVRT_OK && nccl && grouped && lib->GroupStart())
    st = dv_fail(DEVRT_ERR_BACKEND_ERROR, "devrt_group_end: ncclGroupStart failed");
  bool started = st == DEVRT_OK && nccl && grouped;
  for (unsigned i = 0; st == DEVRT_OK && i < n; i++) {
    st = cop_work(ops[i], lib);
    if (st == DEVRT_OK && captured) ops[i]->cap->launches++;
  }
  if (started) {
    dv_nccl_result r = lib->GroupEnd(); /* closes the group even after a failed call */
    if (r && st == DEVRT_OK) st = dv_nccl_fail(lib, r, NULL, "ncclGroupEnd", "(%u calls)", n);
  }
  for (unsigned i = 0; i < pinned && !captured; i++)
    DV_ALSO(st, cop_finish(ops[i], st == DEVRT_OK));
  return st;
}

/* The bytes o reads from send and writes to recv, with o's counts checked against overflow; false
 * if they overflow (v's parts: each part's end). */
static bool cop_extent(const cop* o, size_t* need_send, size_t* need_recv) {
  size_t e = dsize[o->dt], n = (size_t)o->c->nranks, part = o->count * e;
  *need_send = *need_recv = 0;
  if (o->kind == C_ALL_TO_ALLV) {
    for (size_t j = 0; j < 2 * n; j++) { /* j < n: send parts, then recv parts */
      size_t cnt = o->v[j < n ? j : n + j], off = o->v[j < n ? n + j : 2 * n + j];
      size_t* need = j < n ? need_send : need_recv;
      if (cnt > SIZE_MAX / e || off > SIZE_MAX / e - cnt) return false;
      if (cnt && (off + cnt) * e > *need) *need = (off + cnt) * e;
    }
    return true;
  }
  if (o->count > SIZE_MAX / e / n) return false;
  bool many_send = o->kind == C_REDUCE_SCATTER || o->kind == C_ALL_TO_ALL;
  bool many_recv = o->kind == C_ALL_GATHER || o->kind == C_ALL_TO_ALL;
  *need_send = o->kind == C_RECV ? 0 : many_send ? part * n : part;
  *need_recv = o->kind == C_SEND ? 0 : many_recv ? part * n : part;
  return true;
}

/* Checks one call and issues it now, or defers it to the thread's group end. Owns o->v. */
static devrt_status collective(cop* o, const char* call) {
  devrt_status st = DEVRT_OK;
  cop* copy = NULL;
  devrt_comm* c = o->c;
  if (!comm_ok(c)) {
    st = dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: communicator %p is NULL or destroyed", call,
                 (void*)c);
    goto out;
  }
  devrt_runtime* rt = c->rt;
  if ((st = dv_stream_or_capture(rt, o->stream, &o->s, &o->cap, call)) != DEVRT_OK) goto out;
  size_t need_send, need_recv;
  bool v = o->kind == C_ALL_TO_ALLV, p2p_kind = o->kind == C_SEND || o->kind == C_RECV;
  const char* bad = (!v && !o->count)                        ? "count is 0"
                    : (unsigned)o->dt >= DEVRT_DTYPE_COUNT_  ? "dtype is unknown"
                    : (unsigned)o->op >= DEVRT_REDOP_COUNT_  ? "op is unknown"
                    : o->root < 0 || o->root >= c->nranks    ? "root or peer is out of range"
                    : !cop_extent(o, &need_send, &need_recv) ? "a count is too large"
                    : o->nu == 2 && o->u[0].block == o->u[1].block && (o->kind == C_ALL_TO_ALL || v)
                        ? "send and recv are one block"
                        : NULL;
  if (bad) {
    st = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                 "%s: %s (count %zu, dtype %d, op %d, root/peer %d of %d)", call, bad, o->count,
                 (int)o->dt, (int)o->op, o->root, c->nranks);
    goto out;
  }
  if (is_host(rt) && (o->dt == DEVRT_FLOAT16 || o->dt == DEVRT_BFLOAT16)) {
    st = dv_fail(DEVRT_ERR_UNSUPPORTED, "%s: the host collectives have no 16-bit floats", call);
    goto out;
  }
  devrt_runtime* owner;
  void* p;
  size_t size;
  for (unsigned i = 0; i < o->nu; i++) {
    bool is_send = !p2p_kind ? i == 0 : o->kind == C_SEND;
    size_t need = is_send ? need_send : need_recv;
    if ((st = dv_block_find(rt, o->u[i].block, call, &owner, &p, &size)) != DEVRT_OK) goto out;
    if (size < need) {
      st = dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: %s holds %zu bytes; %zu are needed", call,
                   is_send ? "send" : "recv", size, need);
      goto out;
    }
    *(is_send ? (void**)&o->send : (void**)&o->recv) = p;
  }
  if (depth == 0) {
    st = run(&o, 1, false);
    goto out;
  }
  if (ndeferred == capdeferred) {
    unsigned cap = capdeferred ? 2 * capdeferred : 8;
    cop** nv = realloc(deferred, cap * sizeof *nv);
    if (!nv) {
      st = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "%s: out of host memory", call);
      goto out;
    }
    deferred = nv, capdeferred = cap;
  }
  if (!(copy = malloc(sizeof *copy))) {
    st = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "%s: out of host memory", call);
    goto out;
  }
  memcpy(copy, o, offsetof(cop, k));
  deferred[ndeferred++] = copy;
  return DEVRT_OK; /* the copy owns o->v */
out:
  free(o->v);
  return st;
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
  for (unsigned i = 0; i < ndeferred; i++) free(deferred[i]->v), free(deferred[i]);
  free(deferred);
  deferred = NULL, ndeferred = capdeferred = 0;
  return st;
}

/* A call over a send and a recv block (a read and a write). */
static devrt_status two_blocks(cop o, devrt_block send, devrt_block recv) {
  o.u[0] = (devrt_block_use){send, DEVRT_ACCESS_READ};
  o.u[1] = (devrt_block_use){recv, DEVRT_ACCESS_WRITE};
  o.nu = 2;
  return collective(&o, cname[o.kind]);
}

devrt_status devrt_all_reduce(devrt_comm* c, devrt_stream stream, devrt_block send,
                              devrt_block recv, size_t count, devrt_dtype dt, devrt_redop op) {
  return two_blocks(
      (cop){.c = c, .kind = C_ALL_REDUCE, .stream = stream, .count = count, .dt = dt, .op = op},
      send, recv);
}

devrt_status devrt_broadcast(devrt_comm* c, devrt_stream stream, devrt_block send, devrt_block recv,
                             size_t count, devrt_dtype dt, int root) {
  return two_blocks(
      (cop){.c = c, .kind = C_BROADCAST, .stream = stream, .count = count, .dt = dt, .root = root},
      send, recv);
}

devrt_status devrt_all_gather(devrt_comm* c, devrt_stream stream, devrt_block send,
                              devrt_block recv, size_t count, devrt_dtype dt) {
  return two_blocks((cop){.c = c, .kind = C_ALL_GATHER, .stream = stream, .count = count, .dt = dt},
                    send, recv);
}

devrt_status devrt_reduce_scatter(devrt_comm* c, devrt_stream stream, devrt_block send,
                                  devrt_block recv, size_t count, devrt_dtype dt, devrt_redop op) {
  return two_blocks(
      (cop){.c = c, .kind = C_REDUCE_SCATTER, .stream = stream, .count = count, .dt = dt, .op = op},
      send, recv);
}

devrt_status devrt_all_to_all(devrt_comm* c, devrt_stream stream, devrt_block send,
                              devrt_block recv, size_t count, devrt_dtype dt) {
  return two_blocks((cop){.c = c, .kind = C_ALL_TO_ALL, .stream = stream, .count = count, .dt = dt},
                    send, recv);
}

devrt_status devrt_all_to_allv(devrt_comm* c, devrt_stream stream, devrt_block send,
                               const size_t* send_counts, const size_t* send_offsets,
                               devrt_block recv, const size_t* recv_counts,
                               const size_t* recv_offsets, devrt_dtype dt) {
  dv_error_clear();
  DV_ARG_CHECK(comm_ok(c), "devrt_all_to_allv", "communicator %p is NULL or destroyed", (void*)c);
  DV_ARG_CHECK(send_counts && send_offsets && recv_counts && recv_offsets, "devrt_all_to_allv",
               "a count or offset array is NULL");
  size_t n = (size_t)c->nranks, *v = malloc(4 * n * sizeof *v);
  if (!v) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_all_to_allv: out of host memory");
  const size_t* from[4] = {send_counts, send_offsets, recv_counts, recv_offsets};
  for (size_t i = 0; i < 4; i++) memcpy(v + i * n, from[i], n * sizeof *v);
  return two_blocks(
      (cop){.c = c, .kind = C_ALL_TO_ALLV, .stream = stream, .count = 0, .dt = dt, .v = v}, send,
      recv);
}

/* A send or a receive: one block. */
static devrt_status message(cop o, devrt_block b) {
  o.u[0] = (devrt_block_use){b, o.kind == C_SEND ? DEVRT_ACCESS_READ : DEVRT_ACCESS_WRITE};
  o.nu = 1;
  return collective(&o, cname[o.kind]);
}

devrt_status devrt_send(devrt_comm* c, devrt_stream stream, devrt_block send, size_t count,
                        devrt_dtype dt, int peer) {
  return message(
      (cop){.c = c, .kind = C_SEND, .stream = stream, .count = count, .dt = dt, .root = peer},
      send);
}

devrt_status devrt_recv(devrt_comm* c, devrt_stream stream, devrt_block recv, size_t count,
                        devrt_dtype dt, int peer) {
  return message(
      (cop){.c = c, .kind = C_RECV, .stream = stream, .count = count, .dt = dt, .root = peer},
      recv);
}
