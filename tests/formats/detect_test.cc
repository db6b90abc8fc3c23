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
  EXPECT_EQ(FromBytes("PK\x03\x04", "x.bin"), Format::kNpz);
  EXPECT_EQ(FromBytes("PK\x05\x06", "x"), Format::kNpz);
  EXPECT_EQ(FromBytes("~TenBin~", "x"), Format::kTenbin);
  EXPECT_EQ(FromBytes("GGUF\x03", "x.npy"), Format::kGguf);
  EXPECT_EQ(FromBytes(std::string("\x02\0\0\0\0\0\0\0{}", 10), "x"), Format::kSafetensors);
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
