# Build helpers shared by every folder.
#
#   node_library(NAME SRCS ... DEPS ...)       a static library of our code (warnings as errors)
#   node_executable(NAME SRCS ... DEPS ...)    a program of our code
#   node_add_test(NAME SRCS ... DEPS ... [LABELS ...] [TIMEOUT s])
#                                              a GoogleTest binary registered with ctest
#   node_add_benchmark(NAME SRCS ... DEPS ...) a Google Benchmark binary (not run by ctest)

set(NODE_WARNING_FLAGS -Wall -Wextra -Werror -Wno-unused-parameter)

function(node_apply_sanitizers)
  if(NODE_SANITIZE STREQUAL "")
    return()
  endif()
  string(REPLACE "," ";" _kinds "${NODE_SANITIZE}")
  foreach(_k IN LISTS _kinds)
    if(NOT _k MATCHES "^(address|undefined|thread)$")
      message(FATAL_ERROR "NODE_SANITIZE: unknown sanitizer '${_k}' (address, undefined, thread)")
    endif()
  endforeach()
  if("thread" IN_LIST _kinds AND "address" IN_LIST _kinds)
    message(FATAL_ERROR "NODE_SANITIZE: thread and address cannot be combined")
  endif()
  add_compile_options(-fsanitize=${NODE_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  # GCC's flow analysis changes under the sanitizers' instrumentation and reports
  # maybe-uninitialized on moves of fully initialised aggregates (e.g. a std::optional member
  # moved by vector::push_back). The warnings gate is the plain build, which keeps it.
  add_compile_options(-Wno-maybe-uninitialized)
  add_link_options(-fsanitize=${NODE_SANITIZE})
endfunction()

function(_node_our_code target)
  target_compile_options(${target} PRIVATE ${NODE_WARNING_FLAGS})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
endfunction()

function(node_library name)
  cmake_parse_arguments(A "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SRCS})
  _node_our_code(${name})
  target_link_libraries(${name} PUBLIC ${A_DEPS})
endfunction()

function(node_executable name)
  cmake_parse_arguments(A "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${A_SRCS})
  _node_our_code(${name})
  target_link_libraries(${name} PRIVATE ${A_DEPS})
endfunction()

function(node_add_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${A_SRCS})
  _node_our_code(${name})
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gmock GTest::gtest GTest::gtest_main)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${A_TIMEOUT} LABELS "${A_LABELS}")
endfunction()

function(node_add_benchmark name)
  cmake_parse_arguments(A "" "" "SRCS;DEPS" ${ARGN})
  if(NOT NODE_BUILD_BENCHMARKS)
    return()
  endif()
  add_executable(${name} ${A_SRCS})
  _node_our_code(${name})
  target_link_libraries(${name} PRIVATE ${A_DEPS} benchmark::benchmark benchmark::benchmark_main)
endfunction()

# fuzz (issue 9): NODE_FUZZ=ON builds tests/fuzz as libFuzzer binaries (clang only; see
# tools/fuzz.sh). All of our code gets coverage instrumentation plus ASan and UBSan; Debian's
# gcc-built libraries (protobuf, gRPC, abseil, RocksDB, OpenSSL) stay uninstrumented and link as
# is (libstdc++ on both sides). -Werror is dropped in this mode: the warnings gate is the gcc build.
option(NODE_FUZZ "Build tests/fuzz as libFuzzer binaries with ASan+UBSan (clang only)" OFF)
if(NODE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "NODE_FUZZ=ON needs clang: -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(NOT NODE_SANITIZE STREQUAL "")
    message(FATAL_ERROR "NODE_FUZZ=ON sets its own sanitizers; leave NODE_SANITIZE empty")
  endif()
  list(REMOVE_ITEM NODE_WARNING_FLAGS -Werror)
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
    -fno-sanitize-recover=all)
  add_link_options(-fsanitize=address,undefined)
endif()
# end fuzz
