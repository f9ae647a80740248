/* simple.c: the leaf on synchronous mem_alloc / mem_free (cuMemAlloc / cuMemFree). The stream
 * is checked; a free first synchronizes it (work using the block is done), so nothing is ever
 * pending. Shares the live table with async.c. */
#include <stdlib.h>
#include <string.h>
#include "memory.h"
#include "account.h"
#include "live_table.h"

typedef struct simple_res {
  devrt_resource base;
  dv_live_table* live;
} simple_res;

static devrt_status simple_allocate(devrt_resource* self, size_t size, devrt_stream stream,
                                    const char* tag, void** out) {
  simple_res* r = (simple_res*)self;
  devrt_runtime* rt = self->rt;
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, stream, &s, "simple allocate"));
  uint64_t n = 0;
  DV_CHECK(dv_live_admit(self->account, "simple allocate", size, tag, &n));
  void* p = NULL;
  devrt_status st = rt->be->mem_alloc(rt->dev, size, &p);
  if (st == DEVRT_OK && (st = dv_live_track(r->live, "simple allocate", p, size, tag)) != DEVRT_OK)
    rt->be->mem_free(rt->dev, p); /* the table's error is the one reported */
  if (st != DEVRT_OK) {
    dv_account_release(self->account, n);
    return st;
  }
  *out = p;
  return DEVRT_OK;
}

static devrt_status simple_deallocate_tagged(devrt_resource* self, void* p, size_t size,
                                             devrt_stream stream, const char** tag) {
  simple_res* r = (simple_res*)self;
  devrt_runtime* rt = self->rt;
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, stream, &s, "simple deallocate"));
  dv_live_entry e;
  DV_CHECK(dv_live_take(r->live, "simple", p, size, &e));
  devrt_status st = rt->be->stream_sync(s);
  if (st == DEVRT_OK) st = rt->be->mem_free(rt->dev, p);
  if (st != DEVRT_OK) {
    dv_live_put_back(r->live, p, size, &e);
    return st;
  }
  uint64_t rounded = dv_round(self->account, size);
  *tag = e.tag;
  dv_account_release(self->account, rounded);
  return DEVRT_OK;
}

static devrt_status simple_query(devrt_resource* self, devrt_resource_figures* out) {
  dv_account_query(self->account, out);
  DV_ASSERT(!out->pending_bytes); /* a free completes before deallocate returns */
  return DEVRT_OK;
}

static devrt_status simple_reap(devrt_resource* self, unsigned flags, uint64_t* reaped) {
  (void)self, (void)flags;
  *reaped = 0; /* frees complete before deallocate returns */
  return DEVRT_OK;
}

static devrt_status simple_trim(devrt_resource* self, uint64_t* released) {
  (void)self;
  *released = 0; /* nothing is kept */
  return DEVRT_OK;
}

static void simple_destroy(devrt_resource* self) {
  simple_res* r = (simple_res*)self;
  dv_live_destroy(r->live);
  free(self->account);
  free(r);
}

static devrt_status simple_deallocate(devrt_resource* self, void* p, size_t size,
                                      devrt_stream stream) {
  const char* tag;
  return simple_deallocate_tagged(self, p, size, stream, &tag);
}

static const devrt_resource_vtable simple_vtable = {
    .allocate = simple_allocate,
    .deallocate = simple_deallocate,
    .query = simple_query,
    .reap = simple_reap,
    .trim = simple_trim,
    .destroy = simple_destroy,
    .deallocate_tagged = simple_deallocate_tagged,
};

devrt_status devrt_simple_resource_create(devrt_runtime* rt, devrt_resource** out) {
  DV_RT_CHECK(rt, "devrt_simple_resource_create");
  DV_ARG_CHECK(out, "devrt_simple_resource_create", "out is NULL");
  simple_res* r = dv_zalloc_lines(sizeof *r);
  dv_mem_account* acc = dv_account_new();
  if (!r || !acc) {
    free(r), free(acc);
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED,
                   "devrt_simple_resource_create: out of host memory");
  }
  /* cuMemAlloc hands out at least 512-byte steps; the host backend rounds to 256. */
  acc->granularity = strcmp(rt->be->name, "cuda") ? 256 : 512;
  r->base.account = acc;
  devrt_status st = dv_live_create("devrt_simple_resource_create", &r->live);
  if (st == DEVRT_OK) st = devrt_resource_init(&r->base, &simple_vtable, "simple", rt, NULL);
  if (st != DEVRT_OK) {
    dv_live_destroy(r->live);
    free(acc);
    free(r);
    return st;
  }
  *out = &r->base;
  return DEVRT_OK;
}
