/* statistics.c: the statistics decorator: bytes and allocation counts {current, peak, total},
 * overall and per tag. Bytes are the REQUESTED sizes (the pool's rounded sizes are query's
 * live_bytes). Counters rise after upstream's allocate succeeded. Over a recording layer (caching,
 * async, simple) they fall once its deallocate accepted the free, by the tag of its record (its
 * deallocate_tagged); over any other upstream this layer keeps a sharded pointer map (ptr -> size,
 * tag) and they fall before the free (restored if it is refused).
 *
 * One design for exact and bounded peaks. Each figure set (overall, each tag's, "(other)") keeps
 * a cell per thread shard, and each cell a quota: what its figures may reach without the set
 * hearing of it. A call within its cells' quotas takes one lock, its thread's, for its overall and
 * its tag's cells. A read locks every cell and settles the set: the peak takes the quotas' sum,
 * which bounds every total since the last settle, and the quotas are handed out again
 * (st_settle); a reset makes the peak the current total. The one switch, `bound`
 * (DEVRT_STATS_PEAK), says what a cell past its quota does and how much a settle hands out (st_fit,
 * st_settle): exact, the quotas add up to the peak and a cell past its quota takes the set's slow
 * path, which raises the peak to the exact total (st_add_slow); bound, a cell past its quota raises
 * it to its new figure (its high-water mark) and a settle hands out nothing more, so no call takes
 * a slow path and a read's peak is never below the true one, exact on one thread. Tags are found by
 * their address in a table read lock-free (st_find); a new address takes a mutex and is matched by
 * its text; texts past ST_TAGS share "(other)". */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "memory.h"
#include "account.h"

#define ST_TAGS 1024 /* distinct tag texts with figures of their own */
/* Tag addresses remembered: at most half the slots, so a probe always meets an empty one. */
#define ST_SLOT_BITS 13
#define ST_SLOTS (1 << ST_SLOT_BITS)
#define ST_SHARD_BITS 10
#define ST_SHARDS (1 << ST_SHARD_BITS) /* pointer-map shards: 16 threads rarely meet on one */

/* A thread's cell of a figure set ([0] bytes, [1] count): its share of the set's figures. cur may
 * go negative where this thread frees what others allocated; it never passes quota (st_fit). Cell
 * j of every set of a layer is under the lock of the overall set's cell j (uncontended while shard
 * j is owned: dv_shard), so a call takes one lock for both of its sets. */
typedef struct st_cell {
  _Alignas(DV_LINE) dv_spin mu; /* used in the overall set's cells only */
  int64_t cur[2], quota[2], total[2];
  int64_t want; /* exact: bytes of this cell's last allocation that took the slow path */
} st_cell;
/* A figure set (overall, "(other)", one tag's). Invariants: sum(cur) <= sum(quota) always, so a
 * total cannot pass the quotas' sum unseen, and sum(quota) <= peak after a settle (exact: equal,
 * always). The peak only changes with every cell locked (st_lock_all). */
typedef struct st_set {
  pthread_mutex_t mu; /* the slow path and readers; taken before the cells' locks */
  int64_t peak[2];    /* under mu and every cell's lock */
  st_cell* cells;     /* [DV_SHARDS]; NULL until the set is first used (tags) */
  st_cell* lk;        /* the overall set's cells: lk[j].mu locks cells[j] */
} st_set;
typedef struct st_tag {
  const char* name; /* under tag_mu; set before any slot points at the entry */
  st_set c;
} st_tag;
typedef struct st_slot {
  _Atomic(const char*) key; /* a tag's address, published (release) after `pair`; never removed */
  st_set* pair;             /* its tag's entry, or &other */
} st_slot;
typedef struct st_ent {
  uintptr_t key; /* 0: empty */
  uint64_t size;
  st_set* tag;
} st_ent;
typedef struct st_shard {
  _Alignas(DV_LINE) pthread_mutex_t mu; /* a mutex: st_insert may grow the table under it */
  st_ent* e;                            /* open addressing, linear probing, load <= 1/2 */
  size_t cap, n;
} st_shard;

typedef struct dv_stats {
  devrt_resource base;
  st_shard* shards; /* the pointer map [ST_SHARDS]; NULL over a recording layer, whose records
                       tell a free its tag (dv_stats_deallocate) */
  st_slot* slots;   /* [ST_SLOTS] by address (st_find); written under tag_mu, read lock-free */
  st_tag* tags;     /* [ST_TAGS] by text; entries past ntags are zero */
  unsigned ntags, nslots; /* entries of tags[] and keys of slots[] in use (under tag_mu) */
  pthread_mutex_t tag_mu; /* serialises adding a tag address (st_tag_add) and reading by text; taken
                             before any set's mu */
  bool bound; /* the switch: peaks an upper bound (DEVRT_STATS_PEAK=bound), else exact */
  st_set all, other;
} dv_stats;

/* Slow paths taken by every statistics layer (tests and measurements read it). */
_Atomic uint64_t dv_stats_slow_paths;

/* Upstream: called through its vtable. */
#define UP_ALLOCATE(self, ...) (self)->upstream->vtable->allocate((self)->upstream, __VA_ARGS__)
#define UP_DEALLOCATE(self, ...) (self)->upstream->vtable->deallocate((self)->upstream, __VA_ARGS__)

/* ---- counters ---- */

/* A set whose cells lk[j].mu locks (NULL: its own, for the overall set). */
static bool st_set_init(st_set* s, st_cell* lk) {
  if (!(s->cells = dv_zalloc_lines(sizeof(st_cell) * DV_SHARDS))) return false;
  s->lk = lk ? lk : s->cells;
  pthread_mutex_init(&s->mu, NULL);
  return true;
}
static void st_set_fini(st_set* s) {
  if (s->cells) pthread_mutex_destroy(&s->mu);
  free(s->cells);
}

/* Whether a cell lock is taken (asserts only: the caller's, where it must hold it). */
static __attribute__((unused)) bool st_held(dv_spin* l) {
  return atomic_load_explicit(l, memory_order_relaxed);
}

/* sum(quota) of s (asserts and st_settle; every cell locked). */
static int64_t st_quotas(const st_set* s, int k) {
  int64_t q = 0;
  for (unsigned j = 0; j < DV_SHARDS; j++) q += s->cells[j].quota[k];
  return q;
}

/* s->mu held: locks every cell (in index order) for an exact snapshot; sum: sum(cur). */
static void st_lock_all(st_set* s, int64_t sum[2], int64_t total[2]) {
  sum[0] = sum[1] = total[0] = total[1] = 0;
  for (unsigned j = 0; j < DV_SHARDS; j++) {
    st_cell* c = &s->cells[j];
    dv_spin_lock(&s->lk[j].mu);
    for (int k = 0; k < 2; k++) sum[k] += c->cur[k], total[k] += c->total[k];
  }
  DV_ASSERT(sum[0] >= 0 && sum[1] >= 0 && total[0] >= sum[0] && total[1] >= sum[1]);
  DV_ASSERT(sum[0] <= st_quotas(s, 0) && sum[1] <= st_quotas(s, 1)); /* no cell past its quota */
}
static void st_unlock_all(st_set* s) {
  for (unsigned j = 0; j < DV_SHARDS; j++) dv_spin_unlock(&s->lk[j].mu);
}

/* Every cell locked, sum: sum(cur): each cell's quota restarts from its cur, then `slack` goes to
 * the other cells that have allocated, as much as their last slow allocation (and one count)
 * each, from the one after `me` on, so threads taking turns do not each need the slow path; `me`
 * gets the rest. */
static void st_spread(st_set* s, unsigned me, const int64_t sum[2], const int64_t slack[2]) {
  DV_ASSERT(me < DV_SHARDS && slack[0] >= 0 && slack[1] >= 0);
  int64_t left[2] = {slack[0], slack[1]};
  for (unsigned n = 1; n <= DV_SHARDS; n++) {
    unsigned j = (me + n) % DV_SHARDS; /* me last */
    st_cell* c = &s->cells[j];
    DV_ASSERT(st_held(&s->lk[j].mu)); /* every cell locked */
    const int64_t want[2] = {c->want, c->want > 0};
    for (int k = 0; k < 2; k++) {
      int64_t g = j == me ? left[k] : want[k] < left[k] ? want[k] : left[k];
      c->quota[k] = c->cur[k] + g;
      left[k] -= g;
    }
  }
  DV_ASSERT(left[0] == 0 && left[1] == 0);
  DV_ASSERT(st_quotas(s, 0) == sum[0] + slack[0] && st_quotas(s, 1) == sum[1] + slack[1]);
}

/* The cell with the most room (quota - cur): where a read settling an exact set leaves the rest
 * of the slack, which is where the last slow path left it unless frees moved the room. */
static unsigned st_roomiest(const st_set* s) {
  unsigned best = 0;
  for (unsigned j = 1; j < DV_SHARDS; j++)
    if (s->cells[j].quota[0] - s->cells[j].cur[0] > s->cells[best].quota[0] - s->cells[best].cur[0])
      best = j;
  return best;
}

/* Every cell locked, sum: sum(cur): the set settles. The peak takes the quotas' sum: no cell
 * passed its quota, so it bounds every total since the last settle (exact: it is the peak
 * already). Then the quotas are handed out again; the switch says how much: exact, up to the peak
 * (sum(quota) = peak, so the next total past it takes a slow path); bound, nothing (each quota
 * restarts at its cur: the next marks are this settle's figures, which keeps one thread exact). */
static void st_settle(st_set* s, unsigned me, const int64_t sum[2], bool bound) {
  int64_t slack[2];
  for (int k = 0; k < 2; k++) {
    int64_t q = st_quotas(s, k);
    DV_ASSERT(bound || q == s->peak[k]); /* exact: the quotas add up to the peak */
    if (q > s->peak[k]) s->peak[k] = q;
    DV_ASSERT(sum[k] <= s->peak[k]);
    slack[k] = bound ? 0 : s->peak[k] - sum[k];
  }
  st_spread(s, me, sum, slack);
}

/* Exact: an allocation of d = {bytes, 1} past this cell's quota: with every cell locked, the total
 * it makes is exact; the peak rises to it, and the quotas are spread again to add up to it (no
 * fold: the quotas' sum may be above the total, which a peak must have been). */
static DV_NOINLINE void st_add_slow(st_set* s, unsigned me, const int64_t d[2], bool total) {
  atomic_fetch_add_explicit(&dv_stats_slow_paths, 1, memory_order_relaxed);
  pthread_mutex_lock(&s->mu);
  int64_t sum[2], tot[2], slack[2];
  st_lock_all(s, sum, tot);
  st_cell* c = &s->cells[me];
  for (int k = 0; k < 2; k++) {
    c->cur[k] += d[k];
    if (total) c->total[k] += d[k];
    sum[k] += d[k];
    if (sum[k] > s->peak[k]) s->peak[k] = sum[k];
    slack[k] = s->peak[k] - sum[k];
  }
  c->want = d[0];
  st_spread(s, me, sum, slack);
  st_unlock_all(s);
  pthread_mutex_unlock(&s->mu);
}

/* The lock of cell c held: an allocation of d enters the cell (total: a new one, not a refused
 * free being restored). Past its quota, the switch: exact, false (nothing entered: the caller takes
 * the set's slow path); bound, the quota rises with cur (the cell's high-water mark since the last
 * settle). */
static DV_INLINE bool st_fit(st_cell* c, const int64_t d[2], bool total, bool bound) {
  for (int k = 0; k < 2; k++)
    if (DV_UNLIKELY(c->cur[k] + d[k] > c->quota[k])) {
      if (!bound) return false;
      c->quota[k] = c->cur[k] + d[k];
    }
  c->cur[0] += d[0], c->cur[1] += 1;
  if (total) c->total[0] += d[0], c->total[1] += 1;
  DV_ASSERT(c->cur[0] <= c->quota[0] && c->cur[1] <= c->quota[1]);
  return true;
}
/* The overall figures and its tag's t: an allocation enters (sign 1) or leaves (sign -1) on this
 * thread's cells, under one uncontended lock on a line no other thread writes; an allocation that
 * does not fit a cell then takes that set's slow path. A free leaves the quotas: the cells' room
 * grows. */
static DV_INLINE void st_count(dv_stats* S, st_set* t, uint64_t size, int sign, bool total) {
  unsigned me = dv_shard();
  const int64_t d[2] = {(int64_t)size, 1};
  DV_ASSERT(me < DV_SHARDS && t->lk == S->all.cells && (int64_t)size > 0); /* one lock: all's */
  st_cell *a = &S->all.cells[me], *c = &t->cells[me];
  dv_spin_lock(&a->mu);
  if (sign > 0) {
    bool fa = st_fit(a, d, total, S->bound), fc = st_fit(c, d, total, S->bound);
    dv_spin_unlock(&a->mu);
    if (DV_UNLIKELY(!fa)) st_add_slow(&S->all, me, d, total);
    if (DV_UNLIKELY(!fc)) st_add_slow(t, me, d, total);
    return;
  }
  a->cur[0] -= d[0], a->cur[1] -= 1;
  c->cur[0] -= d[0], c->cur[1] -= 1;
  dv_spin_unlock(&a->mu);
}

/* A snapshot of s (all its cells locked, and the set settled); zeros for a set never used. */
static devrt_memory_stats st_read(st_set* s, bool bound) {
  if (!s->cells) return (devrt_memory_stats){{0}, {0}};
  int64_t sum[2], tot[2];
  pthread_mutex_lock(&s->mu);
  st_lock_all(s, sum, tot);
  st_settle(s, st_roomiest(s), sum, bound);
  devrt_memory_stats st = {{sum[0], s->peak[0], tot[0]}, {sum[1], s->peak[1], tot[1]}};
  st_unlock_all(s);
  pthread_mutex_unlock(&s->mu);
  return st;
}
/* The peak of s becomes its current total; every quota its cell's cur (nothing handed out). */
static void st_reset(st_set* s) {
  if (!s->cells) return;
  int64_t sum[2], tot[2];
  const int64_t none[2] = {0, 0};
  pthread_mutex_lock(&s->mu);
  st_lock_all(s, sum, tot);
  s->peak[0] = sum[0], s->peak[1] = sum[1];
  st_spread(s, 0, sum, none);
  st_unlock_all(s);
  pthread_mutex_unlock(&s->mu);
}

/* ---- tags ---- */

static uint64_t st_hash(uintptr_t k) {
  uint64_t x = k;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

/* The entry a tag address was seen with, or NULL (not yet, or the table was full). */
static DV_INLINE st_set* st_find(dv_stats* S, const char* tag) {
  for (size_t i = st_hash((uintptr_t)tag) & (ST_SLOTS - 1);; i = (i + 1) & (ST_SLOTS - 1)) {
    /* acquire: pairs with st_tag_add's release (pair is set before the key) */
    const char* k = atomic_load_explicit(&S->slots[i].key, memory_order_acquire);
    DV_ASSERT(!k || S->slots[i].pair); /* a key is published after its pair */
    if (k == tag) return S->slots[i].pair;
    if (!k) return NULL;
  }
}

/* tag_mu held: the entry of that text, or NULL. */
static st_set* st_by_name(dv_stats* S, const char* tag) {
  for (unsigned i = 0; i < S->ntags; i++)
    if (!strcmp(S->tags[i].name, tag)) return &S->tags[i].c;
  return NULL;
}

/* A tag address not in the table: its text's entry (a new one while there is room, else
 * "(other)"), remembered under the address while the table has room. */
static DV_NOINLINE st_set* st_tag_add(dv_stats* S, const char* tag) {
  pthread_mutex_lock(&S->tag_mu);
  st_set* p = st_find(S, tag); /* another thread may have added it */
  if (!p) {
    if (!(p = st_by_name(S, tag))) { /* a new text: an entry of its own while there is room and
                                        host memory for its cells */
      p = S->ntags < ST_TAGS && st_set_init(&S->tags[S->ntags].c, S->all.cells)
              ? &S->tags[S->ntags].c
              : &S->other;
      if (p != &S->other) S->tags[S->ntags++].name = tag;
    }
    DV_ASSERT(p == &S->other || ((st_tag*)((char*)p - offsetof(st_tag, c)))->name);
    if (S->nslots < ST_SLOTS / 2) { /* at most half the slots: a probe always meets an empty one */
      size_t i = st_hash((uintptr_t)tag) & (ST_SLOTS - 1);
      while (atomic_load_explicit(&S->slots[i].key, memory_order_relaxed))
        i = (i + 1) & (ST_SLOTS - 1);
      S->slots[i].pair = p;
      atomic_store_explicit(&S->slots[i].key, tag, memory_order_release); /* pairs: st_find */
      S->nslots++;
    }
  }
  DV_ASSERT(S->nslots <= ST_SLOTS / 2 && S->ntags <= ST_TAGS);
  pthread_mutex_unlock(&S->tag_mu);
  return p;
}

/* The tag's entry (its text's, or "(other)"). */
static DV_INLINE st_set* st_tag_of(dv_stats* S, const char* tag) {
  st_set* p = st_find(S, tag);
  return DV_LIKELY(p) ? p : st_tag_add(S, tag);
}

/* ---- pointer map ---- */

static st_shard* st_shard_of(dv_stats* S, uintptr_t k) {
  return &S->shards[st_hash(k) & (ST_SHARDS - 1)];
}
static size_t st_home(const st_shard* sh, uintptr_t k) {
  return (size_t)(st_hash(k) >> ST_SHARD_BITS) & (sh->cap - 1);
}

static void st_put(st_shard* sh, st_ent e) {
  size_t i = st_home(sh, e.key);
  while (sh->e[i].key && sh->e[i].key != e.key) i = (i + 1) & (sh->cap - 1);
  if (!sh->e[i].key) sh->n++;
  sh->e[i] = e;
}

/* mu held; false when the table cannot grow. */
static DV_NOINLINE bool st_insert(st_shard* sh, st_ent e) {
  if ((sh->n + 1) * 2 > sh->cap) {
    size_t cap = sh->cap ? sh->cap * 2 : 64;
    st_ent* ne = dv_zalloc_lines(cap * sizeof *ne);
    if (!ne) return false;
    st_shard old = *sh;
    sh->e = ne;
    sh->cap = cap;
    sh->n = 0;
    for (size_t i = 0; i < old.cap; i++)
      if (old.e[i].key) st_put(sh, old.e[i]);
    free(old.e);
  }
  st_put(sh, e);
  DV_ASSERT(sh->n * 2 <= sh->cap); /* load <= 1/2 */
  return true;
}

/* mu held; removes key's entry into *out (backward-shift deletion, no tombstones). */
static DV_NOINLINE bool st_remove(st_shard* sh, uintptr_t key, st_ent* out) {
  if (!sh->cap) return false;
  size_t m = sh->cap - 1, i = st_home(sh, key);
  while (sh->e[i].key != key) {
    if (!sh->e[i].key) return false;
    i = (i + 1) & m;
  }
  *out = sh->e[i];
  for (size_t j = (i + 1) & m; sh->e[j].key; j = (j + 1) & m) {
    size_t h = st_home(sh, sh->e[j].key);
    if (((j - h) & m) >= ((j - i) & m)) { /* e[j]'s home is not in (i, j]: it may move to i */
      sh->e[i] = sh->e[j];
      i = j;
    }
  }
  sh->e[i].key = 0;
  DV_ASSERT(sh->n > 0);
  sh->n--;
  return true;
}

/* ---- the layer ---- */

/* The pointer map's side of allocate and deallocate, over an upstream that is no recording layer
 * (out of line: devrt's own stacks put one beneath this layer). */
static DV_NOINLINE devrt_status map_add(dv_stats* S, void** out, size_t size, devrt_stream stream,
                                        const char* tag, st_set* t) {
  uintptr_t k = (uintptr_t)*out;
  st_shard* sh = st_shard_of(S, k);
  pthread_mutex_lock(&sh->mu);
  bool ok = st_insert(sh, (st_ent){k, size, t});
  pthread_mutex_unlock(&sh->mu);
  if (ok) return DEVRT_OK;
  UP_DEALLOCATE(&S->base, *out, size, stream);
  *out = NULL;
  return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                 "statistics allocate: no host memory to track %zu bytes (tag %s)", size,
                 tag ? tag : "untagged");
}
static DV_NOINLINE devrt_status map_deallocate(dv_stats* S, void* ptr, size_t size,
                                               devrt_stream stream) {
  uintptr_t k = (uintptr_t)ptr;
  st_shard* sh = st_shard_of(S, k);
  st_ent e;
  pthread_mutex_lock(&sh->mu);
  bool known = st_remove(sh, k, &e);
  pthread_mutex_unlock(&sh->mu);
  if (!known) return UP_DEALLOCATE(&S->base, ptr, size, stream); /* upstream refuses it */
  st_count(S, e.tag, e.size, -1, false);
  devrt_status s = UP_DEALLOCATE(&S->base, ptr, size, stream);
  if (s != DEVRT_OK) { /* refused: the allocation is still there */
    pthread_mutex_lock(&sh->mu);
    bool back = st_insert(sh, e);
    pthread_mutex_unlock(&sh->mu);
    if (back) st_count(S, e.tag, e.size, 1, false);
  }
  return s;
}

static DV_HOT devrt_status dv_stats_allocate(devrt_resource* self, size_t size, devrt_stream stream,
                                             const char* tag, void** out) {
  dv_stats* S = (dv_stats*)self;
  st_set* t = st_tag_of(S, tag ? tag : "untagged");
  DV_CHECK(UP_ALLOCATE(self, size, stream, tag, out));
  if (DV_UNLIKELY(S->shards)) DV_CHECK(map_add(S, out, size, stream, tag, t));
  st_count(S, t, size, 1, true);
  return DEVRT_OK;
}

/* Over a recording layer the counters fall once its deallocate accepted the free, by its record
 * (its deallocate_tagged); over any other upstream by this layer's pointer map, before the free
 * (restored if upstream refuses it). */
static DV_HOT devrt_status dv_stats_deallocate(devrt_resource* self, void* ptr, size_t size,
                                               devrt_stream stream) {
  dv_stats* S = (dv_stats*)self;
  if (DV_UNLIKELY(S->shards)) return map_deallocate(S, ptr, size, stream);
  const char* tag = NULL;
  DV_CHECK(self->upstream->vtable->deallocate_tagged(self->upstream, ptr, size, stream, &tag));
  st_count(S, st_tag_of(S, tag ? tag : "untagged"), size, -1, false);
  return DEVRT_OK;
}

static devrt_status st_query(devrt_resource* self, devrt_resource_figures* out) {
  dv_stats* S = (dv_stats*)self;
  DV_CHECK(devrt_resource_query(self->upstream, out));
  devrt_memory_stats st = st_read(&S->all, S->bound);
  out->bytes = st.bytes;
  out->count = st.count;
  return DEVRT_OK;
}

static void st_destroy(devrt_resource* self) {
  dv_stats* S = (dv_stats*)self;
  for (int i = 0; S->shards && i < ST_SHARDS; i++) {
    free(S->shards[i].e);
    pthread_mutex_destroy(&S->shards[i].mu); /* initialised whenever shards exist */
  }
  for (unsigned i = 0; S->tags && i < S->ntags; i++) st_set_fini(&S->tags[i].c);
  st_set_fini(&S->all), st_set_fini(&S->other);
  free(S->shards), free(S->slots), free(S->tags);
  pthread_mutex_destroy(&S->tag_mu);
  free(S);
}

static const devrt_resource_vtable stats_vtable = {.allocate = dv_stats_allocate,
                                                   .deallocate = dv_stats_deallocate,
                                                   .query = st_query,
                                                   .destroy = st_destroy};

devrt_status devrt_statistics_resource_create(devrt_resource* upstream, devrt_resource** out) {
  DV_ARG_CHECK(out, "devrt_statistics_resource_create", "out is NULL");
  *out = NULL;
  DV_RES_CHECK(upstream, "devrt_statistics_resource_create");
  return dv_stats_create(upstream, false, out);
}

devrt_status dv_stats_create(devrt_resource* upstream, bool bound, devrt_resource** out) {
  dv_stats* S = dv_zalloc_lines(sizeof *S);
  if (!S)
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_statistics_resource_create: no host memory");
  pthread_mutex_init(&S->tag_mu, NULL);
  S->bound = bound;
  bool records = upstream->vtable->deallocate_tagged != NULL;
  if (!(S->slots = calloc(ST_SLOTS, sizeof *S->slots)) ||
      !(S->tags = calloc(ST_TAGS, sizeof *S->tags)) || !st_set_init(&S->all, NULL) ||
      !st_set_init(&S->other, S->all.cells) ||
      (!records && !(S->shards = dv_zalloc_lines(sizeof(st_shard) * ST_SHARDS)))) {
    st_destroy(&S->base);
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_statistics_resource_create: no host memory");
  }
  for (int i = 0; S->shards && i < ST_SHARDS; i++) pthread_mutex_init(&S->shards[i].mu, NULL);
  devrt_status s =
      devrt_resource_init(&S->base, &stats_vtable, "statistics", upstream->rt, upstream);
  if (s != DEVRT_OK) {
    st_destroy(&S->base);
    return s;
  }
  *out = &S->base;
  return DEVRT_OK;
}

devrt_status devrt_statistics_get(devrt_resource* r, const char* tag, devrt_memory_stats* out) {
  DV_RES_CHECK(r, "devrt_statistics_get");
  DV_ARG_CHECK(r->vtable == &stats_vtable, "devrt_statistics_get",
               "resource %p is a %s layer, not statistics", (void*)r, r->name);
  DV_ARG_CHECK(out, "devrt_statistics_get", "out is NULL (tag %s)", tag ? tag : "(overall)");
  dv_stats* S = (dv_stats*)r;
  pthread_mutex_lock(&S->tag_mu); /* by text: tag need not outlive this call, so no slot for it */
  st_set* p = !tag ? &S->all : st_by_name(S, tag);
  if (!p && !strcmp(tag, "(other)")) p = &S->other;
  *out = p ? st_read(p, S->bound) : (devrt_memory_stats){{0}, {0}};
  pthread_mutex_unlock(&S->tag_mu);
  return DEVRT_OK;
}

devrt_status devrt_statistics_reset_peaks(devrt_resource* r) {
  DV_RES_CHECK(r, "devrt_statistics_reset_peaks");
  DV_ARG_CHECK(r->vtable == &stats_vtable, "devrt_statistics_reset_peaks",
               "resource %p is a %s layer, not statistics", (void*)r, r->name);
  dv_stats* S = (dv_stats*)r;
  pthread_mutex_lock(&S->tag_mu);
  for (unsigned i = 0; i < S->ntags + 2; i++)
    st_reset(i < S->ntags ? &S->tags[i].c : i == S->ntags ? &S->all : &S->other);
  pthread_mutex_unlock(&S->tag_mu);
  return DEVRT_OK;
}
