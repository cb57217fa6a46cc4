# Writes a C++ source that holds a text file as a string constant:
#   cmake -DINPUT=file.ptx -DOUTPUT=file.cc -DSYMBOL=kName -DNAMESPACE=a::b
#         -P embed_text.cmake
# defines `extern const char SYMBOL[]` in NAMESPACE, NUL-terminated, as one
# raw string literal. The driver wants PTX as a NUL-terminated string, and a
# raw literal keeps the generated file readable and quick to compile.
foreach(_var INPUT OUTPUT SYMBOL NAMESPACE)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "embed_text.cmake: -D${_var}=... is required")
  endif()
endforeach()

file(READ "${INPUT}" _text)
set(_delimiter "autotune_embed")
string(FIND "${_text}" ")${_delimiter}\"" _clash)
if(NOT _clash EQUAL -1)
  message(FATAL_ERROR "embed_text.cmake: ${INPUT} contains the raw-string delimiter")
endif()

get_filename_component(_name "${INPUT}" NAME)
set(_content "// Generated from ${_name} by service/worker/embed_text.cmake; do not edit.
namespace ${NAMESPACE} {
extern const char ${SYMBOL}[];
const char ${SYMBOL}[] = R\"${_delimiter}(${_text})${_delimiter}\";
}  // namespace ${NAMESPACE}
")
# Rewrite only on change, so dependants are not rebuilt for nothing.
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" _old)
  if(_old STREQUAL _content)
    return()
  endif()
endif()
file(WRITE "${OUTPUT}" "${_content}")
