#include "formats/codec_util.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <functional>

#include "formats/codec_test_util.h"
#include "io/atomic_file.h"
#include "tensorsafe/formats/btf.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/formats/npz.h"
#include "tensorsafe/formats/tenbin.h"
#include "tensorsafe/formats/zio.h"

namespace tensorsafe {
namespace {

// Fails one chosen step of the write path.
class FaultyEnv : public Env {
 public:
  enum class Fail { kNone, kAppend, kSync, kRename };
  explicit FaultyEnv(Fail f) : fail_(f) {}

  Result<std::unique_ptr<WritableFile>> NewTempFile(const std::string& final_path, std::string* tmp) override {
    TS_ASSIGN_OR_RETURN(auto file, Env::NewTempFile(final_path, tmp));
    return std::unique_ptr<WritableFile>(std::make_unique<File>(std::move(file), fail_));
  }
  Status Rename(const std::string& from, const std::string& to) override {
    if (fail_ == Fail::kRename) return IOError("injected rename failure", EXDEV);
    return Env::Rename(from, to);
  }

 private:
  class File : public WritableFile {
   public:
    File(std::unique_ptr<WritableFile> f, Fail fail) : f_(std::move(f)), fail_(fail) {}
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
    std::unique_ptr<WritableFile> f_;
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

TEST(CodecUtil, PiecesJoinAndStreamTheSameBytes) {
  const std::string big(200 << 10, 'x');  // above the 64 KiB buffering threshold
  internal::Pieces p;
  const std::size_t table = p.Append("head");
  p.AppendView(testing::Bytes(big));
  p.AppendZeros(3);
  p.AppendView({});  // empty views add nothing
  p.Append("tail");
  p.owned(table)[0] = 'H';
  const std::string want = "Head" + big + std::string(3, '\0') + "tail";
  EXPECT_EQ(p.size(), want.size());
  EXPECT_EQ(p.Join(), want);
  testing::TempDir dir;
  ASSERT_TRUE(internal::WritePiecesAtomically(dir.File("p.bin"), p, false, Env::Default()).ok());
  EXPECT_EQ(testing::ReadFileBytes(dir.File("p.bin")), want);
}

// The streamed WriteFile of every codec built on Pieces writes what Encode
// returns, and leaves nothing behind when a write, sync or rename fails.
TEST(CodecUtil, StreamedCodecWritersMatchEncodeAndCleanUp) {
  const std::string data(100000, '\x01');
  TensorSet set;
  set.tensors.push_back(testing::MakeTensor("a", DType::kI32, {25000}, data));
  set.tensors.push_back(testing::MakeTensor("b", DType::kU8, {3}, "xyz"));
  struct Codec {
    const char* name;
    std::function<Status(Env*, const std::string&)> write;
    std::function<Result<std::string>()> encode;
  };
  const std::vector<Codec> codecs = {
      {"tenbin", [&](Env* e, const std::string& p) { return tenbin::WriteFile(p, set, {.env = e}); },
       [&] { return tenbin::Encode(set); }},
      {"btf", [&](Env* e, const std::string& p) { return btf::WriteFile(p, set, {.env = e}); },
       [&] { return btf::Encode(set); }},
      {"zio", [&](Env* e, const std::string& p) { return zio::WriteFile(p, set, {.env = e}); },
       [&] { return zio::Encode(set); }},
      {"npz", [&](Env* e, const std::string& p) { return npz::WriteFile(p, set, {.env = e}); },
       [&] { return npz::Encode(set); }},
  };
  for (const Codec& c : codecs) {
    SCOPED_TRACE(c.name);
    testing::TempDir dir;
    auto want = c.encode();
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    FaultyEnv ok_env(FaultyEnv::Fail::kNone);
    ASSERT_TRUE(c.write(&ok_env, dir.File("f")).ok());
    EXPECT_EQ(testing::ReadFileBytes(dir.File("f")), *want);
    for (auto fail : {FaultyEnv::Fail::kAppend, FaultyEnv::Fail::kSync, FaultyEnv::Fail::kRename}) {
      testing::TempDir d2;
      FaultyEnv env(fail);
      Status s = c.write(&env, d2.File("f"));
      EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
      EXPECT_TRUE(std::filesystem::is_empty(d2.path()));
    }
  }
  TensorSet one;
  one.tensors.push_back(set.tensors[0]);
  testing::TempDir dir;
  FaultyEnv env(FaultyEnv::Fail::kAppend);
  EXPECT_EQ(npy::WriteFile(dir.File("a.npy"), one, {.env = &env}).code(), StatusCode::kIOError);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace tensorsafe
