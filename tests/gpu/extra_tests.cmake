# extra_tests.cmake: CUDA tests kept in tests/gpu/ until they move to tests/unit/ (tests/gpu/check.sh
# configures with -DCMAKE_PROJECT_INCLUDE=<this file>; an ordinary configure never reads it).
#   unit.test_ops_train_cuda   tests/gpu/ops_train_cuda.c: the training ops, CUDA against the CPU
# Deferred to the end of the top-level CMakeLists.txt, where the dflash library and the test harness
# exist. A target of the same name (the file moved to tests/unit/test_ops_train_cuda.c) wins.
function(dflash_gpu_extra_tests)
  if(TARGET test_ops_train_cuda)
    return()
  endif()
  add_executable(test_ops_train_cuda ${PROJECT_SOURCE_DIR}/tests/gpu/ops_train_cuda.c ${PROJECT_SOURCE_DIR}/tests/unit/testing.c)
  target_include_directories(test_ops_train_cuda PRIVATE ${PROJECT_SOURCE_DIR}/tests/unit)
  target_link_libraries(test_ops_train_cuda PRIVATE dflash)
  target_compile_options(test_ops_train_cuda PRIVATE ${DFLASH_C_WARNINGS})
  set_target_properties(test_ops_train_cuda PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  add_test(NAME unit.test_ops_train_cuda COMMAND test_ops_train_cuda)
  set_tests_properties(unit.test_ops_train_cuda PROPERTIES SKIP_RETURN_CODE 77
    ENVIRONMENT "DFLASH_SRC=${PROJECT_SOURCE_DIR};DFLASH_BUILD=${PROJECT_BINARY_DIR}"
    WORKING_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL dflash_gpu_extra_tests)
