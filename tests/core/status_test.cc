#include <catch2/catch.hpp>

#include "core/status.h"

using namespace starling::core;

namespace {
Result<int> half(int x) {
  if (x % 2) return invalidArgument("odd: " + std::to_string(x));
  return x / 2;
}
Status chain(int x) {
  STARLING_RETURN_IF_ERROR(half(x).status());
  return Status::ok();
}
}  // namespace

TEST_CASE("Status carries code and message, context is prepended", "[unit][core]") {
  Status ok;
  CHECK(ok.isOk());
  CHECK(ok.toString() == "ok");
  Status bad = timeout("no message from rank 3");
  CHECK_FALSE(bad.isOk());
  CHECK(bad.code() == StatusCode::kTimeout);
  CHECK(bad.toString() == "timeout: no message from rank 3");
  CHECK(bad.withContext("round 7").message() == "round 7: no message from rank 3");
  CHECK(ok.withContext("x").isOk());
}

TEST_CASE("Result holds a value or an error", "[unit][core]") {
  auto a = half(8);
  REQUIRE(a.isOk());
  CHECK(*a == 4);
  auto b = half(7);
  REQUIRE_FALSE(b.isOk());
  CHECK(b.status().code() == StatusCode::kInvalidArgument);
  CHECK(b.status().message() == "odd: 7");
  CHECK(chain(4).isOk());
  CHECK(chain(5).code() == StatusCode::kInvalidArgument);
}
