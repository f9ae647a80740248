/* devrt/collective.h: NCCL's collectives as tracked work over devrt blocks.
 *
 * A communicator is one rank of a group of devices: devrt_comms_create makes one per runtime for a
 * set of runtimes in one process; devrt_comm_create makes one rank from a unique id that the
 * caller passes to every rank (other threads, or other processes: the caller brings the
 * launcher). A collective (all-reduce, all-gather, reduce-scatter, broadcast) is a recorded launch
 * on one of the comm's runtime's streams over its blocks: it waits for what a read of `send` and a
 * write of `recv` must respect, and both blocks' records keep where it ends, so a kernel on any
 * stream (of any runtime with peer access, peer.h) that reads the result waits for it, and no
 * block is freed under it. `send` and `recv` may be one block (in place) and may be peers'.
 *
 * Calls for several ranks from one thread must be grouped (devrt_group_start, then one call per
 * rank, then devrt_group_end), as NCCL requires: the work is enqueued at devrt_group_end, and
 * only then are the blocks pinned and the work recorded on them. Other work must not use them
 * until devrt_group_end returns; a block freed before it makes devrt_group_end fail with
 * STALE_BLOCK before anything of the group is enqueued.
 *
 * Backends. cuda: libnccl is loaded at the first call (DEVRT_NCCL_LIBRARY, else libnccl.so.2,
 * else the nvidia-nccl wheels' copies under python's site directories); missing, every call is
 * UNSUPPORTED with a message naming what was tried. host: devrt's own host collectives over host
 * devices of one process (streams meet on the host; for tests of tracking and ordering): every
 * type but the 16-bit floats, ranks from devrt_comms_create or devrt_comm_create in threads of one
 * process (an id from devrt_comm_id_create of that process). */
#ifndef DEVRT_COLLECTIVE_H
#define DEVRT_COLLECTIVE_H

#include "devrt/block.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct devrt_comm devrt_comm;

/* NCCL's unique id (ncclUniqueId): the bytes every rank of one group is created from. */
typedef struct devrt_comm_id {
  char bytes[128];
} devrt_comm_id;

typedef enum devrt_dtype {
  DEVRT_INT8 = 0,
  DEVRT_UINT8,
  DEVRT_INT32,
  DEVRT_UINT32,
  DEVRT_INT64,
  DEVRT_UINT64,
  DEVRT_FLOAT16, /* cuda only */
  DEVRT_FLOAT32,
  DEVRT_FLOAT64,
  DEVRT_BFLOAT16, /* cuda only */
  DEVRT_DTYPE_COUNT_
} devrt_dtype;

typedef enum devrt_redop {
  DEVRT_SUM = 0,
  DEVRT_PROD,
  DEVRT_MAX,
  DEVRT_MIN,
  DEVRT_AVG,
  DEVRT_REDOP_COUNT_
} devrt_redop;

/* The NCCL version loaded (e.g. 22703), or 0 on the host backend; UNSUPPORTED on cuda when libnccl
 * cannot be loaded (the message names every path tried). Thread-safe. */
devrt_status devrt_comm_version(devrt_runtime* rt, int* out);

/* A new unique id for devrt_comm_create (ncclGetUniqueId; on host, random bytes). Thread-safe. */
devrt_status devrt_comm_id_create(devrt_runtime* rt, devrt_comm_id* out);

/* One communicator per runtime of rts[0..n) (rank i on rts[i]; n >= 1, distinct runtimes of one
 * backend), into comms[0..n). Nothing is created if it fails. Thread-safe. */
devrt_status devrt_comms_create(unsigned n, devrt_runtime* const* rts, devrt_comm** comms);

/* Rank `rank` of `nranks` on rt, of the group `id` names. Blocks until every rank has joined (call
 * it for the other ranks from other threads or processes). Thread-safe. */
devrt_status devrt_comm_create(devrt_runtime* rt, const devrt_comm_id* id, int nranks, int rank,
                               devrt_comm** out);

/* Destroys a communicator once its work has completed. Not thread-safe with other calls on it. */
devrt_status devrt_comm_destroy(devrt_comm* comm);

/* Its rank, the group's size and its runtime. Thread-safe. */
devrt_status devrt_comm_info(devrt_comm* comm, int* rank, int* nranks, devrt_runtime** rt);

/* Groups the collectives this thread calls until devrt_group_end (see above); groups nest. */
devrt_status devrt_group_start(void);
/* Enqueues the group's work and records it on its blocks. A failure fails the whole group: its
 * streams are synchronized (no untracked work is left running) and the error returned. */
devrt_status devrt_group_end(void);

/* The collectives, on `stream` (of the comm's runtime). count is in elements of dtype; the blocks
 * must hold what NCCL reads and writes: all-reduce and broadcast count elements in each, all-gather
 * count in send and nranks*count in recv, reduce-scatter nranks*count in send and count in recv.
 * INVALID_ARGUMENT: a NULL comm, stream 0 or another runtime's, count 0, an unknown dtype or op,
 * a block too small, a root out of range; STALE_BLOCK as a launch; UNSUPPORTED as above.
 * Thread-safe (a comm's calls must come in the same order on every rank, as NCCL's). */
devrt_status devrt_all_reduce(devrt_comm* comm, devrt_stream stream, devrt_block send,
                              devrt_block recv, size_t count, devrt_dtype dtype, devrt_redop op);
devrt_status devrt_broadcast(devrt_comm* comm, devrt_stream stream, devrt_block send,
                             devrt_block recv, size_t count, devrt_dtype dtype, int root);
devrt_status devrt_all_gather(devrt_comm* comm, devrt_stream stream, devrt_block send,
                              devrt_block recv, size_t count, devrt_dtype dtype);
devrt_status devrt_reduce_scatter(devrt_comm* comm, devrt_stream stream, devrt_block send,
                                  devrt_block recv, size_t count, devrt_dtype dtype,
                                  devrt_redop op);

#ifdef __cplusplus
}
#endif
#endif
