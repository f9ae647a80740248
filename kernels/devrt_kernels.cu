// devrt_kernels.cu: the CUDA C kernels devrt ships, built by nvcc into a fatbin that is
// embedded in libdevrt and loaded with devrt's module loader. Host versions: host_kernels.c.
#include <stdint.h>

__device__ static uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ static void spin_ns(uint64_t ns) {
  uint64_t start = globaltimer_ns();
  while (globaltimer_ns() - start < ns) {}
}

#define GRID_STRIDE(i, n)                                                     \
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < (n); \
       i += (uint64_t)gridDim.x * blockDim.x)

extern "C" __global__ void devrt_fill_u32(uint32_t* p, uint32_t value, uint64_t n) {
  GRID_STRIDE(i, n) p[i] = value;
}

extern "C" __global__ void devrt_copy_u32(uint32_t* dst, const uint32_t* src, uint64_t n) {
  GRID_STRIDE(i, n) dst[i] = src[i];
}

extern "C" __global__ void devrt_checksum_u32(const uint32_t* p, uint64_t n,
                                              unsigned long long* out) {
  unsigned long long sum = 0;
  GRID_STRIDE(i, n) sum += p[i];
  atomicAdd(out, sum);
}

// Slow writer: every thread waits delay_ns before it writes, so a reader that is not ordered
// after it sees the old contents.
extern "C" __global__ void devrt_slow_fill_u32(uint32_t* p, uint32_t value, uint64_t n,
                                               uint64_t delay_ns) {
  spin_ns(delay_ns);
  GRID_STRIDE(i, n) p[i] = value;
}

// Slow reader: waits delay_ns, then copies, so a writer that is not ordered after it overwrites
// what it was meant to read.
extern "C" __global__ void devrt_slow_copy_u32(uint32_t* dst, const uint32_t* src, uint64_t n,
                                               uint64_t delay_ns) {
  spin_ns(delay_ns);
  GRID_STRIDE(i, n) dst[i] = src[i];
}

// Records the SM each block ran on.
extern "C" __global__ void devrt_record_smid(uint32_t* out) {
  if (threadIdx.x == 0) {
    uint32_t smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    out[blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)] = smid;
  }
}

// Every block spins for ns nanoseconds: fixed work per block, no memory traffic (the background
// and critical kernels of `devrt bench partition`).
extern "C" __global__ void devrt_spin(uint64_t ns) { spin_ns(ns); }

// devrt_spin that also stamps each block's start and end (%globaltimer, ns) into
// stamps[2 * block] and stamps[2 * block + 1]: where a launch's latency went, seen from the GPU.
extern "C" __global__ void devrt_spin_stamp(uint64_t ns, uint64_t* stamps) {
  uint64_t start = globaltimer_ns();
  spin_ns(ns);
  if (threadIdx.x == 0)
    stamps[2 * blockIdx.x] = start, stamps[2 * blockIdx.x + 1] = globaltimer_ns();
}

// Faults the context on purpose (a trap: CUDA_ERROR_LAUNCH_FAILED, sticky). cuda only: the tests
// of device loss use it in a process of their own.
extern "C" __global__ void devrt_trap() { asm volatile("trap;"); }
