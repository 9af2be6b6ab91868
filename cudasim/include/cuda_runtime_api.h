// The simulated CUDA runtime: cuda_runtime_api.h and cuda_runtime.h are one header here.
#pragma once
#include "cuda_runtime.h"
