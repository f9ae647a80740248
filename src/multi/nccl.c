/* nccl.c: run-time loading of libnccl (dlopen + dlsym, once per process, a sticky failure that
 * names every path tried) and NCCL's results mapped to devrt statuses with NCCL's own text. */
#include "nccl.h"

#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../core/error.h"

static dv_nccl lib;
static devrt_status lib_status;
static char lib_message[1536];
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

/* Where NVIDIA's nccl wheels (nvidia-nccl-cu12, -cu13) put the library. */
static const char* const wheel_globs[] = {
    "/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
    "/usr/local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
    "/usr/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
    "/usr/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
    "/usr/local/lib/python3*/dist-packages/nvidia/cu1*/lib/libnccl.so.2",
    "/usr/local/lib/python3*/site-packages/nvidia/cu1*/lib/libnccl.so.2",
    "/opt/conda/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
    "~/.local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
    "~/.local/lib/python3*/site-packages/nvidia/cu1*/lib/libnccl.so.2",
};

static void tried(const char* path, const char* why) {
  size_t len = strlen(lib_message);
  snprintf(lib_message + len, sizeof lib_message - len, "%s%s (%s)", len ? "; " : "", path, why);
}

/* dlopen + every entry point; false (and the reason noted) if either fails. */
static bool try_load(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    tried(path, e ? e : "dlopen failed");
    return false;
  }
  const char* missing = NULL;
#define SYM(field, name) \
  if (!missing && !(*(void**)& lib.field = dlsym(h, name))) missing = name;
  SYM(GetVersion, "ncclGetVersion")
  SYM(GetUniqueId, "ncclGetUniqueId")
  SYM(CommInitRank, "ncclCommInitRank")
  SYM(CommInitAll, "ncclCommInitAll")
  SYM(CommDestroy, "ncclCommDestroy")
  SYM(GetErrorString, "ncclGetErrorString")
  SYM(AllReduce, "ncclAllReduce")
  SYM(Broadcast, "ncclBroadcast")
  SYM(AllGather, "ncclAllGather")
  SYM(ReduceScatter, "ncclReduceScatter")
  SYM(Send, "ncclSend")
  SYM(Recv, "ncclRecv")
  SYM(GroupStart, "ncclGroupStart")
  SYM(GroupEnd, "ncclGroupEnd")
#undef SYM
  if (missing || lib.GetVersion(&lib.version) != 0) {
    tried(path, missing ? missing : "ncclGetVersion failed");
    dlclose(h);
    memset(&lib, 0, sizeof lib);
    return false;
  }
  *(void**)&lib.GetLastError = dlsym(h, "ncclGetLastError");
  snprintf(lib.path, sizeof lib.path, "%s", path);
  return true;
}

static void load(void) {
  const char* env = getenv("DEVRT_NCCL_LIBRARY");
  bool ok = false;
  if (env && *env) {
    ok = try_load(env);
  } else {
    ok = try_load("libnccl.so.2");
    for (size_t i = 0; !ok && i < sizeof wheel_globs / sizeof *wheel_globs; i++) {
      glob_t g;
      if (glob(wheel_globs[i], GLOB_TILDE, NULL, &g) == 0)
        for (size_t k = 0; !ok && k < g.gl_pathc; k++) ok = try_load(g.gl_pathv[k]);
      else
        tried(wheel_globs[i], "no match");
      globfree(&g);
    }
  }
  if (!ok) lib_status = DEVRT_ERR_UNSUPPORTED;
}

devrt_status dv_nccl_get(const dv_nccl** out) {
  pthread_once(&lib_once, load);
  if (lib_status != DEVRT_OK)
    return dv_fail(lib_status,
                   "NCCL: libnccl could not be loaded (set DEVRT_NCCL_LIBRARY to its path); "
                   "tried: %s",
                   lib_message);
  *out = &lib;
  return DEVRT_OK;
}

devrt_status dv_nccl_fail(const dv_nccl* n, dv_nccl_result r, dv_nccl_comm_t comm, const char* call,
                          const char* fmt, ...) {
  char ctx[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  const char* last = comm && n->GetLastError ? n->GetLastError(comm) : NULL;
  /* ncclInvalidArgument (4) and ncclInvalidUsage (5) are the caller's; the rest the library's or
   * the system's (1 CUDA, 2 system, 3 internal, 6 remote). */
  devrt_status st = r == 4 || r == 5 ? DEVRT_ERR_INVALID_ARGUMENT : DEVRT_ERR_BACKEND_ERROR;
  return dv_fail(st, "%s: NCCL error %d (%s%s%s) %s", call, r, n->GetErrorString(r),
                 last && *last ? "; " : "", last ? last : "", ctx);
}
