// `tensorsafe convert`, and info/ls/verify/cat on every format: runs the
// built binary and checks stdout, stderr, exit codes, and that the progress
// bar appears on a terminal (a pseudo-terminal here) and nowhere else.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "support/cli_runner.h"
#include "support/temp_dir.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/writer.h"

namespace tensorsafe {
namespace {

using Output = testing::CliOutput;

class ConvertCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(TS_CLI_PATH).empty()) GTEST_SKIP() << "CLI not built";
    path_ = dir_.File("m.tsafe");
    auto w = Writer::Create(path_);
    ASSERT_TRUE(w.ok());
    std::vector<float> a = {1, 2.5, -3, 4, 5, 6};
    std::vector<std::int32_t> b = {7, 8, 9};
    ASSERT_TRUE((*w)->Add("a", TensorView::Contiguous(DType::kF32, {2, 3}, std::as_bytes(std::span(a)))).ok());
    ASSERT_TRUE((*w)->Add("b", TensorView::Contiguous(DType::kI32, {3}, std::as_bytes(std::span(b)))).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }

  Output Run(const std::string& args) { return testing::RunCli(TS_CLI_PATH, args); }

  // Runs the CLI with stderr on a pseudo-terminal and returns what the
  // terminal showed; stdout goes to /dev/null.
  std::string RunOnTerminal(const std::vector<std::string>& args) {
    const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) return "<no pty>";
    const std::string slave_name = ::ptsname(master);
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int slave = ::open(slave_name.c_str(), O_RDWR | O_NOCTTY);
      const int null = ::open("/dev/null", O_WRONLY);
      if (slave < 0 || null < 0) ::_exit(126);
      ::dup2(slave, STDERR_FILENO);
      ::dup2(null, STDOUT_FILENO);
      std::vector<char*> argv;
      std::string bin = TS_CLI_PATH;
      argv.push_back(bin.data());
      std::vector<std::string> copy = args;
      for (std::string& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
    std::string shown;
    char buf[4096];
    for (;;) {
      pollfd pfd{master, POLLIN, 0};
      if (::poll(&pfd, 1, 10000) <= 0) break;
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n <= 0) break;  // EIO once the child has exited and closed the slave
      shown.append(buf, static_cast<std::size_t>(n));
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ::close(master);
    return shown;
  }

  testing::TempDir dir_;
  std::string path_;
};

TEST_F(ConvertCliTest, ConvertsAndSaysWhat) {
  const std::string out = dir_.File("m.safetensors");
  Output o = Run("convert " + path_ + " " + out);
  EXPECT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(o.out, "converted " + path_ + " (tsafe) to " + out + " (safetensors): 2 tensors, 36 bytes of data, " +
                       std::to_string(std::filesystem::file_size(out)) + " bytes written\n");
  // stderr is a file here, not a terminal: no progress bar.
  EXPECT_EQ(o.err, "");
  Output q = Run("convert --quiet " + path_ + " " + dir_.File("q.npz"));
  EXPECT_EQ(q.rc, 0) << q.err;
  EXPECT_EQ(q.out, "");
  EXPECT_EQ(q.err, "");
}

TEST_F(ConvertCliTest, ProgressBarOnlyOnATerminalAndNotWhenQuiet) {
  const std::string shown = RunOnTerminal({"convert", path_, dir_.File("t.gguf")});
  EXPECT_NE(shown.find("converting ["), std::string::npos) << shown;
  EXPECT_NE(shown.find("100%"), std::string::npos) << shown;
  EXPECT_TRUE(std::filesystem::exists(dir_.File("t.gguf")));
  // A compressed output ends below the data's size; the bar still ends full.
  const std::string packed = RunOnTerminal({"convert", "--compress", path_, dir_.File("t.npz")});
  EXPECT_NE(packed.find("100%"), std::string::npos) << packed;
  const std::string quiet = RunOnTerminal({"convert", "--quiet", path_, dir_.File("t2.gguf")});
  EXPECT_EQ(quiet, "");
  EXPECT_TRUE(std::filesystem::exists(dir_.File("t2.gguf")));
}

TEST_F(ConvertCliTest, RefusalsExitWithTheirCodes) {
  Output btf = Run("convert " + path_ + " " + dir_.File("x.btf"));
  EXPECT_EQ(btf.rc, 7) << btf.err;  // names BTF cannot hold: invalid argument
  EXPECT_NE(btf.err.find("tensorsafe convert: invalid argument: "), std::string::npos) << btf.err;
  EXPECT_NE(btf.err.find("--drop-names"), std::string::npos) << btf.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.File("x.btf")));
  Output ok = Run("convert --drop-names " + path_ + " " + dir_.File("x.btf"));
  EXPECT_EQ(ok.rc, 0) << ok.err;
  Output npy = Run("convert " + path_ + " " + dir_.File("x.npy"));
  EXPECT_EQ(npy.rc, 7) << npy.err;
  Output one = Run("convert --tensor b " + path_ + " " + dir_.File("x.npy"));
  EXPECT_EQ(one.rc, 0) << one.err;
  Output two = Run("convert --tensor b --tensor a " + path_ + " " + dir_.File("two.npz") + " --no-sync");
  EXPECT_EQ(two.rc, 0) << two.err;
  EXPECT_NE(two.out.find("2 tensors"), std::string::npos) << two.out;
  Output missing = Run("convert --tensor nope " + path_ + " " + dir_.File("y.npy"));
  EXPECT_EQ(missing.rc, 3) << missing.err;
  Output fmt = Run("convert --to xyz " + path_ + " " + dir_.File("y.npz"));
  EXPECT_EQ(fmt.rc, 2);
  EXPECT_NE(fmt.err.find("unknown format \"xyz\""), std::string::npos) << fmt.err;
  Output unknown = Run("convert " + path_ + " " + dir_.File("y.bin"));
  EXPECT_EQ(unknown.rc, 7) << unknown.err;
  Output to = Run("convert --to npz " + path_ + " " + dir_.File("y.bin"));
  EXPECT_EQ(to.rc, 0) << to.err;
  Output nofile = Run("convert " + dir_.File("nope.tsafe") + " " + dir_.File("z.npz"));
  EXPECT_EQ(nofile.rc, 4) << nofile.err;  // I/O (ENOENT)
}

TEST_F(ConvertCliTest, UnsupportedDTypeExits5) {
  auto w = Writer::Create(dir_.File("h.tsafe"));
  ASSERT_TRUE(w.ok());
  std::vector<std::uint16_t> h = {0x3f80};
  ASSERT_TRUE((*w)->Add("0", TensorView::Contiguous(DType::kBF16, {1}, std::as_bytes(std::span(h)))).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  Output o = Run("convert " + dir_.File("h.tsafe") + " " + dir_.File("h.btf"));
  EXPECT_EQ(o.rc, 5) << o.err;
  EXPECT_NE(o.err.find("dtype bf16 cannot be stored in btf"), std::string::npos) << o.err;
}

// info, ls, verify and cat read every format.
TEST_F(ConvertCliTest, InspectionCommandsReadEveryFormat) {
  const char* formats[] = {"safetensors", "npz", "gguf", "ten", "btf", "zio"};
  for (const char* ext : formats) {
    SCOPED_TRACE(ext);
    const std::string f = dir_.File(std::string("m.") + ext);
    const bool btf = std::string(ext) == "btf";
    Output c = Run(std::string("convert ") + (btf ? "--drop-names " : "") + path_ + " " + f);
    ASSERT_EQ(c.rc, 0) << c.err;
    const std::string a = btf ? "0" : "a", b = btf ? "1" : "b";
    Output ls = Run("ls " + f);
    EXPECT_EQ(ls.rc, 0) << ls.err;
    EXPECT_NE(ls.out.find(a + "     f32    [2, 3]"), std::string::npos) << ls.out;
    EXPECT_NE(ls.out.find(b + "     i32    [3]"), std::string::npos) << ls.out;
    Output info = Run("info " + f);
    EXPECT_EQ(info.rc, 0) << info.err;
    const std::string fmt_name = std::string(ext) == "ten" ? "tenbin" : ext;
    EXPECT_NE(info.out.find("format:       " + fmt_name), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("tensors:      2"), std::string::npos) << info.out;
    Output v = Run("verify " + f);
    EXPECT_EQ(v.rc, 0) << v.err;
    EXPECT_EQ(v.out, "ok: 2 tensors, 36 bytes verified\n");
    Output cat = Run("cat " + f + " " + a);
    EXPECT_EQ(cat.rc, 0) << cat.err;
    EXPECT_EQ(cat.out, "dtype: f32\nshape: [2, 3]\n[[  1, 2.5,  -3],\n [  4,   5,   6]]\n");
  }
  // A BTF file under another name: --from says what it is.
  std::filesystem::copy_file(dir_.File("m.btf"), dir_.File("m.bin"));
  EXPECT_EQ(Run("ls " + dir_.File("m.bin")).rc, 5);
  Output from = Run("ls --from btf " + dir_.File("m.bin"));
  EXPECT_EQ(from.rc, 0) << from.err;
  // A damaged foreign file: verify fails with the reader's code.
  std::string bytes = testing::ReadFileBytes(dir_.File("m.safetensors"));
  bytes.resize(bytes.size() - 1);
  testing::WriteFileBytes(dir_.File("cut.safetensors"), bytes);
  Output bad = Run("verify " + dir_.File("cut.safetensors"));
  EXPECT_EQ(bad.rc, 1) << bad.err;
}

}  // namespace
}  // namespace tensorsafe
