// Converting a file whose data is larger than the memory the process may
// allocate. A forked child limits RLIMIT_DATA (heap and private writable
// mappings; since Linux 4.7 not the read-only file mappings the readers use)
// to 16 MiB above what it already has, then converts 256 MiB of tensors
// from .tsafe to every format and back. A writer that gathered a file in
// memory, or a reader that copied it, would fail to allocate; the child
// first proves the limit bites by failing to allocate 256 MiB itself.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "support/sanitizer.h"
#include "support/temp_dir.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe {
namespace {

constexpr std::uint64_t kTensorBytes = std::uint64_t{128} << 20;  // two of them: 256 MiB
constexpr std::uint64_t kHeadroom = std::uint64_t{16} << 20;      // it passes with 4 MiB; 16 leaves a margin

std::uint64_t VmDataBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmData:", 0) == 0) return std::stoull(line.substr(7)) * 1024;  // "VmData:  1234 kB"
  }
  return 0;
}

// Streams a .tsafe of two f32 tensors "a" and "b" of kTensorBytes each,
// never holding more than 1 MiB of them.
void WriteBigTsafe(const std::string& path) {
  WriterOptions wo;
  wo.sync = false;
  auto w = Writer::Create(path, wo);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  std::vector<float> chunk(std::size_t{1} << 18);  // 1 MiB
  for (const char* name : {"a", "b"}) {
    ASSERT_TRUE((*w)->BeginTensor(name, DType::kF32, {kTensorBytes / 4}).ok());
    for (std::uint64_t done = 0, k = 0; done < kTensorBytes; done += sizeof(float) * chunk.size(), ++k) {
      for (std::size_t i = 0; i < chunk.size(); ++i)
        chunk[i] = static_cast<float>(k * chunk.size() + i) + (*name == 'b');
      ASSERT_TRUE((*w)->Append(std::as_bytes(std::span(chunk))).ok());
    }
    ASSERT_TRUE((*w)->EndTensor().ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
}

// The child's work; returns its exit code and says why on stderr.
int ConvertUnderLimit(const testing::TempDir& dir) {
  const std::uint64_t limit = VmDataBytes() + kHeadroom;
  const rlimit rl{limit, limit};
  if (::setrlimit(RLIMIT_DATA, &rl) != 0) {
    std::perror("setrlimit");
    return 2;
  }
  try {
    std::vector<std::byte> all(2 * kTensorBytes);
    std::fprintf(stderr, "the limit did not bite: allocated %zu bytes\n", all.size());
    return 3;
  } catch (const std::bad_alloc&) {
  }
  const std::string in = dir.File("in.tsafe");
  auto original = Reader::Open(in);
  if (!original.ok()) return 4;
  const Format targets[] = {Format::kTsafe, Format::kSafetensors, Format::kNpy, Format::kNpz,
                            Format::kGguf,  Format::kTenbin,      Format::kBtf, Format::kZio};
  for (Format f : targets) {
    const std::string name(FormatName(f));
    const std::string out = dir.File("out." + name), back = dir.File("back.tsafe");
    ConvertOptions opt;
    opt.sync = false;
    opt.to = f;
    opt.drop_names = f == Format::kBtf;
    if (f == Format::kNpy) opt.tensors = {"a"};
    auto s = Convert(in, out, opt);
    if (!s.ok()) {
      std::fprintf(stderr, "tsafe -> %s: %s\n", name.c_str(), s.status().ToString().c_str());
      return 10;
    }
    // ZIO payloads sit at odd offsets in the packed frame, so its reader
    // copies them (convert.h): no way back under this limit.
    if (f != Format::kZio) {
      ConvertOptions back_opt;
      back_opt.sync = false;
      back_opt.from = f;
      auto b = Convert(out, back, back_opt);
      if (!b.ok()) {
        std::fprintf(stderr, "%s -> tsafe: %s\n", name.c_str(), b.status().ToString().c_str());
        return 11;
      }
      // The writer hashed what it wrote: the checksums match the input's.
      auto r = Reader::Open(back);
      auto names = r.ok() ? (*r)->Names() : Result<std::vector<std::string>>(r.status());
      if (!names.ok() || names->empty()) return 12;
      for (std::size_t i = 0; i < names->size(); ++i) {
        const std::string want = f == Format::kBtf ? std::string(1, "ab"[i]) : (*names)[i];
        const auto got = (*r)->Find((*names)[i]);
        const auto exp = (*original)->Find(f == Format::kNpy ? "a" : want);
        if (!got.ok() || !exp.ok() || got->data_checksum != exp->data_checksum) {
          std::fprintf(stderr, "%s: tensor %zu differs after the round trip\n", name.c_str(), i);
          return 13;
        }
      }
      std::filesystem::remove(back);
    }
    std::filesystem::remove(out);
  }
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "converted 256 MiB to 8 formats and back under RLIMIT_DATA = %.1f MiB (the process's "
      "%.1f MiB + %.0f MiB); peak RSS %.1f MiB, which counts the mapped input's page-cache pages\n",
      static_cast<double>(limit) / (1 << 20), static_cast<double>(limit - kHeadroom) / (1 << 20),
      static_cast<double>(kHeadroom) / (1 << 20), static_cast<double>(ru.ru_maxrss) / 1024);
  std::fflush(stdout);
  return 0;
}

TEST(ConvertMemory, DataLargerThanTheAllocationLimitConverts) {
#if TS_UNDER_ASAN
  GTEST_SKIP() << "ASan's allocator reserves memory that RLIMIT_DATA counts";
#endif
  testing::TempDir dir;
  WriteBigTsafe(dir.File("in.tsafe"));
  if (HasFatalFailure()) return;
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(ConvertUnderLimit(dir));
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's message above";
}

}  // namespace
}  // namespace tensorsafe
