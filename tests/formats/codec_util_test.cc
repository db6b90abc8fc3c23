#include "formats/common/codec_util.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>

#include "formats/codec_test_util.h"

namespace tensorsafe {
namespace {

// Fails one chosen step of the write path.
class FaultyEnv : public internal::Env {
 public:
  enum class Fail { kNone, kAppend, kSync, kRename };
  explicit FaultyEnv(Fail f) : fail_(f) {}

  Result<std::unique_ptr<internal::WritableFile>> NewTempFile(const std::string& final_path,
                                                              std::string* tmp) override {
    TS_ASSIGN_OR_RETURN(auto file, Env::NewTempFile(final_path, tmp));
    return std::unique_ptr<internal::WritableFile>(std::make_unique<File>(std::move(file), fail_));
  }
  Status Rename(const std::string& from, const std::string& to) override {
    if (fail_ == Fail::kRename) return IOError("injected rename failure", EXDEV);
    return Env::Rename(from, to);
  }

 private:
  class File : public internal::WritableFile {
   public:
    File(std::unique_ptr<internal::WritableFile> f, Fail fail) : f_(std::move(f)), fail_(fail) {}
    Status Append(std::span<const std::byte> b) override {
      if (fail_ == Fail::kAppend) return IOError("injected write failure", ENOSPC);
      return f_->Append(b);
    }
    bool seekable() const override { return f_->seekable(); }
    Status WriteAt(std::uint64_t o, std::span<const std::byte> b) override { return f_->WriteAt(o, b); }
    Status Sync() override {
      if (fail_ == Fail::kSync) return IOError("injected fsync failure", EIO);
      return f_->Sync();
    }
    Status Close() override { return f_->Close(); }
    std::uint64_t position() const override { return f_->position(); }
    const std::string& name() const override { return f_->name(); }

   private:
    std::unique_ptr<internal::WritableFile> f_;
    Fail fail_;
  };
  Fail fail_;
};

TEST(CodecUtil, WriteFileAtomicallyLeavesNothingOnEveryInjectedFailure) {
  const std::string data = "payload";
  for (auto fail : {FaultyEnv::Fail::kAppend, FaultyEnv::Fail::kSync, FaultyEnv::Fail::kRename}) {
    testing::TempDir dir;
    FaultyEnv env(fail);
    Status s = internal::WriteFileAtomically(dir.File("x.bin"), internal::AsByteSpan(data), true, &env);
    EXPECT_EQ(s.code(), StatusCode::kIOError);
    EXPECT_NE(s.message().find("injected"), std::string::npos) << s.ToString();
    EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  }
  testing::TempDir dir;
  FaultyEnv env(FaultyEnv::Fail::kNone);
  ASSERT_TRUE(internal::WriteFileAtomically(dir.File("x.bin"), internal::AsByteSpan(data), true, &env).ok());
  EXPECT_EQ(testing::ReadFileBytes(dir.File("x.bin")), data);
}

TEST(CodecUtil, WriteFileAtomicallyKeepsTheOldFileOnFailure) {
  testing::TempDir dir;
  testing::WriteFileBytes(dir.File("x.bin"), "old");
  FaultyEnv env(FaultyEnv::Fail::kRename);
  const std::string data = "new";
  EXPECT_FALSE(internal::WriteFileAtomically(dir.File("x.bin"), internal::AsByteSpan(data), false, &env).ok());
  EXPECT_EQ(testing::ReadFileBytes(dir.File("x.bin")), "old");
}

TEST(CodecUtil, AssignNamesKeepsUniqueNamesAndResolvesPositionalClashes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(internal::AssignNames(V{"xs", "ys"}), (V{"xs", "ys"}));
  EXPECT_EQ(internal::AssignNames(V{"", ""}), (V{"0", "1"}));
  EXPECT_EQ(internal::AssignNames(V{"a", "a", "b"}), (V{"0", "1", "b"}));
  EXPECT_EQ(internal::AssignNames(V{"0", "x"}), (V{"0", "x"}));  // its own position
  EXPECT_EQ(internal::AssignNames(V{"1", ""}), (V{"0", "1"}));   // "1" belongs to tensor 1
  // A chain: "2" clashes with tensor 2; dropping it makes "1" clash with tensor 1.
  EXPECT_EQ(internal::AssignNames(V{"1", "2", ""}), (V{"0", "1", "2"}));
}

TEST(CodecUtil, ViewOrCopyViewsAlignedBytesAndCopiesOthers) {
  alignas(8) const char buf[16] = "abcdefghijklmno";
  auto owner = std::make_shared<int>(1);
  auto aligned = std::as_bytes(std::span<const char>(buf, 8));
  Tensor v = internal::ViewOrCopy({}, aligned, owner, 8);
  EXPECT_EQ(v.data.data(), aligned.data());
  EXPECT_EQ(v.owner, owner);
  auto odd = std::as_bytes(std::span<const char>(buf + 1, 8));
  Tensor c = internal::ViewOrCopy({}, odd, owner, 8);
  EXPECT_NE(c.data.data(), odd.data());
  EXPECT_NE(c.owner, owner);
  EXPECT_EQ(testing::Str(c.data), "bcdefghi");
}

}  // namespace
}  // namespace tensorsafe
