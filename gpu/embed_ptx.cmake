# embed_ptx.cmake - writes the PTX file IN into the C source OUT as
#   const char gpusha_ptx[] = { ..., 0 };  const char gpusha_ptx_nvcc[] = "VER";
# (a byte array, not a string literal: PTX is longer than the 4095
# characters C11 promises for one literal). Run by gpu/CMakeLists.txt:
#   cmake -DIN=gpusha.ptx -DOUT=gpusha_ptx.c -DVER=13.0.88 -P embed_ptx.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
if(n EQUAL 0)
  message(FATAL_ERROR "embed_ptx: ${IN} is empty")
endif()
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
# 16 bytes a line
string(REPEAT "0x..," 16 line)
string(REGEX REPLACE "(${line})" "\\1\n\t" hex "${hex}")
file(WRITE "${OUT}" "/* Generated from ${IN} by gpu/embed_ptx.cmake: do not edit. */\n"
  "extern const char gpusha_ptx[];\nextern const char gpusha_ptx_nvcc[];\n"
  "const char gpusha_ptx[] = {\n\t${hex}0x00\n};\n"
  "const char gpusha_ptx_nvcc[] = \"${VER}\";\n")
