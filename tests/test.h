/* test.h: the tests' small harness: CHECK macros, a runtime on the backend the test run asks for
 * (DEVRT_BACKEND; a cuda run without a GPU exits 77 = skipped, or fails under
 * DEVRT_REQUIRE_GPU=1), and helpers to launch devrt's shipped kernels and read memory back. */
#ifndef DEVRT_TEST_H
#define DEVRT_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "runtime/runtime.h"
#include "devrt/devrt.h"

static int t_failures, t_checks;

#define CHECK(c)                                                            \
  do {                                                                      \
    t_checks++;                                                             \
    if (!(c)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); \
      t_failures++;                                                         \
    }                                                                       \
  } while (0)

#define CHECK_STATUS(expr, want)                                                          \
  do {                                                                                    \
    t_checks++;                                                                           \
    devrt_status s_ = (expr);                                                             \
    if (s_ != (want)) {                                                                   \
      fprintf(stderr, "%s:%d: %s -> %s, want %s (%s)\n", __FILE__, __LINE__, #expr,       \
              devrt_status_name(s_), devrt_status_name(want), devrt_last_error());        \
      t_failures++;                                                                       \
    } else if ((want) != DEVRT_OK && devrt_last_error()[0] == 0) {                        \
      fprintf(stderr, "%s:%d: %s failed without a message\n", __FILE__, __LINE__, #expr); \
      t_failures++;                                                                       \
    }                                                                                     \
  } while (0)

#define CHECK_OK(expr) CHECK_STATUS(expr, DEVRT_OK)

/* Like CHECK_OK, but a failure ends the test at once (later steps depend on it). */
#define REQUIRE_OK(expr)                                                                          \
  do {                                                                                            \
    devrt_status s_ = (expr);                                                                     \
    if (s_ != DEVRT_OK) {                                                                         \
      fprintf(stderr, "%s:%d: %s -> %s (%s)\n", __FILE__, __LINE__, #expr, devrt_status_name(s_), \
              devrt_last_error());                                                                \
      exit(1);                                                                                    \
    }                                                                                             \
  } while (0)

/* xorshift64: the stress tests' random choices (each thread seeds its own state, never 0). */
static inline uint64_t t_rand(uint64_t* s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

/* In a stress thread's void function: a call that fails is printed with its line, counted in
 * the atomic `counter`, and ends the function. */
#define T_STRESS_OK(counter, expr)                                               \
  do {                                                                           \
    devrt_status s_ = (expr);                                                    \
    if (s_ != DEVRT_OK) {                                                        \
      fprintf(stderr, "line %d: %s: %s\n", __LINE__, #expr, devrt_last_error()); \
      atomic_fetch_add(&(counter), 1);                                           \
      return;                                                                    \
    }                                                                            \
  } while (0)

static inline int t_done(void) {
  printf("%d checks, %d failed\n", t_checks, t_failures);
  return t_failures ? 1 : 0;
}

static inline int t_want_cuda(void) {
  const char* b = getenv("DEVRT_BACKEND");
  return b && !strcmp(b, "cuda");
}

/* Exits 77 (skipped) when a cuda run finds no GPU, or 1 under DEVRT_REQUIRE_GPU=1. */
static inline void t_no_gpu(devrt_status s) {
  const char* req = getenv("DEVRT_REQUIRE_GPU");
  if (req && !strcmp(req, "1")) {
    fprintf(stderr, "DEVRT_REQUIRE_GPU=1 but the cuda backend is unavailable: %s: %s\n",
            devrt_status_name(s), devrt_last_error());
    exit(1);
  }
  printf("skipped: no GPU (%s: %s)\n", devrt_status_name(s), devrt_last_error());
  exit(77);
}

/* An owned runtime on the backend DEVRT_BACKEND names (cfg fields from env + overrides). */
static inline devrt_runtime* t_runtime_cfg(devrt_config* cfg) {
  devrt_runtime* rt = NULL;
  devrt_status s = devrt_runtime_create(cfg, &rt);
  if (s != DEVRT_OK && t_want_cuda() &&
      (s == DEVRT_ERR_NO_DRIVER || s == DEVRT_ERR_NO_DEVICE || s == DEVRT_ERR_UNSUPPORTED))
    t_no_gpu(s);
  if (s != DEVRT_OK) {
    fprintf(stderr, "devrt_runtime_create: %s: %s\n", devrt_status_name(s), devrt_last_error());
    exit(1);
  }
  if (t_want_cuda() && strcmp(rt->be->name, "cuda")) t_no_gpu(DEVRT_ERR_NO_DEVICE);
  return rt;
}

static inline devrt_runtime* t_runtime(void) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  return t_runtime_cfg(&cfg);
}

static inline int t_is_cuda(devrt_runtime* rt) { return !strcmp(rt->be->name, "cuda"); }

/* Launches one of devrt's shipped kernels (backend level; the public launch API is later). */
static inline devrt_status t_launch(devrt_runtime* rt, devrt_stream sid, const char* name,
                                    unsigned grid, unsigned block, void** args) {
  static dv_module* mod;
  static devrt_runtime* mod_rt;
  if (mod_rt != rt) {
    DV_CHECK(rt->be->module_load(rt->dev, NULL, &mod));
    mod_rt = rt;
  }
  dv_kernel* k;
  DV_CHECK(rt->be->kernel_get(mod, name, &k));
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, sid, &s, "t_launch"));
  unsigned g[3] = {grid, 1, 1}, b[3] = {block, 1, 1};
  return rt->be->launch(s, k, g, b, 0, args);
}

/* A new arena leaf on rt; on a GPU whose driver lacks virtual memory management, skipped (77). */
static inline devrt_resource* t_arena(devrt_runtime* rt) {
  devrt_resource* r = NULL;
  devrt_status s = devrt_arena_resource_create(rt, &r);
  if (s == DEVRT_ERR_UNSUPPORTED && t_is_cuda(rt)) t_no_gpu(s);
  REQUIRE_OK(s);
  return r;
}

/* r's figures, the query checked. */
static inline devrt_resource_figures t_figures(devrt_resource* r) {
  devrt_resource_figures f;
  CHECK_OK(devrt_resource_query(r, &f));
  return f;
}

static inline void t_sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* The whole file at path as a string (empty when it cannot be read); free() it. */
static inline char* t_slurp(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return calloc(1, 1);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* s = calloc(1, (size_t)n + 1);
  if (fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = 0;
  fclose(f);
  return s;
}

/* A new empty file's path in buf (/tmp/devrt_log_XXXXXX); the test ends if none can be made. */
static inline void t_tmp_path(char* buf, size_t n) {
  snprintf(buf, n, "/tmp/devrt_log_XXXXXX");
  int fd = mkstemp(buf);
  if (fd < 0) {
    perror("mkstemp");
    exit(1);
  }
  close(fd);
}

/* The lines (newlines) in s. */
static inline int t_lines(const char* s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

#endif
