/* multi.h (internal): several devices: peer access between runtimes (peer.c), whose links live in
 * the runtime's state (src/timeline/rt.h) so the layers below read them, NCCL loaded at run time
 * (nccl.c) and the collectives over it (collective.c). */
#ifndef DEVRT_MULTI_H
#define DEVRT_MULTI_H

#include "../sync/sync.h"

/* INVALID_STATE (naming `call`) while rt has peer access with another runtime. */
devrt_status dv_peers_check_none(devrt_runtime* rt, const char* call);

#endif
