# The GPU SHA-256 kernels (gpusha.cu), included by gpu/CMakeLists.txt.
# With nvcc (on PATH or in /usr/local/cuda/bin) they are compiled to PTX for
# compute_75, the oldest target CUDA 13 still builds, which the driver
# compiles at load time for whatever GPU is there (sm_90 on an H100), and
# embedded in crest_gpu. Without nvcc, or with -DCREST_GPU_HASH=OFF,
# gpusha_open reports -ENOTSUP and callers hash on the CPU.
option(CREST_GPU_HASH "Build the GPU SHA-256 kernels when nvcc is found" ON)
find_program(CREST_NVCC nvcc PATHS /usr/local/cuda/bin)
if(CREST_GPU_HASH AND CREST_NVCC)
  execute_process(COMMAND ${CREST_NVCC} --version OUTPUT_VARIABLE _nvcc_out ERROR_QUIET)
  string(REGEX MATCH "V([0-9][0-9.]*)" _m "${_nvcc_out}")
  set(_nvcc_ver "${CMAKE_MATCH_1}")
  set(_ptx ${CMAKE_CURRENT_BINARY_DIR}/gpusha.ptx)
  set(_ptx_c ${CMAKE_CURRENT_BINARY_DIR}/gpusha_ptx.c)
  add_custom_command(OUTPUT ${_ptx}
    COMMAND ${CREST_NVCC} -ptx -arch=compute_75 -O3 -I${CMAKE_SOURCE_DIR}
            -o ${_ptx} ${CMAKE_CURRENT_SOURCE_DIR}/gpusha.cu
    DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/gpusha.cu ${CMAKE_CURRENT_SOURCE_DIR}/gpusha_core.h
    COMMENT "nvcc: gpu/gpusha.cu to PTX (compute_75)")
  add_custom_command(OUTPUT ${_ptx_c}
    COMMAND ${CMAKE_COMMAND} -DIN=${_ptx} -DOUT=${_ptx_c} -DVER=${_nvcc_ver}
            -P ${CMAKE_CURRENT_SOURCE_DIR}/embed_ptx.cmake
    DEPENDS ${_ptx} ${CMAKE_CURRENT_SOURCE_DIR}/embed_ptx.cmake
    COMMENT "embedding gpusha.ptx")
  target_sources(crest_gpu PRIVATE ${_ptx_c})
  target_compile_definitions(crest_gpu PRIVATE CREST_GPUSHA_PTX)
  message(STATUS "GPU SHA-256 kernels: PTX for compute_75 by ${CREST_NVCC} ${_nvcc_ver}")
else()
  message(STATUS "GPU SHA-256 kernels: not built (no nvcc, or CREST_GPU_HASH=OFF): the CPU hashes")
endif()
