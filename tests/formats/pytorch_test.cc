// The PyTorch checkpoint reader: torch 2.13.0's files (tests/golden/pytorch/,
// made by make_golden.py) read as torch.load(weights_only=True) reads them,
// the conversion safetensors' convert.py makes, and the names a checkpoint's
// containers flatten to. pytorch_hostile_test.cc has the refusals of
// docs/formats/pytorch.md "Reader checks" with code and message: malicious
// pickles, damaged archives and streams, limits.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "formats/pytorch_test_util.h"
#include "support/status_matchers.h"
#include "support/temp_dir.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/env.h"
#include "tensorsafe/formats/detect.h"
#include "tensorsafe/formats/pytorch.h"

namespace tensorsafe {
namespace {

using namespace pytorch_test;  // NOLINT: the helpers of pytorch_test_util.h
// Beside gguf_random_test.cc's Hex(v, digits) of this namespace in the unity build.
using pytorch_test::Hex;
using Json = nlohmann::ordered_json;

// --- golden files ----------------------------------------------------------------
void ExpectMatches(const TensorSet& set, const Json& want, const std::string& file) {
  SCOPED_TRACE(file);
  ASSERT_EQ(set.tensors.size(), want["tensors"].size());
  for (std::size_t i = 0; i < set.tensors.size(); ++i) {
    const Tensor& t = set.tensors[i];
    const Json& w = want["tensors"][i];
    SCOPED_TRACE(w["name"].get<std::string>());
    EXPECT_EQ(t.info.name, w["name"].get<std::string>());
    EXPECT_EQ(DTypeName(t.info.dtype), w["dtype"].get<std::string>());
    EXPECT_EQ(t.info.shape, w["shape"].get<Shape>());
    EXPECT_EQ(Hex(t.data), w["hex"].get<std::string>());
    EXPECT_EQ(t.info.data_length, t.data.size());
  }
  if (want["metadata"].is_null()) {
    EXPECT_EQ(set.metadata_json, "");
  } else {
    const Json got = Json::parse(set.metadata_json);
    EXPECT_EQ(got, want["metadata"]);  // ordered: file order too
  }
}

Json Expected() { return Json::parse(testing::ReadFileBytes(kPytorchGolden + "expected.json")); }

TEST(PytorchGolden, ReadsWhatTorchLoadReads) {
  const Json expected = Expected();
  ASSERT_EQ(expected.size(), 10u);
  for (const auto& [file, want] : expected.items()) {
    auto set = pytorch::ReadFile(kPytorchGolden + file);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    ExpectMatches(*set, want, file);
    // With every CRC checked, and through the format-neutral path.
    pytorch::ReadOptions crc;
    crc.verify_crc = true;
    auto checked = pytorch::ReadFile(kPytorchGolden + file, crc);
    ASSERT_TRUE(checked.ok()) << checked.status().ToString();
    auto any = ReadTensorSet(kPytorchGolden + file);
    ASSERT_TRUE(any.ok()) << any.status().ToString();
    ExpectMatches(*any, want, file);
  }
}

TEST(PytorchGolden, DetectedAsPytorchWhateverTheName) {
  testing::TempDir dir;
  for (const char* file : {"all_dtypes.pt", "all_dtypes_legacy.pt", "protocol4.pt", "tied.bin", "big_endian.pt"}) {
    SCOPED_TRACE(file);
    auto f = DetectFormat(kPytorchGolden + file);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(*f, Format::kPytorch);
    // By content: the same bytes under a name that says nothing.
    testing::WriteFileBytes(dir.File("blob"), testing::ReadFileBytes(kPytorchGolden + file));
    EXPECT_EQ(*DetectFormat(dir.File("blob")), Format::kPytorch);
  }
  EXPECT_EQ(FormatName(Format::kPytorch), "pytorch");
  EXPECT_EQ(*ParseFormat("pytorch"), Format::kPytorch);
}

TEST(PytorchGolden, ContiguousAlignedStoragesAreZeroCopy) {
  const std::string bytes = testing::ReadFileBytes(kPytorchGolden + "views.pt");
  auto img = std::make_shared<Image>(bytes);
  auto set = pytorch::Decode(img->bytes(), img, "views.pt");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  std::map<std::string, const Tensor*> by;
  for (const Tensor& t : set->tensors) by[t.info.name] = &t;
  for (const char* n : {"base", "row", "same", "scalar", "param", "half_view"}) {
    SCOPED_TRACE(n);
    EXPECT_TRUE(img->Holds(by[n]->data));
    EXPECT_EQ(by[n]->data.data(), img->bytes().data() + by[n]->info.data_offset);
  }
  // Views of one storage share its bytes.
  EXPECT_EQ(by["base"]->data.data(), by["same"]->data.data());
  EXPECT_EQ(by["row"]->data.data(), by["base"]->data.data() + 6 * 4);
  for (const char* n : {"col", "t", "step", "expanded"}) {
    SCOPED_TRACE(n);
    EXPECT_FALSE(img->Holds(by[n]->data));   // materialised
    EXPECT_EQ(by[n]->info.data_offset, 0u);  // its bytes are nowhere in the file
  }
}

TEST(PytorchGolden, LegacyStoragesAtOddOffsetsAreCopied) {
  auto set = pytorch::ReadFile(kPytorchGolden + "views_legacy.pt");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  for (const Tensor& t : set->tensors) {
    const std::size_t align = std::min<std::size_t>(GetDTypeInfo(t.info.dtype).block_bytes, 8);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data.data()) % align, 0u) << t.info.name;
  }
}

// safetensors' convert.py on tied.bin: model.embed.weight and
// model.first_row share lm_head.weight's storage and are dropped, recorded
// in the metadata; the transposed proj is written contiguous. tied.safetensors is
// what that script wrote (make_golden.py); its __metadata__ order is a Rust
// HashMap's, so the header is compared parsed, and ours keeps convert.py's
// dict order.
TEST(PytorchConvert, SafetensorsAsConvertPyWritesIt) {
  testing::TempDir dir;
  auto stats = Convert(kPytorchGolden + "tied.bin", dir.File("model.safetensors"));
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->from, Format::kPytorch);
  EXPECT_EQ(stats->tensor_count, 3u);
  const std::string got = testing::ReadFileBytes(dir.File("model.safetensors"));
  const std::string want = testing::ReadFileBytes(kPytorchGolden + "tied.safetensors");
  ASSERT_EQ(got.size(), want.size());
  std::uint64_t n = 0;
  std::memcpy(&n, want.data(), 8);
  EXPECT_EQ(got.substr(0, 8), want.substr(0, 8));
  EXPECT_EQ(got.substr(8 + n), want.substr(8 + n));  // the data section
  const nlohmann::json gh = nlohmann::json::parse(got.substr(8, n)), wh = nlohmann::json::parse(want.substr(8, n));
  EXPECT_EQ(gh, wh);
  const Json ordered = Json::parse(got.substr(8, n));
  std::vector<std::string> keys;
  for (const auto& [k, v] : ordered["__metadata__"].items()) keys.push_back(k);
  // The smallest complete name is kept: "lm_head.weight" < "model...".
  EXPECT_EQ(keys, (std::vector<std::string>{"format", "model.embed.weight", "model.first_row"}));
  EXPECT_EQ(ordered["__metadata__"]["model.embed.weight"], "lm_head.weight");
  EXPECT_EQ(ordered["__metadata__"]["model.first_row"], "lm_head.weight");
  // Other targets keep every tensor.
  auto all = Convert(kPytorchGolden + "tied.bin", dir.File("model.tsafe"));
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->tensor_count, 5u);
}

// convert.py's discard_names (Hugging Face passes the model's
// _tied_weights_keys): the other complete name is kept.
TEST(PytorchConvert, DiscardNamesChooseTheNameKept) {
  testing::TempDir dir;
  ConvertOptions o;
  o.discard_names = {"lm_head.weight"};
  ASSERT_TRUE(Convert(kPytorchGolden + "tied.bin", dir.File("m.safetensors"), o).ok());
  const std::string got = testing::ReadFileBytes(dir.File("m.safetensors"));
  std::uint64_t n = 0;
  std::memcpy(&n, got.data(), 8);
  const Json h = Json::parse(got.substr(8, n));
  EXPECT_EQ(h["__metadata__"], Json::parse(R"({"format":"pt","lm_head.weight":"model.embed.weight",)"
                                           R"("model.first_row":"model.embed.weight"})"));
  EXPECT_TRUE(h.contains("model.embed.weight"));
  EXPECT_FALSE(h.contains("lm_head.weight"));
  // Discarding every complete name keeps the smallest, as convert.py does.
  o.discard_names = {"lm_head.weight", "model.embed.weight"};
  ASSERT_TRUE(Convert(kPytorchGolden + "tied.bin", dir.File("m2.safetensors"), o).ok());
  const std::string got2 = testing::ReadFileBytes(dir.File("m2.safetensors"));
  std::memcpy(&n, got2.data(), 8);
  EXPECT_EQ(Json::parse(got2.substr(8, n))["__metadata__"],
            Json::parse(R"({"format":"pt","model.embed.weight":"lm_head.weight","model.first_row":"lm_head.weight"})"));
  o.discard_names = {"x"};
  EXPECT_STATUS(Convert(kPytorchGolden + "tied.bin", dir.File("m.tsafe"), o), StatusCode::kInvalidArgument,
                "discard names apply to a PyTorch checkpoint converted to safetensors only");
}

TEST(PytorchConvert, WritingCheckpointsIsRefused) {
  testing::TempDir dir;
  EXPECT_STATUS(Convert(kPytorchGolden + "views.pt", dir.File("out.pt")), StatusCode::kInvalidArgument,
                "out.pt: the extension names pytorch, which tensorsafe reads but does not write");
  EXPECT_FALSE(std::filesystem::exists(dir.File("out.pt")));
  ConvertOptions o;
  o.to = Format::kPytorch;
  EXPECT_STATUS(Convert(kPytorchGolden + "views.pt", dir.File("out.safetensors"), o), StatusCode::kUnsupported,
                "does not write PyTorch checkpoints");
}

TEST(PytorchConvert, SharedViewsNoneCoveringTheStorageAreRefusedAsConvertPyDoes) {
  // a = s[0:2], b = s[1:3]: overlapping, neither covers all 4 elements.
  const std::string pkl = Proto2("}(" + U("a") + TensorV2(Pid("FloatStorage", "0", 4), 0, {2}, {1}) + U("b") +
                                 TensorV2(Pid("FloatStorage", "0", 4), 1, {2}, {1}) + "u");
  testing::TempDir dir;
  testing::WriteFileBytes(dir.File("x.pt"), Archive(pkl, {{"data/0", std::string(16, '\0')}}));
  EXPECT_STATUS(Convert(dir.File("x.pt"), dir.File("x.safetensors")), StatusCode::kUnsupported,
                "none covers all of it");
  // Read as they are, both are fine.
  EXPECT_TRUE(pytorch::ReadFile(dir.File("x.pt")).ok());
}

TEST(PytorchNames, DictKeysAndCollisions) {
  // {1: t, "1": t}: both spell "1".
  const std::string t = TensorV2(Pid("FloatStorage", "0", 2), 0, {2}, {1});
  EXPECT_STATUS(DecodePytorch(Archive(Proto2("}(" + I(1) + t + U("1") + t + "u"))), StatusCode::kUnsupported,
                "two entries flatten to the name \"1\"");
  EXPECT_STATUS(DecodePytorch(Archive(Proto2("}(" + std::string("G") + Le64(0) + t + "u"))), StatusCode::kUnsupported,
                "a dict key that is a float cannot name an entry");
  // A repeated key replaces its value in place, as a Python dict does.
  auto r = DecodePytorch(Archive(Proto2("}(" + U("a") + U("x") + U("b") + t + U("a") + I(5) + "u")));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->metadata_json, "{\"a\":5}");
  // Nested containers: list positions and dict keys joined by dots; True,
  // None and ints spelt as Python's str().
  r = DecodePytorch(Archive(Proto2("}(" + U("l") + "](" + I(0) + "}(\x88" + t + "N" + I(7) + "ueu")));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->tensors.size(), 1u);
  EXPECT_EQ(r->tensors[0].info.name, "l.1.True");
  EXPECT_EQ(r->metadata_json, "{\"l.0\":0,\"l.1.None\":7}");
}

}  // namespace
}  // namespace tensorsafe
