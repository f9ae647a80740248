#!/bin/bash
# The issue-39 A/B on one GPU: 886580d (old) and this tree (new), both built here with the same
# compiler and flags; launch suite with an A/A pair, the demo, and the PyTorch bench.
set -x
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /tmp/old && tar xzf .ab/old-886580d.tar.gz -C /tmp/old
(cmake -S /tmp/old -B /tmp/old/build -DDEVRT_CUDA_ARCHS=90 -DDEVRT_BUILD_TESTS=OFF >/dev/null && cmake --build /tmp/old/build -j16 --target devrt_cli devrt >/dev/null) &
cmake -S . -B build-ab -DDEVRT_CUDA_ARCHS=90 -DDEVRT_BUILD_TESTS=OFF >/dev/null && cmake --build build-ab -j16 --target devrt_cli devrt >/dev/null
wait
ls -la /tmp/old/build/devrt build-ab/devrt /tmp/old/build/libdevrt.so build-ab/libdevrt.so
R=/tmp/r; mkdir -p $R
python3 bench/ab.py --arm old=/tmp/old/build/devrt --arm new=build-ab/devrt --arm new2=build-ab/devrt --runs 3 --suite launch --out $R/launch > $OUT/ab39_launch.txt 2>&1
tail -13 $OUT/ab39_launch.txt
for i in 1 2; do for a in old new; do b=$([ $a = old ] && echo /tmp/old/build/devrt || echo build-ab/devrt); timeout 120 $b bench demo --rounds 1 --json > $R/demo-$a-$i.json 2>/dev/null; echo "demo $a $i rc=$?"; done; done
for i in 1 2; do for a in old new; do d=$([ $a = old ] && echo /tmp/old || echo .); l=$([ $a = old ] && echo /tmp/old/build/libdevrt.so || echo $PWD/build-ab/libdevrt.so); (cd $d/python && DEVRT_LIBRARY=$l timeout 150 python3 -m devrt.bench torch --workloads empty,resnet50 --allocators devrt,native --steps 20 --warmup 5 --procs 1 --json > $R/torch-$a-$i.json 2>$R/torch-$a-$i.err); echo "torch $a $i rc=$?"; done; done
tar czf $OUT/ab39.tgz -C /tmp r
