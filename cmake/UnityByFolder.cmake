# Unity builds (TENSORSAFE_UNITY; `make` turns it on): the sources of each
# folder of a target compile as one translation unit, so the heavy headers
# (simdjson, nlohmann, gtest, <filesystem>) are parsed once per folder, not
# once per file. CI compiles everything twice from scratch (g++, then clang
# with ASan); this halves the library (489 -> 254 CPU-seconds with g++).
#
# Folders rather than CMake's batches of N files: adding a file never moves
# other files into another batch, so two file-local helpers with the same
# name collide the day they are put in one folder, not the day an unrelated
# file is added. A file-local name must be unique in its folder and
# namespace (docs/CONTRIBUTING.md, "Build flags and CI time").
option(TENSORSAFE_UNITY "Compile each source folder as one translation unit" OFF)

function(tensorsafe_unity_by_folder target)
  if(NOT TENSORSAFE_UNITY)
    return()
  endif()
  get_target_property(sources ${target} SOURCES)
  foreach(src ${sources})
    if(NOT src MATCHES "\\.cc$")
      continue()
    endif()
    get_filename_component(dir ${src} DIRECTORY)
    file(RELATIVE_PATH group ${CMAKE_SOURCE_DIR} ${dir})
    string(REPLACE "/" "_" group "${group}")
    set_source_files_properties(${src} TARGET_DIRECTORY ${target} PROPERTIES UNITY_GROUP "${group}")
  endforeach()
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE GROUP)
  # g++ takes a .cc included by the unity file for a header, and warns that a
  # class of it holds a type of the .cc's unnamed namespace: not so here.
  target_compile_options(${target} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-subobject-linkage>)
endfunction()
