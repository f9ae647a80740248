/* sync.h (internal): what timeline semaphores (semaphore.c), the submission queue with its dispatch
 * thread (queue.c) and the completion thread (completion.c) share. Lock order: the queue's issue
 * mutex, then the queue's mu, then a semaphore's mu, then the completion thread's cmu, an event
 * slot's mu (src/timeline/marks.c) or a host waiter's mu.
 *
 * Completion is observed lazily: a device signal's value is completed by whoever sees its event
 * done (a spinning host waiter, a query, the semaphore itself pruning old signals as new ones are
 * scheduled), and the completion thread watches only semaphores that a blocked host waiter or a
 * parked host call needs. Nothing is done per submission that nobody waits for on the host. */
#ifndef DEVRT_SYNC_H
#define DEVRT_SYNC_H

#include "devrt/queue.h"
#include "../block/block.h"

typedef struct dv_action dv_action;

/* A scheduled device signal: `value` is reached once `ev` completes. */
typedef struct dv_tp {
  uint64_t value;
  dv_pev* ev;
  uint64_t order; /* issue order across the runtime: the completion thread waits on the oldest */
  bool armed;     /* hostfn mode: a host function will post once ev completes */
  struct dv_tp *prev, *next;
} dv_tp;

/* A thread blocked in a host wait (on its stack), with one node in each semaphore it waits on.
 * Nodes are linked, fired and unlinked under the semaphore's mu, so once the waiter has unlinked
 * its nodes under those locks no other thread can touch them. */
typedef struct dv_waiter {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool fired;
} dv_waiter;
typedef struct dv_wnode {
  uint64_t value;
  dv_waiter* w;
  struct dv_wnode *prev, *next;
  bool linked;
  bool sched_woken; /* woken once already because its value got scheduled */
} dv_wnode;
/* Blocked waiters' nodes, smallest value first (equal values in arrival order). */
typedef struct dv_wlist {
  dv_wnode *head, *tail;
} dv_wlist;

/* Submissions parked on one semaphore, smallest awaited value first (a binary heap). */
typedef struct dv_park {
  uint64_t value;
  dv_action* a;
} dv_park;
typedef struct dv_heap {
  dv_park* v;
  unsigned n, cap;
} dv_heap;

enum { SEM_LIVE, SEM_FAILED, SEM_DESTROYED };
#define DV_MSG 320

struct devrt_semaphore {
  _Atomic uint64_t magic;
  devrt_runtime* rt;
  _Atomic uint32_t refs;  /* the user's, host waiters', submissions', the dispatcher list's */
  _Atomic uint64_t value; /* the completed watermark: written under mu, read anywhere */
  _Atomic int state;      /* written under mu */
  pthread_mutex_t mu;
  _Atomic uint64_t scheduled; /* the scheduled watermark (>= value): written under mu */
  devrt_status cause;         /* the root cause, once failed */
  char msg[DV_MSG];
  dv_tp *head, *tail; /* device signals scheduled and not yet known complete, by value */
  unsigned ntps;
  /* Blocked host waiters by value (under mu): [0] not woken yet, [1] woken once by their value's
   * scheduling (sched_woken): only completion wakes those. A signal visits only what it wakes. */
  dv_wlist waiters[2];
  dv_heap dev;  /* parked device work: released once its value is scheduled */
  dv_heap host; /* parked host calls: released once its value has completed */
  bool queued;  /* on the dispatcher's list (set under mu, the list under the queue's mu) or on a
                 * signalling thread's cascade list (that thread's: queue.c) */
  devrt_semaphore* qnext; /* the link of whichever of those lists holds it */
  bool watched;           /* on the completion thread's list (set under mu, the list under cmu) */
  devrt_semaphore* wnext;
  devrt_semaphore *prev, *next; /* the runtime's live semaphores (queue's mu) */
};

/* One submission. Issued at once it borrows the caller's arrays (heap false); to be parked it is
 * copied into a single allocation holding semaphore references. Owned by one party at a time: the
 * submitter, a semaphore's parked heap, or the dispatcher. */
struct dv_action {
  devrt_runtime* rt;
  devrt_work_kind kind;
  devrt_stream stream;
  devrt_semaphore_value *waits, *signals;
  unsigned nwaits, nsignals;
  bool heap, was_parked;
  devrt_launch_desc launch; /* uses and args point into this allocation */
  devrt_host_call_fn fn;
  void* user;
  devrt_block block; /* ALLOC (reserved at submit) or FREE */
  size_t size;       /* ALLOC */
  const char* tag;
  devrt_graph* graph; /* GRAPH */
  dv_action* next;
};

typedef struct dv_queue {
  /* Serializes issuing released (once parked) submissions: held across dv_sem_release and the
   * issue of what it returned, so one semaphore's releases are issued in the order released, and
   * across everything that issue reaches (driver calls, allocations, the memory stack, user
   * enqueue callbacks). The outermost lock of sync/ (docs/architecture.md's lock order). The
   * dispatch thread takes it; a host signal only try-locks it (else it hands the semaphore to the
   * dispatch thread), then issues the chain its release sets off, up to a bound
   * (dv_queue_kick_here). Two runtimes' issue mutexes are taken together only in address order
   * (peer.c); elsewhere a second one is only try-locked. */
  pthread_mutex_t issue;
  pthread_mutex_t mu; /* the dispatcher's lists and the live-semaphore list */
  pthread_cond_t cv;
  devrt_semaphore* dirty;        /* semaphores whose parked submissions may be released */
  dv_action *ready, *ready_tail; /* host calls whose waits have completed */
  devrt_semaphore* live;
  unsigned nlive;
  pthread_t dispatcher;
  bool dispatcher_up, stop;

  pthread_mutex_t cmu; /* the completion thread's watch list */
  pthread_cond_t ccv;
  devrt_semaphore* watch; /* semaphores a blocked host waiter or parked host call needs */
  uint64_t posts;         /* hostfn mode: host functions run */
  _Atomic uint64_t order;
  dv_stream** side; /* per slot: the side stream where the completion thread follows events */
  dv_event** bev;   /* sync mode, per slot: a blocking-sync event recorded on the side stream */
  pthread_t completer;
  bool completer_up, cstop, cidle;
  uint64_t rounds; /* the completion thread's passes begun (under cmu) */

  _Atomic bool lost;
  char lost_msg[DV_MSG];
  _Atomic uint64_t submitted, refused, inline_, parked, dispatched, host_calls, failed, dwaits,
      hops, dwake, cwake, completions;
} dv_queue;

/* semaphore.c */
bool dv_sem_ok(devrt_semaphore* s); /* a live handle */
void dv_sem_ref(devrt_semaphore* s);
void dv_sem_unref(devrt_semaphore* s);
/* Raises the completed (and scheduled) watermark to v, waking host waiters and releasing parked
 * work; v <= the current value changes nothing. gpu: v comes from observed device completion. */
void dv_sem_complete(devrt_semaphore* s, uint64_t v, bool gpu);
/* Records that v will be reached once ev (recorded, holding no reference for this) completes. */
void dv_sem_schedule(devrt_semaphore* s, uint64_t v, dv_pev* ev);
/* The first failure wins; parked work waiting on s fails with the same root cause. */
void dv_sem_fail(devrt_semaphore* s, devrt_status cause, const char* msg);
typedef enum { DV_WAIT_MET, DV_WAIT_EVENT, DV_WAIT_PARKED, DV_WAIT_FAILED } dv_wait_result;
/* Resolves one wait of a: met, an event to wait on (*ev, a reference), parked, or failed (*cause
 * and msg say why). Host calls need v completed. Parked: a heap action belongs to s from then
 * on; a borrowed one is not pushed (the caller copies it to the heap and resolves again). */
dv_wait_result dv_sem_resolve(devrt_semaphore* s, uint64_t v, dv_action* a, dv_pev** ev,
                              devrt_status* cause, char* msg);
/* The smallest value a host waiter or a parked host call waits for (UINT64_MAX: none). Under mu. */
uint64_t dv_sem_needed(devrt_semaphore* s);
/* The oldest scheduled signal that reaches v, or NULL. Under mu. */
dv_tp* dv_sem_find(devrt_semaphore* s, uint64_t v);
/* Whether ev (the event of s's signal of v) has completed, completing v if so; true too on a
 * device error, which loses the device. The caller keeps its reference. */
bool dv_sem_observe(devrt_semaphore* s, dv_pev* ev, uint64_t v);
/* Pops what s's parked heaps can release now into a list linked by ->next. */
dv_action* dv_sem_release(devrt_semaphore* s);

/* queue.c */
devrt_status dv_queue_init(devrt_runtime* rt);
/* INVALID_STATE while semaphores of rt are alive; otherwise stops the threads. */
devrt_status dv_queue_fini(devrt_runtime* rt);
/* Puts s (queued set by the caller, with a reference for the list) on the dispatcher's list. */
void dv_queue_kick(devrt_runtime* rt, devrt_semaphore* s);
/* As dv_queue_kick, for a host signal: issues what s releases on this thread if no other thread
 * is issuing released work (the issue mutex is free), else kicks. */
void dv_queue_kick_here(devrt_runtime* rt, devrt_semaphore* s);
void dv_queue_add_sem(devrt_runtime* rt, devrt_semaphore* s);
void dv_queue_remove_sem(devrt_runtime* rt, devrt_semaphore* s);
/* Fails every signal of a with the root cause, then frees it (if on the heap). */
void dv_action_fail(dv_action* a, devrt_status cause, const char* msg);
void dv_action_free(dv_action* a);

/* completion.c */
devrt_status dv_completion_start(devrt_runtime* rt);
void dv_completion_stop(devrt_runtime* rt);
/* Puts s on the completion thread's watch list (under s->mu; takes a reference). */
void dv_watch(devrt_semaphore* s);
/* A sticky device error: fails every semaphore of rt and every pending completion. */
void dv_device_lost(devrt_runtime* rt, const char* msg);

/* When a peer link ends (src/multi, both runtimes synchronized and quiet): whether rt's
 * semaphores hold work parked on other's; rt's semaphores complete other's signals
 * (semaphore.c), and the completion thread lets go of what it held (completion.c). */
bool dv_sems_parked_from(devrt_runtime* rt, devrt_runtime* other);
void dv_sems_forget(devrt_runtime* rt, devrt_runtime* other);
void dv_completion_pass(devrt_runtime* rt);

#endif
