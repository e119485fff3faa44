#include <doctest/doctest.h>

#include "dl/core/error.hpp"
#include "dl/core/tensor.hpp"

using namespace dl;

TEST_CASE("tensor views share storage and check bounds") {
  Tensor t = Tensor::zeros({4, 3}, DType::f32);
  CHECK(t.numel() == 12);
  CHECK(t.nbytes() == 48);
  CHECK(t.describe() == "f32[4,3]");
  Tensor r = t.rows(1, 2);
  r.data<float>()[0] = 5.0f;
  CHECK(t.data<float>()[3] == 5.0f);
  Tensor v = t.view({12});
  CHECK(v.data<float>()[3] == 5.0f);
  Tensor s = t.flat_slice(3, {3});
  CHECK(s.data<float>()[0] == 5.0f);
  CHECK_THROWS_AS(t.flat_slice(10, {3}), Error);
  CHECK_THROWS_AS(t.view({5}), Error);
  CHECK_THROWS_AS(t.data<double>(), Error);
  CHECK(reinterpret_cast<uintptr_t>(t.raw()) % 64 == 0);
}

TEST_CASE("exit codes per error kind") {
  CHECK(exit_code(ErrorKind::runtime) == 1);
  CHECK(exit_code(ErrorKind::usage) == 2);
  CHECK(exit_code(ErrorKind::diverged) == 3);
  CHECK(exit_code(ErrorKind::interrupted) == 130);
}
