/* job.c: ranks in separate processes: the job a launcher started this process in (its variables,
 * read strictly) and a communicator from it, the unique id passed from rank 0 through a file or
 * MPI_Bcast (libmpi loaded at run time, no mpi.h). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "runtime.h"
#include "../core/clock.h"
#include "../core/parse.h"

#define CALL "devrt_comm_create_from_env"
enum { MAX_RANKS = 1 << 20 };

/* Each launcher's rank, size, local rank and local size, in the order they are tried. */
static const struct {
  const char* name;
  const char* var[4];
} launchers[] = {
    {"torchrun", {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}},
    {"openmpi",
     {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
      "OMPI_COMM_WORLD_LOCAL_SIZE"}},
    {"mpich", {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}},
    {"slurm", {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"}},
};

/* var's value v as a decimal number in [0, MAX_RANKS]. */
static devrt_status num(const char* call, const char* var, const char* v, int* out) {
  uint64_t x;
  if (!dv_parse_u64(v, strlen(v), 10, &x) || x > MAX_RANKS)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "%s: %s=\"%s\" is not a decimal number in [0, %d] (digits only: no sign, "
                   "blank, prefix or leading zero)",
                   call, var, v, MAX_RANKS);
  *out = (int)x;
  return DEVRT_OK;
}

/* The job from the first launcher whose rank and size are both set. Reads the environment: safe
 * with other threads' reads, not with a concurrent setenv. */
static devrt_status job_read(const char* call, devrt_job* out) {
  devrt_job j = {0, 1, 0, 1, "none"};
  for (size_t i = 0; i < sizeof launchers / sizeof *launchers; i++) {
    const char* const* var = launchers[i].var;
    const char *r = getenv(var[0]), *n = getenv(var[1]), *lr = getenv(var[2]), *ln = getenv(var[3]);
    if (!r || !n) continue;
    if (!lr)
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: %s and %s are set (%s) but %s is not", call,
                     var[0], var[1], launchers[i].name, var[2]);
    DV_CHECK(num(call, var[0], r, &j.rank));
    DV_CHECK(num(call, var[1], n, &j.nranks));
    DV_CHECK(num(call, var[2], lr, &j.local_rank));
    uint64_t x;
    bool slurm = !strcmp(launchers[i].name, "slurm"); /* "2(x3)" and "4,2" say nothing */
    j.local_nranks = 0;
    if (ln && (!slurm || dv_parse_u64(ln, strlen(ln), 10, &x)))
      DV_CHECK(num(call, var[3], ln, &j.local_nranks));
    if (j.rank >= j.nranks)
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: %s=%d is not below %s=%d", call, var[0],
                     j.rank, var[1], j.nranks);
    if (j.local_nranks && j.local_rank >= j.local_nranks)
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: %s=%d is not below %s=%d", call, var[2],
                     j.local_rank, var[3], j.local_nranks);
    snprintf(j.launcher, sizeof j.launcher, "%s", launchers[i].name);
    break;
  }
  *out = j;
  return DEVRT_OK;
}

devrt_status devrt_job_get(devrt_job* out) {
  dv_error_clear(); /* a public call's entry: see error.h */
  DV_ARG_CHECK(out, "devrt_job_get", "out is NULL");
  return job_read("devrt_job_get", out);
}

/* Rank 0's side of "file:PATH": the id written to PATH.tmp.<pid>, synced, renamed to PATH. */
static devrt_status file_put(const char* path, const devrt_comm_id* id) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, CALL ": DEVRT_RENDEZVOUS path \"%s\" is too long",
                   path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), e = errno;
  const char* what = fd < 0 ? "create" : NULL;
  for (size_t done = 0; !what && done < sizeof *id;) {
    ssize_t w = write(fd, id->bytes + done, sizeof *id - done);
    if (w > 0)
      done += (size_t)w;
    else if (!(w < 0 && errno == EINTR))
      what = "write", e = w < 0 ? errno : EIO;
  }
  if (!what && fsync(fd)) what = "fsync", e = errno;
  if (fd >= 0 && close(fd) && !what) what = "close", e = errno;
  if (!what && rename(tmp, path)) what = "rename", e = errno;
  if (!what) return DEVRT_OK;
  if (fd >= 0) unlink(tmp);
  return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                 CALL ": DEVRT_RENDEZVOUS=file:%s: rank 0 cannot %s \"%s\": %s", path, what, tmp,
                 strerror(e));
}

/* The other ranks' side: polls PATH (1 ms, doubling up to 50 ms) until it holds an id. */
static devrt_status file_get(const char* path, uint64_t timeout_ms, int rank, devrt_comm_id* id) {
  uint64_t start = dv_now_ns() / 1000000, waited = 0;
  for (unsigned sleep_ms = 1;; sleep_ms = sleep_ms * 2 > 50 ? 50 : sleep_ms * 2) {
    struct stat st;
    if (!stat(path, &st) && st.st_size == (off_t)sizeof *id) {
      int fd = open(path, O_RDONLY | O_CLOEXEC);
      ssize_t got = fd >= 0 ? read(fd, id->bytes, sizeof *id) : -1;
      if (fd >= 0) close(fd);
      if (got == (ssize_t)sizeof *id) return DEVRT_OK; /* renamed whole: one read is all of it */
    }
    if ((waited = dv_now_ns() / 1000000 - start) >= timeout_ms) break;
    uint64_t left = timeout_ms - waited;
    struct timespec ts = {0, (long)(left < sleep_ms ? left : sleep_ms) * 1000000L};
    nanosleep(&ts, NULL);
  }
  return dv_fail(DEVRT_ERR_TIMEOUT,
                 CALL
                 ": rank %d waited %llu ms for rank 0 to write the id to \"%s\" "
                 "(DEVRT_RENDEZVOUS; DEVRT_RENDEZVOUS_TIMEOUT_MS=%llu)",
                 rank, (unsigned long long)waited, path, (unsigned long long)timeout_ms);
}

/* The MPI ABIs: Open MPI's handles are the addresses of its predefined objects, MPICH's ints. */
typedef int (*mpi_initialized_fn)(int* flag);
typedef int (*mpi_init_fn)(int* argc, char*** argv);
typedef int (*ompi_bcast_fn)(void* buf, int count, void* type, int root, void* comm);
typedef int (*mpich_bcast_fn)(void* buf, int count, int type, int root, int comm);
enum { MPICH_COMM_WORLD = 0x44000000, MPICH_BYTE = 0x4c00010d };

/* MPI_Bcast of id from rank 0 of MPI_COMM_WORLD, MPI initialized first if it is not (and left
 * initialized). Serialized by a mutex: MPI_Init must not run twice at once. */
static devrt_status mpi_bcast(devrt_comm_id* id) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  const char* env = getenv("DEVRT_MPI_LIBRARY");
  const char* paths[] = {env && *env ? env : "libmpi.so.40", env && *env ? NULL : "libmpi.so.12"};
  char tried[1024] = "";
  void* h = NULL;
  size_t i = 0;
  for (; i < 2 && paths[i]; i++) { /* GLOBAL: Open MPI's plugins use libmpi's symbols */
    if ((h = dlopen(paths[i], RTLD_NOW | RTLD_GLOBAL))) break;
    const char* why = dlerror();
    size_t len = strlen(tried);
    snprintf(tried + len, sizeof tried - len, "%s%s (%s)", len ? "; " : "", paths[i],
             why ? why : "dlopen failed");
  }
  if (!h)
    return dv_fail(DEVRT_ERR_UNSUPPORTED,
                   CALL ": DEVRT_RENDEZVOUS=mpi but no libmpi loads (DEVRT_MPI_LIBRARY%s): %s",
                   env && *env ? "" : " unset", tried);
  mpi_initialized_fn initialized;
  mpi_init_fn init;
  ompi_bcast_fn ompi_bcast;
  mpich_bcast_fn mpich_bcast;
  *(void**)&initialized = dlsym(h, "MPI_Initialized");
  *(void**)&init = dlsym(h, "MPI_Init");
  *(void**)&ompi_bcast = *(void**)&mpich_bcast = dlsym(h, "MPI_Bcast");
  void *world = dlsym(h, "ompi_mpi_comm_world"), *byte = dlsym(h, "ompi_mpi_byte");
  if (!initialized || !init || !ompi_bcast)
    return dv_fail(DEVRT_ERR_UNSUPPORTED,
                   CALL ": %s (DEVRT_RENDEZVOUS=mpi) lacks MPI_Initialized, MPI_Init or MPI_Bcast",
                   paths[i]);
  int flag = 0, rc = 0;
  const char* step = "MPI_Initialized";
  pthread_mutex_lock(&mu);
  if (!(rc = initialized(&flag)) && !flag) step = "MPI_Init", rc = init(NULL, NULL);
  if (!rc) {
    step = "MPI_Bcast";
    if (world && byte) /* Open MPI */
      rc = ompi_bcast(id->bytes, (int)sizeof *id, byte, 0, world);
    else
      rc = mpich_bcast(id->bytes, (int)sizeof *id, MPICH_BYTE, 0, MPICH_COMM_WORLD);
  }
  pthread_mutex_unlock(&mu);
  if (rc)
    return dv_fail(DEVRT_ERR_BACKEND_ERROR, CALL ": %s of %s failed (MPI error %d, %s ABI)", step,
                   paths[i], rc, world && byte ? "Open MPI" : "MPICH");
  return DEVRT_OK;
}

devrt_status devrt_comm_create_from_env(devrt_runtime* rt, devrt_comm** out) {
  dv_error_clear(); /* a public call's entry: see error.h */
  DV_ARG_CHECK(out, CALL, "out is NULL");
  DV_ARG_CHECK(!rt || dv_rt_ok(rt), CALL, "runtime %p is destroyed", (void*)rt);
  devrt_job job;
  DV_CHECK(job_read(CALL, &job));
  /* The rendezvous is checked before a process-wide runtime is made for it. */
  const char* rv = getenv("DEVRT_RENDEZVOUS");
  const char* path = NULL;
  uint64_t timeout_ms = 300000;
  if (job.nranks > 1) {
    if (!rv || !*rv) {
      if (strcmp(job.launcher, "openmpi") && strcmp(job.launcher, "mpich"))
        return dv_fail(DEVRT_ERR_INVALID_STATE,
                       CALL ": rank %d of %d (launcher %s) needs DEVRT_RENDEZVOUS=file:PATH or mpi",
                       job.rank, job.nranks, job.launcher);
      rv = "mpi";
    } else if (!strncmp(rv, "file:", 5)) {
      path = rv + 5;
      DV_ARG_CHECK(*path, CALL, "DEVRT_RENDEZVOUS=\"file:\" names no path");
      const char* t = getenv("DEVRT_RENDEZVOUS_TIMEOUT_MS");
      DV_ARG_CHECK(!t || dv_parse_u64(t, strlen(t), 10, &timeout_ms), CALL,
                   "DEVRT_RENDEZVOUS_TIMEOUT_MS=\"%s\" is not a decimal number of milliseconds "
                   "(digits only: no sign, blank, prefix or leading zero)",
                   t);
    } else {
      DV_ARG_CHECK(!strcmp(rv, "mpi"), CALL, "DEVRT_RENDEZVOUS=\"%s\" is not file:PATH or mpi", rv);
    }
  }
  if (!rt) DV_CHECK(devrt_runtime_get(job.local_rank, &rt));
  devrt_comm_id id;
  memset(&id, 0, sizeof id);
  if (job.rank == 0) DV_CHECK(dv_comm_id_for_processes(rt, &id));
  if (path && job.rank == 0)
    DV_CHECK(file_put(path, &id));
  else if (path)
    DV_CHECK(file_get(path, timeout_ms, job.rank, &id));
  else if (job.nranks > 1)
    DV_CHECK(mpi_bcast(&id));
  devrt_status s = devrt_comm_create(rt, &id, job.nranks, job.rank, out);
  /* Every rank has joined (or the id is spoiled): a later job must not read it. */
  if (path && job.rank == 0) unlink(path);
  return s;
}
