// Result<T>::status(): a reference into an lvalue Result, a value from a
// temporary, so binding `F().status()` to a const reference never dangles.
#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <utility>

#include "tensorsafe/status.h"

namespace tensorsafe {
namespace {

Result<int> Fails() { return Corruption("entry 3 \"w\": bad"); }
Result<int> Succeeds() { return 7; }

static_assert(std::is_same_v<decltype(std::declval<Result<int>&>().status()), const Status&>);
static_assert(std::is_same_v<decltype(std::declval<const Result<int>&>().status()), const Status&>);
static_assert(std::is_same_v<decltype(std::declval<Result<int>>().status()), Status>);
static_assert(std::is_same_v<decltype(std::declval<const Result<int>>().status()), Status>);

TEST(Status, StatusOfATemporaryOutlivesIt) {
  const auto& s = Fails().status();  // a lifetime-extended value, not a reference into the temporary
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "entry 3 \"w\": bad");
  const auto& ok = Succeeds().status();
  EXPECT_TRUE(ok.ok());
}

TEST(Status, StatusOfAnLvalueIsAReferenceIntoIt) {
  Result<int> r = Fails();
  EXPECT_EQ(&r.status(), &r.status());
  EXPECT_EQ(r.status().message(), "entry 3 \"w\": bad");
  Result<int> v = Succeeds();
  EXPECT_TRUE(v.status().ok());
  EXPECT_EQ(*v, 7);
}

Status Propagates() {
  TS_ASSIGN_OR_RETURN(int x, Fails());
  return x == 0 ? Status::OK() : Internal("unreachable");
}

TEST(Status, AssignOrReturnMovesTheErrorOut) {
  Status s = Propagates();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "entry 3 \"w\": bad");
}

}  // namespace
}  // namespace tensorsafe
