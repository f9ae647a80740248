/* test_logging_stats.c: the logging and statistics layers over a fake upstream (and devrt's async
 * leaf): the record sequence through a callback, CSV and JSONL files parsed back, buffering, the
 * inner result untouched, bad options; RMM's statistics sequence, per-tag figures, reset_peaks,
 * stacked layers, refused frees, and 8 threads racing alloc/free. */
#include <pthread.h>
#include <unistd.h>
#include "core/error.h"
#include "test.h"

/* ---- a fake upstream: 256-aligned malloc, refuses unknown pointers, fails on demand ---- */

typedef struct fake {
  devrt_resource base;
  pthread_mutex_t mu;
  void** live;
  size_t n, cap;
  uint64_t live_bytes;
  _Atomic int fail_alloc, fail_free; /* the next N calls fail */
} fake;

static devrt_status fake_allocate(devrt_resource* self, size_t size, devrt_stream stream,
                                  const char* tag, void** out) {
  fake* f = (fake*)self;
  (void)stream;
  if (atomic_load(&f->fail_alloc) > 0 && atomic_fetch_sub(&f->fail_alloc, 1) > 0)
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED,
                   "fake allocate: injected failure (%zu bytes, tag %s)", size,
                   tag ? tag : "untagged");
  void* p = aligned_alloc(256, (size + 255) / 256 * 256);
  if (!p)
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED, "fake allocate: out of memory (%zu bytes)", size);
  pthread_mutex_lock(&f->mu);
  if (f->n == f->cap) {
    f->cap = f->cap ? f->cap * 2 : 64;
    f->live = realloc(f->live, f->cap * sizeof *f->live);
  }
  f->live[f->n++] = p;
  f->live_bytes += size;
  pthread_mutex_unlock(&f->mu);
  *out = p;
  return DEVRT_OK;
}

static devrt_status fake_deallocate(devrt_resource* self, void* ptr, size_t size,
                                    devrt_stream stream) {
  fake* f = (fake*)self;
  (void)stream;
  if (atomic_load(&f->fail_free) > 0 && atomic_fetch_sub(&f->fail_free, 1) > 0)
    return dv_fail(DEVRT_ERR_BACKEND_ERROR, "fake deallocate: injected failure (%p)", ptr);
  pthread_mutex_lock(&f->mu);
  size_t i = 0;
  while (i < f->n && f->live[i] != ptr) i++;
  bool found = i < f->n;
  if (found) {
    f->live[i] = f->live[--f->n];
    f->live_bytes -= size;
  }
  pthread_mutex_unlock(&f->mu);
  if (!found) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "fake deallocate: %p is not live", ptr);
  free(ptr);
  return DEVRT_OK;
}

static devrt_status fake_query(devrt_resource* self, devrt_resource_figures* out) {
  fake* f = (fake*)self;
  pthread_mutex_lock(&f->mu);
  out->live_bytes = f->live_bytes;
  pthread_mutex_unlock(&f->mu);
  out->granularity = 256;
  return DEVRT_OK;
}

static devrt_status fake_reap(devrt_resource* self, unsigned flags, uint64_t* reaped) {
  (void)self, (void)flags;
  *reaped = 4096;
  return DEVRT_OK;
}

static void fake_destroy(devrt_resource* self) {
  fake* f = (fake*)self;
  for (size_t i = 0; i < f->n; i++) free(f->live[i]);
  free(f->live);
  pthread_mutex_destroy(&f->mu);
  free(f);
}

static const devrt_resource_vtable fake_vt = {.allocate = fake_allocate,
                                              .deallocate = fake_deallocate,
                                              .query = fake_query,
                                              .reap = fake_reap,
                                              .destroy = fake_destroy};

static devrt_resource* fake_new(devrt_runtime* rt) {
  fake* f = calloc(1, sizeof *f);
  pthread_mutex_init(&f->mu, NULL);
  REQUIRE_OK(devrt_resource_init(&f->base, &fake_vt, "fake", rt, NULL));
  return &f->base;
}

static int is_fake(devrt_resource* r) { return r->vtable == &fake_vt; }

/* The next allocation through `up` fails: the fake on demand, devrt's leaves by an injected fault.
 */
static void fail_next_alloc(devrt_resource* up) {
  if (is_fake(up))
    atomic_store(&((fake*)up)->fail_alloc, 1);
  else
    up->rt->be->fault_arm(up->rt->dev, DV_FAULT_ALLOC, 1);
}

/* ---- helpers ---- */

typedef struct collector {
  pthread_mutex_t mu;
  devrt_log_record r[16];
  int n;
  _Atomic uint64_t total;
} collector;

static void collect(void* user, const devrt_log_record* rec) {
  collector* c = user;
  atomic_fetch_add(&c->total, 1);
  pthread_mutex_lock(&c->mu);
  if (c->n < 16) c->r[c->n++] = *rec;
  pthread_mutex_unlock(&c->mu);
}

/* Splits one CSV line (quoted fields, "" for a quote) into up to 16 fields; returns their count. */
static int csv_split(const char* line, char f[][128]) {
  int n = 0;
  const char* p = line;
  for (;;) {
    size_t k = 0;
    if (*p == '"') {
      for (p++; *p && !(*p == '"' && p[1] != '"'); p++) {
        if (*p == '"') p++;
        if (k < 127) f[n][k++] = *p;
      }
      if (*p == '"') p++;
    } else {
      for (; *p && *p != ',' && *p != '\n'; p++)
        if (k < 127) f[n][k++] = *p;
    }
    f[n++][k] = 0;
    if (*p != ',' || n == 16) break;
    p++;
  }
  return n;
}

static void stats_of(devrt_resource* s, const char* tag, devrt_memory_stats* st) {
  CHECK_OK(devrt_statistics_get(s, tag, st));
}

#define MiB (1ull << 20)
#define CHECK_CTR(c, cur, pk, tot) \
  CHECK((c).current == (int64_t)(cur) && (c).peak == (int64_t)(pk) && (c).total == (int64_t)(tot))

/* ---- logging ---- */

static void test_record_sequence(devrt_resource* up, devrt_stream s) {
  collector col = {.mu = PTHREAD_MUTEX_INITIALIZER};
  devrt_logging_options o = {.callback = collect, .user = &col};
  devrt_resource* L;
  REQUIRE_OK(devrt_logging_resource_create(up, &o, &L));
  CHECK(!strcmp(devrt_resource_name(L), "logging") && devrt_resource_upstream(L) == up);
  void *p, *q = (void*)1;
  CHECK_OK(devrt_resource_allocate(L, 1000, s, "alpha", &p));
  fail_next_alloc(up);
  devrt_status fs = devrt_resource_allocate(L, 2000, s, NULL, &q);
  CHECK(fs != DEVRT_OK && q == NULL && devrt_last_error()[0]);
  CHECK_OK(devrt_resource_deallocate(L, p, 1000, s));
  uint64_t reaped = 0;
  CHECK_OK(devrt_resource_reap(L, DEVRT_REAP_WAIT, &reaped));
  CHECK(col.n == 4);
  if (col.n == 4) {
    devrt_log_record* r = col.r;
    CHECK(!strcmp(r[0].action, "allocate") && r[0].ptr == p && r[0].size == 1000 &&
          !strcmp(r[0].tag, "alpha") && r[0].status == DEVRT_OK && r[0].stream == s &&
          r[0].generation == 0);
    CHECK(!strcmp(r[1].action, "allocate failure") && r[1].ptr == NULL && r[1].size == 2000 &&
          !strcmp(r[1].tag, "untagged") && r[1].status == fs);
    CHECK(!strcmp(r[2].action, "free") && r[2].ptr == p && r[2].size == 1000 &&
          r[2].status == DEVRT_OK);
    CHECK(!strcmp(r[3].action, "reap") && r[3].size == reaped && r[3].status == DEVRT_OK);
    if (is_fake(up)) CHECK(reaped == 4096);
    for (int i = 0; i < 4; i++) CHECK(r[i].thread == r[0].thread && r[i].thread > 0);
    for (int i = 1; i < 4; i++) CHECK(r[i].time_ns >= r[i - 1].time_ns);
  }
  devrt_resource_figures fig;
  CHECK_OK(devrt_resource_query(L, &fig));
  CHECK(fig.log_records == 4 && fig.log_dropped == 0);
  CHECK_OK(devrt_logging_flush(L)); /* no file: nothing to do */
  CHECK_OK(devrt_resource_release(L));
}

static void test_csv(devrt_resource* up, devrt_stream s) {
  char path[64];
  t_tmp_path(path, sizeof path);
  devrt_logging_options o = {.path = path, .format = DEVRT_LOG_CSV, .buffer_records = 100};
  devrt_resource* L;
  REQUIRE_OK(devrt_logging_resource_create(up, &o, &L));
  static const char odd[] = "odd,\"tag\"";
  void *a, *b, *c;
  CHECK_OK(devrt_resource_allocate(L, 4096, s, odd, &a));
  CHECK_OK(devrt_resource_allocate(L, 777, s, NULL, &b));
  fail_next_alloc(up);
  devrt_status fs = devrt_resource_allocate(L, 12345, s, "big", &c);
  CHECK(fs != DEVRT_OK);
  CHECK_OK(devrt_resource_deallocate(L, a, 4096, s));
  CHECK_OK(devrt_resource_deallocate(L, b, 777, s));
  uint64_t reaped;
  CHECK_OK(devrt_resource_reap(L, 0, &reaped));

  char* before = t_slurp(path); /* buffered: only the header so far */
  CHECK(!strcmp(before, "Thread,Time,Action,Pointer,Size,Stream,Tag,Generation,Status\n"));
  free(before);
  CHECK_OK(devrt_logging_flush(L));
  char* text = t_slurp(path);
  CHECK(t_lines(text) == 7);
  struct {
    const char* action;
    void* ptr;
    uint64_t size;
    const char* tag;
    devrt_status st;
  } want[6] = {
      {"allocate", a, 4096, odd, DEVRT_OK},         {"allocate", b, 777, "untagged", DEVRT_OK},
      {"allocate failure", NULL, 12345, "big", fs}, {"free", a, 4096, "untagged", DEVRT_OK},
      {"free", b, 777, "untagged", DEVRT_OK},       {"reap", NULL, reaped, "untagged", DEVRT_OK}};
  char* line = strchr(text, '\n');
  CHECK(line && !strncmp(text, "Thread,Time,Action,Pointer,Size,Stream,Tag,Generation,Status\n",
                         (size_t)(line - text + 1)));
  double last_time = 0;
  for (int i = 0; i < 6 && line && line[1]; i++) {
    line++;
    char f[16][128];
    CHECK(csv_split(line, f) == 9);
    CHECK(strtoull(f[0], NULL, 10) > 0);
    double t = strtod(f[1], NULL);
    CHECK(t >= last_time && strchr(f[1], '.'));
    last_time = t;
    CHECK(!strcmp(f[2], want[i].action));
    CHECK(!strncmp(f[3], "0x", 2) && strtoull(f[3], NULL, 16) == (uintptr_t)want[i].ptr);
    CHECK(strtoull(f[4], NULL, 10) == want[i].size);
    CHECK(!strncmp(f[5], "0x", 2) && strtoull(f[5], NULL, 16) == (i == 5 ? 0 : s));
    CHECK(!strcmp(f[6], want[i].tag));
    CHECK(!strcmp(f[7], "0"));
    CHECK(!strcmp(f[8], devrt_status_name(want[i].st)));
    line = strchr(line, '\n');
  }
  free(text);

  /* Release writes what is still buffered. */
  void* d;
  CHECK_OK(devrt_resource_allocate(L, 256, s, "last", &d));
  CHECK_OK(devrt_resource_deallocate(L, d, 256, s));
  text = t_slurp(path);
  CHECK(t_lines(text) == 7);
  free(text);
  CHECK_OK(devrt_resource_release(L));
  text = t_slurp(path);
  CHECK(t_lines(text) == 9 && strstr(text, ",last,0,OK\n"));
  free(text);
  unlink(path);
}

static void test_jsonl(devrt_resource* up, devrt_stream s) {
  char path[64];
  t_tmp_path(path, sizeof path);
  devrt_logging_options o = {.path = path, .format = DEVRT_LOG_JSONL, .buffer_records = 2};
  devrt_resource* L;
  REQUIRE_OK(devrt_logging_resource_create(up, &o, &L));
  void* a;
  CHECK_OK(devrt_resource_allocate(L, 512, s, "j\"son", &a));
  CHECK_OK(devrt_resource_deallocate(L, a, 512, s));
  CHECK_OK(devrt_resource_allocate(L, 1024, s, NULL,
                                   &a)); /* third record: stays buffered (batch of 2) */
  char* text = t_slurp(path);
  CHECK(t_lines(text) == 2);
  free(text);
  CHECK_OK(devrt_resource_deallocate(L, a, 1024, s));
  text = t_slurp(path);
  CHECK(t_lines(text) == 4);
  const char* want_action[4] = {"allocate", "free", "allocate", "free"};
  const uint64_t want_size[4] = {512, 512, 1024, 1024};
  const char* want_tag[4] = {"\"j\\\"son\"", "\"untagged\"", "\"untagged\"", "\"untagged\""};
  const char* p = text;
  for (int i = 0; i < 4 && *p; i++) {
    const char* end = strchr(p, '\n');
    CHECK(p[0] == '{' && end && end[-1] == '}');
    char key[64];
    snprintf(key, sizeof key, "\"action\":\"%s\"", want_action[i]);
    CHECK(strstr(p, key) && strstr(p, key) < end);
    const char* v = strstr(p, "\"size\":");
    CHECK(v && strtoull(v + 7, NULL, 10) == want_size[i]);
    v = strstr(p, "\"pointer\":\"0x");
    CHECK(v && v < end && strtoull(v + 11, NULL, 16) != 0);
    v = strstr(p, "\"tag\":");
    CHECK(v && !strncmp(v + 6, want_tag[i], strlen(want_tag[i])));
    CHECK(strstr(p, "\"thread\":") && strstr(p, "\"time\":") && strstr(p, "\"stream\":\"0x") &&
          strstr(p, "\"generation\":0,") && strstr(p, "\"status\":\"OK\"}"));
    p = end + 1;
  }
  free(text);
  CHECK_OK(devrt_resource_release(L));
  unlink(path);
}

/* The layer hands back upstream's pointers and statuses untouched. */
static void test_untouched(devrt_resource* up, devrt_stream s) {
  collector col = {.mu = PTHREAD_MUTEX_INITIALIZER};
  devrt_logging_options o = {.callback = collect, .user = &col};
  devrt_resource* L;
  REQUIRE_OK(devrt_logging_resource_create(up, &o, &L));
  void *p, *q;
  CHECK_OK(devrt_resource_allocate(L, 3000, s, "x", &p));
  CHECK_OK(devrt_resource_deallocate(up, p, 3000, s)); /* upstream's own pointer */
  CHECK_OK(devrt_resource_allocate(up, 3000, s, "x", &q));
  CHECK_OK(devrt_resource_deallocate(L, q, 3000, s));
  devrt_status bare = devrt_resource_deallocate(up, q, 3000, s); /* double free, bare and logged */
  CHECK(bare != DEVRT_OK);
  CHECK_STATUS(devrt_resource_deallocate(L, q, 3000, s), bare);
  CHECK(col.n == 3 && col.r[2].status == bare && !strcmp(col.r[2].action, "free"));
  fail_next_alloc(up);
  devrt_status fb = devrt_resource_allocate(up, 64, s, NULL, &p);
  fail_next_alloc(up);
  CHECK_STATUS(devrt_resource_allocate(L, 64, s, NULL, &q), fb);
  CHECK(p == NULL && q == NULL);
  CHECK_OK(devrt_resource_release(L));
}

static void test_logging_errors(devrt_runtime* rt, devrt_resource* up, devrt_stream s) {
  devrt_resource* L = (devrt_resource*)1;
  devrt_logging_options o = {.path = "/nonexistent/dir/log.csv"};
  CHECK_STATUS(devrt_logging_resource_create(up, &o, &L), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(L == NULL && strstr(devrt_last_error(), "/nonexistent/dir/log.csv"));
  o = (devrt_logging_options){0};
  CHECK_STATUS(devrt_logging_resource_create(up, &o, &L), DEVRT_ERR_INVALID_ARGUMENT);
  o = (devrt_logging_options){.callback = collect, .format = (devrt_log_format)7};
  CHECK_STATUS(devrt_logging_resource_create(up, &o, &L), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_logging_resource_create(NULL, &o, &L), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_logging_flush(up), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_logging_flush(NULL), DEVRT_ERR_INVALID_ARGUMENT);

  /* opts NULL: DEVRT_LOG and DEVRT_LOG_FORMAT. */
  unsetenv("DEVRT_LOG");
  CHECK_STATUS(devrt_logging_resource_create(up, NULL, &L), DEVRT_ERR_INVALID_ARGUMENT);
  char path[64];
  t_tmp_path(path, sizeof path);
  setenv("DEVRT_LOG", path, 1);
  setenv("DEVRT_LOG_FORMAT", "xml", 1);
  CHECK_STATUS(devrt_logging_resource_create(up, NULL, &L), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "DEVRT_LOG_FORMAT"));
  setenv("DEVRT_LOG_FORMAT", "jsonl", 1);
  REQUIRE_OK(devrt_logging_resource_create(up, NULL, &L));
  void* p;
  CHECK_OK(devrt_resource_allocate(L, 256, s, "env", &p));
  CHECK_OK(devrt_resource_deallocate(L, p, 256, s));
  CHECK_STATUS(devrt_statistics_get(L, NULL, &(devrt_memory_stats){{0}, {0}}),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_OK(devrt_resource_release(L));
  char* text = t_slurp(path);
  CHECK(t_lines(text) == 2 && text[0] == '{' && strstr(text, "\"tag\":\"env\""));
  free(text);
  unlink(path);
  unsetenv("DEVRT_LOG");
  unsetenv("DEVRT_LOG_FORMAT");

  /* A write error drops records, never the call. */
  if (access("/dev/full", W_OK) == 0) {
    o = (devrt_logging_options){
        .path = "/dev/full", .format = DEVRT_LOG_JSONL, .buffer_records = 1};
    REQUIRE_OK(devrt_logging_resource_create(up, &o, &L));
    CHECK_OK(devrt_resource_allocate(L, 256, s, NULL, &p));
    CHECK_OK(devrt_resource_deallocate(L, p, 256, s));
    devrt_resource_figures fig;
    CHECK_OK(devrt_resource_query(L, &fig));
    CHECK(fig.log_records == 2 && fig.log_dropped == 2);
    CHECK_OK(devrt_resource_release(L));
    o.format = DEVRT_LOG_CSV; /* the header cannot be written: an error at creation */
    CHECK_STATUS(devrt_logging_resource_create(up, &o, &L), DEVRT_ERR_INVALID_ARGUMENT);
  }
  (void)rt;
}

/* ---- statistics ---- */

static void test_stats_sequence(devrt_resource* up, devrt_stream s) {
  devrt_resource* S;
  REQUIRE_OK(devrt_statistics_resource_create(up, &S));
  CHECK(!strcmp(devrt_resource_name(S), "statistics"));
  devrt_memory_stats st;
  stats_of(S, NULL, &st);
  CHECK_CTR(st.bytes, 0, 0, 0);
  CHECK_CTR(st.count, 0, 0, 0);
  stats_of(S, "never", &st);
  CHECK_CTR(st.bytes, 0, 0, 0);

  /* RMM's sequence: 10 x 10 MiB, free 5; 10 more, free all. */
  void* p[20];
  for (int i = 0; i < 10; i++) REQUIRE_OK(devrt_resource_allocate(S, 10 * MiB, s, "first", &p[i]));
  for (int i = 0; i < 5; i++) CHECK_OK(devrt_resource_deallocate(S, p[i], 10 * MiB, s));
  stats_of(S, NULL, &st);
  CHECK_CTR(st.bytes, 50 * MiB, 100 * MiB, 100 * MiB);
  CHECK_CTR(st.count, 5, 10, 10);
  static char second[] = "second"; /* the same text as the literal, at another address */
  for (int i = 10; i < 20; i++)
    REQUIRE_OK(devrt_resource_allocate(S, 10 * MiB, s, i & 1 ? "second" : second, &p[i]));
  devrt_resource_figures fig;
  CHECK_OK(devrt_resource_query(S, &fig));
  CHECK_CTR(fig.bytes, 150 * MiB, 150 * MiB, 200 * MiB);
  CHECK_CTR(fig.count, 15, 15, 20);
  CHECK(fig.live_bytes >= 150 * MiB);
  for (int i = 5; i < 20; i++) CHECK_OK(devrt_resource_deallocate(S, p[i], 10 * MiB, s));
  stats_of(S, NULL, &st);
  CHECK_CTR(st.bytes, 0, 150 * MiB, 200 * MiB);
  CHECK_CTR(st.count, 0, 15, 20);
  char key[16];
  strcpy(key, "first");
  stats_of(S, key, &st);
  CHECK_CTR(st.bytes, 0, 100 * MiB, 100 * MiB);
  CHECK_CTR(st.count, 0, 10, 10);
  stats_of(S, "second", &st);
  CHECK_CTR(st.bytes, 0, 100 * MiB, 100 * MiB);
  CHECK_CTR(st.count, 0, 10, 10);

  /* Requested sizes; NULL tag is "untagged"; reset_peaks: peak = current. */
  void *a, *b;
  CHECK_OK(devrt_resource_allocate(S, 1000, s, NULL, &a));
  CHECK_OK(devrt_resource_allocate(S, 3, s, "first", &b));
  CHECK_OK(devrt_statistics_reset_peaks(S));
  stats_of(S, NULL, &st);
  CHECK_CTR(st.bytes, 1003, 1003, 200 * MiB + 1003);
  CHECK_CTR(st.count, 2, 2, 22);
  stats_of(S, "untagged", &st);
  CHECK_CTR(st.bytes, 1000, 1000, 1000);
  stats_of(S, "first", &st);
  CHECK_CTR(st.bytes, 3, 3, 100 * MiB + 3);
  stats_of(S, "second", &st);
  CHECK_CTR(st.bytes, 0, 0, 100 * MiB);

  /* A refused free changes nothing: a double free, and (fake) an upstream that refuses a live one.
   */
  CHECK_OK(devrt_resource_deallocate(S, b, 3, s));
  devrt_memory_stats before, after;
  stats_of(S, NULL, &before);
  CHECK(devrt_resource_deallocate(S, b, 3, s) != DEVRT_OK);
  stats_of(S, NULL, &after);
  CHECK(!memcmp(&before, &after, sizeof before));
  if (is_fake(up)) {
    atomic_store(&((fake*)up)->fail_free, 1);
    CHECK_STATUS(devrt_resource_deallocate(S, a, 1000, s), DEVRT_ERR_BACKEND_ERROR);
    stats_of(S, NULL, &after);
    CHECK(!memcmp(&before, &after, sizeof before));
  }
  CHECK_OK(devrt_resource_deallocate(S, a, 1000, s));
  stats_of(S, NULL, &st);
  CHECK(st.bytes.current == 0 && st.count.current == 0 && st.count.total == 22);
  fail_next_alloc(up); /* a failed allocate counts nothing */
  CHECK(devrt_resource_allocate(S, 256, s, NULL, &a) != DEVRT_OK);
  stats_of(S, NULL, &after);
  CHECK(!memcmp(&st, &after, sizeof st));

  /* More tag texts than the layer's entries (1024): the rest share "(other)", and more tag
   * addresses than it remembers (4096), so later ones are matched by text on every call. Each
   * text is used twice, the second time at another address. */
  enum { MANY = 5000 };
  static char many[2][MANY][16];
  for (int i = 0; i < 2 * MANY; i++) {
    char* t = many[i / MANY][i % MANY];
    snprintf(t, sizeof many[0][0], "t%d", i % MANY);
    CHECK_OK(devrt_resource_allocate(S, 256, s, t, &a));
    CHECK_OK(devrt_resource_deallocate(S, a, 256, s));
  }
  int64_t own = 0, owners = 0;
  for (int i = 0; i < MANY; i++) {
    stats_of(S, many[0][i], &st);
    CHECK(st.count.total == 0 || (st.count.total == 2 && st.bytes.total == 512));
    own += st.count.total, owners += st.count.total > 0;
  }
  stats_of(S, "(other)", &st);
  CHECK(owners == 1024 - 3); /* "first", "second" and "untagged" came first */
  CHECK(own + st.count.total == 2 * MANY && st.count.current == 0 && st.count.peak == 1);
  CHECK_STATUS(devrt_statistics_get(up, NULL, &st), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_statistics_reset_peaks(up), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_statistics_get(S, NULL, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  devrt_resource* none = up;
  CHECK_STATUS(devrt_statistics_resource_create(NULL, &none), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(none == NULL);
  CHECK_OK(devrt_resource_release(S));
}

static void test_stats_stacked(devrt_resource* up, devrt_stream s) {
  devrt_resource *inner, *outer;
  REQUIRE_OK(devrt_statistics_resource_create(up, &inner));
  REQUIRE_OK(devrt_statistics_resource_create(inner, &outer));
  CHECK_OK(devrt_resource_release(inner)); /* outer holds it */
  void *a, *b;
  CHECK_OK(devrt_resource_allocate(outer, 5000, s, "o", &a));
  CHECK_OK(devrt_resource_allocate(inner, 700, s, "i", &b));
  devrt_memory_stats so, si;
  stats_of(outer, NULL, &so);
  stats_of(inner, NULL, &si);
  CHECK_CTR(so.bytes, 5000, 5000, 5000);
  CHECK_CTR(si.bytes, 5700, 5700, 5700);
  CHECK_CTR(si.count, 2, 2, 2);
  stats_of(inner, "o", &si);
  CHECK_CTR(si.bytes, 5000, 5000, 5000);
  devrt_resource_figures fig;
  CHECK_OK(devrt_resource_query(outer, &fig));
  CHECK(fig.bytes.current == 5000 && fig.count.current == 1);
  CHECK_OK(devrt_resource_deallocate(outer, a, 5000, s));
  CHECK_OK(devrt_resource_deallocate(inner, b, 700, s));
  stats_of(inner, NULL, &si);
  CHECK_CTR(si.bytes, 0, 5700, 5700);
  CHECK_OK(devrt_resource_release(outer));
}

/* ---- 8 threads x 5000 alloc/free through logging(file + callback) -> statistics ---- */

enum { NT = 8, ITERS = 5000 };
typedef struct worker {
  devrt_runtime* rt;
  devrt_resource* top;
  int id, errors;
} worker;

static void* work(void* arg) {
  worker* w = arg;
  static const char* tags[4] = {"w0", "w1", "w2", NULL};
  devrt_stream s;
  if (devrt_stream_acquire(w->rt, DEVRT_ACQUIRE_WAIT, &s) != DEVRT_OK) {
    w->errors++;
    return NULL;
  }
  for (int i = 0; i < ITERS; i++) {
    size_t size = 256 + (size_t)((i * 7919 + w->id * 131) % 64) * 1024;
    void* p;
    if (devrt_resource_allocate(w->top, size, s, tags[(i + w->id) & 3], &p) != DEVRT_OK) {
      w->errors++;
      continue;
    }
    if (devrt_resource_deallocate(w->top, p, size, s) != DEVRT_OK) w->errors++;
  }
  if (devrt_stream_synchronize(w->rt, s) != DEVRT_OK || devrt_stream_release(w->rt, s) != DEVRT_OK)
    w->errors++;
  return NULL;
}

static void test_threads(devrt_runtime* rt, devrt_resource* up) {
  char path[64];
  t_tmp_path(path, sizeof path);
  collector col = {.mu = PTHREAD_MUTEX_INITIALIZER};
  devrt_resource *S, *L;
  REQUIRE_OK(devrt_statistics_resource_create(up, &S));
  devrt_logging_options o = {
      .path = path, .callback = collect, .user = &col, .buffer_records = 128};
  REQUIRE_OK(devrt_logging_resource_create(S, &o, &L));
  pthread_t th[NT];
  worker w[NT];
  for (int i = 0; i < NT; i++) {
    w[i] = (worker){rt, L, i, 0};
    pthread_create(&th[i], NULL, work, &w[i]);
  }
  int errors = 0;
  for (int i = 0; i < NT; i++) {
    pthread_join(th[i], NULL);
    errors += w[i].errors;
  }
  CHECK(errors == 0);
  devrt_memory_stats st;
  stats_of(S, NULL, &st);
  CHECK(st.bytes.current == 0 && st.count.current == 0 && st.count.total == NT * ITERS);
  CHECK(st.count.peak >= 1 && st.count.peak <= NT);
  int64_t per_tag = 0;
  for (int i = 0; i < 4; i++) {
    stats_of(S, i < 3 ? (const char*[]){"w0", "w1", "w2"}[i] : "untagged", &st);
    CHECK(st.count.current == 0 && st.bytes.current == 0);
    per_tag += st.count.total;
  }
  CHECK(per_tag == NT * ITERS);
  devrt_resource_figures fig;
  CHECK_OK(devrt_resource_query(L, &fig));
  CHECK(fig.log_records == 2 * NT * ITERS && fig.log_dropped == 0 &&
        atomic_load(&col.total) == 2 * NT * ITERS);
  CHECK(fig.count.total == NT * ITERS);
  CHECK_OK(devrt_logging_flush(L));
  char* text = t_slurp(path);
  CHECK(t_lines(text) == 1 + 2 * NT * ITERS);
  free(text);
  CHECK_OK(devrt_resource_release(L));
  CHECK_OK(devrt_resource_release(S));
  unlink(path);
}

typedef devrt_resource* (*maker)(devrt_runtime* rt);

static devrt_resource* async_new(devrt_runtime* rt) {
  devrt_resource* r;
  REQUIRE_OK(devrt_async_resource_create(rt, &r));
  return r;
}

/* The peak with threads taking turns: exact, including main allocating again at its own earlier
 * high while another thread holds a block; a block allocated on one thread and freed on another
 * leaves every current at zero; after a reset, the room one thread's free left it does not let
 * another's allocation pass the peak unseen. (Exactness under concurrency:
 * tests/stress/test_stats_stress.c.)
 */
typedef struct turn {
  devrt_resource* S;
  devrt_stream s;
  void* p;
  bool free_it;
  devrt_status st;
} turn;
static void* take_turn(void* arg) {
  turn* t = arg;
  if (t->free_it)
    t->st = devrt_resource_deallocate(t->S, t->p, 1000, t->s);
  else
    t->st = devrt_resource_allocate(t->S, 1000, t->s, "turns", &t->p);
  return NULL;
}
static void run_turn(turn* t, bool free_it) { /* on a new thread */
  pthread_t th;
  t->free_it = free_it;
  pthread_create(&th, NULL, take_turn, t);
  pthread_join(th, NULL);
  CHECK_OK(t->st);
}
static void test_stats_turns(devrt_resource* up, devrt_stream s) {
  devrt_resource* S;
  REQUIRE_OK(devrt_statistics_resource_create(up, &S));
  turn a = {S, s, NULL, false, DEVRT_OK}, b = a;
  void* q;
  devrt_memory_stats st;
  CHECK_OK(devrt_resource_allocate(S, 1000, s, "turns", &q));
  CHECK_OK(devrt_resource_deallocate(S, q, 1000, s));
  run_turn(&a, false);
  CHECK_OK(devrt_resource_allocate(S, 1000, s, "turns", &q)); /* main's own high again */
  CHECK_OK(devrt_resource_deallocate(S, q, 1000, s));
  stats_of(S, "turns", &st); /* the peak of 2 was reached while main held q */
  CHECK(st.count.current == 1 && st.count.peak == 2 && st.bytes.peak == 2000 &&
        st.count.total == 3);
  CHECK_OK(devrt_resource_allocate(S, 1000, s, "turns", &q));
  run_turn(&b, false);
  stats_of(S, NULL, &st);
  CHECK(st.count.current == 3 && st.count.peak == 3 && st.bytes.peak == 3000);
  turn c = {S, s, q, false, DEVRT_OK}; /* main's block, freed by another thread */
  run_turn(&c, true);
  run_turn(&a, true);
  run_turn(&b, true);
  stats_of(S, NULL, &st);
  CHECK(st.count.current == 0 && st.bytes.current == 0 && st.count.peak == 3 &&
        st.count.total == 5);
  CHECK_OK(devrt_statistics_reset_peaks(S));
  stats_of(S, "turns", &st);
  CHECK(st.count.peak == 0 && st.bytes.peak == 0);
  /* The room main's free leaves it is no room for another thread: the peak stays exact. */
  CHECK_OK(devrt_resource_allocate(S, 1000, s, "turns", &q));
  CHECK_OK(devrt_resource_deallocate(S, q, 1000, s));
  run_turn(&a, false);
  stats_of(S, "turns", &st);
  CHECK(st.count.current == 1 && st.count.peak == 1 && st.bytes.peak == 1000);
  CHECK_OK(devrt_resource_allocate(S, 1000, s, "turns", &q)); /* while a holds its block */
  stats_of(S, NULL, &st);
  CHECK(st.count.current == 2 && st.count.peak == 2 && st.bytes.peak == 2000);
  CHECK_OK(devrt_resource_deallocate(S, q, 1000, s));
  run_turn(&a, true);
  stats_of(S, NULL, &st);
  CHECK(st.count.current == 0 && st.bytes.current == 0 && st.bytes.peak == 2000);
  CHECK_OK(devrt_resource_release(S));
}

static void suite(devrt_runtime* rt, const char* name, maker mk) {
  devrt_stream s;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s));
  devrt_resource* up = mk(rt);
  int before = t_failures;
  test_record_sequence(up, s);
  test_csv(up, s);
  test_jsonl(up, s);
  test_untouched(up, s);
  test_logging_errors(rt, up, s);
  test_stats_sequence(up, s);
  test_stats_stacked(up, s);
  test_stats_turns(up, s);
  CHECK_OK(devrt_stream_synchronize(rt, s));
  test_threads(rt, up);
  CHECK_OK(devrt_resource_reap(up, DEVRT_REAP_WAIT, NULL));
  devrt_resource_figures fig;
  CHECK_OK(devrt_resource_query(up, &fig));
  CHECK(fig.live_bytes == 0);
  CHECK_OK(devrt_resource_release(up));
  CHECK_OK(devrt_stream_release(rt, s));
  printf(
      "%s upstream: logging (callback, csv, jsonl, buffering, errors), statistics (RMM sequence, "
      "tags, peaks, "
      "stacking, refused frees), %d threads x %d: %s\n",
      name, NT, ITERS, t_failures == before ? "ok" : "FAILED");
}

/* DEVRT_STATS_PEAK=bound: the runtime's statistics layer keeps exact current and total figures
 * and a peak never below the true one (on one thread, the true one); anything else is refused. */
static void test_peak_bound(void) {
  setenv("DEVRT_STATS_PEAK", "sometimes", 1);
  devrt_config cfg;
  CHECK_STATUS(devrt_config_init(&cfg), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "DEVRT_STATS_PEAK"));
  setenv("DEVRT_STATS_PEAK", "bound", 1);
  REQUIRE_OK(devrt_config_init(&cfg));
  unsetenv("DEVRT_STATS_PEAK");
  CHECK(cfg.stats_peak_bound);
  devrt_runtime* rt = t_runtime_cfg(&cfg);
  devrt_resource* r = NULL;
  REQUIRE_OK(devrt_runtime_resource(rt, &r));
  devrt_resource* st = r;
  while (st && strcmp(devrt_resource_name(st), "statistics")) st = devrt_resource_upstream(st);
  if (!st) {
    CHECK(!"the runtime's stack has a statistics layer");
    return;
  }
  devrt_stream s = 0;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s));
  void* p[3];
  for (int round = 0; round < 2; round++) { /* the second round's peak is the first's */
    for (int i = 0; i < 3; i++) CHECK_OK(devrt_resource_allocate(r, 1000, s, "bound", &p[i]));
    for (int i = 0; i < 3; i++) CHECK_OK(devrt_resource_deallocate(r, p[i], 1000, s));
    devrt_memory_stats m;
    CHECK_OK(devrt_statistics_get(st, "bound", &m));
    CHECK(m.bytes.current == 0 && m.bytes.peak == 3000 && m.bytes.total == 3000 * (round + 1));
    CHECK(m.count.current == 0 && m.count.peak == 3 && m.count.total == 3 * (round + 1));
  }
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_runtime_destroy(rt));
}

int main(void) {
  test_peak_bound();
  devrt_runtime* rt = t_runtime();
  suite(rt, "fake", fake_new);
  suite(rt, "async", async_new);
  printf("backend %s\n", rt->be->name);
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
