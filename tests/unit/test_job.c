/* test_job.c: devrt_job_get reads each launcher's variables strictly and in order, and
 * devrt_comm_create_from_env's choices that one process can see: one rank, the rendezvous settings
 * refused, a rank waiting for a file that never comes, an MPI library that does not load. */
#include <errno.h>
#include "test.h"

/* Sets the four variables of a launcher (NULL: unset). */
static void set4(const char* const* names, const char* r, const char* n, const char* lr,
                 const char* ln) {
  const char* v[4] = {r, n, lr, ln};
  for (int i = 0; i < 4; i++) v[i] ? setenv(names[i], v[i], 1) : unsetenv(names[i]);
}

static const char* const torch[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
static const char* const ompi[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                   "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
static const char* const mpich[] = {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"};
static const char* const slurm[] = {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                                    "SLURM_NTASKS_PER_NODE"};

static void clear(void) {
  const char* const* launchers[] = {torch, ompi, mpich, slurm};
  for (int l = 0; l < 4; l++)
    for (int i = 0; i < 4; i++) unsetenv(launchers[l][i]);
  unsetenv("DEVRT_RENDEZVOUS");
  unsetenv("DEVRT_RENDEZVOUS_TIMEOUT_MS");
  unsetenv("DEVRT_MPI_LIBRARY");
}

static void check_job(int rank, int nranks, int lrank, int lnranks, const char* launcher) {
  devrt_job j;
  memset(&j, 0x55, sizeof j);
  CHECK_OK(devrt_job_get(&j));
  CHECK(j.rank == rank && j.nranks == nranks);
  CHECK(j.local_rank == lrank && j.local_nranks == lnranks);
  CHECK(!strcmp(j.launcher, launcher));
}

/* INVALID_ARGUMENT with a message naming the call and `var`. */
static void check_bad(const char* var) {
  devrt_job j;
  CHECK_STATUS(devrt_job_get(&j), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "devrt_job_get") && strstr(devrt_last_error(), var));
}

static uint64_t ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int main(void) {
  clear();
  CHECK_STATUS(devrt_job_get(NULL), DEVRT_ERR_INVALID_ARGUMENT);
  check_job(0, 1, 0, 1, "none");

  /* Each launcher alone. */
  set4(torch, "3", "8", "1", "4");
  check_job(3, 8, 1, 4, "torchrun");
  clear();
  set4(ompi, "5", "6", "2", "3");
  check_job(5, 6, 2, 3, "openmpi");
  clear();
  set4(mpich, "0", "2", "0", "2");
  check_job(0, 2, 0, 2, "mpich");
  clear();
  set4(slurm, "7", "16", "3", "4");
  check_job(7, 16, 3, 4, "slurm");
  const char* per_node[] = {"2(x3)", "4,2", ""}; /* not a plain number: the local size unknown */
  for (size_t i = 0; i < sizeof per_node / sizeof *per_node; i++) {
    setenv("SLURM_NTASKS_PER_NODE", per_node[i], 1);
    check_job(7, 16, 3, 0, "slurm");
  }
  unsetenv("SLURM_NTASKS_PER_NODE");
  check_job(7, 16, 3, 0, "slurm");

  /* Precedence: torchrun, Open MPI, MPICH, Slurm; a launcher needs both its rank and size. */
  set4(mpich, "1", "4", "1", NULL);
  check_job(1, 4, 1, 0, "mpich");
  set4(ompi, "2", "4", "0", "2");
  check_job(2, 4, 0, 2, "openmpi");
  set4(torch, "3", "4", "1", "2");
  check_job(3, 4, 1, 2, "torchrun");
  unsetenv("WORLD_SIZE"); /* a rank alone is no launcher */
  check_job(2, 4, 0, 2, "openmpi");
  clear();
  setenv("RANK", "1", 1);
  setenv("SLURM_NTASKS", "2", 1);
  check_job(0, 1, 0, 1, "none");
  clear();

  /* Malformed numbers and values out of range, each naming its variable. */
  const char* bad[] = {"abc", "-1", "",    "010",     "+1",
                       " 1",  "1 ", "0x1", "1048577", "99999999999999999999999"};
  for (int v = 0; v < 4; v++)
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
      set4(torch, "1", "4", "1", "2");
      setenv(torch[v], bad[i], 1);
      check_bad(torch[v]);
      set4(ompi, "1", "4", "1", "2");
      setenv(ompi[v], bad[i], 1);
      unsetenv("RANK");
      check_bad(ompi[v]);
      clear();
      set4(mpich, "1", "4", "1", "2");
      setenv(mpich[v], bad[i], 1);
      check_bad(mpich[v]);
      clear();
      if (v == 3) continue; /* Slurm's local size is tested above */
      set4(slurm, "1", "4", "1", "2");
      setenv(slurm[v], bad[i], 1);
      check_bad(slurm[v]);
      clear();
    }
  set4(torch, "4", "4", "0", NULL); /* rank >= size */
  check_bad("RANK=4");
  set4(torch, "0", "0", "0", NULL);
  check_bad("WORLD_SIZE=0");
  clear();
  set4(ompi, "0", "1048576", "2", "2"); /* local rank >= local size */
  check_bad("OMPI_COMM_WORLD_LOCAL_RANK=2");
  set4(ompi, "0", "1048576", "1", "2"); /* the most ranks there may be */
  check_job(0, 1 << 20, 1, 2, "openmpi");
  set4(ompi, "0", "1048577", "1", "2");
  check_bad("OMPI_COMM_WORLD_SIZE");
  clear();
  set4(mpich, "1", "2", NULL, "2"); /* a missing local rank */
  check_bad("MPI_LOCALRANKID");
  clear();
  set4(slurm, "1", "2", NULL, NULL);
  check_bad("SLURM_LOCALID");
  clear();

  /* One rank: a communicator of one, on the process-wide runtime of ordinal 0 or on rt. */
  devrt_runtime *rt = t_runtime(), *got, *global;
  devrt_comm* comm = NULL;
  int rank = -1, n = -1;
  REQUIRE_OK(devrt_runtime_get(0, &global));
  CHECK_STATUS(devrt_comm_create_from_env(rt, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_OK(devrt_comm_create_from_env(NULL, &comm));
  CHECK_OK(devrt_comm_info(comm, &rank, &n, &got));
  CHECK(rank == 0 && n == 1 && got == global);
  CHECK_OK(devrt_comm_destroy(comm));
  set4(torch, "0", "1", "0", "1");
  setenv("DEVRT_RENDEZVOUS", "nonsense", 1); /* one rank exchanges nothing: not read */
  CHECK_OK(devrt_comm_create_from_env(rt, &comm));
  CHECK_OK(devrt_comm_info(comm, &rank, &n, &got));
  CHECK(rank == 0 && n == 1 && got == rt);
  CHECK_OK(devrt_comm_destroy(comm));

  /* Several ranks: the rendezvous must be named (mpi is implied under mpirun only). */
  set4(torch, "1", "2", "0", NULL);
  unsetenv("DEVRT_RENDEZVOUS");
  CHECK_STATUS(devrt_comm_create_from_env(NULL, &comm), DEVRT_ERR_INVALID_STATE);
  CHECK(strstr(devrt_last_error(),
               "devrt_comm_create_from_env: rank 1 of 2 (launcher torchrun) "
               "needs DEVRT_RENDEZVOUS=file:PATH or mpi"));
  setenv("DEVRT_RENDEZVOUS", "", 1);
  CHECK_STATUS(devrt_comm_create_from_env(rt, &comm), DEVRT_ERR_INVALID_STATE);
  const char* rv_bad[] = {"nonsense", "MPI", "file", " mpi", "tcp:host:1"};
  for (size_t i = 0; i < sizeof rv_bad / sizeof *rv_bad; i++) {
    setenv("DEVRT_RENDEZVOUS", rv_bad[i], 1);
    CHECK_STATUS(devrt_comm_create_from_env(rt, &comm), DEVRT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(devrt_last_error(), "devrt_comm_create_from_env") &&
          strstr(devrt_last_error(), rv_bad[i]));
  }
  setenv("DEVRT_RENDEZVOUS", "file:", 1);
  CHECK_STATUS(devrt_comm_create_from_env(rt, &comm), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "DEVRT_RENDEZVOUS"));

  /* file: a rank other than 0 waits for the id at most DEVRT_RENDEZVOUS_TIMEOUT_MS; a file that is
   * not an id (another size) is not read as one. */
  char path[64], env[80];
  t_tmp_path(path, sizeof path); /* an empty file: not an id */
  snprintf(env, sizeof env, "file:%s", path);
  setenv("DEVRT_RENDEZVOUS", env, 1);
  const char* to_bad[] = {"abc", "-1", "", "050"};
  for (size_t i = 0; i < sizeof to_bad / sizeof *to_bad; i++) {
    setenv("DEVRT_RENDEZVOUS_TIMEOUT_MS", to_bad[i], 1);
    CHECK_STATUS(devrt_comm_create_from_env(rt, &comm), DEVRT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(devrt_last_error(), "DEVRT_RENDEZVOUS_TIMEOUT_MS"));
  }
  setenv("DEVRT_RENDEZVOUS_TIMEOUT_MS", "50", 1);
  uint64_t t0 = ms_now();
  CHECK_STATUS(devrt_comm_create_from_env(rt, &comm), DEVRT_ERR_TIMEOUT);
  uint64_t took = ms_now() - t0;
  CHECK(took >= 50 && took < 5000);
  CHECK(strstr(devrt_last_error(), path) && strstr(devrt_last_error(), "waited"));
  unlink(path);
  setenv("DEVRT_RENDEZVOUS_TIMEOUT_MS", "0", 1); /* no wait at all */
  CHECK_STATUS(devrt_comm_create_from_env(rt, &comm), DEVRT_ERR_TIMEOUT);

  /* file: rank 0 that cannot write the id says where and why, and leaves nothing behind. */
  set4(torch, "0", "2", "0", NULL);
  setenv("DEVRT_RENDEZVOUS", "file:/nonexistent-devrt-dir/id", 1);
  CHECK_STATUS(devrt_comm_create_from_env(rt, &comm), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "/nonexistent-devrt-dir/id") &&
        strstr(devrt_last_error(), strerror(ENOENT)));

  /* mpi: a library that does not load is UNSUPPORTED, naming it and dlerror's reason; under
   * mpirun without DEVRT_RENDEZVOUS, mpi is the rendezvous. */
  setenv("DEVRT_RENDEZVOUS", "mpi", 1);
  setenv("DEVRT_MPI_LIBRARY", "/nonexistent/libmpi.so", 1);
  CHECK_STATUS(devrt_comm_create_from_env(rt, &comm), DEVRT_ERR_UNSUPPORTED);
  CHECK(strstr(devrt_last_error(), "/nonexistent/libmpi.so") &&
        strstr(devrt_last_error(), "No such file"));
  clear();
  setenv("DEVRT_MPI_LIBRARY", "/nonexistent/libmpi.so", 1);
  set4(ompi, "1", "2", "1", "2");
  CHECK_STATUS(devrt_comm_create_from_env(rt, &comm), DEVRT_ERR_UNSUPPORTED);
  CHECK(strstr(devrt_last_error(), "DEVRT_RENDEZVOUS=mpi"));
  clear();

  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
