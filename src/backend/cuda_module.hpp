#pragma once
// The C ABI between latprof and the CUDA backend module (liblatprof_cuda.so), which latprof
// dlopens at run time so that the binary starts on machines with no GPU, driver or toolkit.
#include "backend/backend.hpp"

extern "C" {
// The ABI's identity: a hash of backend.hpp and this file, computed by CMake when it configures
// (LATPROF_BACKEND_ABI), so a change of the interface cannot be forgotten. The module and the
// host must have been built from the same interface; a module without this entry point is older.
#ifndef LATPROF_BACKEND_ABI
#error "LATPROF_BACKEND_ABI is defined by CMakeLists.txt (a hash of the backend interface)"
#endif
typedef const char* (*latprof_cuda_abi_id_fn)();
// Number of usable CUDA devices, or -1 with a reason written to `why` (up to why_len bytes).
typedef int (*latprof_cuda_device_count_fn)(char* why, int why_len);
// Creates the backend; returns nullptr and writes the reason on failure.
typedef latprof::Backend* (*latprof_cuda_create_fn)(const latprof::BackendOptions* opt, char* why,
                                                    int why_len);
}
