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
 * Under capture (graph.h): a collective on a stream the calling thread captures is recorded, not
 * run (its blocks join the capture's uses), and every launch of the graph runs it again; a group's
 * calls must all be on capturing streams (each rank's capture may be its own), or none. Every
 * rank must launch its graph as often and in the same order relative to its other calls on the
 * communicator (NCCL's rule for any call). The graph holds the communicator: devrt_comm_destroy
 * is refused until the graph is destroyed.
 *
 * Backends. cuda: libnccl is loaded at the first call (DEVRT_NCCL_LIBRARY, else libnccl.so.2,
 * else the nvidia-nccl wheels' copies under python's site directories); missing, every call is
 * UNSUPPORTED with a message naming what was tried. host: devrt's own host collectives over host
 * devices of one process (streams meet on the host; for tests of tracking and ordering): every
 * type but the 16-bit floats, ranks from devrt_comms_create or devrt_comm_create in threads of one
 * process (an id from devrt_comm_id_create of that process), or ranks in processes of one machine
 * from devrt_comm_create_from_env (data exchanged through shared memory). */
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

/* Destroys a communicator once its work has completed. INVALID_STATE while a graph holds a
 * collective of it (graph.h). Not thread-safe with other calls on it. */
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

/* Point-to-point: `count` elements of dtype from the start of a block, sent to or received from
 * rank `peer` (which may be this rank: then its send and receive must be in one group). A send is
 * a read of `send`, a receive a write of `recv`, tracked as the collectives above. A rank's sends
 * to one peer are received there in the order they were issued; a send and its receive must
 * name the same count and dtype. Calls that must progress together (a send and a receive between
 * two ranks, each rank's both directions) go in one group, as NCCL requires; ungrouped, a send
 * may wait for its receive. INVALID_ARGUMENT as above, and a peer out of range. Thread-safe. */
devrt_status devrt_send(devrt_comm* comm, devrt_stream stream, devrt_block send, size_t count,
                        devrt_dtype dtype, int peer);
devrt_status devrt_recv(devrt_comm* comm, devrt_stream stream, devrt_block recv, size_t count,
                        devrt_dtype dtype, int peer);

/* All-to-all with equal parts: send and recv hold nranks parts of `count` elements each; part j of
 * a rank's send goes to rank j, and part j of its recv comes from rank j. send and recv must be
 * distinct blocks. Enqueued as one piece of tracked work (on cuda: a send and a receive per peer
 * in one NCCL group). Thread-safe. */
devrt_status devrt_all_to_all(devrt_comm* comm, devrt_stream stream, devrt_block send,
                              devrt_block recv, size_t count, devrt_dtype dtype);

/* All-to-all with a count per rank (MPI's alltoallv): send_counts[j] elements from
 * send_offsets[j] (in elements) of send go to rank j, and recv_counts[j] elements from rank j land
 * at recv_offsets[j] of recv; each array has nranks entries and is copied by the call. A rank's
 * send_counts[j] must equal rank j's recv_counts[this rank]. Parts may be empty; each must lie in
 * its block, and send and recv must be distinct blocks. Thread-safe. */
devrt_status devrt_all_to_allv(devrt_comm* comm, devrt_stream stream, devrt_block send,
                               const size_t* send_counts, const size_t* send_offsets,
                               devrt_block recv, const size_t* recv_counts,
                               const size_t* recv_offsets, devrt_dtype dtype);

/* ---- Ranks in separate processes ----
 *
 * The job a launcher started this process in, read from the launcher's variables: torchrun (RANK,
 * WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), Open MPI's mpirun (OMPI_COMM_WORLD_RANK, _SIZE,
 * _LOCAL_RANK, _LOCAL_SIZE), MPICH's (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS) and
 * Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), tried in that order; without any, one
 * rank. */
typedef struct devrt_job {
  int rank, nranks;             /* this process's rank in the job, and the job's size */
  int local_rank, local_nranks; /* on this node (local_nranks 0: the launcher does not say) */
  char launcher[16];            /* "torchrun", "openmpi", "mpich", "slurm" or "none" */
} devrt_job;

/* The job this process belongs to. INVALID_ARGUMENT, naming the variable, when a launcher's
 * variable is not a number or out of range. Thread-safe. */
devrt_status devrt_job_get(devrt_job* out);

/* This process's rank of the job (devrt_job_get) on rt, or, with rt NULL, on the process-wide
 * runtime of ordinal local_rank (devrt_comm_info gives it back). Rank 0 makes the unique id and
 * passes it to the others through DEVRT_RENDEZVOUS: "file:PATH" (a path on a filesystem every
 * rank sees, unique to the job; rank 0 writes it and removes it once every rank has joined) or
 * "mpi" (MPI_Bcast through libmpi loaded at run time, DEVRT_MPI_LIBRARY or libmpi.so.40/.12);
 * unset, "mpi" under mpirun and otherwise an error naming DEVRT_RENDEZVOUS. Waits for the id at
 * most DEVRT_RENDEZVOUS_TIMEOUT_MS (default 300000) and then for every rank, as devrt_comm_create.
 * On the host backend the ranks exchange data through shared memory (one machine). Thread-safe. */
devrt_status devrt_comm_create_from_env(devrt_runtime* rt, devrt_comm** out);

#ifdef __cplusplus
}
#endif
#endif
