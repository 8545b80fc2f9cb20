# libcrest: the library-capture API (include/crest.h). libcrest.so and
# libcrest.a wrap crest_capture and everything it links, so a job needs only
# -lcrest (plus, for the static archive, the system libraries listed in
# CREST_STATIC_DEPS).
set(CREST_INTERNAL_LIBS crest_capture crest_engine crest_restore crest_gpu crest_cas crest_dedup crest_util)

# Shared: every internal archive whole, and exactly the functions crest.h
# declares exported (the list is read from the header, so the two cannot
# drift; tests/library/exports.sh checks the result with nm -D).
file(STRINGS ${CMAKE_SOURCE_DIR}/include/crest.h _api_lines REGEX "[ *]crest_[a-z_0-9]+\\(")
set(_api "")
foreach(l ${_api_lines})
  string(REGEX MATCH "crest_[a-z_0-9]+\\(" _fn "${l}")
  string(REPLACE "(" "" _fn "${_fn}")
  list(APPEND _api ${_fn})
endforeach()
list(REMOVE_DUPLICATES _api)
list(LENGTH _api _napi)
if(_napi LESS 5)
  message(FATAL_ERROR "read only ${_napi} functions from include/crest.h: the export list would be wrong")
endif()
list(JOIN _api "; " _api_globals)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/libcrest.map "{ global: ${_api_globals}; local: *; };\n")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/libcrest_empty.c "/* libcrest: the code is in the archives */\n")
add_library(crest_lib SHARED ${CMAKE_CURRENT_BINARY_DIR}/libcrest_empty.c)
set(_whole)
foreach(l ${CREST_INTERNAL_LIBS})
  list(APPEND _whole $<TARGET_FILE:${l}>)
endforeach()
add_dependencies(crest_lib ${CREST_INTERNAL_LIBS})
target_link_libraries(crest_lib PRIVATE -Wl,--whole-archive ${_whole} -Wl,--no-whole-archive
  ${ROCKSDB_LIB} PkgConfig::LZ4 PkgConfig::URING PkgConfig::CRYPTO Threads::Threads ${CMAKE_DL_LIBS})
target_link_options(crest_lib PRIVATE -Wl,--version-script=${CMAKE_CURRENT_BINARY_DIR}/libcrest.map -Wl,--no-undefined)
target_include_directories(crest_lib PUBLIC ${CMAKE_SOURCE_DIR}/include)
set_target_properties(crest_lib PROPERTIES OUTPUT_NAME crest PUBLIC_HEADER ${CMAKE_SOURCE_DIR}/include/crest.h)

# Static: the internal archives merged into one libcrest.a.
set(CREST_STATIC ${CMAKE_CURRENT_BINARY_DIR}/libcrest.a)
set(_mri "create ${CREST_STATIC}\n")
foreach(l ${CREST_INTERNAL_LIBS})
  string(APPEND _mri "addlib $<TARGET_FILE:${l}>\n")
endforeach()
string(APPEND _mri "save\nend\n")
file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/libcrest.mri CONTENT "${_mri}")
add_custom_command(OUTPUT ${CREST_STATIC}
  COMMAND ${CMAKE_COMMAND} -E rm -f ${CREST_STATIC}
  COMMAND ${CMAKE_AR} -M < ${CMAKE_CURRENT_BINARY_DIR}/libcrest.mri
  DEPENDS ${CREST_INTERNAL_LIBS} ${CMAKE_CURRENT_BINARY_DIR}/libcrest.mri
  COMMENT "Merging the crest archives into libcrest.a" VERBATIM)
add_custom_target(crest_static_archive ALL DEPENDS ${CREST_STATIC})
# For in-tree users of the static archive: libcrest.a and what it needs.
add_library(crest_static INTERFACE)
add_dependencies(crest_static crest_static_archive)
target_include_directories(crest_static INTERFACE ${CMAKE_SOURCE_DIR}/include ${CUDA_INCLUDE})
target_link_libraries(crest_static INTERFACE ${CREST_STATIC}
  ${ROCKSDB_LIB} PkgConfig::LZ4 PkgConfig::URING PkgConfig::CRYPTO Threads::Threads ${CMAKE_DL_LIBS})
