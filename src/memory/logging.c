/* logging.c: telemetry decorator: one record per allocate, allocate failure, free and reap, to a
 * callback (synchronously) and/or a file as CSV (RMM's columns first) or JSON Lines, buffered under
 * a mutex. Time is seconds since the layer was created (CLOCK_MONOTONIC, 9 decimals); Thread a
 * small per-thread id. A buffer is written when it holds buffer_records records, by the flusher
 * thread every DEVRT_LOG_FLUSH_INTERVAL_MS, at the layer's destruction and at exit. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "memory.h"
#include "account.h"
#include "../core/clock.h"
#include "../core/thread.h"

/* Upstream: called through its vtable. */
#define UP_ALLOCATE(self, ...) (self)->upstream->vtable->allocate((self)->upstream, __VA_ARGS__)
#define UP_DEALLOCATE(self, ...) (self)->upstream->vtable->deallocate((self)->upstream, __VA_ARGS__)

typedef struct dv_logging {
  devrt_resource base;
  devrt_log_format format;
  devrt_log_fn callback;
  void* user;
  int fd; /* -1: callback only */
  char* path;
  unsigned batch; /* records per write */
  uint64_t t0;    /* CLOCK_MONOTONIC ns at creation */
  /* guards buf, len, cap, nbuf, said; held across the buffer's realloc, its write() and the
   * one stderr line of a first loss */
  pthread_mutex_t mu;
  char* buf;
  size_t len, cap;
  unsigned nbuf;
  bool said; /* a loss was said on stderr */
  _Atomic uint64_t records, dropped;
  struct dv_logging* next; /* in lg_files, under lg_files_mu */
} dv_logging;

/* The layers that write a file, for the flusher thread and the exit hook. Lock order: lg_files_mu,
 * then a layer's mu. lg_files_mu guards lg_files and lg_flusher_up; it is held across their
 * flushes (so a layer's destruction, which unlinks it first, waits for one in progress) and the
 * flusher thread's start. */
static pthread_mutex_t lg_files_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t lg_files_cv = PTHREAD_COND_INITIALIZER; /* signalled: a layer was added */
static dv_logging* lg_files;
static bool lg_flusher_up;
static _Atomic bool lg_exiting; /* the exit hook ran: every record is written at once */

static const devrt_resource_vtable lg_vtable;

static uint64_t lg_thread(void) {
  static _Atomic uint64_t next = 1;
  static _Thread_local uint64_t id;
  if (!id) id = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed);
  return id;
}

static bool lg_write_all(int fd, const char* p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w == 0) errno = EIO;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

/* n records lost (mu held): counted in dropped; the layer's first loss is said on stderr. */
static void lg_lost(dv_logging* L, unsigned n, const char* why) {
  atomic_fetch_add_explicit(&L->dropped, n, memory_order_relaxed);
  if (!L->said)
    fprintf(stderr,
            "devrt: allocation log \"%s\": lost %u record(s): %s (log_dropped counts every "
            "record lost; said once)\n",
            L->path, n, why);
  L->said = true;
}

/* Writes the buffer out (mu held); on failure its records are lost (errno says why). */
static bool lg_drain(dv_logging* L) {
  DV_ASSERT(L->fd >= 0 && L->len <= L->cap && !L->len == !L->nbuf); /* a record has bytes */
  bool ok = lg_write_all(L->fd, L->buf, L->len);
  int e = errno;
  if (!ok) lg_lost(L, L->nbuf, strerror(e));
  L->len = 0;
  L->nbuf = 0;
  errno = e;
  return ok;
}

/* Writes every file layer's buffer (lg_files_mu held). */
static void lg_flush_files(void) {
  for (dv_logging* L = lg_files; L; L = L->next) {
    pthread_mutex_lock(&L->mu);
    if (L->len) lg_drain(L);
    pthread_mutex_unlock(&L->mu);
  }
}

/* The flusher thread: every DEVRT_LOG_FLUSH_INTERVAL_MS while a file layer exists. */
static void* lg_flusher(void* arg) {
  (void)arg;
  const struct timespec interval = {DEVRT_LOG_FLUSH_INTERVAL_MS / 1000,
                                    DEVRT_LOG_FLUSH_INTERVAL_MS % 1000 * 1000000L};
  pthread_mutex_lock(&lg_files_mu);
  for (;;) {
    while (!lg_files) pthread_cond_wait(&lg_files_cv, &lg_files_mu);
    pthread_mutex_unlock(&lg_files_mu);
    nanosleep(&interval, NULL);
    pthread_mutex_lock(&lg_files_mu);
    lg_flush_files();
  }
  return NULL;
}

/* At exit: every buffer is written, and records logged later (other threads still running) are
 * written one by one. */
static void lg_at_exit(void) {
  pthread_mutex_lock(&lg_files_mu);
  atomic_store_explicit(&lg_exiting, true, memory_order_relaxed); /* read under the layers' mu */
  lg_flush_files();
  pthread_mutex_unlock(&lg_files_mu);
}

/* Adds a file layer to lg_files; the first one registers the exit hook and starts the flusher,
 * which takes no asynchronous signals (they belong to the application's threads). */
static devrt_status lg_add_file(dv_logging* L) {
  pthread_mutex_lock(&lg_files_mu);
  int rc = 0;
  if (!lg_flusher_up && (rc = atexit(lg_at_exit)) == 0) {
    pthread_t t;
    rc = dv_thread_start(&t, lg_flusher, NULL); /* no asynchronous signals: core/thread.h */
    if (rc == 0) pthread_detach(t);
    lg_flusher_up = rc == 0;
  }
  DV_ASSERT(rc || lg_flusher_up); /* a file layer exists only with the flusher running */
  if (rc == 0) {
    L->next = lg_files;
    lg_files = L;
    pthread_cond_signal(&lg_files_cv);
  }
  pthread_mutex_unlock(&lg_files_mu);
  if (rc)
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                   "devrt_logging_resource_create: cannot start the log flusher for \"%s\": %s",
                   L->path, rc > 0 ? strerror(rc) : "atexit refused the exit hook");
  return DEVRT_OK;
}

/* Appends the tag: CSV quotes it when it holds , " CR or LF (doubling quotes); JSON escapes it. */
static char* lg_tag(char* o, const char* t, devrt_log_format f) {
  if (f == DEVRT_LOG_CSV) {
    bool q = strpbrk(t, ",\"\r\n") != NULL;
    if (q) *o++ = '"';
    for (; *t; t++) {
      if (*t == '"') *o++ = '"';
      *o++ = *t;
    }
    if (q) *o++ = '"';
    return o;
  }
  *o++ = '"';
  for (; *t; t++) {
    unsigned char c = (unsigned char)*t;
    if (c == '"' || c == '\\') *o++ = '\\';
    if (c < 0x20)
      o += sprintf(o, "\\u%04x", c);
    else
      *o++ = (char)c;
  }
  *o++ = '"';
  return o;
}

/* Formats r at o (room checked by the caller); returns the new end. */
static char* lg_format(char* o, const devrt_log_record* r, devrt_log_format f) {
  uint64_t s = r->time_ns / 1000000000u, ns = r->time_ns % 1000000000u;
  if (f == DEVRT_LOG_CSV) {
    o += sprintf(
        o, "%" PRIu64 ",%" PRIu64 ".%09" PRIu64 ",%s,0x%" PRIxPTR ",%" PRIu64 ",0x%" PRIx64 ",",
        r->thread, s, ns, r->action, (uintptr_t)r->ptr, r->size, r->stream);
    o = lg_tag(o, r->tag, f);
    return o + sprintf(o, ",%" PRIu64 ",%s\n", r->generation, devrt_status_name(r->status));
  }
  o += sprintf(o,
               "{\"thread\":%" PRIu64 ",\"time\":%" PRIu64 ".%09" PRIu64
               ",\"action\":\"%s\",\"pointer\":\"0x%" PRIxPTR "\",\"size\":%" PRIu64
               ",\"stream\":\"0x%" PRIx64 "\",\"tag\":",
               r->thread, s, ns, r->action, (uintptr_t)r->ptr, r->size, r->stream);
  o = lg_tag(o, r->tag, f);
  return o + sprintf(o, ",\"generation\":%" PRIu64 ",\"status\":\"%s\"}\n", r->generation,
                     devrt_status_name(r->status));
}

/* One record: the callback sees it at once; the file gets it through the buffer. Never fails. */
static void lg_log(dv_logging* L, uint64_t t, const char* action, void* ptr, uint64_t size,
                   devrt_stream stream, const char* tag, devrt_status st) {
  devrt_log_record r = {
      lg_thread(), t - L->t0, action, ptr, size, stream, 0, tag ? tag : "untagged", st};
  atomic_fetch_add_explicit(&L->records, 1, memory_order_relaxed);
  if (L->callback) L->callback(L->user, &r);
  if (L->fd < 0) return;
  size_t need = 384 + 6 * strlen(r.tag); /* fixed fields take < 300 */
  pthread_mutex_lock(&L->mu);
  if (L->cap - L->len < need) {
    size_t cap = L->cap * 2 > L->len + need ? L->cap * 2 : L->len + need;
    char* nb = realloc(L->buf, cap);
    if (nb) {
      L->buf = nb;
      L->cap = cap;
    }
  }
  if (L->cap - L->len >= need) {
    size_t was = L->len;
    L->len = (size_t)(lg_format(L->buf + L->len, &r, L->format) - L->buf);
    DV_ASSERT(L->len > was && L->len - was <= need); /* the room checked was enough */
    (void)was;
    if (++L->nbuf >= L->batch || atomic_load_explicit(&lg_exiting, memory_order_relaxed))
      lg_drain(L);
  } else {
    lg_lost(L, 1, "no host memory to buffer it");
  }
  DV_ASSERT(L->nbuf < L->batch && L->len <= L->cap); /* a full buffer was written */
  pthread_mutex_unlock(&L->mu);
}

static devrt_status lg_allocate(devrt_resource* self, size_t size, devrt_stream stream,
                                const char* tag, void** out) {
  devrt_status s = UP_ALLOCATE(self, size, stream, tag, out);
  lg_log((dv_logging*)self, dv_now_ns(), s == DEVRT_OK ? "allocate" : "allocate failure",
         s == DEVRT_OK ? *out : NULL, size, stream, tag, s);
  return s;
}

/* The time is taken before the upstream free, so for an address another thread gets back at once,
 * the free's Time is always earlier than that allocate's Time (rows are written as calls finish).
 */
static devrt_status lg_deallocate(devrt_resource* self, void* ptr, size_t size,
                                  devrt_stream stream) {
  uint64_t t = dv_now_ns();
  devrt_status s = UP_DEALLOCATE(self, ptr, size, stream);
  lg_log((dv_logging*)self, t, "free", ptr, size, stream, NULL, s);
  return s;
}

static devrt_status lg_reap(devrt_resource* self, unsigned flags, uint64_t* reaped) {
  uint64_t n = 0;
  devrt_status s = devrt_resource_reap(self->upstream, flags, &n);
  lg_log((dv_logging*)self, dv_now_ns(), "reap", NULL, n, DEVRT_STREAM_NONE, NULL, s);
  *reaped = n;
  return s;
}

static devrt_status lg_query(devrt_resource* self, devrt_resource_figures* out) {
  dv_logging* L = (dv_logging*)self;
  DV_CHECK(devrt_resource_query(self->upstream, out));
  out->log_records = atomic_load_explicit(&L->records, memory_order_relaxed);
  out->log_dropped = atomic_load_explicit(&L->dropped, memory_order_relaxed);
  return DEVRT_OK;
}

static void lg_destroy(devrt_resource* self) {
  dv_logging* L = (dv_logging*)self;
  if (L->fd >= 0) {
    pthread_mutex_lock(&lg_files_mu); /* unlinked first: no flush of it runs after this */
    dv_logging** at = &lg_files;
    while (*at && *at != L) at = &(*at)->next;
    if (*at) *at = L->next;
    pthread_mutex_unlock(&lg_files_mu);
    pthread_mutex_lock(&L->mu);
    if (L->len) lg_drain(L);
    pthread_mutex_unlock(&L->mu);
    close(L->fd);
  }
  pthread_mutex_destroy(&L->mu);
  free(L->buf);
  free(L->path);
  free(L);
}

static const devrt_resource_vtable lg_vtable = {.allocate = lg_allocate,
                                                .deallocate = lg_deallocate,
                                                .query = lg_query,
                                                .reap = lg_reap,
                                                .destroy = lg_destroy};

devrt_status devrt_logging_resource_create(devrt_resource* upstream,
                                           const devrt_logging_options* opts,
                                           devrt_resource** out) {
  DV_ARG_CHECK(out, "devrt_logging_resource_create", "out is NULL");
  *out = NULL;
  DV_RES_CHECK(upstream, "devrt_logging_resource_create");
  devrt_logging_options o = {0};
  if (opts) {
    o = *opts;
  } else {
    o.path = getenv("DEVRT_LOG");
    const char* f = getenv("DEVRT_LOG_FORMAT");
    if (f && strcmp(f, "csv") && strcmp(f, "jsonl"))
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                     "devrt_logging_resource_create: DEVRT_LOG_FORMAT=\"%s\" is not csv or jsonl",
                     f);
    o.format = f && !strcmp(f, "jsonl") ? DEVRT_LOG_JSONL : DEVRT_LOG_CSV;
  }
  if (o.path && !*o.path) o.path = NULL;
  DV_ARG_CHECK(o.path || o.callback, "devrt_logging_resource_create",
               "no path and no callback (opts %p%s)", (const void*)opts,
               opts ? "" : ", DEVRT_LOG unset");
  DV_ARG_CHECK(o.format == DEVRT_LOG_CSV || o.format == DEVRT_LOG_JSONL,
               "devrt_logging_resource_create",
               "format %d is neither DEVRT_LOG_CSV nor DEVRT_LOG_JSONL", (int)o.format);

  dv_logging* L = dv_zalloc_lines(sizeof *L);
  if (!L)
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_logging_resource_create: no host memory");
  L->format = o.format;
  L->callback = o.callback;
  L->user = o.user;
  L->batch = o.buffer_records ? o.buffer_records : 256;
  L->fd = -1;
  L->t0 = dv_now_ns();
  pthread_mutex_init(&L->mu, NULL);
  devrt_status s = DEVRT_OK;
  if (o.path) {
    L->cap = (L->batch < 4096 ? L->batch : 4096) * (size_t)160 + 512;
    L->buf = malloc(L->cap);
    L->path = strdup(o.path);
    if (!L->buf || !L->path) {
      s = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                  "devrt_logging_resource_create: no host memory for a %zu-byte buffer", L->cap);
    } else if ((L->fd = open(o.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
      s = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                  "devrt_logging_resource_create: cannot open \"%s\": %s", o.path, strerror(errno));
    } else if (o.format == DEVRT_LOG_CSV) {
      static const char hdr[] = "Thread,Time,Action,Pointer,Size,Stream,Tag,Generation,Status\n";
      if (!lg_write_all(L->fd, hdr, sizeof hdr - 1))
        s = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                    "devrt_logging_resource_create: cannot write \"%s\": %s", o.path,
                    strerror(errno));
    }
  }
  if (s == DEVRT_OK && L->fd >= 0) s = lg_add_file(L);
  if (s == DEVRT_OK)
    s = devrt_resource_init(&L->base, &lg_vtable, "logging", upstream->rt, upstream);
  if (s != DEVRT_OK) {
    lg_destroy(&L->base); /* nothing buffered yet: it unlinks and closes */
    return s;
  }
  *out = &L->base;
  return DEVRT_OK;
}

devrt_status devrt_logging_flush(devrt_resource* r) {
  DV_RES_CHECK(r, "devrt_logging_flush");
  DV_ARG_CHECK(r->vtable == &lg_vtable, "devrt_logging_flush",
               "resource %p is a %s layer, not logging", (void*)r, r->name);
  dv_logging* L = (dv_logging*)r;
  if (L->fd < 0) return DEVRT_OK;
  pthread_mutex_lock(&L->mu);
  unsigned n = L->nbuf;
  bool ok = !L->len || lg_drain(L);
  int e = errno;
  pthread_mutex_unlock(&L->mu);
  if (!ok)
    return dv_fail(DEVRT_ERR_BACKEND_ERROR,
                   "devrt_logging_flush: writing %u records to \"%s\" failed: %s", n, L->path,
                   strerror(e));
  return DEVRT_OK;
}
