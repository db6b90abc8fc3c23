// StringFile: a WritableFile in memory, for encoders that write through the
// file interface (npz, the native writer) but are asked for bytes.
#pragma once

#include <string>

#include "tensorsafe/env.h"
#include "util/checked_math.h"

namespace tensorsafe::internal {

class StringFile final : public WritableFile {
 public:
  Status Append(std::span<const std::byte> b) override {
    s_.append(reinterpret_cast<const char*>(b.data()), b.size());
    return Status::OK();
  }
  bool seekable() const override { return true; }
  Status WriteAt(std::uint64_t off, std::span<const std::byte> b) override {
    if (!RangeWithin(off, b.size(), s_.size())) return Internal("write past the end of a buffer");
    s_.replace(off, b.size(), reinterpret_cast<const char*>(b.data()), b.size());
    return Status::OK();
  }
  Status Sync() override { return Status::OK(); }
  Status Close() override { return Status::OK(); }
  std::uint64_t position() const override { return s_.size(); }
  const std::string& name() const override { return name_; }
  std::string& str() { return s_; }

 private:
  std::string s_, name_ = "<memory>";
};

}  // namespace tensorsafe::internal
