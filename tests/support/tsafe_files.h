// Shared helpers of the native-format tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/temp_dir.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::testing {

// Four tensors ("a" f32 [2,3] with metadata, "b" i32 [6], "c" u8 scalar,
// "d" bf16 [0]) and nested file metadata: small, but every field is in use.
std::string MakeBaseFile(const TempDir& dir, const WriterOptions& opt = {});

// Opens `bytes` (written to a temp file) and verifies it; returns the first
// error. Runs both mmap and pread readers and expects them to agree.
Status OpenAndVerify(const TempDir& dir, const std::string& bytes, ReaderOptions opt = {});

}  // namespace tensorsafe::testing
