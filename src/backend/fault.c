/* fault.c: fault injection at every backend entry (fault.h). Owns the wrapping table, its call
 * counters and armed calls, and DEVRT_FAULT. Only runtimes created while injection is enabled
 * use the table; every other runtime's calls never come here. */
#include "fault.h"
#include "../core/parse.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DV_OP_NAME_(name) #name,
static const char* const names[DV_OP_COUNT] = {DV_BACKEND_OPS(DV_OP_NAME_)};

/* Process-wide, as the table is: every counter is atomic, and relaxed: a test arms a fault before
 * the calls it fails (on the calling thread, or before the threads that make them start), so no
 * arm needs to order anything else; `enabled` and `inner` are read under mu or after it. */
static _Atomic uint64_t calls[DV_OP_COUNT]; /* calls through the wrapper so far */
static _Atomic uint64_t armed[DV_OP_COUNT]; /* the call number that fails; 0 none */
static _Atomic int armed_status[DV_OP_COUNT];
static _Atomic uint64_t fired;
static _Atomic bool enabled;
static _Atomic(const dv_backend*) inner; /* the wrapped backend: set once, under mu */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static dv_backend table; /* the wrapper of `inner`, filled once under mu before inner is set */

const char* dv_op_name(dv_op op) { return (unsigned)op < DV_OP_COUNT ? names[op] : "?"; }

dv_op dv_op_find(const char* name) {
  unsigned i = 0;
  while (i < DV_OP_COUNT && strcmp(names[i], name)) i++;
  return (dv_op)i;
}

bool dv_op_can_fail(dv_op op) {
  switch (op) {
    case DV_OP_stream_native:
    case DV_OP_device_close:
    case DV_OP_stream_destroy:
    case DV_OP_stream_unwrap:
    case DV_OP_event_destroy:
    case DV_OP_module_unload:
    case DV_OP_green_destroy:
    case DV_OP_fault_arm:
    case DV_OP_peer_disable:
    case DV_OP_device_leave:
    case DV_OP_graph_destroy:
    case DV_OP_capture_mode_swap:
    case DV_OP_va_release:
      return false;
    default:
      return (unsigned)op < DV_OP_COUNT;
  }
}

devrt_status dv_op_usual_failure(dv_op op) {
  return op == DV_OP_pool_alloc || op == DV_OP_mem_alloc || op == DV_OP_va_map
             ? DEVRT_ERR_DEVICE_ALLOC_FAILED
             : DEVRT_ERR_BACKEND_ERROR;
}

void dv_fault_enable(void) { atomic_store_explicit(&enabled, true, memory_order_relaxed); }

devrt_status dv_fault_inject(dv_op op, uint64_t nth, devrt_status status) {
  if (!dv_op_can_fail(op) || (unsigned)status >= DEVRT_STATUS_COUNT_)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "dv_fault_inject: op %d cannot fail or status %d",
                   (int)op, (int)status);
  if (status == DEVRT_OK) status = dv_op_usual_failure(op);
  atomic_store_explicit(&armed_status[op], (int)status, memory_order_relaxed);
  atomic_store_explicit(&armed[op],
                        nth ? atomic_load_explicit(&calls[op], memory_order_relaxed) + nth : 0,
                        memory_order_relaxed);
  dv_fault_enable();
  return DEVRT_OK;
}

uint64_t dv_fault_calls(dv_op op) { return atomic_load_explicit(&calls[op], memory_order_relaxed); }
uint64_t dv_fault_fired(void) { return atomic_load_explicit(&fired, memory_order_relaxed); }

/* ---- the wrapper ---- */

static const dv_backend* in(void) { return atomic_load_explicit(&inner, memory_order_relaxed); }

static void count(dv_op op) { atomic_fetch_add_explicit(&calls[op], 1, memory_order_relaxed); }

DV_COLD static devrt_status injected(dv_op op, uint64_t n) {
  atomic_fetch_add_explicit(&fired, 1, memory_order_relaxed);
  devrt_status st = (devrt_status)atomic_load_explicit(&armed_status[op], memory_order_relaxed);
  return dv_fail(st, "%s: injected fault (its call %llu): %s", names[op], (unsigned long long)n,
                 devrt_status_name(st));
}

/* Counts a call of op, fails it if it is the armed one, else calls through. */
#define PASS(op, args)                                                                        \
  do {                                                                                        \
    uint64_t n_ = atomic_fetch_add_explicit(&calls[DV_OP_##op], 1, memory_order_relaxed) + 1; \
    if (DV_UNLIKELY(n_ == atomic_load_explicit(&armed[DV_OP_##op], memory_order_relaxed)))    \
      return injected(DV_OP_##op, n_);                                                        \
    return in()->op args;                                                                     \
  } while (0)

static devrt_status w_launch(dv_stream* s, dv_kernel* k, const unsigned g[3], const unsigned b[3],
                             unsigned shmem, void** args) {
  PASS(launch, (s, k, g, b, shmem, args));
}
static devrt_status w_event_record(dv_event* e, dv_stream* s) { PASS(event_record, (e, s)); }
static devrt_status w_stream_wait(dv_stream* s, dv_event* e) { PASS(stream_wait, (s, e)); }
static devrt_status w_event_query(dv_event* e, bool* c) { PASS(event_query, (e, c)); }
static devrt_status w_pool_alloc(dv_dev* d, size_t size, dv_stream* s, void** out) {
  PASS(pool_alloc, (d, size, s, out));
}
static devrt_status w_pool_free(dv_dev* d, void* p, dv_stream* s) { PASS(pool_free, (d, p, s)); }
static devrt_status w_stream_sync(dv_stream* s) { PASS(stream_sync, (s)); }
static void* w_stream_native(dv_stream* s) {
  count(DV_OP_stream_native);
  return in()->stream_native(s);
}
static devrt_status w_device_count(int* out) { PASS(device_count, (out)); }
static devrt_status w_device_open(const devrt_config* cfg, dv_dev** out) {
  PASS(device_open, (cfg, out));
}
static void w_device_close(dv_dev* d) {
  count(DV_OP_device_close);
  in()->device_close(d);
}
static devrt_status w_device_info(dv_dev* d, devrt_device_info* out) {
  PASS(device_info, (d, out));
}
static devrt_status w_stream_create(dv_dev* d, dv_green* g, int prio, dv_stream** out) {
  PASS(stream_create, (d, g, prio, out));
}
static void w_stream_destroy(dv_dev* d, dv_stream* s) {
  count(DV_OP_stream_destroy);
  in()->stream_destroy(d, s);
}
static devrt_status w_stream_wrap(dv_dev* d, void* native, dv_stream** out) {
  PASS(stream_wrap, (d, native, out));
}
static void w_stream_unwrap(dv_dev* d, dv_stream* s) {
  count(DV_OP_stream_unwrap);
  in()->stream_unwrap(d, s);
}
static devrt_status w_stream_legacy(dv_dev* d, dv_stream** out) { PASS(stream_legacy, (d, out)); }
static devrt_status w_stream_sync_native(dv_dev* d, void* native) {
  PASS(stream_sync_native, (d, native));
}
static devrt_status w_event_create(dv_dev* d, unsigned flags, dv_event** out) {
  PASS(event_create, (d, flags, out));
}
static void w_event_destroy(dv_dev* d, dv_event* e) {
  count(DV_OP_event_destroy);
  in()->event_destroy(d, e);
}
static devrt_status w_event_sync(dv_event* e) { PASS(event_sync, (e)); }
static devrt_status w_host_func(dv_stream* s, devrt_host_fn fn, void* user, size_t copy) {
  PASS(host_func, (s, fn, user, copy));
}
static devrt_status w_pool_stats(dv_dev* d, devrt_pool_stats* out) { PASS(pool_stats, (d, out)); }
static devrt_status w_pool_trim(dv_dev* d, size_t keep) { PASS(pool_trim, (d, keep)); }
static devrt_status w_pool_reset_high(dv_dev* d) { PASS(pool_reset_high, (d)); }
static devrt_status w_mem_alloc(dv_dev* d, size_t size, void** out) {
  PASS(mem_alloc, (d, size, out));
}
static devrt_status w_mem_free(dv_dev* d, void* p) { PASS(mem_free, (d, p)); }
static devrt_status w_memset_async(dv_stream* s, void* p, int byte, size_t size) {
  PASS(memset_async, (s, p, byte, size));
}
static devrt_status w_memcpy_async(dv_stream* s, void* dst, const void* src, size_t size) {
  PASS(memcpy_async, (s, dst, src, size));
}
static devrt_status w_va_page(dv_dev* d, size_t* out) { PASS(va_page, (d, out)); }
static devrt_status w_va_reserve(dv_dev* d, size_t size, void** out) {
  PASS(va_reserve, (d, size, out));
}
static void w_va_release(dv_dev* d, void* p, size_t size) {
  count(DV_OP_va_release);
  in()->va_release(d, p, size);
}
static devrt_status w_va_map(dv_dev* d, void* p, size_t size) { PASS(va_map, (d, p, size)); }
static devrt_status w_va_unmap(dv_dev* d, void* p, size_t size) { PASS(va_unmap, (d, p, size)); }
static devrt_status w_module_load(dv_dev* d, const void* image, dv_module** out) {
  PASS(module_load, (d, image, out));
}
static devrt_status w_module_load_host(dv_dev* d, const devrt_host_kernel* t, unsigned count,
                                       dv_module** out) {
  PASS(module_load_host, (d, t, count, out));
}
static void w_module_unload(dv_dev* d, dv_module* m) {
  count(DV_OP_module_unload);
  in()->module_unload(d, m);
}
static devrt_status w_kernel_get(dv_module* m, const char* name, dv_kernel** out) {
  PASS(kernel_get, (m, name, out));
}
static devrt_status w_kernel_params(dv_kernel* k, unsigned max, unsigned* sizes, unsigned* n) {
  PASS(kernel_params, (k, max, sizes, n));
}
static devrt_status w_sm_resource(dv_dev* d, dv_res* out) { PASS(sm_resource, (d, out)); }
static devrt_status w_sm_split(dv_dev* d, const dv_res* r, unsigned min_sms, unsigned flags,
                               dv_res* groups, unsigned* n, dv_res* rem) {
  PASS(sm_split, (d, r, min_sms, flags, groups, n, rem));
}
static devrt_status w_green_create(dv_dev* d, const dv_res* res, unsigned n, dv_green** out) {
  PASS(green_create, (d, res, n, out));
}
static devrt_status w_green_resource(dv_green* g, dv_res* out) { PASS(green_resource, (g, out)); }
static void w_green_destroy(dv_dev* d, dv_green* g) {
  count(DV_OP_green_destroy);
  in()->green_destroy(d, g);
}
static void w_fault_arm(dv_dev* d, dv_fault_op op, unsigned nth) {
  count(DV_OP_fault_arm);
  in()->fault_arm(d, op, nth);
}

static devrt_status w_peer_query(dv_dev* a, dv_dev* b, devrt_peer_info* out) {
  PASS(peer_query, (a, b, out));
}
static devrt_status w_peer_enable(dv_dev* a, dv_dev* b) { PASS(peer_enable, (a, b)); }
static void w_peer_disable(dv_dev* a, dv_dev* b) {
  count(DV_OP_peer_disable);
  in()->peer_disable(a, b);
}
static devrt_status w_memcpy_peer(dv_stream* s, void* dst, dv_dev* dd, const void* src, dv_dev* sd,
                                  size_t size) {
  PASS(memcpy_peer, (s, dst, dd, src, sd, size));
}
static devrt_status w_device_enter(dv_dev* d) { PASS(device_enter, (d)); }
static void w_device_leave(dv_dev* d) {
  count(DV_OP_device_leave);
  in()->device_leave(d);
}
static devrt_status w_capture_begin(dv_stream* s) { PASS(capture_begin, (s)); }
static devrt_status w_capture_end(dv_dev* d, dv_stream* s, dv_green* green, int priority,
                                  dv_graph** out) {
  PASS(capture_end, (d, s, green, priority, out));
}
static devrt_status w_graph_launch(dv_graph* g, dv_stream* s) { PASS(graph_launch, (g, s)); }
static void w_graph_destroy(dv_dev* d, dv_graph* g) {
  count(DV_OP_graph_destroy);
  in()->graph_destroy(d, g);
}
static devrt_status w_stream_capturing(dv_stream* s, bool* out) {
  PASS(stream_capturing, (s, out));
}
static void w_capture_mode_swap(int* mode) {
  count(DV_OP_capture_mode_swap);
  in()->capture_mode_swap(mode);
}

static const dv_backend wrap_all = {
    .launch = w_launch,
    .event_record = w_event_record,
    .stream_wait = w_stream_wait,
    .event_query = w_event_query,
    .pool_alloc = w_pool_alloc,
    .pool_free = w_pool_free,
    .stream_sync = w_stream_sync,
    .stream_native = w_stream_native,
    .device_count = w_device_count,
    .device_open = w_device_open,
    .device_close = w_device_close,
    .device_info = w_device_info,
    .stream_create = w_stream_create,
    .stream_destroy = w_stream_destroy,
    .stream_wrap = w_stream_wrap,
    .stream_unwrap = w_stream_unwrap,
    .stream_legacy = w_stream_legacy,
    .stream_sync_native = w_stream_sync_native,
    .event_create = w_event_create,
    .event_destroy = w_event_destroy,
    .event_sync = w_event_sync,
    .host_func = w_host_func,
    .pool_stats = w_pool_stats,
    .pool_trim = w_pool_trim,
    .pool_reset_high = w_pool_reset_high,
    .mem_alloc = w_mem_alloc,
    .mem_free = w_mem_free,
    .memset_async = w_memset_async,
    .memcpy_async = w_memcpy_async,
    .va_page = w_va_page,
    .va_reserve = w_va_reserve,
    .va_release = w_va_release,
    .va_map = w_va_map,
    .va_unmap = w_va_unmap,
    .module_load = w_module_load,
    .module_load_host = w_module_load_host,
    .module_unload = w_module_unload,
    .kernel_get = w_kernel_get,
    .kernel_params = w_kernel_params,
    .sm_resource = w_sm_resource,
    .sm_split = w_sm_split,
    .green_create = w_green_create,
    .green_resource = w_green_resource,
    .green_destroy = w_green_destroy,
    .fault_arm = w_fault_arm,
    .peer_query = w_peer_query,
    .peer_enable = w_peer_enable,
    .peer_disable = w_peer_disable,
    .memcpy_peer = w_memcpy_peer,
    .device_enter = w_device_enter,
    .device_leave = w_device_leave,
    .capture_begin = w_capture_begin,
    .capture_end = w_capture_end,
    .graph_launch = w_graph_launch,
    .graph_destroy = w_graph_destroy,
    .stream_capturing = w_stream_capturing,
    .capture_mode_swap = w_capture_mode_swap,
};

/* The table seen as entry-sized words (`name` and padding included): an entry the real backend
 * fills must be wrapped, and one it leaves NULL (module_load_host on cuda) stays NULL. */
typedef void (*entry)(void);
enum { WORDS = sizeof(dv_backend) / sizeof(entry) };
_Static_assert(sizeof(entry) == sizeof(const char*), "the table is a run of pointer-sized words");
static bool word_set(const dv_backend* t, unsigned i) {
  static const unsigned char zero[sizeof(entry)];
  return memcmp((const unsigned char*)t + i * sizeof(entry), zero, sizeof(entry)) != 0;
}

/* mu held: fills `table` as the wrapper of be. */
static devrt_status fill(const dv_backend* be) {
  table = wrap_all;
  for (unsigned i = 0; i < WORDS; i++) {
    if (i * sizeof(entry) == offsetof(dv_backend, name)) continue;
    if (word_set(be, i) && !word_set(&wrap_all, i))
      return dv_fail(DEVRT_ERR_INVALID_STATE,
                     "fault injection: the %s backend's table entry at byte %zu has no wrapper "
                     "(src/backend/fault.c covers every entry: add it there)",
                     be->name, i * sizeof(entry));
    if (!word_set(be, i)) memset((unsigned char*)&table + i * sizeof(entry), 0, sizeof(entry));
  }
  table.name = be->name;
  return DEVRT_OK;
}

/* ---- DEVRT_FAULT ---- */

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static devrt_status env_status;
static char env_error[256];

static void print_counts(void) {
  fprintf(stderr, "devrt fault counts (DEVRT_FAULT=count):");
  for (unsigned i = 0; i < DV_OP_COUNT; i++)
    if (dv_fault_calls((dv_op)i))
      fprintf(stderr, " %s=%llu", names[i], (unsigned long long)dv_fault_calls((dv_op)i));
  fprintf(stderr, "\n");
}

/* DEVRT_FAULT: `count`, or op:N[:STATUS] with N in decimal digits (dv_parse_u64); set, it must be
 * one of them (empty too is refused). */
static void read_env(void) {
  const char* v = getenv("DEVRT_FAULT");
  if (!v) return;
  if (!strcmp(v, "count")) {
    dv_fault_enable();
    atexit(print_counts);
    return;
  }
  char op[64] = "";
  const char *n = strchr(v, ':'), *st = n ? strchr(n + 1, ':') : NULL;
  uint64_t nth = 0;
  bool ok = n && (size_t)(n - v) < sizeof op &&
            dv_parse_u64(n + 1, st ? (size_t)(st - n - 1) : strlen(n + 1), 10, &nth) && nth > 0;
  if (ok) memcpy(op, v, (size_t)(n - v));
  unsigned s = 0; /* the status named after a second ':', 0 (the op's usual one) without */
  if (ok && st)
    while (++s < DEVRT_STATUS_COUNT_ && strcmp(devrt_status_name((devrt_status)s), st + 1)) {}
  ok = ok && (!st || s < DEVRT_STATUS_COUNT_);
  if (!ok || dv_fault_inject(dv_op_find(op), nth, (devrt_status)s) != DEVRT_OK) {
    env_status = DEVRT_ERR_INVALID_ARGUMENT;
    snprintf(env_error, sizeof env_error,
             "DEVRT_FAULT=\"%s\" is neither `count` nor op:N[:STATUS] (an op of the backend table "
             "that returns a status, N >= 1 in decimal digits, a status name other than OK)",
             v);
  }
}

devrt_status dv_fault_select(const dv_backend** be) {
  pthread_once(&env_once, read_env);
  if (env_status != DEVRT_OK) return dv_fail(env_status, "devrt_runtime: %s", env_error);
  if (DV_LIKELY(!atomic_load_explicit(&enabled, memory_order_relaxed))) return DEVRT_OK;
  pthread_mutex_lock(&mu);
  const dv_backend* was = in();
  devrt_status st = DEVRT_OK;
  if (!was && (st = fill(*be)) == DEVRT_OK) /* the table is filled before: read under mu */
    atomic_store_explicit(&inner, *be, memory_order_release);
  if (st == DEVRT_OK && was && was != *be)
    st = dv_fail(DEVRT_ERR_INVALID_STATE,
                 "devrt_runtime: fault injection wraps the %s backend in this process, not %s",
                 was->name, (*be)->name);
  pthread_mutex_unlock(&mu);
  if (st == DEVRT_OK) *be = &table;
  return st;
}
