/* devrt/devrt.h: the umbrella header; includes every public devrt header. */
#ifndef DEVRT_DEVRT_H
#define DEVRT_DEVRT_H
#include "devrt/status.h"
#include "devrt/runtime.h"
#include "devrt/stream.h"
#include "devrt/event.h"
#include "devrt/memory.h"
#include "devrt/device.h"
#include "devrt/resource.h"
#include "devrt/block.h"
#include "devrt/launch.h"
#include "devrt/graph.h"
#include "devrt/semaphore.h"
#include "devrt/queue.h"
#include "devrt/partition.h"
#include "devrt/torch.h"
#include "devrt/peer.h"
#include "devrt/collective.h"
#endif
