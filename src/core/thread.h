/* thread.h (internal): starting devrt's own threads (host stream workers, the queue's dispatch and
 * completion threads, the allocation log's flusher). They take no asynchronous signals: those
 * belong to the application's threads; the synchronous ones (a fault in the thread's own code)
 * still reach them. */
#ifndef DEVRT_CORE_THREAD_H
#define DEVRT_CORE_THREAD_H

#include <pthread.h>
#include <signal.h>

/* pthread_create's result (0, or an errno). */
static inline int dv_thread_start(pthread_t* t, void* (*fn)(void*), void* arg) {
  static const int sync_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP};
  sigset_t block, old;
  sigfillset(&block);
  for (size_t i = 0; i < sizeof sync_signals / sizeof *sync_signals; i++)
    sigdelset(&block, sync_signals[i]);
  pthread_sigmask(SIG_SETMASK, &block, &old);
  int rc = pthread_create(t, NULL, fn, arg);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc;
}

#endif
