#include "backend/cuda/lt_gemm.hpp"

#include "backend/cuda/check.hpp"

namespace latprof::cuda {

LtGemm::LtGemm() {
  LP_CHECK(cublasLtCreate(&handle_));
  // 32 MiB is what cuBLAS recommends on Hopper (4 MiB elsewhere); 256-byte aligned by cudaMalloc.
  int dev = 0, major = 0;
  LP_CHECK(cudaGetDevice(&dev));
  LP_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  workspace_bytes_ = size_t(major >= 9 ? 32 : 4) << 20;
  LP_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

LtGemm::~LtGemm() {
  for (auto& [key, p] : plans_) {
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  }
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

LtGemm::Plan& LtGemm::plan(int64_t m, int64_t n_out, int64_t n_in, bool int8) {
  const Key key{m, n_out, n_in, int8 ? 1 : 0};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan& p = plans_[key];
  const cublasComputeType_t compute = int8 ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale = int8 ? CUDA_R_32I : CUDA_R_32F;
  const cudaDataType_t ab = int8 ? CUDA_R_8I : CUDA_R_16F;
  const cudaDataType_t cd = int8 ? CUDA_R_32I : CUDA_R_16F;
  LP_CHECK(cublasLtMatmulDescCreate(&p.desc, compute, scale));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  LP_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                          sizeof(trans_a)));
  LP_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                          sizeof(trans_b)));
  // A = W stored [n_in, n_out] column-major (op T); B = x [n_in, m]; C = y [n_out, m].
  LP_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab, uint64_t(n_in), uint64_t(n_out), n_in));
  LP_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab, uint64_t(n_in), uint64_t(m), n_in));
  LP_CHECK(cublasLtMatrixLayoutCreate(&p.c, cd, uint64_t(n_out), uint64_t(m), n_out));
  cublasLtMatmulPreference_t pref = nullptr;
  LP_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  LP_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &workspace_bytes_, sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  // NOT_SUPPORTED / no result: no algorithm for this shape; any other status is an error.
  if (st != CUBLAS_STATUS_NOT_SUPPORTED) LP_CHECK(st);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    p.algo = result.algo;
    p.ok = true;
  }
  return p;
}

bool LtGemm::gemm_f16(const __half* w, const __half* x, int64_t m, int64_t n_out, int64_t n_in,
                      __half* y, cudaStream_t stream) {
  Plan& p = plan(m, n_out, n_in, false);
  if (!p.ok) return false;
  const float alpha = 1.f, beta = 0.f;
  LP_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo,
                          workspace_, workspace_bytes_, stream));
  return true;
}

bool LtGemm::gemm_i8(const int8_t* w, const int8_t* x, int64_t m, int64_t n_out, int64_t n_in,
                     int32_t* y, cudaStream_t stream) {
  Plan& p = plan(m, n_out, n_in, true);
  if (!p.ok) return false;
  const int32_t alpha = 1, beta = 0;
  LP_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo,
                          workspace_, workspace_bytes_, stream));
  return true;
}

}  // namespace latprof::cuda
