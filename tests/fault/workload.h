/* workload.h: the reliability workload that the fault sweep (tests/fault) runs once per injected
 * fault and the soak (tests/gpu/test_soak.c) runs on 16 threads: recorded launches across streams,
 * foreign work, imported streams, events, the raw pool, a queue chain with queued alloc and free
 * and host calls, a caching stack under a budget with sub-budgets, a partition layout with a
 * sub-budget, and PyTorch's entry points with record_stream. Every call's status and every word
 * read back is checked. */
#ifndef DEVRT_TEST_WORKLOAD_H
#define DEVRT_TEST_WORKLOAD_H

#include <stdbool.h>
#include <stdint.h>
#include "devrt/devrt.h"

typedef struct wl {
  devrt_runtime* rt;    /* the runtime of the run (the soak's threads share one) */
  devrt_runtime* other; /* one of the same backend whose stream is imported (NULL: none) */
  /* PyTorch's entry points (devrt/torch.h, host backend only) on the process-wide runtime of
   * ordinal 0, with streams of this runtime standing for the framework's: imported into ordinal
   * 0's runtime for the life of the process, so it is never destroyed. NULL: none. */
  devrt_runtime* framework;
  uint32_t seed;      /* varies the values written */
  bool layout;        /* build and use a partition layout */
  bool keep_layout;   /* the first run's layout is kept for the next runs (wl_finish destroys
                         it): the driver leaks a green context's host memory (reliability.md) */
  devrt_layout* kept; /* the kept layout, NULL: none yet */
  bool exclusive;     /* no other thread uses rt: the layout is activated too */
  /* The sweep: a failure whose message carries "<fault_op>: injected fault" is what the fault
   * caused; the run goes on without what the failed call would have made. NULL: none is. */
  const char* fault_op;
  unsigned fault_statuses; /* the statuses (1 << status) such a failure may return */
  /* Results, added to by each run. */
  unsigned errors;      /* a call failed without a reason, or a check did not hold */
  unsigned corruptions; /* words read back that differ from what was written */
  unsigned tolerated;   /* calls that failed with the injected fault as their cause */
  uint64_t calls;       /* public calls made */
} wl;

/* One run: everything it creates is released (or freed) before it returns. Thread-safe for
 * distinct wl on one runtime. */
void wl_run(wl* w);

/* Destroys the layout kept by keep_layout (errors counted in w). */
void wl_finish(wl* w);

/* After every run on rt is over: waits for the pending frees, trims the caches, and checks that
 * live, pending and cached bytes, live blocks and leased streams are 0 (errors counted in w). */
void wl_drained(wl* w, devrt_runtime* rt);

#endif
