/* nccl.h (internal): libnccl loaded at run time (nccl.c). devrt declares the few NCCL types and
 * entry points it calls itself, with NCCL's ABI (enums are ints, streams CUstreams), so it builds
 * without nccl.h. */
#ifndef DEVRT_MULTI_NCCL_H
#define DEVRT_MULTI_NCCL_H

#include <stddef.h>
#include "devrt/status.h"

typedef int dv_nccl_result; /* ncclResult_t: 0 is ncclSuccess */
typedef struct dv_nccl_comm* dv_nccl_comm_t;
typedef struct dv_nccl_id {
  char internal[128]; /* NCCL_UNIQUE_ID_BYTES */
} dv_nccl_id;

typedef struct dv_nccl {
  dv_nccl_result (*GetVersion)(int* version);
  dv_nccl_result (*GetUniqueId)(dv_nccl_id* id);
  dv_nccl_result (*CommInitRank)(dv_nccl_comm_t* comm, int nranks, dv_nccl_id id, int rank);
  dv_nccl_result (*CommInitAll)(dv_nccl_comm_t* comms, int ndev, const int* devlist);
  dv_nccl_result (*CommDestroy)(dv_nccl_comm_t comm);
  const char* (*GetErrorString)(dv_nccl_result r);
  const char* (*GetLastError)(dv_nccl_comm_t comm); /* NCCL 2.13+, else NULL */
  /* dtype and op: ncclDataType_t and ncclRedOp_t, which devrt_dtype and devrt_redop match */
  dv_nccl_result (*AllReduce)(const void* send, void* recv, size_t count, int dtype, int op,
                              dv_nccl_comm_t comm, void* stream);
  dv_nccl_result (*Broadcast)(const void* send, void* recv, size_t count, int dtype, int root,
                              dv_nccl_comm_t comm, void* stream);
  dv_nccl_result (*AllGather)(const void* send, void* recv, size_t count, int dtype,
                              dv_nccl_comm_t comm, void* stream);
  dv_nccl_result (*ReduceScatter)(const void* send, void* recv, size_t count, int dtype, int op,
                                  dv_nccl_comm_t comm, void* stream);
  dv_nccl_result (*Send)(const void* send, size_t count, int dtype, int peer, dv_nccl_comm_t comm,
                         void* stream);
  dv_nccl_result (*Recv)(void* recv, size_t count, int dtype, int peer, dv_nccl_comm_t comm,
                         void* stream);
  dv_nccl_result (*GroupStart)(void);
  dv_nccl_result (*GroupEnd)(void);
  int version;
  char path[256]; /* what was loaded */
} dv_nccl;

/* Loads libnccl once per process: DEVRT_NCCL_LIBRARY (only it, when set), else libnccl.so.2, else
 * the copies NVIDIA's nccl wheels install under python's site directories. UNSUPPORTED, naming
 * every path tried and why it failed, when none loads or lacks an entry point; the failure is
 * sticky. Thread-safe. */
devrt_status dv_nccl_get(const dv_nccl** out);

/* Fails with the status for r and "<call>: NCCL error <r> (<its text>; <the comm's last error>)
 * <context>". comm may be NULL. */
devrt_status dv_nccl_fail(const dv_nccl* n, dv_nccl_result r, dv_nccl_comm_t comm, const char* call,
                          const char* fmt, ...) __attribute__((format(printf, 5, 6), cold));

#endif
