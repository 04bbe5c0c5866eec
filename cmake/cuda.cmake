# CUDA backend build (owned by the CUDA backend work; see src/backend/cuda/).
