/* multi.h (internal): several devices: peer access between runtimes (peer.c), whose links live in
 * the runtime's state (src/timeline/rt.h) so the layers below read them, NCCL loaded at run time
 * (nccl.c) and the collectives over it (collective.c). */
#ifndef DEVRT_MULTI_H
#define DEVRT_MULTI_H

#include "devrt/collective.h"
#include "../sync/sync.h"

/* INVALID_STATE (naming `call`) while rt has peer access with another runtime. */
devrt_status dv_peers_check_none(devrt_runtime* rt, const char* call);

/* A new unique id (devrt_comm_id_create) for a group whose ranks may be in other processes: on
 * cuda NCCL's id as it is; on host an id marked for the shared-memory transport, which
 * devrt_comm_create then uses for every rank of the group (collective.c). */
devrt_status dv_comm_id_for_processes(devrt_runtime* rt, devrt_comm_id* out);

#endif
