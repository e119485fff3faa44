# Unity batches the project writes itself, with paths relative to the batch file.
#
# CMake's own UNITY_BUILD (3.25) writes each batch as `#include "/abs/clone/lib/...cpp"` lines: the
# translation unit ccache hashes then differs from one clone to the next, and CCACHE_BASEDIR, which
# rewrites command lines and not file contents, cannot help (a second clean clone missed on 212 of
# its first 240 compilations). These batches include `../../../lib/...cpp`, identical in every clone
# whose build folder sits at the same place in it (build/, build-asan/, build-tsan/).
#
# The rules are CMake's: C++ sources only, in the target's order, DL_UNITY_BATCH per unit; a file
# with its own COMPILE_OPTIONS, COMPILE_DEFINITIONS, COMPILE_FLAGS or INCLUDE_DIRECTORIES, or with
# SKIP_UNITY_BUILD_INCLUSION, compiles alone. A target with one such source keeps it as it is.

function(dl_unity_target target)
  get_target_property(type ${target} TYPE)
  get_target_property(imported ${target} IMPORTED)
  if(imported OR NOT type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY|MODULE_LIBRARY|EXECUTABLE)$")
    return()
  endif()
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  get_target_property(binary_dir ${target} BINARY_DIR)
  set(batchable "")
  set(kept "")
  foreach(src IN LISTS sources)
    set(alone TRUE)
    if(NOT src MATCHES "\\$<" AND src MATCHES "\\.(cpp|cc|cxx)$")
      if(IS_ABSOLUTE "${src}")
        set(path "${src}")
      else()
        set(path "${source_dir}/${src}")
      endif()
      set(alone FALSE)
      foreach(property COMPILE_OPTIONS COMPILE_DEFINITIONS COMPILE_FLAGS INCLUDE_DIRECTORIES
                       SKIP_UNITY_BUILD_INCLUSION HEADER_FILE_ONLY GENERATED)
        get_source_file_property(value "${src}" TARGET_DIRECTORY ${target} ${property})
        if(value)
          set(alone TRUE)
        endif()
      endforeach()
    endif()
    if(alone)
      list(APPEND kept "${src}")
    else()
      list(APPEND batchable "${path}")
    endif()
  endforeach()
  list(LENGTH batchable count)
  if(count LESS 2)
    return()
  endif()
  set(folder "${binary_dir}/unity/${target}")
  set(batches "")
  set(index 0)
  set(text "")
  set(in_batch 0)
  foreach(path IN LISTS batchable)
    file(RELATIVE_PATH relative "${folder}" "${path}")
    string(APPEND text "#include \"${relative}\"\n")
    math(EXPR in_batch "${in_batch} + 1")
    if(in_batch EQUAL DL_UNITY_BATCH)
      file(CONFIGURE OUTPUT "${folder}/unity_${index}.cxx" CONTENT "${text}" @ONLY)
      list(APPEND batches "${folder}/unity_${index}.cxx")
      math(EXPR index "${index} + 1")
      set(text "")
      set(in_batch 0)
    endif()
  endforeach()
  if(in_batch GREATER 0)
    file(CONFIGURE OUTPUT "${folder}/unity_${index}.cxx" CONTENT "${text}" @ONLY)
    list(APPEND batches "${folder}/unity_${index}.cxx")
  endif()
  # The batched files leave the target's sources: editing one rebuilds its batch through the
  # compiler's dependency file, as with CMake's batches.
  set_property(TARGET ${target} PROPERTY SOURCES ${kept} ${batches})
endfunction()

# Every target defined in `dir` and below it.
function(dl_unity_directory dir)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    dl_unity_target(${target})
  endforeach()
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(subdir IN LISTS subdirs)
    dl_unity_directory("${subdir}")
  endforeach()
endfunction()
