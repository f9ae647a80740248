/* hostxp.c: the host backend's ranks in separate processes of one machine. Ranks exchange data
 * through POSIX shared-memory segments named by the group, the exchange and the rank: a rank
 * writes its part once, every rank that needs it maps it, and the last reader unlinks it. No
 * process-shared lock: a reader waits (polling) for the segment and for its `ready` flag. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "hostxp.h"

struct dv_xp {
  uint64_t key; /* the group's id, hashed: every segment's name starts with it */
  int rank, nranks;
};

/* The head of every segment; the part's bytes follow at XP_HEAD. */
typedef struct xhead {
  _Atomic uint32_t ready;   /* 1 once the writer has written every byte (release/acquire) */
  _Atomic uint32_t readers; /* readers done: the one that makes it `want` unlinks the name */
  uint32_t want;            /* how many ranks read it */
  uint64_t len;
} xhead;
enum { XP_HEAD = 64 };
_Static_assert(sizeof(xhead) <= XP_HEAD, "the head fits its room");

static void seg_name(char* out, size_t cap, const dv_xp* x, const char* what, uint64_t seq, int a,
                     int b) {
  snprintf(out, cap, "/devrt-%016llx-%s-%llu-%d-%d", (unsigned long long)x->key, what,
           (unsigned long long)seq, a, b);
}

/* Waits a little longer each time: a peer process may be slow to arrive (no deadline: as NCCL, a
 * rank that never comes leaves the others waiting). */
static void backoff(unsigned* spins) {
  if (++*spins < 64) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, *spins < 1024 ? 20000 : 200000};
  nanosleep(&ts, NULL);
}

/* Writes one segment: the head, then hlen bytes of h and len of p. */
static devrt_status seg_write(const char* name, uint32_t want, const void* h, size_t hlen,
                              const void* p, size_t len) {
  size_t total = XP_HEAD + hlen + len;
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0)
    return dv_fail(DEVRT_ERR_BACKEND_ERROR, "host collectives: shm_open(%s): %s", name,
                   strerror(errno));
  char* m = ftruncate(fd, (off_t)total) == 0
                ? mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  int err = errno;
  close(fd);
  if (m == MAP_FAILED) {
    shm_unlink(name);
    return dv_fail(DEVRT_ERR_BACKEND_ERROR, "host collectives: %zu bytes of %s: %s", total, name,
                   strerror(err));
  }
  xhead* hd = (xhead*)(void*)m;
  hd->want = want, hd->len = hlen + len;
  if (hlen) memcpy(m + XP_HEAD, h, hlen);
  if (len) memcpy(m + XP_HEAD + hlen, p, len);
  atomic_store_explicit(&hd->ready, 1, memory_order_release); /* pairs: seg_map's acquire */
  munmap(m, total);
  return DEVRT_OK;
}

/* Maps the segment `name` once its writer is done, waiting for it. */
static devrt_status seg_map(const char* name, dv_xp_view* v) {
  for (unsigned spins = 0;; backoff(&spins)) {
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
      if (errno == ENOENT) continue;
      return dv_fail(DEVRT_ERR_BACKEND_ERROR, "host collectives: shm_open(%s): %s", name,
                     strerror(errno));
    }
    struct stat st;
    void* m = fstat(fd, &st) == 0 && st.st_size >= XP_HEAD
                  ? mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    close(fd);
    if (m == MAP_FAILED) continue; /* not sized yet */
    xhead* hd = m;
    for (unsigned s = 0; !atomic_load_explicit(&hd->ready, memory_order_acquire); backoff(&s)) {}
    DV_ASSERT(XP_HEAD + hd->len == (uint64_t)st.st_size);
    v->map = m, v->size = (size_t)st.st_size, v->data = (const char*)m + XP_HEAD, v->len = hd->len;
    snprintf(v->name, sizeof v->name, "%s", name);
    return DEVRT_OK;
  }
}

/* Done with a mapped segment: the last of its readers unlinks it. */
static void seg_done(dv_xp_view* v) {
  if (!v->map) return;
  xhead* hd = v->map;
  /* acq_rel: the last reader's unlink comes after every other reader's use */
  if (atomic_fetch_add_explicit(&hd->readers, 1, memory_order_acq_rel) + 1 == hd->want)
    shm_unlink(v->name);
  munmap(v->map, v->size);
  v->map = NULL;
}

static uint64_t hash(const void* p, size_t n) { /* FNV-1a */
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char*)p)[i]) * 1099511628211ull;
  return h;
}

devrt_status dv_xp_join(const void* id, size_t idlen, int nranks, int rank, dv_xp** out) {
  dv_xp* x = calloc(1, sizeof *x);
  if (!x) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_comm_create: out of host memory");
  x->key = hash(id, idlen), x->rank = rank, x->nranks = nranks;
  dv_xp_view* v = calloc((size_t)nranks, sizeof *v);
  devrt_status st = v ? dv_xp_exchange(x, 0, NULL, 0, NULL, 0, v)
                      : dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_comm_create: out of memory");
  if (st == DEVRT_OK) dv_xp_release(x, v);
  free(v);
  if (st != DEVRT_OK) {
    free(x);
    return st;
  }
  *out = x;
  return DEVRT_OK;
}

void dv_xp_leave(dv_xp* x) { free(x); }

devrt_status dv_xp_exchange(dv_xp* x, uint64_t seq, const void* h, size_t hlen, const void* p,
                            size_t len, dv_xp_view* v) {
  char name[96];
  seg_name(name, sizeof name, x, "x", seq, x->rank, 0);
  DV_CHECK(seg_write(name, (uint32_t)x->nranks, h, hlen, p, len));
  for (int k = 0; k < x->nranks; k++) {
    seg_name(name, sizeof name, x, "x", seq, k, 0);
    devrt_status st = seg_map(name, &v[k]);
    if (st != DEVRT_OK) {
      while (k--) seg_done(&v[k]);
      return st;
    }
  }
  return DEVRT_OK;
}

void dv_xp_release(dv_xp* x, dv_xp_view* v) {
  for (int k = 0; k < x->nranks; k++) seg_done(&v[k]);
}

devrt_status dv_xp_send(dv_xp* x, int peer, uint64_t seq, const void* p, size_t len) {
  char name[96];
  seg_name(name, sizeof name, x, "p", seq, x->rank, peer);
  return seg_write(name, 1, NULL, 0, p, len);
}

devrt_status dv_xp_recv(dv_xp* x, int peer, uint64_t seq, void* p, size_t len) {
  char name[96];
  dv_xp_view v;
  seg_name(name, sizeof name, x, "p", seq, peer, x->rank);
  DV_CHECK(seg_map(name, &v));
  memcpy(p, v.data, len < v.len ? len : v.len);
  seg_done(&v);
  return DEVRT_OK;
}
