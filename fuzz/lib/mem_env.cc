#include "mem_env.h"

#include <cstring>

#include "util/checked_math.h"

namespace tensorsafe::fuzz {
namespace {

class MemFile final : public RandomAccessFile {
 public:
  MemFile(std::span<const std::byte> bytes, std::string name) : bytes_(bytes), name_(std::move(name)) {}
  // The same contract and message as the fd-backed file (io/env.cc).
  Status ReadAt(std::uint64_t offset, std::span<std::byte> out) const override {
    if (!internal::RangeWithin(offset, out.size(), bytes_.size())) {
      return Corruption(name_ + ": read of " + std::to_string(out.size()) + " bytes at offset " +
                        std::to_string(offset) + " runs past the end of the file (" + std::to_string(bytes_.size()) +
                        " bytes)");
    }
    if (!out.empty()) std::memcpy(out.data(), bytes_.data() + offset, out.size());
    return Status::OK();
  }
  std::uint64_t size() const override { return bytes_.size(); }
  const std::string& name() const override { return name_; }

 private:
  std::span<const std::byte> bytes_;
  std::string name_;
};

}  // namespace

Result<std::unique_ptr<RandomAccessFile>> MemReadEnv::OpenRead(const std::string& path) {
  return std::unique_ptr<RandomAccessFile>(std::make_unique<MemFile>(bytes_, path));
}

Status MemWritableFile::Append(std::span<const std::byte> bytes) {
  out_->append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return Status::OK();
}

Status MemWritableFile::WriteAt(std::uint64_t offset, std::span<const std::byte> bytes) {
  if (!seekable_) return Internal("WriteAt on a non-seekable memory file");
  if (!internal::RangeWithin(offset, bytes.size(), out_->size())) {
    return Internal("WriteAt past the end of a memory file");
  }
  std::memcpy(out_->data() + offset, bytes.data(), bytes.size());
  return Status::OK();
}

Result<std::span<std::byte>> MemWritableFile::MapForWrite(std::uint64_t size) {
  if (!out_->empty()) return WritableFile::MapForWrite(size);
  out_->resize(size);
  return std::span<std::byte>(reinterpret_cast<std::byte*>(out_->data()), out_->size());
}

}  // namespace tensorsafe::fuzz
