/* clock.h: the monotonic clock every layer reads (timeouts, durations, the log's times), in
 * nanoseconds. */
#ifndef DEVRT_CORE_CLOCK_H
#define DEVRT_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t dv_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
