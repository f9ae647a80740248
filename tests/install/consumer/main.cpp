// main.cpp: the outside consumer in C++ (built as C++11, 17 and 20 with -Wall -Wextra -Werror
// -pedantic): the umbrella header, and a resource of its own that counts what passes through it.
#include <devrt/devrt.h>

#include <cstdio>

namespace {

struct counting {
  devrt_resource base;  // first, as resource.h asks
  unsigned long allocations = 0;
};

devrt_status allocate(devrt_resource* self, size_t size, devrt_stream stream, const char* tag,
                      void** out) {
  reinterpret_cast<counting*>(self)->allocations++;
  return devrt_resource_allocate(devrt_resource_upstream(self), size, stream, tag, out);
}

devrt_status deallocate(devrt_resource* self, void* ptr, size_t size, devrt_stream stream) {
  return devrt_resource_deallocate(devrt_resource_upstream(self), ptr, size, stream);
}

void destroy(devrt_resource*) {}

}  // namespace

int main() {
  devrt_runtime* rt = nullptr;
  devrt_resource* stack = nullptr;
  devrt_stream s = 0;
  devrt_resource_vtable vt = {};
  vt.allocate = allocate, vt.deallocate = deallocate, vt.destroy = destroy;
  counting c;
  void* p = nullptr;
  if (devrt_runtime_get(0, &rt) || devrt_runtime_resource(rt, &stack) ||
      devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s) ||
      devrt_resource_init(&c.base, &vt, "counting", rt, stack) ||
      devrt_resource_allocate(&c.base, 4096, s, "c++", &p) ||
      devrt_resource_deallocate(&c.base, p, 4096, s) || devrt_stream_synchronize(rt, s) ||
      devrt_stream_release(rt, s) || devrt_resource_release(&c.base)) {
    std::fprintf(stderr, "consumer (C++): %s\n", devrt_last_error());
    return 1;
  }
  std::printf("devrt %s from C++ %ld: %lu allocation through a C++ resource\n", devrt_version(),
              static_cast<long>(__cplusplus), c.allocations);
  return c.allocations == 1 ? 0 : 1;
}
