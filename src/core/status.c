/* status.c: status names and the thread-local last-error message. */
#include <stdarg.h>
#include <stdio.h>
#include "error.h"

static _Thread_local char last_error[1024];
_Thread_local unsigned dv_error_state;

static const char* const names[DEVRT_STATUS_COUNT_] = {
    "OK",
    "INVALID_ARGUMENT",
    "OVER_BUDGET",
    "STALE_BLOCK",
    "INVALID_STATE",
    "DEVICE_ALLOC_FAILED",
    "DEPENDENCY_FAILED",
    "UNSUPPORTED",
    "NO_DRIVER",
    "NO_DEVICE",
    "TIMEOUT",
    "ABORTED",
    "CANCELLED",
    "OUT_OF_RESOURCES",
    "BACKEND_ERROR",
    "DEVICE_LOST",
};

const char* devrt_status_name(devrt_status s) {
  return (unsigned)s < DEVRT_STATUS_COUNT_ ? names[s] : "UNKNOWN";
}

const char* devrt_last_error(void) { return last_error; }

void dv_error_reset(void) {
  last_error[0] = 0;
  dv_error_state = 0;
}

devrt_status dv_fail(devrt_status status, const char* fmt, ...) {
  if (dv_error_state >= DV_ERROR_KEEP)
    return status; /* cleanup after a failure: the first stands */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  dv_error_state = DV_ERROR_SET;
  return status;
}
