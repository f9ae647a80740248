/* floor.c: the pluggable-allocator floor for alloc_time.py: exact-size free lists over cudaMalloc,
 * one mutex, no streams (a lower bound for what any allocator spends a call). */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdlib.h>
typedef struct node {
  void* p;
  size_t n;
  struct node* next;
} node;
#define NB 4096
static node* bins[NB];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned h(size_t n) { return (unsigned)((n >> 9) * 0x9e3779b1u) % NB; }
void* floor_alloc(size_t n, int dev, void* s) {
  (void)dev, (void)s;
  n = (n + 511) & ~(size_t)511;
  pthread_mutex_lock(&mu);
  for (node** pp = &bins[h(n)]; *pp; pp = &(*pp)->next)
    if ((*pp)->n == n) {
      node* x = *pp;
      *pp = x->next;
      pthread_mutex_unlock(&mu);
      void* p = x->p;
      free(x);
      return p;
    }
  pthread_mutex_unlock(&mu);
  void* p = 0;
  return cudaMalloc(&p, n) == cudaSuccess ? p : 0;
}
void floor_free(void* p, size_t n, int dev, void* s) {
  (void)dev, (void)s;
  n = (n + 511) & ~(size_t)511;
  node* x = malloc(sizeof *x);
  x->p = p, x->n = n;
  pthread_mutex_lock(&mu);
  x->next = bins[h(n)], bins[h(n)] = x;
  pthread_mutex_unlock(&mu);
}
