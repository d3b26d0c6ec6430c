# The CUDA backend, added to gpucompute_kernels when nvcc is found (included from
# kernels/CMakeLists.txt). Architectures come from CMAKE_CUDA_ARCHITECTURES at the
# top level: machine code for sm_80/86/89/90 plus PTX for 90, so nothing is JIT
# compiled at run time.
target_sources(gpucompute_kernels PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/device.cc
  ${CMAKE_CURRENT_LIST_DIR}/host_copy.cc
  ${CMAKE_CURRENT_LIST_DIR}/lombscargle_op.cc
  ${CMAKE_CURRENT_LIST_DIR}/op_runner.cc
  ${CMAKE_CURRENT_LIST_DIR}/shared_memory.cc
  ${CMAKE_CURRENT_LIST_DIR}/discount_product.cu
  ${CMAKE_CURRENT_LIST_DIR}/haversine.cu
  ${CMAKE_CURRENT_LIST_DIR}/normalize.cu
  ${CMAKE_CURRENT_LIST_DIR}/lombscargle.cu
  ${CMAKE_CURRENT_LIST_DIR}/lombscargle_nufft.cu
  ${CMAKE_CURRENT_LIST_DIR}/lombscargle_ragged.cu
  ${CMAKE_CURRENT_LIST_DIR}/lombscargle_small.cu
  ${CMAKE_CURRENT_LIST_DIR}/cufft_plans.cc
  ${CMAKE_CURRENT_LIST_DIR}/support.cu
  ${CMAKE_CURRENT_LIST_DIR}/value_check.cu)
target_compile_definitions(gpucompute_kernels PUBLIC GPUCOMPUTE_HAVE_CUDA)
target_link_libraries(gpucompute_kernels PUBLIC CUDA::cudart_static CUDA::cufft)
# -lineinfo: source lines for compute-sanitizer and ncu, no effect on the code.
# --compress-mode=size: the fatbins compressed (the default mode left the machine code
# as it was, line tables and all): the same code, a fraction of the bytes, unpacked once
# as the kernels load at start-up.
target_compile_options(gpucompute_kernels PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo --compress-mode=size --expt-relaxed-constexpr -Xptxas=-warn-spills>)
