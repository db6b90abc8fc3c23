// EXPECT_STATUS: a Status (or a Result's status) is an error with the given
// code whose message contains the given text. One definition for every test.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "tensorsafe/status.h"

namespace tensorsafe::testing {

inline Status GetStatus(const Status& s) { return s; }
template <typename T>
Status GetStatus(const Result<T>& r) {
  return r.status();
}

}  // namespace tensorsafe::testing

#define EXPECT_STATUS(expr, code_, text_)                                          \
  do {                                                                             \
    auto ts_st_ = (expr);                                                          \
    ::tensorsafe::Status ts_s_ = ::tensorsafe::testing::GetStatus(ts_st_);         \
    EXPECT_EQ(ts_s_.code(), (code_)) << ts_s_.ToString();                          \
    EXPECT_NE(ts_s_.message().find(text_), std::string::npos) << ts_s_.ToString(); \
  } while (0)
