# CUDA backend build: liblatprof_cuda.so, a MODULE that latprof dlopens from its own directory
# (src/backend/registry.cpp), so the latprof binary never links CUDA and starts without a driver.
# Included by the root CMakeLists.txt when LATPROF_WITH_CUDA is ON (CUDA enabled, CUDAToolkit found).
#
# The module links cudart statically, cuBLASLt/cuBLAS, CUPTI and NVTX3, and NEVER CUDA::cuda_driver
# (the stub would make libcuda.so.1 a hard dependency): the runtime finds the driver itself and
# reports cudaErrorInsufficientDriver when there is none. Only the three latprof_cuda_* entry
# points are exported; everything else is hidden, cudart_static included.

file(GLOB LATPROF_CUDA_KERNEL_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cuda/*.cu)
file(GLOB LATPROF_CUDA_BACKEND_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu
                                                     ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cpp)

set(LATPROF_CUDA_WARNINGS
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>
    $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)

add_library(latprof_cuda MODULE ${LATPROF_CUDA_KERNEL_SRC} ${LATPROF_CUDA_BACKEND_SRC})
target_include_directories(latprof_cuda PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/src)
target_compile_options(latprof_cuda PRIVATE ${LATPROF_CUDA_WARNINGS})
target_link_libraries(latprof_cuda PRIVATE CUDA::cudart_static CUDA::cublasLt CUDA::cublas
                                           CUDA::cupti CUDA::nvtx3 nlohmann_json::nlohmann_json
                                           ${CMAKE_DL_LIBS} Threads::Threads)
set_target_properties(latprof_cuda PROPERTIES
  OUTPUT_NAME latprof_cuda
  PREFIX lib
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  CXX_VISIBILITY_PRESET hidden
  CUDA_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON
  POSITION_INDEPENDENT_CODE ON)
# Every symbol resolved at link time (no surprise at dlopen), static libraries' symbols hidden.
target_link_options(latprof_cuda PRIVATE -Wl,--no-undefined -Wl,--exclude-libs,ALL)
add_dependencies(latprof latprof_cuda)

# ---- GPU tests (ctest label gpu); tests/CMakeLists.txt leaves tests/gpu/ to this file ----------
if(LATPROF_TESTS)
  find_package(GTest QUIET)
  if(GTest_FOUND)
    include(GoogleTest)
    enable_testing()
    file(GLOB LATPROF_GPU_TEST_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/gpu/test_gpu_*.cpp)
    foreach(src ${LATPROF_GPU_TEST_SRC})
      get_filename_component(name ${src} NAME_WE)
      add_executable(${name} ${src} ${CMAKE_SOURCE_DIR}/tests/gpu/gpu_support.cpp)
      target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/src
                                                 ${CMAKE_SOURCE_DIR}/tests)
      target_link_libraries(${name} PRIVATE latprof_cpu_kernels GTest::gtest GTest::gtest_main
                                            nlohmann_json::nlohmann_json ${CMAKE_DL_LIBS})
      target_compile_definitions(${name} PRIVATE
        LATPROF_CUDA_MODULE_PATH="$<TARGET_FILE:latprof_cuda>")
      add_dependencies(${name} latprof_cuda)
      gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST PROPERTIES LABELS gpu
                           DISCOVERY_TIMEOUT 60)
    endforeach()
    # The offline metric-set check compiles the counter code into the test (no device needed).
    if(TARGET test_gpu_forward)
      # The whole forward pass runs the runner's code on both backends.
      target_link_libraries(test_gpu_forward PRIVATE latprof_core)
    endif()
    if(TARGET test_gpu_counters)
      target_sources(test_gpu_counters PRIVATE ${CMAKE_SOURCE_DIR}/src/backend/cuda/range_counters.cpp
                                               ${CMAKE_SOURCE_DIR}/src/backend/cuda/check.cpp)
      target_link_libraries(test_gpu_counters PRIVATE CUDA::cupti CUDA::cudart_static)
    endif()
  else()
    message(STATUS "latprof: GoogleTest not found, GPU tests not built")
  endif()
endif()

message(STATUS "latprof: CUDA backend module liblatprof_cuda.so for architectures "
               "${CMAKE_CUDA_ARCHITECTURES} (CUDA ${CUDAToolkit_VERSION})")
