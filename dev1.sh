set -x
cmake -S . -B build -DDEVRT_CUDA_ARCHS=90 -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build build -j 16 2>&1 | grep -E "error|warning" | head
(cd build && DEVRT_REQUIRE_GPU=1 DEVRT_REQUIRE_NCCL=1 timeout 200 ctest -L gpu -E "torch|cupy|soak" --output-on-failure -j 4 2>&1 | tail -25)
(cd build && DEVRT_BACKEND=cuda DEVRT_REQUIRE_GPU=1 tests/test_arena; DEVRT_BACKEND=cuda tests/test_arena_stress) 2>&1 | tail -5
gcc -O2 -shared -fPIC -o /tmp/shim.so bench/torch_alloc_time/shim.c -ldl
export DEVRT_LIBRARY=$PWD/build/libdevrt.so
for w in resnet50 gpt; do for a in arena devrt; do timeout 100 python3 bench/torch_alloc_time/alloc_time.py $a $w 2>&1 | tail -1 | tee -a $OUT/alloc_time.jsonl; done; done
cd python && timeout 330 python3 -m devrt.bench torch --workloads resnet50,gpt,varlen --allocators arena,devrt,native,expandable --steps 20 --warmup 5 --procs 1 --json > $OUT/torch.json 2>$OUT/torch.err; echo rc=$?; tail -c 3000 $OUT/torch.json
