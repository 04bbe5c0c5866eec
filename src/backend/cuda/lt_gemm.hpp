#pragma once
// cuBLASLt GEMMs for prefill (and the ceiling probes): y[m, n_out] = x[m, n_in] · Wᵀ with row-major
// x, W [n_out, n_in] and y. In cuBLAS's column-major terms that is yᵀ = W · xᵀ with A = W read
// transposed ("TN"): M = n_out, N = m, K = n_in, lda = ldb = n_in, ldc = n_out.
// FP16 inputs and output, CUBLAS_COMPUTE_32F (fp32 accumulation on tensor cores).
// The workspace is allocated once at construction and passed explicitly, so matmuls can be
// captured into CUDA graphs; the heuristic's algorithm is cached per (M, N, K, dtype).
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace latprof::cuda {

class LtGemm {
 public:
  LtGemm();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // FP16 tensor-core GEMM (see the file comment for the layout). Returns false when cuBLASLt
  // has no algorithm for the shape (the caller then uses kernels/cuda/gemm_fallback.cu).
  bool gemm_f16(const __half* w, const __half* x, int64_t m, int64_t n_out, int64_t n_in, __half* y,
                cudaStream_t stream);
  // INT8 IMMA GEMM, int32 result, same TN layout (for the ceiling probe). Returns false when
  // cuBLASLt has no algorithm for it on this device.
  bool gemm_i8(const int8_t* w, const int8_t* x, int64_t m, int64_t n_out, int64_t n_in, int32_t* y,
               cudaStream_t stream);
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, int>;
  Plan& plan(int64_t m, int64_t n_out, int64_t n_in, bool int8);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace latprof::cuda
