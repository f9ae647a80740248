// graph_launch_race.cu: CUDA alone (no devrt): six threads, six shared streams; each round a slow
// fill of the thread's input on a random stream, the thread's own graph (out = in) on another after
// a wait on the fill's event, and a copy out on a third after a wait on the graph's event.
// nvcc -O2 -arch=sm_90 -o race graph_launch_race.cu && ./race MODE [ROUNDS]; modes in names[].
#include <cstdio>
#include <cstdlib>
#include <pthread.h>
#include <atomic>
#include <cuda_runtime.h>
#define CK(x)                                                           \
  do {                                                                  \
    cudaError_t e_ = (x);                                               \
    if (e_) {                                                           \
      printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      exit(1);                                                          \
    }                                                                   \
  } while (0)
__global__ void slow_fill(unsigned* p, unsigned v, int n, long long ns) {
  long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (long long t = t0; t - t0 < ns;) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v;
}
__global__ void copy(unsigned* d, const unsigned* s, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    d[i] = s[i];
}
enum { T = 6, NS = 6, N = 4096 };
static cudaStream_t S[NS];
static int mode, rounds;
static std::atomic<long> bad{0};
static pthread_mutex_t gmu = PTHREAD_MUTEX_INITIALIZER, smu[NS];
static int sidx(cudaStream_t s) {
  for (int i = 0; i < NS; i++)
    if (S[i] == s) return i;
  return 0;
}
static void L(pthread_mutex_t* m, bool on) {
  if (on) pthread_mutex_lock(m);
}
static void U(pthread_mutex_t* m, bool on) {
  if (on) pthread_mutex_unlock(m);
}
static void* work(void* arg) {
  long t = (long)arg;
  unsigned long long r = 0x9e3779b97f4a7c15ull * (t + 1);
  auto next = [&]() {
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    return r;
  };
  unsigned *in, *out, *h;
  CK(cudaMalloc(&in, N * 4));
  CK(cudaMalloc(&out, N * 4));
  CK(cudaMallocHost(&h, N * 4));
  cudaStream_t cap;
  CK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
  cudaGraph_t gr;
  cudaGraphExec_t ex;
  CK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeRelaxed));
  copy<<<4, 256, 0, cap>>>(out, in, N);
  CK(cudaStreamEndCapture(cap, &gr));
  CK(cudaGraphInstantiateWithFlags(&ex, gr, 0));
  cudaEvent_t e1, e2, e0, e3;
  cudaStream_t P;
  CK(cudaStreamCreateWithFlags(&P, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&e3, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming));
  for (int i = 1; i <= rounds; i++) {
    cudaStream_t sp = S[next() % NS], sg = S[next() % NS], sr = S[next() % NS];
    long long slow = next() % 4 == 0 ? 2000000 : 0;
    bool all = mode == 4; /* every op on a stream under that stream's mutex */
    pthread_mutex_t *mp = &smu[sidx(sp)], *mg = &smu[sidx(sg)], *mr = &smu[sidx(sr)];
    L(mp, all);
    slow_fill<<<4, 256, 0, sp>>>(in, i, N, slow);
    CK(cudaEventRecord(e1, sp));
    U(mp, all);
    L(mg, all || mode == 5);
    L(&gmu, mode == 3);
    CK(cudaStreamWaitEvent(sg, e1, 0));
    L(&gmu, mode == 2);
    if (mode == 6) { /* on the thread's own stream, joined to sg by events */
      CK(cudaEventRecord(e0, sg));
      CK(cudaStreamWaitEvent(P, e0, 0));
      CK(cudaGraphLaunch(ex, P));
      CK(cudaEventRecord(e3, P));
      CK(cudaStreamWaitEvent(sg, e3, 0));
    } else if (mode != 1)
      CK(cudaGraphLaunch(ex, sg));
    else
      copy<<<4, 256, 0, sg>>>(out, in, N);
    U(&gmu, mode == 2);
    CK(cudaEventRecord(e2, sg));
    U(&gmu, mode == 3);
    U(mg, all || mode == 5);
    L(mr, all);
    CK(cudaStreamWaitEvent(sr, e2, 0));
    CK(cudaMemcpyAsync(h, out, N * 4, cudaMemcpyDeviceToHost, sr));
    U(mr, all);
    CK(cudaStreamSynchronize(sr));
    int w = 0;
    for (int k = 0; k < N; k++) w += h[k] != (unsigned)i;
    if (w && bad++ < 6)
      printf("thread %ld round %d: %d wrong, h[0] %u, slow %d\n", t, i, w, h[0], slow != 0);
  }
  return nullptr;
}
static const char* names[] = {"graphs",
                              "kernels",
                              "graphs, mutex around launch",
                              "graphs, mutex around wait+launch+record",
                              "graphs, per-stream mutex on every op",
                              "graphs, per-stream mutex around wait+launch+record",
                              "graphs on a private stream joined by events"};
int main(int argc, char** argv) {
  mode = argc > 1 ? atoi(argv[1]) : 0;
  rounds = argc > 2 ? atoi(argv[2]) : 1000;
  for (int i = 0; i < NS; i++) {
    CK(cudaStreamCreateWithFlags(&S[i], cudaStreamNonBlocking));
    pthread_mutex_init(&smu[i], nullptr);
  }
  pthread_t th[T];
  for (long t = 0; t < T; t++) pthread_create(&th[t], nullptr, work, (void*)t);
  for (int t = 0; t < T; t++) pthread_join(th[t], nullptr);
  printf("mode %d (%s): %ld bad of %d rounds x %d threads\n", mode, names[mode], (long)bad, rounds,
         T);
  return 0;
}
