// safetensors files on disk: WriteFile/ReadFile, streaming of large and many
// small tensors, and fault injection through the Env seam.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "formats/safetensors/internal.h"
#include "support/temp_dir.h"
#include "tensorsafe/env.h"
#include "tensorsafe/formats/safetensors.h"

namespace tensorsafe::safetensors {
namespace {

namespace fs = std::filesystem;
using tensorsafe::Env;
using tensorsafe::WritableFile;

TensorSet MakeSet(std::vector<std::pair<std::string, std::size_t>> sizes) {
  TensorSet set;
  set.metadata_json = R"({"framework":"pt"})";
  std::uint32_t seed = 1;
  for (auto& [name, size] : sizes) {
    auto data = std::make_shared<std::string>(size, '\0');
    for (char& c : *data) c = static_cast<char>((seed = seed * 1103515245u + 12345u) >> 24);
    Tensor t;
    t.info.name = name;
    t.info.dtype = DType::kU8;
    t.info.shape = {size};
    t.data = {reinterpret_cast<const std::byte*>(data->data()), data->size()};
    t.owner = data;
    set.tensors.push_back(std::move(t));
  }
  return set;
}

std::vector<std::string> Listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(SafetensorsIO, WriteFileThenReadFile) {
  testing::TempDir dir;
  const std::string path = dir.File("m.safetensors");
  // A tensor written straight from memory, and small ones that overflow the
  // 1 MiB gathering buffer.
  std::vector<std::pair<std::string, std::size_t>> sizes = {{"big", 3 << 20}};
  for (int i = 0; i < 40; ++i) sizes.emplace_back("small" + std::to_string(i), 60000 - i);
  const TensorSet set = MakeSet(sizes);
  ASSERT_TRUE(WriteFile(path, set).ok());
  auto encoded = Encode(set);
  ASSERT_TRUE(encoded.ok());
  EXPECT_EQ(testing::ReadFileBytes(path), *encoded);
  EXPECT_EQ(Listing(dir.path()), std::vector<std::string>{"m.safetensors"});
  auto read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->tensors.size(), set.tensors.size());
  EXPECT_EQ(read->metadata_json, set.metadata_json);
  for (const Tensor& t : read->tensors) {
    auto it = std::find_if(set.tensors.begin(), set.tensors.end(),
                           [&](const Tensor& s) { return s.info.name == t.info.name; });
    ASSERT_NE(it, set.tensors.end());
    ASSERT_EQ(t.data.size(), it->data.size());
    EXPECT_TRUE(std::equal(t.data.begin(), t.data.end(), it->data.begin())) << t.info.name;
  }
  // Overwriting a file that is still mapped leaves the mapping intact.
  ASSERT_TRUE(WriteFile(path, MakeSet({{"other", 5}})).ok());
  EXPECT_EQ(read->tensors[0].data.size(), std::size_t{3} << 20);
  EXPECT_EQ(static_cast<unsigned char>(read->tensors[0].data[0]), static_cast<unsigned char>(set.tensors[0].data[0]));
  auto reread = ReadFile(path);
  ASSERT_TRUE(reread.ok());
  EXPECT_EQ(reread->tensors.at(0).info.name, "other");
}

TEST(SafetensorsIO, ReadFileErrors) {
  testing::TempDir dir;
  auto missing = ReadFile(dir.File("none.safetensors"));
  EXPECT_EQ(missing.status().code(), StatusCode::kIOError);
  EXPECT_EQ(missing.status().error_number(), ENOENT);
  testing::WriteFileBytes(dir.File("empty.safetensors"), "");
  auto empty = ReadFile(dir.File("empty.safetensors"));
  EXPECT_EQ(empty.status().code(), StatusCode::kCorruption);
  EXPECT_NE(empty.status().message().find("empty.safetensors: file is 0 bytes"), std::string::npos)
      << empty.status().message();
}

// Fails one chosen operation of the files it creates, and renames on demand.
class SafetensorsFaultyEnv : public Env {
 public:
  enum class Fault { kNone, kAppend, kSync, kClose, kRename, kCreate };
  Fault fault = Fault::kNone;
  int fail_at_append = 0;  // index of the Append that fails

  Result<std::unique_ptr<WritableFile>> NewTempFile(const std::string& final_path, std::string* tmp_path) override {
    if (fault == Fault::kCreate) return IOError("injected: cannot create", ENOSPC);
    TS_ASSIGN_OR_RETURN(auto file, Env::NewTempFile(final_path, tmp_path));
    return std::unique_ptr<WritableFile>(std::make_unique<File>(std::move(file), this));
  }
  Status Rename(const std::string& from, const std::string& to) override {
    if (fault == Fault::kRename) return IOError("injected: rename failed", EXDEV);
    return Env::Rename(from, to);
  }

 private:
  class File : public WritableFile {
   public:
    File(std::unique_ptr<WritableFile> base, SafetensorsFaultyEnv* env) : base_(std::move(base)), env_(env) {}
    Status Append(std::span<const std::byte> bytes) override {
      if (env_->fault == Fault::kAppend && appends_++ == env_->fail_at_append) {
        return IOError("injected: write failed", EIO);
      }
      return base_->Append(bytes);
    }
    bool seekable() const override { return base_->seekable(); }
    Status WriteAt(std::uint64_t o, std::span<const std::byte> b) override { return base_->WriteAt(o, b); }
    Status Sync() override {
      if (env_->fault == Fault::kSync) return IOError("injected: fsync failed", EIO);
      return base_->Sync();
    }
    Status Close() override {
      Status s = base_->Close();
      if (env_->fault == Fault::kClose && !closed_once_) {
        closed_once_ = true;
        return IOError("injected: close failed", EIO);
      }
      return s;
    }
    std::uint64_t position() const override { return base_->position(); }
    const std::string& name() const override { return base_->name(); }

   private:
    std::unique_ptr<WritableFile> base_;
    SafetensorsFaultyEnv* env_;
    int appends_ = 0;
    bool closed_once_ = false;
  };
};

TEST(SafetensorsIO, FailuresLeaveNothingBehindAndTheOldFileIntact) {
  testing::TempDir dir;
  const std::string path = dir.File("m.safetensors");
  testing::WriteFileBytes(path, "previous contents");
  // Header, one direct write, then the gathered small tensors: 3 appends.
  const TensorSet set = MakeSet({{"big", 100000}, {"a", 10}, {"b", 20}});
  struct Case {
    SafetensorsFaultyEnv::Fault fault;
    int at;
  } cases[] = {{SafetensorsFaultyEnv::Fault::kAppend, 0}, {SafetensorsFaultyEnv::Fault::kAppend, 1},
               {SafetensorsFaultyEnv::Fault::kAppend, 2}, {SafetensorsFaultyEnv::Fault::kSync, 0},
               {SafetensorsFaultyEnv::Fault::kClose, 0},  {SafetensorsFaultyEnv::Fault::kRename, 0},
               {SafetensorsFaultyEnv::Fault::kCreate, 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.fault) * 10 + c.at);
    SafetensorsFaultyEnv env;
    env.fault = c.fault;
    env.fail_at_append = c.at;
    Status s = WriteFile(path, set, WriteOptions{.env = &env});
    EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
    EXPECT_NE(s.message().find("injected"), std::string::npos) << s.ToString();
    EXPECT_EQ(Listing(dir.path()), std::vector<std::string>{"m.safetensors"});
    EXPECT_EQ(testing::ReadFileBytes(path), "previous contents");
  }
  // Without a fault the same call succeeds (so the cases above fail for the
  // injected reason only).
  SafetensorsFaultyEnv ok_env;
  ASSERT_TRUE(WriteFile(path, set, WriteOptions{.env = &ok_env}).ok());
  EXPECT_EQ(testing::ReadFileBytes(path), *Encode(set));
}

TEST(SafetensorsIO, InvalidInputCreatesNoFile) {
  testing::TempDir dir;
  TensorSet set = MakeSet({{"a", 1}});
  set.metadata_json = R"({"n":1})";
  Status s = WriteFile(dir.File("m.safetensors"), set);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Listing(dir.path()).empty());
}

// A file in memory that counts its reads.
class BytesFile : public RandomAccessFile {
 public:
  explicit BytesFile(std::string bytes) : bytes_(std::move(bytes)) {}
  Status ReadAt(std::uint64_t offset, std::span<std::byte> out) const override {
    ++reads;
    if (offset > bytes_.size() || out.size() > bytes_.size() - offset) return Corruption("read past the end");
    std::memcpy(out.data(), bytes_.data() + offset, out.size());
    return Status::OK();
  }
  std::uint64_t size() const override { return bytes_.size(); }
  const std::string& name() const override { return name_; }
  mutable int reads = 0;

 private:
  std::string bytes_;
  std::string name_ = "mem.safetensors";
};

std::string WithLength(std::uint64_t n, std::size_t total) {
  std::string s(total, ' ');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>(n >> (8 * i));
  return s;
}

TEST(SafetensorsIO, HeaderPrefixInBothReadOrders) {
  ReadOptions opt;
  opt.max_header_bytes = 1 << 20;
  struct Case {
    std::uint64_t n;
    std::size_t file;
    std::size_t plain;  // bytes returned reading 64 KiB first
    int plain_reads;
    std::size_t first;  // bytes returned reading the length first
  };
  const Case cases[] = {
      {2, 10, 10, 1, 10},                       // "{}" and no data: the whole file
      {2, 200, 200, 1, 16},                     // at least 16 bytes, for format detection
      {5000, 9000, 9000, 1, 5008},              // a header under 64 KiB: one read, or exactly it
      {100000, 100100, 100008, 2, 100008},      // over 64 KiB: two reads either way
      {65528, 70000, 65536, 1, 65536},          // exactly 64 KiB
      {(2u << 20), 3u << 20, 65536, 1, 65536},  // over the limit: the first 64 KiB, for the error
      {9000, 5000, 5000, 1, 5000},              // past the end of the file
      {0, 5, 5, 1, 5},                          // shorter than the length field
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("n=" + std::to_string(c.n) + " file=" + std::to_string(c.file));
    const std::string bytes = c.file < 8 ? std::string(c.file, '\x01') : WithLength(c.n, c.file);
    BytesFile plain(bytes), first(bytes);
    auto a = internal::ReadHeaderPrefix(plain, opt);
    auto b = internal::ReadHeaderPrefix(first, opt, /*length_first=*/true);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->size, c.plain);
    EXPECT_EQ(plain.reads, c.plain_reads);
    EXPECT_EQ(b->size, c.first);
    EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(a->data.get()), a->size), bytes.substr(0, a->size));
    EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(b->data.get()), b->size), bytes.substr(0, b->size));
    // Both give ParseHeader what it needs to say the same thing.
    auto pa = ParseHeader(a->span(), bytes.size(), opt);
    auto pb = ParseHeader(b->span(), bytes.size(), opt);
    EXPECT_EQ(pa.status().ToString(), pb.status().ToString());
  }
}

}  // namespace
}  // namespace tensorsafe::safetensors
