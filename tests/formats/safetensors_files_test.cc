// Files on disk: the reference package's golden files (both directions), the
// named edge-case suite with the expected verdicts, and the writer half of
// the interop check with the reference package.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "formats/safetensors/internal.h"
#include "support/hex.h"
#include "support/temp_dir.h"
#include "tensorsafe/formats/safetensors.h"

namespace tensorsafe::safetensors {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using testing::Hex;
using testing::Unhex;

const fs::path kGoldenDir = fs::path(TS_SOURCE_DIR) / "tests/golden/safetensors";
const fs::path kCasesDir = fs::path(TS_SOURCE_DIR) / "tests/invalid/safetensors";

Json LoadJson(const fs::path& p) {
  std::ifstream in(p);
  return Json::parse(in);
}

// Metadata pairs [[k, v], ...] (or null) as the JSON text TensorSet holds.
std::string MetadataText(const Json& pairs) {
  if (pairs.is_null()) return "";
  Json obj = Json::object();
  for (const auto& kv : pairs) obj[kv[0].get<std::string>()] = kv[1];
  return obj.dump();
}

// The set an expected.json entry describes, built without our reader.
TensorSet SetFromDescription(const Json& desc, std::vector<std::shared_ptr<std::string>>& keep) {
  TensorSet set;
  set.metadata_json = MetadataText(desc["metadata"]);
  for (const auto& t : desc["tensors"]) {
    auto data = std::make_shared<std::string>(Unhex(t["data_hex"].get<std::string>()));
    keep.push_back(data);
    Tensor tensor;
    tensor.info.name = t["name"].get<std::string>();
    auto dtype = DTypeFromName(t["dtype"].get<std::string>());
    EXPECT_TRUE(dtype.has_value()) << t["dtype"];
    tensor.info.dtype = dtype.value_or(DType::kU8);
    tensor.info.shape = t["shape"].get<Shape>();
    tensor.data = {reinterpret_cast<const std::byte*>(data->data()), data->size()};
    tensor.owner = data;
    set.tensors.push_back(std::move(tensor));
  }
  return set;
}

TEST(SafetensorsFiles, ReferenceGoldenFilesDecodeExactly) {
  const Json expected = LoadJson(kGoldenDir / "expected.json");
  ASSERT_GE(expected["files"].size(), 14u);
  std::set<std::string> on_disk;
  for (const auto& e : fs::directory_iterator(kGoldenDir)) {
    if (e.path().extension() == ".safetensors") on_disk.insert(e.path().filename().string());
  }
  std::set<std::string> described;
  for (const auto& [fname, desc] : expected["files"].items()) {
    SCOPED_TRACE(fname);
    described.insert(fname);
    auto set = ReadFile((kGoldenDir / fname).string());
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    EXPECT_EQ(set->metadata_json, MetadataText(desc["metadata"]));
    std::map<std::string, const Tensor*> by_name;
    for (const Tensor& t : set->tensors) by_name[t.info.name] = &t;
    ASSERT_EQ(by_name.size(), desc["tensors"].size());
    for (const auto& t : desc["tensors"]) {
      const std::string name = t["name"].get<std::string>();
      ASSERT_TRUE(by_name.count(name)) << name;
      const Tensor& got = *by_name[name];
      EXPECT_EQ(DTypeToName(got.info.dtype), t["dtype"].get<std::string>()) << name;
      EXPECT_EQ(got.info.shape, t["shape"].get<Shape>()) << name;
      EXPECT_EQ(Hex(got.data), t["data_hex"].get<std::string>()) << name;
    }
  }
  EXPECT_EQ(on_disk, described);
}

TEST(SafetensorsFiles, EncodeMatchesTheReferenceWriterByteForByte) {
  const Json expected = LoadJson(kGoldenDir / "expected.json");
  for (const auto& [fname, desc] : expected["files"].items()) {
    SCOPED_TRACE(fname);
    std::vector<std::shared_ptr<std::string>> keep;
    const TensorSet set = SetFromDescription(desc, keep);
    auto ours = Encode(set);
    ASSERT_TRUE(ours.ok()) << ours.status().ToString();
    EXPECT_EQ(*ours, testing::ReadFileBytes((kGoldenDir / fname).string()));
  }
}

TEST(SafetensorsFiles, EdgeCaseSuite) {
  const Json cases = LoadJson(kCasesDir / "cases.json");
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(kCasesDir)) files += e.path().extension() == ".safetensors";
  ASSERT_GE(cases["cases"].size(), 80u);
  EXPECT_EQ(cases["cases"].size(), files);
  for (const auto& c : cases["cases"]) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    const std::string path = (kCasesDir / (name + ".safetensors")).string();
    auto bytes = std::make_shared<std::string>(testing::ReadFileBytes(path));
    auto set = Decode({reinterpret_cast<const std::byte*>(bytes->data()), bytes->size()}, bytes, "");
    const std::string code = c["code"].get<std::string>();
    if (code == "ok") {
      ASSERT_TRUE(set.ok()) << set.status().ToString();
      // Whatever we accept, we can write again and read back the same.
      auto again = Encode(*set);
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      auto owner = std::make_shared<std::string>(*again);
      auto reread = Decode({reinterpret_cast<const std::byte*>(owner->data()), owner->size()}, owner, "");
      ASSERT_TRUE(reread.ok());
      EXPECT_EQ(reread->tensors.size(), set->tensors.size());
      EXPECT_EQ(reread->metadata_json, set->metadata_json);
      continue;
    }
    ASSERT_FALSE(set.ok()) << "accepted; the crate says: " << c["crate"];
    EXPECT_EQ(StatusCodeName(set.status().code()), code) << set.status().ToString();
    EXPECT_NE(set.status().message().find(c["message"].get<std::string>()), std::string::npos)
        << set.status().message();
  }
}

TEST(SafetensorsFiles, EdgeCaseDetails) {
  auto read = [](const std::string& name) {
    auto r = ReadFile((kCasesDir / (name + ".safetensors")).string());
    EXPECT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    return r.ok() ? std::move(r).value() : TensorSet{};
  };
  EXPECT_EQ(read("ok_metadata_escaped_key").metadata_json, R"({"k":"v"})");
  EXPECT_EQ(read("ok_metadata_last").metadata_json, R"({"k":"v"})");
  TensorSet shared = read("ok_zero_size_shared");
  ASSERT_EQ(shared.tensors.size(), 3u);
  // Ties in (begin, end) keep header order.
  EXPECT_EQ(shared.tensors[0].info.name, "a");
  EXPECT_EQ(shared.tensors[1].info.name, "b");
  EXPECT_EQ(shared.tensors[2].info.name, "c");
  TensorSet any = read("ok_any_key_order");
  ASSERT_EQ(any.tensors.size(), 2u);
  EXPECT_EQ(any.tensors[0].info.name, "a");
  EXPECT_EQ(read("ok_scalar").tensors.at(0).info.shape, Shape{});
  // The error of a file read from disk names the file.
  auto bad = ReadFile((kCasesDir / "gap.safetensors").string());
  EXPECT_EQ(bad.status().message().rfind((kCasesDir / "gap.safetensors").string() + ": tensor \"b\"", 0), 0u)
      << bad.status().message();
}

// With TS_SAFETENSORS_INTEROP_DIR set, writes files with our writer and an
// expected.json for tests/interop/safetensors_interop.py, which checks them
// with the reference package (the CTest test safetensors_interop runs both).
TEST(SafetensorsInterop, WriteFilesForTheReferencePackage) {
  const char* dir = std::getenv("TS_SAFETENSORS_INTEROP_DIR");
  if (dir == nullptr) GTEST_SKIP() << "TS_SAFETENSORS_INTEROP_DIR is not set";
  const char* seed_env = std::getenv("TS_SAFETENSORS_INTEROP_SEED");
  const std::uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : std::random_device{}();
  std::printf("SafetensorsInterop seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  auto uniform = [&](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  const std::vector<std::string> names = {"w", "", "q\"b\\s", "tab\t", "c\x01", "\xc3\xbcn", "a.b/c", "B", "a"};
  Json manifest = {
      {"generator", "SafetensorsInterop.WriteFilesForTheReferencePackage"}, {"seed", seed}, {"files", Json::object()}};
  std::vector<std::shared_ptr<std::string>> keep;
  for (int f = 0; f < 24; ++f) {
    TensorSet set;
    Json desc = {{"metadata", nullptr}, {"tensors", Json::array()}};
    // One key at most, so the reference writer's HashMap order is fixed.
    if (f % 3 == 0) desc["metadata"] = Json::array({Json::array({"k\"" + std::to_string(f), "v\n\xc3\xbc"})});
    set.metadata_json = MetadataText(desc["metadata"]);
    std::set<std::string> used;
    for (std::size_t i = uniform(f == 0 ? 0 : 1, 6); i > 0; --i) {
      const std::string name = names[uniform(0, names.size() - 1)];
      if (!used.insert(name).second) continue;
      // File f < 22 holds dtype f for sure; the rest are random.
      const int rank = static_cast<int>(used.size() == 1 && f < 22 ? f : uniform(0, 21));
      const internal::StDType& st = internal::StDTypeAt(rank);
      Shape shape(uniform(st.bits % 8 ? 1 : 0, 3));
      for (auto& d : shape) d = uniform(0, 3);
      if (!shape.empty() && st.bits % 8) shape.back() *= (st.bits == 4 ? 2 : 4);
      std::uint64_t elems = 1;
      for (auto d : shape) elems *= d;
      auto data = std::make_shared<std::string>(elems * st.bits / 8, '\0');
      for (char& c : *data) c = static_cast<char>(uniform(0, 255));
      keep.push_back(data);
      Tensor t;
      t.info.name = name;
      t.info.dtype = st.dtype;
      t.info.shape = shape;
      t.data = {reinterpret_cast<const std::byte*>(data->data()), data->size()};
      t.owner = data;
      set.tensors.push_back(t);
      desc["tensors"].push_back({{"name", name}, {"dtype", st.name}, {"shape", shape}, {"data_hex", Hex(t.data)}});
    }
    const std::string fname = "ours_" + std::to_string(f) + ".safetensors";
    ASSERT_TRUE(WriteFile((fs::path(dir) / fname).string(), set).ok());
    manifest["files"][fname] = desc;
  }
  std::ofstream(fs::path(dir) / "expected.json") << manifest.dump(1) << "\n";
}

}  // namespace
}  // namespace tensorsafe::safetensors
