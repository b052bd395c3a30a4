# libtorch from the pinned torch wheel in the project's virtual environment.
#
# The wheel's own TorchConfig.cmake insists on a CUDA toolkit when the wheel was built with
# CUDA, which a CPU machine does not have. So we import the few libraries we need ourselves:
# c10 and torch_cpu always, c10_cuda and torch_cuda when TRAINER_CUDA is on (GPU machines).
# Only targets that link trainer::torch see torch headers; keep those translation units few.

set(TRAINER_TORCH_DIR "" CACHE PATH "torch package folder (default: asked from TRAINER_PYTHON)")
set(TRAINER_CUDA "AUTO" CACHE STRING "Link torch's CUDA backend: ON, OFF or AUTO (when a GPU driver is present)")

if(NOT TRAINER_TORCH_DIR)
  execute_process(
    COMMAND "${TRAINER_PYTHON}" -c "import torch, os; print(os.path.dirname(torch.__file__)); print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(torch.__version__)"
    OUTPUT_VARIABLE _torch_info RESULT_VARIABLE _torch_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _torch_rc EQUAL 0)
    message(FATAL_ERROR "Cannot import torch with ${TRAINER_PYTHON}; run tools/setup first "
                        "or pass -DTRAINER_TORCH_DIR=<site-packages>/torch")
  endif()
  string(REPLACE "\n" ";" _torch_info "${_torch_info}")
  list(GET _torch_info 0 _dir)
  list(GET _torch_info 1 _abi)
  list(GET _torch_info 2 _ver)
  set(TRAINER_TORCH_DIR "${_dir}" CACHE PATH "torch package folder" FORCE)
  set(TRAINER_TORCH_CXX11_ABI "${_abi}" CACHE STRING "torch's _GLIBCXX_USE_CXX11_ABI" FORCE)
  message(STATUS "torch ${_ver} at ${TRAINER_TORCH_DIR} (cxx11 abi ${_abi})")
endif()
if(NOT DEFINED TRAINER_TORCH_CXX11_ABI)
  set(TRAINER_TORCH_CXX11_ABI 1)
endif()

set(_tlib "${TRAINER_TORCH_DIR}/lib")
if(NOT EXISTS "${_tlib}/libtorch_cpu.so")
  message(FATAL_ERROR "${_tlib}/libtorch_cpu.so not found: is TRAINER_TORCH_DIR a torch package?")
endif()

if(TRAINER_CUDA STREQUAL "AUTO")
  if(EXISTS "${_tlib}/libtorch_cuda.so" AND EXISTS "/dev/nvidiactl")
    set(_use_cuda ON)
  else()
    set(_use_cuda OFF)
  endif()
else()
  set(_use_cuda ${TRAINER_CUDA})
endif()
set(TRAINER_WITH_CUDA ${_use_cuda} CACHE INTERNAL "")
message(STATUS "torch CUDA backend linked: ${_use_cuda}")

add_library(trainer_torch INTERFACE)
target_include_directories(trainer_torch SYSTEM INTERFACE
  "${TRAINER_TORCH_DIR}/include"
  "${TRAINER_TORCH_DIR}/include/torch/csrc/api/include")
target_compile_definitions(trainer_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${TRAINER_TORCH_CXX11_ABI})
set(_torch_libs "${_tlib}/libtorch_cpu.so" "${_tlib}/libc10.so")
if(_use_cuda)
  # --no-as-needed: nothing references torch_cuda directly, but loading it registers the CUDA backend.
  target_link_options(trainer_torch INTERFACE "LINKER:--no-as-needed,${_tlib}/libtorch_cuda.so,${_tlib}/libc10_cuda.so,--as-needed")
  target_compile_definitions(trainer_torch INTERFACE TRAINER_WITH_CUDA=1)
  # torch_cuda's own dependencies (cublas, cudnn, ...) are found through its RUNPATH at load time.
  target_link_options(trainer_torch INTERFACE "LINKER:--allow-shlib-undefined")
endif()
target_link_libraries(trainer_torch INTERFACE ${_torch_libs} Threads::Threads)
target_link_options(trainer_torch INTERFACE "LINKER:-rpath,${_tlib}")
add_library(trainer::torch ALIAS trainer_torch)
