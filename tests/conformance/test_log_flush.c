/* test_log_flush.c: the allocation log loses nothing at its edges. A process that logs through the
 * process-wide runtime (DEVRT_LOG) and exits without destroying anything has every counted record
 * in its file, also while another thread still logs; buffered records reach the file within
 * DEVRT_LOG_FLUSH_INTERVAL_MS without further activity; a failing write is counted in log_dropped
 * and said once on stderr, naming the path and the cause. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#include "test.h"

static uint64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static int count_lines(const char* path) {
  char* s = t_slurp(path);
  int n = t_lines(s);
  free(s);
  return n;
}

/* ---- the child: logs through the process-wide runtime's stack, prints log_records, exits ---- */

static void alloc_free(devrt_resource* r, devrt_stream s) {
  void* p;
  REQUIRE_OK(devrt_resource_allocate(r, 256, s, "exit", &p));
  REQUIRE_OK(devrt_resource_deallocate(r, p, 256, s));
}

static devrt_resource* c_stack;
static devrt_stream c_stream;

static void* keep_logging(void* arg) {
  (void)arg;
  for (;;) alloc_free(c_stack, c_stream);
  return NULL;
}

static int child(bool racing) {
  devrt_runtime* rt;
  REQUIRE_OK(devrt_runtime_get(0, &rt));
  REQUIRE_OK(devrt_runtime_resource(rt, &c_stack));
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_SHARE, &c_stream));
  pthread_t t;
  if (racing && pthread_create(&t, NULL, keep_logging, NULL)) return 1;
  for (int i = 0; i < 1000; i++)
    alloc_free(c_stack, c_stream); /* 2000 records: not whole batches */
  devrt_resource_figures f;
  REQUIRE_OK(devrt_resource_query(c_stack, &f));
  printf("%llu\n", (unsigned long long)f.log_records);
  return 0; /* exit() with the runtime, its stack and (racing) the other thread still alive */
}

/* Runs this program as a child logging to a new file; returns its rows (lines past the header)
 * and sets *counted to the log_records it printed. */
static int run_child(const char* mode, unsigned long long* counted) {
  char path[64], cmd[256];
  t_tmp_path(path, sizeof path);
  setenv("DEVRT_LOG", path, 1);
  snprintf(cmd, sizeof cmd, "exec /proc/%d/exe %s", (int)getpid(), mode);
  FILE* p = popen(cmd, "r");
  unsetenv("DEVRT_LOG");
  REQUIRE_OK(p ? DEVRT_OK : DEVRT_ERR_OUT_OF_RESOURCES);
  *counted = 0;
  CHECK(fscanf(p, "%llu", counted) == 1);
  CHECK(pclose(p) == 0);
  int rows = count_lines(path) - 1;
  unlink(path);
  return rows;
}

static void test_exit(void) {
  unsigned long long counted;
  int rows = run_child("child", &counted);
  if (rows != (int)counted) fprintf(stderr, "exit: %d rows of %llu records\n", rows, counted);
  CHECK(counted >= 2000 && rows == (int)counted);
  /* Another thread logs on through exit(): what was counted before it is written (but for the
   * one record that thread may have counted and not yet buffered), and nothing breaks. */
  rows = run_child("child-racing", &counted);
  if (rows + 1 < (int)counted) fprintf(stderr, "racing: %d rows of %llu records\n", rows, counted);
  CHECK(counted >= 2000 && rows + 1 >= (int)counted);
}

/* ---- within the interval, without further activity ---- */

static void test_interval(devrt_resource* leaf, devrt_stream s) {
  char path[64];
  t_tmp_path(path, sizeof path);
  devrt_logging_options o = {.path = path}; /* 256 records a write: these 6 stay buffered */
  devrt_resource* L;
  REQUIRE_OK(devrt_logging_resource_create(leaf, &o, &L));
  for (int i = 0; i < 3; i++) alloc_free(L, s);
  uint64_t t0 = now_ms();
  while (count_lines(path) < 7 && now_ms() - t0 < DEVRT_LOG_FLUSH_INTERVAL_MS + 2000)
    t_sleep_ms(20);
  uint64_t ms = now_ms() - t0;
  printf("interval: %d lines after %llu ms\n", count_lines(path), (unsigned long long)ms);
  CHECK(count_lines(path) == 7 && ms <= DEVRT_LOG_FLUSH_INTERVAL_MS + 500);
  CHECK_OK(devrt_resource_release(L));
  CHECK(count_lines(path) == 7);
  unlink(path);
}

/* ---- a failing write: counted, said once on stderr ---- */

static void test_write_failure(devrt_resource* leaf, devrt_stream s) {
  if (access("/dev/full", W_OK) != 0) {
    printf("write failure: skipped (no writable /dev/full)\n");
    return;
  }
  char err[64];
  t_tmp_path(err, sizeof err);
  fflush(stderr);
  int saved = dup(2), fd = open(err, O_WRONLY);
  REQUIRE_OK(saved >= 0 && fd >= 0 && dup2(fd, 2) == 2 ? DEVRT_OK : DEVRT_ERR_OUT_OF_RESOURCES);
  close(fd);
  devrt_logging_options o = {.path = "/dev/full", .format = DEVRT_LOG_JSONL, .buffer_records = 2};
  devrt_resource* L;
  REQUIRE_OK(devrt_logging_resource_create(leaf, &o, &L));
  for (int i = 0; i < 3; i++) alloc_free(L, s); /* three writes fail */
  devrt_resource_figures f = t_figures(L);
  CHECK_OK(devrt_resource_release(L));
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  CHECK(f.log_records == 6 && f.log_dropped == 6);
  char* text = t_slurp(err);
  int lines = 0;
  for (const char* p = text; *p; p++) lines += *p == '\n';
  printf("write failure: stderr said \"%s\"\n", text);
  CHECK(lines == 1 && strstr(text, "\"/dev/full\"") && strstr(text, strerror(ENOSPC)));
  free(text);
  unlink(err);
}

int main(int argc, char** argv) {
  if (argc > 1) return child(!strcmp(argv[1], "child-racing"));
  test_exit(); /* first: no thread of this process runs yet when it forks */
  devrt_runtime* rt = t_runtime();
  devrt_resource* leaf;
  devrt_stream s;
  REQUIRE_OK(devrt_simple_resource_create(rt, &leaf));
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_SHARE, &s));
  test_interval(leaf, s);
  test_write_failure(leaf, s);
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_resource_release(leaf));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
