// The one way qload's .cu files launch a kernel: with nvcc, `kernel<<<grid, block, 0, stream>>>`;
// in the simulated backend (QLOAD_CUDA_SIM, cudasim/), the simulator's engine runs the kernel
// as host code on the stream, once per (block, thread). Launch errors come from
// cudaGetLastError() afterwards in both.
#pragma once

#if defined(QLOAD_CUDA_SIM)
#define QLOAD_LAUNCH_KERNEL(kernel, grid, block, stream, ...) \
  (void)::qload::cudasim::launch((grid), (block), (stream), [=] { kernel(__VA_ARGS__); })
#else
#define QLOAD_LAUNCH_KERNEL(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif
