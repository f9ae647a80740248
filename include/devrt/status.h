/* devrt/status.h: the status model shared by every devrt call.
 * Every call that can fail returns a devrt_status; on failure the calling thread's
 * devrt_last_error() names the call and the values that made it fail. */
#ifndef DEVRT_STATUS_H
#define DEVRT_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum devrt_status {
  DEVRT_OK = 0,
  DEVRT_ERR_INVALID_ARGUMENT,    /* NULL, zero size, foreign or stale handle, out of range */
  DEVRT_ERR_OVER_BUDGET,         /* an allocation would exceed a byte budget */
  DEVRT_ERR_STALE_BLOCK,         /* a block handle whose generation is gone */
  DEVRT_ERR_INVALID_STATE,       /* the object is not in a state that allows the call */
  DEVRT_ERR_DEVICE_ALLOC_FAILED, /* the device (or host backend) could not allocate */
  DEVRT_ERR_DEPENDENCY_FAILED,   /* a dependency could not be satisfied */
  DEVRT_ERR_UNSUPPORTED,         /* the driver, device or backend lacks the feature */
  DEVRT_ERR_NO_DRIVER,           /* libcuda could not be loaded */
  DEVRT_ERR_NO_DEVICE,           /* no device at that ordinal */
  DEVRT_ERR_TIMEOUT,             /* a wait ran out of time */
  DEVRT_ERR_ABORTED,             /* the object failed earlier; the message names the root cause */
  DEVRT_ERR_CANCELLED,           /* the object was destroyed while the call waited */
  DEVRT_ERR_OUT_OF_RESOURCES,    /* a bounded pool (streams, slots, events) is exhausted */
  DEVRT_ERR_BACKEND_ERROR,       /* any other driver or backend failure */
  DEVRT_ERR_DEVICE_LOST,         /* a sticky device error: the context is unusable */
  DEVRT_STATUS_COUNT_
} devrt_status;

/* Stable upper-case name of a status ("OK", "OVER_BUDGET", ...); "UNKNOWN" for other values.
 * Thread-safe. */
const char* devrt_status_name(devrt_status status);

/* The message of the devrt call this thread made last, if it failed: "" once a call succeeded
 * (every call clears it on entry), so the status a call returned and the message read after it
 * describe the same failure. The pointer stays valid until the thread's next devrt call.
 * Thread-safe (thread-local). */
const char* devrt_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
