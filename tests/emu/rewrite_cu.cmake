# rewrite_cu.cmake: a .cu file as C++ for the CUDA emulator (see cuda_emu.h).
#
#   cmake -DIN=src/common/kernels/norm_cuda.cu -DOUT=build-emu/emu/norm_cuda.cpp -P tests/emu/rewrite_cu.cmake
#
# Two textual changes, each on one line, so that line numbers stay those of the .cu file:
#   name<<<grid, block[, smem[, stream]]>>>(args)  ->  emu_launcher(name, grid, block[, ...])(args)
#   extern __shared__ T name[];                    ->  T *name = (T *)emu::dynamic_smem();
file(READ "${IN}" src)
string(REGEX REPLACE "([A-Za-z_][A-Za-z_0-9]*)<<<" "emu_launcher(\\1, " src "${src}")
string(REPLACE ">>>(" ")(" src "${src}")
string(REGEX REPLACE "extern __shared__ ([A-Za-z_0-9]+) ([A-Za-z_0-9]+)\\[\\];"
       "\\1 *\\2 = (\\1 *)emu::dynamic_smem();" src "${src}")
if(src MATCHES "<<<|>>>")
  message(FATAL_ERROR "rewrite_cu: a kernel launch in ${IN} is not of the form name<<<...>>>(")
endif()
file(WRITE "${OUT}.tmp" "#line 1 \"${IN}\"\n${src}")
file(RENAME "${OUT}.tmp" "${OUT}")
