# Transparent capture: CRIU + the driver's checkpoint API.
target_sources(crest_capture PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/proc.c
  ${CMAKE_CURRENT_SOURCE_DIR}/criu.c
  ${CMAKE_CURRENT_SOURCE_DIR}/gpuckpt.c
  ${CMAKE_CURRENT_SOURCE_DIR}/gpumap.c
  ${CMAKE_CURRENT_SOURCE_DIR}/transparent.c)
set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/criu.c PROPERTIES
  COMPILE_DEFINITIONS CREST_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
