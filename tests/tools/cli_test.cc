// Runs the built `tensorsafe` binary on files made by the C++ Writer and the
// npy codec, checking stdout, stderr and the exit code (docs/ERRORS.md).
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "support/cli_runner.h"
#include "support/temp_dir.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe {
namespace {

using Output = testing::CliOutput;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(TS_CLI_PATH).empty()) GTEST_SKIP() << "CLI not built";
    path_ = dir_.File("m.tsafe");
    auto w = Writer::Create(path_);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    std::vector<float> a = {1, 2.5, -3, 4, 5, 6};
    std::vector<std::int32_t> big(2000);
    for (int i = 0; i < 2000; ++i) big[i] = i;
    std::vector<std::uint16_t> bf = {0x3f80, 0xc000};  // bf16 1, -2
    ASSERT_TRUE((*w)->Add("a", TensorView::Contiguous(DType::kF32, {2, 3}, std::as_bytes(std::span(a)))).ok());
    ASSERT_TRUE((*w)->Add("big", TensorView::Contiguous(DType::kI32, {2000}, std::as_bytes(std::span(big)))).ok());
    ASSERT_TRUE((*w)->Add("half", TensorView::Contiguous(DType::kBF16, {2}, std::as_bytes(std::span(bf)))).ok());
    const std::uint8_t nib[] = {0x1f};  // i4: low nibble first -> -1, 1
    ASSERT_TRUE((*w)->Add("q", TensorView::Contiguous(DType::kI4, {2}, std::as_bytes(std::span(nib)))).ok());
    ASSERT_TRUE((*w)->SetMetadata(R"({"model":"m"})").ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }

  Output Run(const std::string& args) { return testing::RunCli(TS_CLI_PATH, args); }

  testing::TempDir dir_;
  std::string path_;
};

TEST_F(CliTest, VersionAndHelp) {
  Output v = Run("--version");
  EXPECT_EQ(v.rc, 0);
  EXPECT_EQ(v.out, "tensorsafe 0.1.0\n");
  for (const char* c : {"info", "ls", "verify", "cat"}) {
    Output h = Run(std::string(c) + " --help");
    EXPECT_EQ(h.rc, 0) << c;
    EXPECT_NE(h.out.find("FILE"), std::string::npos) << c;
  }
  Output top = Run("--help");
  EXPECT_NE(top.out.find("verify"), std::string::npos);
}

TEST_F(CliTest, UsageErrorsExit2) {
  Output o = Run("");
  EXPECT_EQ(o.rc, 2);
  EXPECT_NE(o.err.find("subcommand is required"), std::string::npos) << o.err;
  EXPECT_EQ(Run("ls").rc, 2);
  EXPECT_EQ(Run("ls " + path_ + " --bogus").rc, 2);
}

TEST_F(CliTest, Info) {
  Output o = Run("info " + path_);
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("format:       tsafe 1.1\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("tensors:      4\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("header slot:  sequence 1\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("metadata:     {\"model\":\"m\"}\n"), std::string::npos) << o.out;

  Output j = Run("info --json " + path_);
  ASSERT_EQ(j.rc, 0) << j.err;
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["format"], "tsafe");
  EXPECT_EQ(doc["alignment"], 64);
  EXPECT_EQ(doc["tensor_count"], 4);
  EXPECT_EQ(doc["data_bytes"], 24 + 8000 + 4 + 1);
  EXPECT_EQ(doc["metadata"]["model"], "m");
  ASSERT_EQ(doc["tensors"].size(), 4u);
  EXPECT_EQ(doc["tensors"][1]["name"], "big");
  EXPECT_EQ(doc["tensors"][1]["dtype"], "i32");
  EXPECT_EQ(doc["tensors"][1]["shape"], nlohmann::json::array({2000}));
  EXPECT_EQ(doc["tensors"][1]["nbytes"], 8000);
  EXPECT_EQ(doc["tensors"][1]["offset"].get<std::uint64_t>() % 64, 0u);
  EXPECT_EQ(doc["file_size"], std::filesystem::file_size(path_));
}

TEST_F(CliTest, Ls) {
  Output o = Run("ls " + path_);
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(o.out,
            "NAME  DTYPE  SHAPE         NBYTES\n"
            "a     f32    [2, 3]            24\n"
            "big   i32    [2000]          8000\n"
            "half  bf16   [2]                4\n"
            "q     i4     [2]                1\n");
}

TEST_F(CliTest, VerifyOkAndCorrupted) {
  Output ok = Run("verify " + path_);
  EXPECT_EQ(ok.rc, 0) << ok.err;
  EXPECT_EQ(ok.out, "ok: 4 tensors, 8029 bytes verified\n");

  auto r = Reader::Open(path_);
  ASSERT_TRUE(r.ok());
  const std::uint64_t off = (*r)->Find("big")->data_offset + 10;
  r->reset();
  std::string bytes = testing::ReadFileBytes(path_);
  bytes[off] ^= 0x01;
  testing::WriteFileBytes(path_, bytes);
  Output bad = Run("verify " + path_);
  EXPECT_EQ(bad.rc, 1);
  EXPECT_EQ(bad.out, "");
  EXPECT_NE(bad.err.find("tensorsafe verify: corruption: "), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("\"big\": data checksum mismatch"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("damaged tensors (1):\n  big\n"), std::string::npos) << bad.err;
  // cat checks the checksum too.
  EXPECT_EQ(Run("cat " + path_ + " big").rc, 1);
}

TEST_F(CliTest, CatPrintsValues) {
  Output o = Run("cat " + path_ + " a");
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(o.out, "dtype: f32\nshape: [2, 3]\n[[  1, 2.5,  -3],\n [  4,   5,   6]]\n");
  Output h = Run("cat " + path_ + " half");
  EXPECT_EQ(h.out, "dtype: bf16\nshape: [2]\n[ 1, -2]\n");
  Output q = Run("cat " + path_ + " q");
  EXPECT_EQ(q.out, "dtype: i4\nshape: [2]\n[-1,  1]\n");
  Output big = Run("cat " + path_ + " big");
  EXPECT_EQ(big.out, "dtype: i32\nshape: [2000]\n[   0,    1,    2, ..., 1997, 1998, 1999]\n");
  Output all = Run("cat --all " + path_ + " big");
  EXPECT_NE(all.out.find(" 1000, 1001,"), std::string::npos);
  EXPECT_EQ(all.out.find("..."), std::string::npos);
}

TEST_F(CliTest, CatDecodesSmallFloats) {
  const std::string path = dir_.File("f.tsafe");
  auto w = Writer::Create(path);
  ASSERT_TRUE(w.ok());
  // e4m3fn: 1, -2, 448 (max), NaN; e5m2: 1, inf, 2^-16 (smallest subnormal).
  const std::uint8_t e4[] = {0x38, 0xc0, 0x7e, 0x7f}, e5[] = {0x3c, 0x7c, 0x01};
  const std::uint16_t h[] = {0x3c00, 0xc100, 0x0001};  // f16: 1, -2.5, 2^-24
  const std::uint8_t f4[] = {0x72};                    // e2m1: low nibble 2 -> 1, high 7 -> 6
  ASSERT_TRUE((*w)->Add("e4", TensorView::Contiguous(DType::kF8E4M3FN, {4}, std::as_bytes(std::span(e4)))).ok());
  ASSERT_TRUE((*w)->Add("e5", TensorView::Contiguous(DType::kF8E5M2, {3}, std::as_bytes(std::span(e5)))).ok());
  ASSERT_TRUE((*w)->Add("h", TensorView::Contiguous(DType::kF16, {3}, std::as_bytes(std::span(h)))).ok());
  ASSERT_TRUE((*w)->Add("f4", TensorView::Contiguous(DType::kF4E2M1, {2}, std::as_bytes(std::span(f4)))).ok());
  // f6_e2m3 group: elements 1 (0b001000), -1 (0b101000), 7.5 (0b011111), 0.125 (0b000001).
  const std::uint32_t g = 0x08 | 0x28 << 6 | 0x1f << 12 | 0x01 << 18;
  const std::uint8_t f6[] = {static_cast<std::uint8_t>(g), static_cast<std::uint8_t>(g >> 8),
                             static_cast<std::uint8_t>(g >> 16)};
  ASSERT_TRUE((*w)->Add("f6", TensorView::Contiguous(DType::kF6E2M3, {4}, std::as_bytes(std::span(f6)))).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  EXPECT_EQ(Run("cat " + path + " f6").out, "dtype: f6_e2m3\nshape: [4]\n[    1,    -1,   7.5, 0.125]\n");
  EXPECT_EQ(Run("cat " + path + " e4").out, "dtype: f8_e4m3fn\nshape: [4]\n[  1,  -2, 448, nan]\n");
  EXPECT_EQ(Run("cat " + path + " e5").out,
            "dtype: f8_e5m2\nshape: [3]\n[                1,               inf, 1.52587890625e-05]\n");
  EXPECT_EQ(Run("cat " + path + " h").out, "dtype: f16\nshape: [3]\n[            1,          -2.5, 5.9604645e-08]\n");
  EXPECT_EQ(Run("cat " + path + " f4").out, "dtype: f4_e2m1\nshape: [2]\n[1, 6]\n");
}

TEST_F(CliTest, CatMissingTensorExits3) {
  Output o = Run("cat " + path_ + " nope");
  EXPECT_EQ(o.rc, 3);
  EXPECT_EQ(o.out, "");
  EXPECT_NE(o.err.find("tensorsafe cat: not found"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("nope"), std::string::npos) << o.err;
}

TEST_F(CliTest, CatOutWritesNpy) {
  const std::string out = dir_.File("a.npy");
  Output o = Run("cat " + path_ + " a --out " + out);
  ASSERT_EQ(o.rc, 0) << o.err;
  auto set = npy::ReadFile(out);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->tensors[0].info.shape, (Shape{2, 3}));
  EXPECT_EQ(reinterpret_cast<const float*>(set->tensors[0].data.data())[1], 2.5f);
  // Packed i4 has no .npy encoding: exit 5, nothing written.
  Output q = Run("cat " + path_ + " q --out " + dir_.File("q.npy"));
  EXPECT_EQ(q.rc, 5);
  EXPECT_NE(q.err.find("unsupported: "), std::string::npos) << q.err;
  EXPECT_NE(q.err.find("packed below one byte"), std::string::npos) << q.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.File("q.npy")));
}

TEST_F(CliTest, NpyAndNpzInputs) {
  const std::string golden = std::string(TS_SOURCE_DIR) + "/tests/golden/npy/";
  Output ls = Run("ls " + golden + "stored.npz");
  EXPECT_EQ(ls.rc, 0);
  EXPECT_EQ(ls.out,
            "NAME   DTYPE  SHAPE         NBYTES\n"
            "w      f32    [2, 3]            24\n"
            "b      i64    [2]               16\n"
            "\xc3\xa9t\xc3\xa9    bool   []                 1\n");
  Output cat = Run("cat " + golden + "be_i32_2x3.npy be_i32_2x3");
  EXPECT_EQ(cat.out, "dtype: i32\nshape: [2, 3]\n[[-3, -2, -1],\n [ 0,  1,  2]]\n");
  Output info = Run("info --json " + golden + "f32_2x3.npy");
  auto doc = nlohmann::json::parse(info.out);
  EXPECT_EQ(doc["format"], "npy");
  EXPECT_EQ(doc["tensors"][0]["offset"], 128);
  EXPECT_TRUE(doc["alignment"].is_null());
  EXPECT_EQ(Run("verify " + golden + "deflated.npz").out, "ok: 3 tensors, 41 bytes verified\n");
}

// GGUF's data alignment is general.alignment, 32 without the key.
TEST_F(CliTest, InfoGivesGgufAlignment) {
  const std::string golden = std::string(TS_SOURCE_DIR) + "/tests/golden/gguf/";
  for (const auto& [file, want] : std::vector<std::pair<std::string, int>>{{"plain.gguf", 32}, {"align64.gguf", 64}}) {
    Output info = Run("info --json " + golden + file);
    ASSERT_EQ(info.rc, 0) << info.err;
    EXPECT_EQ(nlohmann::json::parse(info.out)["alignment"], want) << file;
  }
}

TEST_F(CliTest, ErrorsMapToExitCodes) {
  Output missing = Run("info " + dir_.File("absent.tsafe"));
  EXPECT_EQ(missing.rc, 4);
  EXPECT_NE(missing.err.find("No such file or directory"), std::string::npos) << missing.err;
  // Every format is read now: a truncated GGUF file is corrupt, and only a
  // file no format recognises is unsupported.
  testing::WriteFileBytes(dir_.File("x.gguf"), "GGUF\3\0\0\0");
  Output gguf = Run("ls " + dir_.File("x.gguf"));
  EXPECT_EQ(gguf.rc, 1) << gguf.err;
  EXPECT_NE(gguf.err.find("tensorsafe ls: corruption: "), std::string::npos) << gguf.err;
  testing::WriteFileBytes(dir_.File("x.bin"), "not a tensor file");
  Output unknown = Run("ls " + dir_.File("x.bin"));
  EXPECT_EQ(unknown.rc, 5);
  EXPECT_NE(unknown.err.find("not a tensor file tensorsafe recognises"), std::string::npos) << unknown.err;
  testing::WriteFileBytes(dir_.File("t.npy"), "\x93NUMPY\x01");
  Output trunc = Run("verify " + dir_.File("t.npy"));
  EXPECT_EQ(trunc.rc, 1);
  EXPECT_NE(trunc.err.find("smaller than the 10-byte"), std::string::npos) << trunc.err;
}

// A valid file of another format given to a command that changes .tsafe
// files is named as what it is (kUnsupported, exit 5), never called corrupt;
// bytes no format recognises stay corrupt (exit 1).
TEST_F(CliTest, UpdateCommandsNameAnotherFormat) {
  const std::string npy = std::string(TS_SOURCE_DIR) + "/tests/golden/npy/f32_2x3.npy";
  const std::string st = dir_.File("m.safetensors");
  ASSERT_EQ(Run("convert " + path_ + " " + st + " --tensor a --drop-metadata").rc, 0);
  const std::string a_npy = dir_.File("a.npy");
  ASSERT_EQ(Run("cat " + path_ + " a --out " + a_npy).rc, 0);
  for (const std::string& file : {st, npy}) {
    const std::string format = file == st ? "safetensors" : "npy";
    for (const std::string& cmd : {"meta " + file, "rm " + file + " a", "mv " + file + " a b", "compact " + file,
                                   "add " + file + " x " + a_npy, "lmdb put " + dir_.File("db") + " " + file}) {
      Output o = Run(cmd);
      EXPECT_EQ(o.rc, 5) << cmd << ": " << o.err;
      EXPECT_NE(o.err.find(file + " is not a tsafe file: its format is " + format), std::string::npos)
          << cmd << ": " << o.err;
    }
  }
  // A tensor of any format is a SOURCE for add.
  Output added = Run("add " + path_ + " from_st " + st + ":a");
  EXPECT_EQ(added.rc, 0) << added.err;
  EXPECT_EQ(added.out, "added from_st (f32 [2, 3], 24 bytes) in " + path_ + "\n");
  Output hint = Run("rm " + st + " a");
  EXPECT_NE(hint.err.find("`tensorsafe convert " + st + " " + dir_.File("m.tsafe") + "` rewrites it"),
            std::string::npos)
      << hint.err;
  testing::WriteFileBytes(dir_.File("noise.tsafe"), std::string(300, 'x'));
  Output noise = Run("rm " + dir_.File("noise.tsafe") + " a");
  EXPECT_EQ(noise.rc, 1) << noise.err;
  EXPECT_NE(noise.err.find("corruption"), std::string::npos) << noise.err;
}

TEST_F(CliTest, UpdateCommands) {
  // add from an .npy and from another .tsafe, rename, remove, metadata, compact.
  Output o = Run("cat " + path_ + " a --out " + dir_.File("a.npy"));
  ASSERT_EQ(o.rc, 0) << o.err;
  o = Run("add " + path_ + " a2 " + dir_.File("a.npy") + " --meta '{\"src\":1}'");
  EXPECT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(o.out, "added a2 (f32 [2, 3], 24 bytes) in " + path_ + "\n");
  o = Run("add " + path_ + " h2 " + path_ + ":half");
  EXPECT_EQ(o.rc, 0) << o.err;
  o = Run("add " + path_ + " a2 " + dir_.File("a.npy"));
  EXPECT_EQ(o.rc, 7);
  EXPECT_EQ(o.err, "tensorsafe add: invalid argument: " + path_ + ": tensor \"a2\" already exists\n");
  EXPECT_EQ(Run("add " + path_ + " a2 " + path_ + ":half --replace").rc, 0);
  o = Run("mv " + path_ + " a2 renamed");
  EXPECT_EQ(o.rc, 0) << o.err;
  o = Run("rm " + path_ + " big q");
  EXPECT_EQ(o.out, "removed 2 tensors from " + path_ + "\n");
  EXPECT_EQ(Run("rm " + path_ + " nope").rc, 3);
  o = Run("meta " + path_ + " --set lr=0.5 --set 'tags=[\"x\"]' --del model");
  EXPECT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(o.out, "{\"lr\":0.5,\"tags\":[\"x\"]}\n");
  o = Run("meta " + path_ + " --tensor renamed");
  EXPECT_EQ(o.out, "{\"src\":1}\n");  // --replace kept the metadata
  auto r = Reader::Open(path_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*(*r)->Names(), (std::vector<std::string>{"a", "half", "renamed", "h2"}));
  EXPECT_EQ((*r)->Find("renamed")->dtype, DType::kBF16);
  EXPECT_GT((*r)->summary().unused_bytes, 8000u);  // "big" and the old a2 are dead
  o = Run("compact " + path_);
  EXPECT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("bytes reclaimed"), std::string::npos);
  EXPECT_EQ(Run("verify " + path_).rc, 0);
  auto after = Reader::Open(path_);
  EXPECT_EQ(*(*after)->Names(), (std::vector<std::string>{"a", "half", "renamed", "h2"}));
  EXPECT_LT((*after)->summary().unused_bytes, 1000u);
}

}  // namespace
}  // namespace tensorsafe
