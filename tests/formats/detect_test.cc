#include <gtest/gtest.h>

#include "support/temp_dir.h"
#include "tensorsafe/formats/detect.h"

namespace tensorsafe {
namespace {

Format FromBytes(const std::string& b, const std::string& path) {
  return DetectFormatFromBytes(std::as_bytes(std::span(b)), path);
}

TEST(Detect, MagicWinsOverExtension) {
  EXPECT_EQ(FromBytes(std::string("\x89TSF\r\n\x1a\n", 8), "x.npy"), Format::kTsafe);
  EXPECT_EQ(FromBytes("\x93NUMPY\x01", "x.bin"), Format::kNpy);
  EXPECT_EQ(FromBytes("PK\x03\x04", "x.npz"), Format::kNpz);
  EXPECT_EQ(FromBytes("PK\x05\x06", "x"), Format::kNpz);
  EXPECT_EQ(FromBytes("~TenBin~", "x"), Format::kTenbin);
  EXPECT_EQ(FromBytes("GGUF\x03", "x.npy"), Format::kGguf);
  EXPECT_EQ(FromBytes(std::string("\x02\0\0\0\0\0\0\0{}", 10), "x"), Format::kSafetensors);
}

// A ZIP is a PyTorch archive when its first member is a torch.save record,
// an .npz otherwise; when the name is not in the prefix, the extension says.
TEST(Detect, ZipFirstMemberTellsPytorchFromNpz) {
  auto local = [](const std::string& name) {
    std::string h = "PK\x03\x04" + std::string(22, '\0');
    h += static_cast<char>(name.size());
    h += std::string(3, '\0');
    return h + name;
  };
  EXPECT_EQ(FromBytes(local("archive/data.pkl"), "x.npz"), Format::kPytorch);
  EXPECT_EQ(FromBytes(local("m/version"), "x"), Format::kPytorch);
  EXPECT_EQ(FromBytes(local("w.npy"), "x.pt"), Format::kNpz);
  EXPECT_EQ(FromBytes(local("dir/w.npy"), "x.bin"), Format::kNpz);
  // Bytes that stop before the first member's name say only "a ZIP": npz
  // (DetectFormat reads kSniffBytes, so a file's name is seen).
  EXPECT_EQ(FromBytes("PK\x03\x04", "x.bin"), Format::kNpz);
  EXPECT_EQ(FromBytes("PK\x03\x04", "x"), Format::kNpz);
  // The legacy magic pickle, protocol 2 and protocol 4 (with its FRAME).
  const std::string magic = "\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.";
  EXPECT_EQ(FromBytes("\x80\x02" + magic, "x.npy"), Format::kPytorch);
  EXPECT_EQ(FromBytes("\x80\x04\x95" + std::string("\x0d\0\0\0\0\0\0\0", 8) + magic, "x"), Format::kPytorch);
  EXPECT_EQ(FromBytes("\x80\x02\x8a\x0a" + std::string(10, 'x'), "x"), Format::kUnknown);
  for (const char* ext : {"a.pt", "a.PTH", "pytorch_model.bin", "a.ckpt"}) {
    EXPECT_EQ(FromBytes("", ext), Format::kPytorch) << ext;
  }
  EXPECT_EQ(FormatName(Format::kPytorch), "pytorch");
}

TEST(Detect, ZioSingleFrameByItsHeaderFrame) {
  EXPECT_EQ(FromBytes("\x4cZIO0TENS{", "x.bin"), Format::kZio);
  EXPECT_EQ(FromBytes(std::string("\xff\0\0\x01\x00ZIO8FLOW", 13), "x"), Format::kZio);
  // The real message made by ZIO's C++ code (formats.md §2.4).
  auto f = DetectFormat(std::string(TS_SHARED_DIR) + "/fixtures/zio/vec_zio_tens_2x3f4_single_part.bin");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f, Format::kZio);
  EXPECT_EQ(FromBytes("\x4cZIO9", "x"), Format::kUnknown);  // level digits stop at 8
  EXPECT_EQ(FromBytes("\x4cZIO", "x"), Format::kUnknown);   // too short to tell
  EXPECT_EQ(FromBytes("abc", "a.zio"), Format::kZio);
  EXPECT_EQ(FormatName(Format::kZio), "zio");
}

TEST(Detect, ExtensionWhenNoMagic) {
  EXPECT_EQ(FromBytes("", "dir.v2/model.BTF"), Format::kBtf);
  EXPECT_EQ(FromBytes("abc", "a.safetensors"), Format::kSafetensors);
  EXPECT_EQ(FromBytes("abc", "a.ten"), Format::kTenbin);
  EXPECT_EQ(FromBytes("abc", "dir.npy/file"), Format::kUnknown);
  EXPECT_EQ(FromBytes("abc", "file"), Format::kUnknown);
  EXPECT_EQ(FormatName(Format::kNpz), "npz");
}

TEST(Detect, ReadsTheFile) {
  testing::TempDir dir;
  testing::WriteFileBytes(dir.File("a.bin"), "\x93NUMPY\x01\x00");
  auto f = DetectFormat(dir.File("a.bin"));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, Format::kNpy);
  testing::WriteFileBytes(dir.File("empty"), "");
  EXPECT_EQ(*DetectFormat(dir.File("empty")), Format::kUnknown);
  EXPECT_EQ(DetectFormat(dir.File("missing")).status().code(), StatusCode::kIOError);
}

}  // namespace
}  // namespace tensorsafe
