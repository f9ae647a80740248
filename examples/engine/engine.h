/* engine.h: the demo engine behind `devrt demo` and `devrt bench demo`: a small multi-tenant
 * relational engine built on devrt's public API alone (include/devrt). Its options and figures,
 * and the state its files share (engine.c runs it; distributed.c runs the query over several
 * devices; reference.c checks them; output.c, trace.c and report.c show them). docs/demo.md
 * describes the model. */
#ifndef EG_ENGINE_H
#define EG_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "devrt/devrt.h"

#define EG_MAX_TENANTS 16
#define EG_STREAMS 4 /* per tenant: two generate streams, the scan stream, the check stream */
#define EG_STAMPED 3 /* streams whose launches leave device stamps: gen0, gen1, scan */
#define EG_RING 8    /* queries a batch tenant may have waiting for its checker */
#define EG_MAX_DEVICES 8
#define EG_ALL_DEVICES (-1) /* --devices all */
#define EG_MAX_RANKS 64     /* --ranks: the ranks rank 0's report shows */

typedef struct eg_options {
  int ordinal;         /* the first device's ordinal */
  int devices;         /* --devices: how many (0: 1), or EG_ALL_DEVICES (ordinal .. the last one) */
  int tenants;         /* 2..EG_MAX_TENANTS: tenant 0 is interactive, the others batch */
  double scale;        /* TPC-H scale factor, 6 M lineitem rows each (0: the backend's default) */
  uint64_t chunk_rows; /* rows per chunk (morsel); 0: the backend's default */
  int credits;         /* chunks a tenant may have in flight */
  int queries;         /* queries per batch tenant (0: the backend's default) */
  double seconds;      /* the batch phase starts no query after this (0: the backend's default) */
  int alone;           /* interactive queries before the batch tenants start (0: default) */
  bool plain;          /* partitions of plain streams instead of green contexts */
  bool quiet, json, progress; /* progress: a live line on stderr (a terminal), else plain lines */
  const char* trace_path;
  const char* report_dir;
  int stamps;   /* launches a stamped stream stamps before it thins them (0: GPU 2^18, host 2^13) */
  bool measure; /* bench: also time a Q1 scan of resident chunks against a device copy */
  bool ranks;   /* --ranks: this process is one rank of a job a launcher started (one device) */
  bool graphs;  /* --graphs: the interactive tenant's queries as graph replays (docs/demo.md) */
} eg_options;

/* Defaults filled for the backend (cuda: a GPU's sizes; host: `make run` in seconds). */
void eg_options_default(eg_options* o);

typedef struct eg_lat {
  int n;
  double p50, p99, max; /* microseconds */
} eg_lat;

typedef struct eg_tenant_figures {
  bool interactive, isolated;
  int device; /* index into eg_figures.d */
  unsigned sms;
  uint64_t queries, rows, bytes, chunks;
  double seconds, rows_per_s, gb_per_s;
  eg_lat alone, load; /* the interactive tenant's query latency */
  uint64_t mem_high, sub_budget, retries;
  uint64_t held_back; /* batch: allocations put off to leave the interactive tenant's share */
} eg_tenant_figures;

typedef struct eg_device_figures {
  int ordinal, tenants;
  char layout[160];
  uint64_t global_budget, sum_sub, peak_held;
} eg_device_figures;

/* The distributed Q1 (several devices only): queries run, and the device results checked (each
 * device's copy of the all-reduced result is compared with the reference). */
typedef struct eg_dist_figures {
  uint64_t queries, rows, chunks, checked;
  double seconds, rows_per_s;
  uint64_t joins, join_rows, shuffle_bytes; /* the distributed joins: rows built and probed */
  double join_seconds, join_rows_per_s;
} eg_dist_figures;

/* --ranks: one rank's figures, all-gathered to rank 0 (u64 words, so one collective moves them). */
typedef struct eg_rank_figures {
  uint64_t ok, tenant_queries, checked_queries, checked_chunks, mismatches;
  uint64_t dist_queries, dist_checked, dist_rows, dist_ns;
  uint64_t joins, join_rows, shuffle_bytes, join_ns;
} eg_rank_figures;

typedef struct eg_figures {
  char backend[16], device[256], mode[24], layout[160]; /* device and layout: the first device's */
  double scale;
  uint64_t lineitem_rows, orders_rows, chunk_rows;
  int tenants, credits, devices;
  uint64_t global_budget, sum_sub, peak_held; /* summed over the devices */
  eg_tenant_figures t[EG_MAX_TENANTS];
  eg_device_figures d[EG_MAX_DEVICES];
  eg_dist_figures dist;
  int rank, nranks;                    /* --ranks: this process's rank of the job, else 0 of 1 */
  eg_rank_figures ranks[EG_MAX_RANKS]; /* --ranks, on rank 0: every rank's (nranks of them) */
  devrt_block_stats blocks;            /* summed over the devices' runtimes */
  devrt_queue_stats queue;             /* the same (the counters the engine shows) */
  uint64_t checked_queries, checked_chunks, mismatches;
  double wall_s, alone_s, load_s;
  double busy;               /* the batch phase: union of kernel spans / its span, device stamps */
  double scan_gbs, copy_gbs; /* measure: Q1 scan of resident chunks; device copy (read+write) */
  int thinned;  /* stamped streams whose launches outran their slots: 1 in 2^k stamped (busy is
                   then a lower bound) */
  bool started; /* the setup succeeded and the tenants ran (else error says why it could not) */
  bool ok;
  char error[512]; /* why not ok: the first failure, a mismatch naming query, tenant and chunk */
} eg_figures;

/* Runs the demo with o (o->tenants etc. set; eg_options_default fills zeros), writes the trace and
 * report if asked, fills *f. Returns 0 when every check passed, 1 otherwise (f->error says why). */
int eg_run(const eg_options* o, eg_figures* f);

/* ---- shared by the engine's files ---- */

enum { EG_Q1 = 0, EG_JOIN = 1 };

typedef enum eg_stage {
  EG_GEN_LI,
  EG_GEN_ORD,
  EG_SCAN_Q1,
  EG_BUILD,
  EG_PROBE,
  EG_MERGE,
  EG_ZERO,
  EG_PART_COUNT,
  EG_PART_SCATTER,
  EG_NSTAGES
} eg_stage;
extern const char* const eg_stage_names[EG_NSTAGES];
extern const char* const eg_stream_names[EG_STREAMS];

/* A query's shape and parameters; its CPU reference. */
typedef struct eg_variant {
  int kind;                /* EG_Q1 or EG_JOIN */
  uint64_t first, rows;    /* lineitem rows [first, first + rows) */
  uint64_t chunk_rows;     /* rows per chunk */
  unsigned nchunks;        /* lineitem chunks */
  uint64_t ofirst, orows;  /* join: orders rows (the orders of those lines) */
  unsigned ochunks;        /* join: orders chunks of chunk_rows */
  uint32_t cutoff;         /* Q1: ship date <= cutoff */
  uint32_t d0, d1, s0;     /* join: order date in [d0, d1), ship date >= s0 */
  uint64_t passing_orders; /* join: orders in the date window (sizes the hash table) */
  uint64_t* ref;           /* (nchunks + 1) * EG_AGG_WORDS: each chunk's slot, then the total */
  char name[64];
} eg_variant;

/* One launch, for the trace and the report. */
typedef struct eg_launch_rec {
  uint8_t stage, stream;
  uint32_t query, chunk;
  uint32_t nth;        /* its place among its stream's launches */
  uint32_t slot;       /* stamp slot on its stream, UINT32_MAX: none */
  uint32_t wait;       /* the record (same tenant) whose signal it waited for on the device */
  uint64_t t_submit;   /* host ns */
  uint64_t sem_value;  /* the value it signalled on its stream's semaphore */
  uint64_t start, end; /* device ns on the host clock (0: no stamp) */
} eg_launch_rec;

/* Allocations, frees and OVER_BUDGET retries the tenant made (host time of the call). */
typedef struct eg_mem_rec {
  uint64_t t, bytes;
  uint8_t kind, stream; /* kind: 0 alloc, 1 free, 2 over budget (retry) */
} eg_mem_rec;

typedef struct eg_live_sample { /* a tenant's live bytes after one allocate or free (log) */
  uint64_t t, live;
  uint8_t tenant;
} eg_live_sample;

typedef struct eg_dev_sample { /* the device budget's figures, sampled */
  uint64_t t, live, pending, cached;
} eg_dev_sample;

/* A query waiting for its results to be copied out and checked. */
typedef struct eg_pending {
  const eg_variant* v;
  uint64_t qval; /* done once the tenant's query semaphore reaches it */
  devrt_block parts;
  uint32_t query;
  uint64_t t_start;
  bool graph; /* a graph replay's: no query semaphore, and parts is the graph's (kept) */
} eg_pending;

struct eg_engine;

/* One device: its runtime, with the engine's own resource stack, its layout (one partition per
 * tenant on it), the kernels loaded there, and, with several devices, its communicator. */
typedef struct eg_device {
  int index, ordinal;
  devrt_runtime* rt;
  devrt_device_info di;
  devrt_resource* budget; /* the top of the stack the engine installs */
  devrt_resource* stats;
  devrt_layout* layout; /* NULL on a device without tenants */
  devrt_layout_info linfo;
  devrt_module* mod;
  devrt_kernel* k[EG_NSTAGES];
  int tenant[EG_MAX_TENANTS], ntenants; /* its tenants (tenant i runs on device i % devices) */
  uint64_t global_budget, sum_sub, peak_held;
  uint64_t reserve; /* what batch tenants leave free for the interactive one (its device) */
  /* Serializes the batch tenants' reserve check with their allocation (a mutex held across that
   * devrt_queue_submit: the allocation is issued inside it), so that no two of them pass the check
   * on the same free bytes. */
  pthread_mutex_t admit_mu;
  int64_t clock_offset; /* device ns - host ns (cuda's %globaltimer vs CLOCK_MONOTONIC) */
  devrt_comm* comm;     /* its rank of the all-reduce (several devices) */
} eg_device;

typedef struct eg_tenant {
  struct eg_engine* e;
  eg_device* d; /* where it runs */
  int id;
  bool interactive;
  const char* tag;       /* a literal: tags outlive the runtime */
  devrt_partition* part; /* partition `index` of its device's layout */
  unsigned index;
  devrt_partition_info pinfo;
  unsigned grid; /* blocks a launch gets: the partition's SMs x 4 (host: its workers) */
  uint64_t sub_budget;
  devrt_stream s[EG_STREAMS];
  /* The tenant thread's own (no other thread touches them while it runs): */
  devrt_semaphore *gsem[2], *ssem; /* the generate and scan streams' timelines */
  devrt_semaphore* credit;         /* chunks retired: bounds the chunks in flight */
  devrt_semaphore* asem;           /* allocations issued (replaced after an OVER_BUDGET) */
  devrt_semaphore* qsem;           /* queries whose results are merged */
  uint64_t gval[2], sval, aval, qval, admitted;
  devrt_block stamps[EG_STAMPED];
  uint64_t* stamp_dev[EG_STAMPED]; /* device addresses */
  /* A stamped stream's stamp_cap slots: its launches are stamped 1 in stamp_stride; when the
   * slots run out, the stride doubles and every other stamped launch gives its slot back
   * (stamp_free), so the stamps stay spread evenly over the whole run. */
  uint32_t stamp_next[EG_STAMPED], stamp_cap, stamp_stride[EG_STAMPED], launches[EG_STAMPED];
  uint32_t *stamp_free[EG_STAMPED], nfree[EG_STAMPED];
  eg_launch_rec* recs;
  size_t nrecs, caprecs;
  eg_mem_rec* mrecs;
  size_t nmrecs, capmrecs;
  uint32_t last_gen[2]; /* the record of each generate stream's last launch */
  uint64_t retries, held_back, t_first, t_last;
  double *lat_alone, *lat_load; /* microseconds */
  size_t nalone, nload, cap_alone, cap_load;
  uint32_t next_query; /* the interactive tenant's: its threads run one after the other */
  /* --graphs (the interactive tenant): each interactive variant's query captured at setup on
   * the scan stream, its slots (the graph's output), and the chunk buffer its graphs share */
  devrt_graph** graphs;
  devrt_block *gparts, gchunk;
  /* The checker (batch tenants): a ring of pending queries under mu. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  eg_pending ring[EG_RING];
  unsigned head, tail;  /* under mu */
  bool closing;         /* under mu: no more queries */
  uint64_t* host_parts; /* the checker's (or the interactive thread's) copy-out buffer */
  /* Progress, read by the main thread while the tenant runs: */
  _Atomic uint64_t queries_done, rows_done, bytes_done, chunks_done;
  pthread_t thread, checker;
} eg_tenant;

typedef struct eg_engine {
  eg_options o;
  eg_device devs[EG_MAX_DEVICES];
  int nd;           /* devices of this process: 1 unless --devices */
  int rank, nranks; /* --ranks: this process's rank of the job (else 0 of 1) */
  int local_rank;   /* --ranks: its rank on this node (its device: --ordinal + local_rank) */
  bool cuda;
  eg_tenant t[EG_MAX_TENANTS];
  int nt;
  eg_variant* var;
  int nvar, nq1, njoin, ninter; /* variants: nq1 Q1s, njoin joins (batch), ninter interactive */
  uint64_t li_rows, ord_rows, chunk_rows, ichunk_rows;
  uint64_t t0, t_alone0, t_alone1, t_load0, t_load1; /* host ns */
  _Atomic int phase;                                 /* 0 alone, 1 load, 2 done */
  _Atomic int alone_running, batch_running;
  _Atomic bool failed;
  pthread_mutex_t err_mu;
  char error[512]; /* under err_mu: the first failure */
  _Atomic uint64_t checked_queries, checked_chunks, mismatches;
  /* Memory over time: the log callback appends under mem_mu; the main thread samples. */
  pthread_mutex_t mem_mu;
  eg_live_sample* live;
  size_t nlive, caplive;
  uint64_t tenant_live[EG_MAX_TENANTS]; /* under mem_mu */
  void** live_ptr;                      /* under mem_mu: allocations the log saw, by address */
  uint64_t* live_meta;                  /* under mem_mu: tenant << 56 | bytes */
  size_t live_cap, live_used;           /* under mem_mu (live_cap: fixed at setup) */
  eg_dev_sample* dev;                   /* the first device's */
  size_t ndev, capdev;
  int corrupt[3]; /* DEVRT_DEMO_CORRUPT=tenant:query:chunk flips a bit of that chunk's copied slot
                   before the check (the tests' proof that a mismatch fails the run); -1: off */
  eg_figures* f;
} eg_engine;

/* A devrt call that must succeed: else the run fails (return 1), naming what and devrt's message.
 */
#define CALL(e, what, expr)                                                             \
  do {                                                                                  \
    devrt_status s_ = (expr);                                                           \
    if (s_ != DEVRT_OK)                                                                 \
      return eg_fail(e, "%s: %s: %s", what, devrt_status_name(s_), devrt_last_error()); \
  } while (0)

/* Host ns (CLOCK_MONOTONIC): the host's %globaltimer. */
uint64_t eg_now_ns(void);
/* Records the first failure (printf-style); later ones are dropped. Returns 1. */
int eg_fail(eg_engine* e, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* Grows *p (n used, *cap) for one more element of size sz; false when out of memory. */
bool eg_grow(void** p, size_t n, size_t* cap, size_t sz);

/* reference.c: the queries' variants for e's sizes, and their CPU reference (threads). */
int eg_plan(eg_engine* e);
void eg_plan_free(eg_engine* e);
/* Compares one query's copied slots with its reference; 0, or 1 after eg_fail naming the query,
 * tenant and chunk. */
int eg_check(eg_engine* e, const eg_tenant* t, const eg_variant* v, uint32_t query,
             const uint64_t* slots);

/* A device's address of block b (NULL after eg_fail). */
void* eg_block_ptr(eg_engine* e, eg_device* d, devrt_block b);
/* Launches a copy of block b's first `bytes` to dst on stream s of device d, ordered after the
 * block's writers by devrt's use tracking (foreign stream-ordered work); the caller waits. */
int eg_copy_to_host(eg_engine* e, eg_device* d, devrt_stream s, devrt_block b, void* dst,
                    size_t bytes);
/* The charge of an allocation of n bytes under devrt's caching layer (its size class). */
uint64_t eg_charge(uint64_t n);

/* distributed.c: the distributed Q1 over every device (several devices, or one per rank with
 * --ranks): the communicators (eg_dist_setup, which fails naming DEVRT_NCCL_LIBRARY where cuda
 * has no NCCL), the queries (eg_dist_run), every rank's figures gathered to rank 0
 * (eg_dist_gather), and the bytes a device needs for them (eg_dist_bytes). 0, or 1 after eg_fail.
 */
int eg_dist_setup(eg_engine* e);
int eg_dist_run(eg_engine* e);
int eg_dist_gather(eg_engine* e);
/* A recorded launch of stage st on stream s of device d, with its uses (no stamp). */
int eg_dist_launch(eg_engine* e, eg_device* d, devrt_stream s, eg_stage st, void** args,
                   const devrt_block_use* uses, unsigned nuses);
/* join.c: one distributed hash join of variant v on every local device (generate and shuffle on
 * gen[i] and work[i]), its result checked on each. 0, or 1 after eg_fail. */
int eg_dist_join(eg_engine* e, const devrt_stream* gen, const devrt_stream* work,
                 const eg_variant* v, uint32_t query);
uint64_t eg_dist_bytes(const eg_engine* e);
/* Compares a device's copy of a distributed query's result with the reference total. */
int eg_check_total(eg_engine* e, const eg_variant* v, uint32_t query, int device,
                   const uint64_t* total);

/* output.c */
void eg_progress(eg_engine* e, bool final);
void eg_print_table(const eg_figures* f, FILE* out);
void eg_print_verdict(const eg_figures* f, FILE* out); /* "OK: ..." or "FAILED: why" */
/* The numbers the table and the report both show, in buf (16 bytes): bytes ("20.5 MiB"), rates
 * ("37.8M"), latencies ("120 us", "1.20 ms"; "-" without samples). */
const char* eg_bytes(char* buf, uint64_t bytes);
const char* eg_rate(char* buf, double v);
const char* eg_us(char* buf, const eg_lat* l, double v);
void eg_print_json(const eg_figures* f, FILE* out);
/* Nearest-rank percentiles of n values (sorted in place). */
eg_lat eg_lat_of(double* v, int n);

/* trace.c, report.c: 0 on success, 1 after eg_fail. */
int eg_write_trace(eg_engine* e, const char* path);
int eg_write_report(eg_engine* e, const eg_figures* f, const char* dir);

/* host_kernels.c */
extern const devrt_host_kernel eg_host_kernels[];
extern const unsigned eg_host_kernel_count;

#endif
