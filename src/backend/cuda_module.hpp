#pragma once
// The C ABI between latprof and the CUDA backend module (liblatprof_cuda.so), which latprof
// dlopens at run time so that the binary starts on machines with no GPU, driver or toolkit.
#include "backend/backend.hpp"

extern "C" {
// Version of this ABI; the module and the host must agree.
#define LATPROF_CUDA_ABI_VERSION 1
typedef int (*latprof_cuda_abi_version_fn)();
// Number of usable CUDA devices, or -1 with a reason written to `why` (up to why_len bytes).
typedef int (*latprof_cuda_device_count_fn)(char* why, int why_len);
// Creates the backend; returns nullptr and writes the reason on failure.
typedef latprof::Backend* (*latprof_cuda_create_fn)(const latprof::BackendOptions* opt, char* why,
                                                    int why_len);
}
