/* error.h: how devrt code fails: set the thread's last-error message and return the status.
 * DV_FAIL(status, "call: what (values)") is the one way every layer reports an error. */
#ifndef DEVRT_CORE_ERROR_H
#define DEVRT_CORE_ERROR_H

#include <assert.h>
#include <stdbool.h>
#include "devrt/status.h"

#if defined(__GNUC__)
#define DV_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define DV_LIKELY(x) __builtin_expect(!!(x), 1)
#define DV_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define DV_INLINE \
  __attribute__((always_inline)) inline /* a hot path's helper, inlined where it is defined */
#define DV_COLD \
  __attribute__((cold)) /* failure paths: the compiler moves what leads here out of hot code */
#define DV_HOT \
  __attribute__((hot)) /* the paths around driver calls (launches, allocations): kept together */
/* A hot path's entry whose helpers all inline into it (no call or frame per helper, fewer lines
 * between the driver's calls), and a rare path such an entry must not pull in. */
#define DV_FLATTEN __attribute__((flatten))
#define DV_NOINLINE __attribute__((noinline))
#else
#define DV_COLD
#define DV_HOT
#define DV_FLATTEN
#define DV_NOINLINE
#define DV_INLINE inline
#define DV_PRINTF(a, b)
#define DV_LIKELY(x) (x)
#define DV_UNLIKELY(x) (x)
#endif

/* An internal invariant: checked in Debug builds (the sanitizer builds CI runs), compiled out
 * where NDEBUG is defined (release builds; sizeof keeps what it names in use). */
#ifdef NDEBUG
#define DV_ASSERT(cond) ((void)sizeof(cond))
#else
#define DV_ASSERT(cond) assert(cond)
#endif

/* Sets the thread's last error to the formatted message and returns `status`. */
devrt_status dv_fail(devrt_status status, const char* fmt, ...) DV_PRINTF(2, 3) DV_COLD;

/* The last-error contract (status.h): every public call clears the message on entry (the entry
 * checks, DV_RT_CHECK and its kind, do it), so the message a caller reads belongs to the call that
 * just failed, and a call that succeeded leaves none. Cleanup that runs after a failure, public
 * calls included, runs under DV_KEEP_ERROR: neither its clears nor its own failures touch the
 * message of the failure being returned. */
enum { DV_ERROR_SET = 1, DV_ERROR_KEEP = 2 }; /* DV_ERROR_KEEP per DV_KEEP_ERROR level */
extern _Thread_local unsigned dv_error_state; /* SET: the message is not "" */
void dv_error_reset(void);
static inline void dv_error_clear(void) {
  if (DV_UNLIKELY(dv_error_state == DV_ERROR_SET)) dv_error_reset();
}
#define DV_KEEP_ERROR(stmt)          \
  do {                               \
    dv_error_state += DV_ERROR_KEEP; \
    stmt;                            \
    dv_error_state -= DV_ERROR_KEEP; \
  } while (0)
/* Runs `call` whether or not st already holds a failure; st keeps the first one, and its message.
 */
#define DV_ALSO(st, call)  \
  do {                     \
    if ((st) == DEVRT_OK)  \
      (st) = (call);       \
    else                   \
      DV_KEEP_ERROR(call); \
  } while (0)

/* A public call's argument check: INVALID_ARGUMENT, "<call>: <what>", when cond does not hold. */
#define DV_ARG_CHECK(cond, call, ...)                                                            \
  do {                                                                                           \
    if (DV_UNLIKELY(!(cond))) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, call ": " __VA_ARGS__); \
  } while (0)

#define DV_CHECK(expr)                                \
  do {                                                \
    devrt_status dv_s_ = (expr);                      \
    if (DV_UNLIKELY(dv_s_ != DEVRT_OK)) return dv_s_; \
  } while (0)

#endif
