/* devrt/semaphore.h: timeline semaphores (the Vulkan/IREE model).
 *
 * A semaphore is a 64-bit timeline that only moves forward. The host signals it
 * (devrt_semaphore_signal), and so does device work: a submission (queue.h) names the values it
 * signals once its work completes, and the values it waits for before its work may start.
 *
 * Rules:
 * - Values are 0 .. DEVRT_SEMAPHORE_MAX_VALUE (2^63 - 1). Signalling a value <= the current one,
 *   or above the maximum, is INVALID_ARGUMENT and changes nothing. Waiting for a value above the
 *   maximum is INVALID_ARGUMENT.
 * - Each semaphore keeps two watermarks: the highest value *scheduled* (the device work that
 *   signals it has been issued, so other device work can wait on it on the GPU) and the highest
 *   value *completed* (what query and host waits see). A host signal raises both.
 * - Timeouts are relative, in nanoseconds. 0 polls (and never blocks); DEVRT_TIMEOUT_INFINITE
 *   waits for ever. A wait that runs out of time returns TIMEOUT, never earlier than asked.
 * - Host waits spin briefly (devrt_config.wait_spin_ns, default 20 us; they poll the event of the
 *   scheduled signal, so a device signal is seen as soon as the GPU reaches it), then block on a
 *   condition variable. An idle runtime uses no CPU.
 * - Failure: the first devrt_semaphore_fail wins; later ones change nothing. After a failure
 *   every wait, signal and query returns ABORTED, whose message names the root cause (its
 *   status, message and where it happened); devrt_semaphore_failure returns that root cause.
 *   Submissions waiting on a failed semaphore fail their own signal semaphores with the same
 *   root cause, so a failure travels down a whole chain.
 * - Destroying a semaphore wakes its host waiters with CANCELLED (no waiter touches freed
 *   memory: waiters hold a reference) and fails submissions still waiting on it with CANCELLED.
 *   The handle is dead at once; devrt frees the memory when the last internal user lets go.
 * - A semaphore belongs to the runtime it was created on; destroy every semaphore before
 *   destroying an owned runtime (devrt_runtime_destroy refuses with INVALID_STATE until then). */
#ifndef DEVRT_SEMAPHORE_H
#define DEVRT_SEMAPHORE_H

#include <stdint.h>
#include "devrt/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct devrt_semaphore devrt_semaphore;

#define DEVRT_SEMAPHORE_MAX_VALUE ((uint64_t)INT64_MAX) /* 2^63 - 1 */
#define DEVRT_TIMEOUT_INFINITE UINT64_MAX

typedef enum devrt_wait_mode {
  DEVRT_WAIT_ALL = 0, /* every semaphore reaches its value */
  DEVRT_WAIT_ANY = 1, /* at least one does */
} devrt_wait_mode;

/* Creates a semaphore at `initial` (<= the maximum). Thread-safe. */
devrt_status devrt_semaphore_create(devrt_runtime* rt, uint64_t initial, devrt_semaphore** out);

/* Destroys it: host waiters wake with CANCELLED, parked submissions waiting on it fail with
 * CANCELLED, signals of issued submissions to it are dropped. Thread-safe with waits and signals
 * on it; the handle must not be used afterwards. */
devrt_status devrt_semaphore_destroy(devrt_semaphore* sem);

/* Host signal: sets the value to `value` (> current, <= maximum), wakes host waiters and
 * releases submissions waiting for it. ABORTED once failed. Thread-safe. The device work it
 * releases may be issued on the calling thread (driver calls; a failure there fails that work's
 * signals, not this call), so do not call it from a CUDA host function (cuLaunchHostFunc), where
 * driver calls are not allowed: signal from a devrt_queue host call instead. */
devrt_status devrt_semaphore_signal(devrt_semaphore* sem, uint64_t value);

/* The completed value (first polling the oldest scheduled device signal once, so GPU progress is
 * seen without waiting for devrt's completion thread). Never decreases. ABORTED once failed,
 * with *value the last value reached before the failure. Thread-safe. */
devrt_status devrt_semaphore_query(devrt_semaphore* sem, uint64_t* value);

/* Blocks until the value is >= `value`: OK, TIMEOUT, ABORTED (failed before or while waiting)
 * or CANCELLED (destroyed while waiting). Thread-safe. */
devrt_status devrt_semaphore_wait(devrt_semaphore* sem, uint64_t value, uint64_t timeout_ns);

/* Fails the semaphore with `status` (not OK) and `message` (may be NULL; copied, truncated to
 * 255 bytes). The first failure wins: a later call returns OK and changes nothing. Wakes every
 * waiter with ABORTED and fails what waits on it. Thread-safe. */
devrt_status devrt_semaphore_fail(devrt_semaphore* sem, devrt_status status, const char* message);

/* The root cause: *status is OK while the semaphore has not failed, else the first failure's
 * status, and *message its message ("" if none; valid as long as the semaphore). Thread-safe. */
devrt_status devrt_semaphore_failure(devrt_semaphore* sem, devrt_status* status,
                                     const char** message);

/* Waits for all (DEVRT_WAIT_ALL) or any (DEVRT_WAIT_ANY) of n semaphores to reach their values.
 * n == 0 returns OK at once. *index (may be NULL) is, for ANY, a semaphore that reached its value;
 * on ABORTED or CANCELLED, the one that failed or was destroyed. A failure of any semaphore in the
 * list ends the wait with ABORTED, even in ANY mode. Semaphores may belong to different runtimes.
 * Thread-safe. */
devrt_status devrt_semaphores_wait(unsigned n, devrt_semaphore* const* sems, const uint64_t* values,
                                   devrt_wait_mode mode, uint64_t timeout_ns, unsigned* index);

#ifdef __cplusplus
}
#endif
#endif
