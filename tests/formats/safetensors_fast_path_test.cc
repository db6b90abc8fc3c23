// The fast paths of the safetensors header reader and of the sharded index
// reader against their general readers: on every file of the golden and
// edge-case suites, on hand-picked near misses and on thousands of mutated
// texts, the two give the same result or the same error, word for word.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "formats/safetensors/internal.h"
#include "formats/safetensors/sharded_internal.h"
#include "support/seed.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/sharded.h"

namespace tensorsafe::safetensors {
namespace {

namespace fs = std::filesystem;

// 8-byte length, header, then `data` bytes of zeros.
std::string StFile(const std::string& header, std::uint64_t data) {
  std::string f(8, '\0');
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return f + header + std::string(data, '\0');
}

std::string Describe(const Result<Header>& r) {
  if (!r.ok()) return "error " + std::to_string(static_cast<int>(r.status().code())) + ": " + r.status().message();
  std::string s = "ok n=" + std::to_string(r->header_length) + " start=" + std::to_string(r->data_start) +
                  " len=" + std::to_string(r->data_length) + " meta=" + r->metadata_json + "\n";
  for (const TensorInfo& t : r->tensors) {
    s += t.name + " " + std::to_string(static_cast<int>(t.dtype)) + " " + ShapeToString(t.shape) + " @" +
         std::to_string(t.data_offset) + "+" + std::to_string(t.data_length) + "\n";
  }
  return s;
}

// Both readers on `file`; true when the fast path took it.
bool ExpectSameHeader(const std::string& file, const ReadOptions& opt = {}) {
  const auto bytes = std::as_bytes(std::span<const char>(file.data(), file.size()));
  const Result<Header> general = internal::ParseHeaderWith(bytes, bytes.size(), opt, /*fast_path=*/false);
  const Result<Header> fast = internal::ParseHeaderWith(bytes, bytes.size(), opt, /*fast_path=*/true);
  EXPECT_EQ(Describe(fast), Describe(general)) << "header: " << file.substr(8, 300);
  if (file.size() < 8) return false;
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(file[i]);
  internal::HeaderEntries entries;
  return n <= file.size() - 8 && internal::ScanCommonHeader(std::string_view(file).substr(8, n), entries);
}

const std::string kCommonHeader =
    "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"h\xC3\xA9llo\"},"
    R"("model.layers.10.self_attn.q_proj.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
    R"("a":{"dtype":"BF16","shape":[],"data_offsets":[24,26]},"z":{"dtype":"U8","shape":[0],"data_offsets":[26,26]}})";

TEST(SafetensorsFastPath, TakesWhatWritersWrite) {
  // serde_json's form, with spaces (Python writers), rank 9, non-ASCII names.
  const std::string plain =
      R"({"__metadata__":{"format":"pt"},"w\u00e9":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}})";
  EXPECT_FALSE(ExpectSameHeader(StFile(plain, 8)));  // an escape: the general reader
  const std::string utf8 =
      "{\"__metadata__\":{\"format\":\"pt\"},\"w\xC3\xA9\":{\"dtype\":\"F32\",\"shape\":[1,2],"
      "\"data_offsets\":[0,8]}}";
  EXPECT_TRUE(ExpectSameHeader(StFile(utf8, 8)));
  EXPECT_TRUE(
      ExpectSameHeader(StFile(R"( { "a" : { "data_offsets" : [ 0 , 4 ] , "shape" : [ ] , "dtype" : "I32" } }   )", 4)));
  EXPECT_TRUE(ExpectSameHeader(StFile(R"({"r9":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,2],"data_offsets":[0,2]}})", 2)));
  EXPECT_TRUE(ExpectSameHeader(StFile("{}", 0)));
  EXPECT_TRUE(ExpectSameHeader(StFile("{\"__metadata__\":{}}", 0)));
}

TEST(SafetensorsFastPath, LeavesTheRestToTheGeneralReader) {
  // Near misses, each refused by the fast path or by the checks after it.
  const char* misses[] = {
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})",           // unknown field
      R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})",       // repeated field
      R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})",                     // unknown dtype
      R"({"a":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}})",                    // leading zero
      R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})",                   // fraction
      R"({"a":{"dtype":"F32","shape":[1e0],"data_offsets":[0,4]}})",                   // exponent
      R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",                    // sign
      R"({"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,4]}})",  // 2^64
      R"({"a":{"dtype":"F32","shape":[10000000000000000000],"data_offsets":[0,4]}})",  // 20 digits, < 2^64
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})",
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",
      R"({"a":{"dtype":"F32","shape":[1]}})",
      R"({"__metadata__":null,"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      R"({"__metadata__":{"k":"1","k":"2"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      R"({"__metadata__":{},"__metadata__":{},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} x)",
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},})",
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      R"({"a\"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      "{\"a\tb\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
      R"({"a":["F32",[1],[0,4]]})",
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})",
  };
  for (const char* h : misses) ExpectSameHeader(StFile(h, 4));
  // Depth limits below the fast path's 3 are the general reader's to apply.
  ReadOptions shallow;
  shallow.max_json_depth = 2;
  const std::string f = StFile(kCommonHeader, 26);
  const auto bytes = std::as_bytes(std::span<const char>(f.data(), f.size()));
  const Result<Header> r = internal::ParseHeaderWith(bytes, bytes.size(), shallow, /*fast_path=*/true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kLimitExceeded) << r.status().ToString();
}

TEST(SafetensorsFastPath, SameOnEveryFileOfTheSuites) {
  int taken = 0, files = 0;
  for (const char* dir : {"tests/golden/safetensors", "tests/invalid/safetensors"}) {
    for (const auto& e : fs::directory_iterator(fs::path(TS_SOURCE_DIR) / dir)) {
      if (e.path().extension() != ".safetensors") continue;
      std::ifstream in(e.path(), std::ios::binary);
      const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      SCOPED_TRACE(e.path().string());
      taken += ExpectSameHeader(file) ? 1 : 0;
      ++files;
    }
  }
  EXPECT_GT(files, 80);
  EXPECT_GE(taken, 20);  // the golden files and the valid edge cases
  std::printf("%d of %d files took the fast path\n", taken, files);
}

// Random edits of `text` towards the characters JSON turns on.
std::string Mutate(std::string text, std::mt19937_64& rng) {
  static const std::string kChars = "\"\\{}[],: \t0123456789-.eE\x01\xC3\xA9zF";
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < edits && !text.empty(); ++i) {
    const std::size_t at = rng() % text.size();
    const char c = kChars[rng() % kChars.size()];
    switch (rng() % 3) {
      case 0: text[at] = c; break;
      case 1: text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c); break;
      default: text.erase(at, 1 + rng() % 4); break;
    }
  }
  return text;
}

TEST(SafetensorsFastPath, SameOnMutatedHeaders) {
  std::mt19937_64 rng(testing::TestSeed());
  int taken = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string h = Mutate(kCommonHeader, rng);
    // Data of the original size, and sometimes of what a digit edit made.
    taken += ExpectSameHeader(StFile(h, 26 + (rng() % 4 == 0 ? rng() % 64 : 0))) ? 1 : 0;
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(taken, 500);  // the fast path did take part (about 5% of edits keep a header valid)
  std::printf("%d of 20000 took the fast path\n", taken);
}

// --- the sharded index --------------------------------------------------------

std::string DescribeIndex(const Result<sharded::Index>& r) {
  if (!r.ok()) return "error " + std::to_string(static_cast<int>(r.status().code())) + ": " + r.status().message();
  std::string s = "ok format=" + std::to_string(static_cast<int>(r->format)) + " meta=" + r->metadata_json +
                  " sorted=" + std::to_string(r->names_sorted) + "\n";
  for (const std::string& sh : r->shards) s += "shard " + sh + "\n";
  for (const auto& [name, shard] : r->weight_map) s += std::string(name) + " -> " + std::to_string(shard) + "\n";
  return s;
}

bool ExpectSameIndex(const std::string& text, const sharded::ReadOptions& opt = {}) {
  const auto general = sharded::internal::ParseIndexWith(text, "/m/model.safetensors.index.json", opt, false);
  const auto fast = sharded::internal::ParseIndexWith(text, "/m/model.safetensors.index.json", opt, true);
  EXPECT_EQ(DescribeIndex(fast), DescribeIndex(general)) << "index: " << text.substr(0, 300);
  std::string metadata;
  return sharded::internal::ScanCommonIndex(text, metadata, [](std::string_view, std::string_view) { return true; });
}

// As huggingface_hub writes it (json.dumps, indent=2, sort_keys=True).
const std::string kHubIndex = R"({
  "metadata": {
    "note": "caf\u00e9",
    "total_size": 1234
  },
  "weight_map": {
    "a.weight": "model-00001-of-00002.safetensors",
    "b.weight": "model-00002-of-00002.safetensors",
    "c.weight": "model-00001-of-00002.safetensors"
  }
})";

TEST(ShardedIndexFastPath, TakesWhatTheHubWrites) {
  EXPECT_FALSE(ExpectSameIndex(kHubIndex));  // the \u escape: the general reader
  std::string utf8 = kHubIndex;
  utf8.replace(utf8.find("\\u00e9"), 6, "\xC3\xA9");
  EXPECT_TRUE(ExpectSameIndex(utf8));
  EXPECT_TRUE(ExpectSameIndex(R"({"weight_map":{}})"));
  EXPECT_TRUE(sharded::ParseIndex(utf8, "i")->names_sorted);
  const auto unsorted = sharded::ParseIndex(R"({"weight_map":{"b":"m.safetensors","a":"m.safetensors"}})", "i");
  ASSERT_TRUE(unsorted.ok()) << unsorted.status().ToString();
  EXPECT_FALSE(unsorted->names_sorted);
  EXPECT_TRUE(ExpectSameIndex(R"({"weight_map":{"x":"m.safetensors"},"metadata":{}})"));
  EXPECT_TRUE(ExpectSameIndex(R"({"metadata":{"total_size":0,"total_parameters":18446744073709551},)"
                              R"("weight_map":{"x":"sub/m.tsafe"}})"));
}

TEST(ShardedIndexFastPath, LeavesTheRestToTheGeneralReader) {
  // Near misses, each refused by the fast path or by the checks after it.
  const char* misses[] = {
      R"({"weight_map":{"x":"m.safetensors"},"other":1})",
      R"({"weight_map":{"x":"m.safetensors"},"weight_map":{}})",
      R"({"metadata":null,"weight_map":{"x":"m.safetensors"}})",
      R"({"metadata":{"total_size":1.5},"weight_map":{"x":"m.safetensors"}})",
      R"({"metadata":{"total_size":-1},"weight_map":{"x":"m.safetensors"}})",
      R"({"metadata":{"total_size":12345678901234567890},"weight_map":{"x":"m.safetensors"}})",
      R"({"metadata":{"nested":{"a":1}},"weight_map":{"x":"m.safetensors"}})",
      R"({"metadata":{"t":true},"weight_map":{"x":"m.safetensors"}})",
      R"({"weight_map":{"x":1}})",
      R"({"weight_map":{"x":"m.safetensors","x":"m.safetensors"}})",
      R"({"weight_map":{"x":"../m.safetensors"}})",
      R"({"weight_map":{"x":"m.bin"}})",
      R"({"weight_map":{"x":"m.safetensors"}} [])",
      R"({"weight_map":{"x\n":"m.safetensors"}})",
      R"({"metadata":{}})",
      R"([])",
  };
  for (const char* t : misses) ExpectSameIndex(t);
}

TEST(ShardedIndexFastPath, SameOnMutatedIndexes) {
  std::mt19937_64 rng(testing::TestSeed());
  std::string utf8 = kHubIndex;
  utf8.replace(utf8.find("\\u00e9"), 6, "\xC3\xA9");
  int taken = 0;
  for (int i = 0; i < 20000; ++i) {
    taken += ExpectSameIndex(Mutate(utf8, rng)) ? 1 : 0;
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(taken, 1000);
  std::printf("%d of 20000 took the fast path\n", taken);
}

// An index of `n` tensors over 7 shards, as the hub writes it, past the
// 1 MiB from which the scan is split at a newline on two threads.
// `between` goes between a name's colon and its shard.
std::string LargeIndex(int n, const std::string& between = " ") {
  std::string s = "{\n  \"metadata\": {\n    \"total_size\": 99\n  },\n  \"weight_map\": {\n";
  for (int i = 0; i < n; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model.layers.%06d.self_attn.q_proj.weight", i);
    s += std::string("    \"") + name + "\":" + between + "\"model-0000" + std::to_string(1 + i % 7) +
         "-of-00007.safetensors\"" + (i + 1 < n ? ",\n" : "\n");
  }
  return s + "  }\n}\n";
}

TEST(ShardedIndexFastPath, SplitsALargeIndexAtANewline) {
  const std::string text = LargeIndex(20000);
  ASSERT_GT(text.size(), std::size_t{1} << 20);
  EXPECT_TRUE(ExpectSameIndex(text));
  // An entry over two lines: the cut may fall inside one, and the scan
  // then goes on alone past it.
  EXPECT_TRUE(ExpectSameIndex(LargeIndex(16000, "\n      ")));
  // The weight map first, then metadata one key a line: the cut falls in
  // the metadata.
  std::string late = R"({"weight_map": {"a": "m.safetensors"}, "metadata": {)";
  for (int i = 0; i < 40000; ++i) late += "\n  \"key" + std::to_string(i) + "\": \"value\"" + (i < 39999 ? "," : "");
  late += "}}";
  EXPECT_TRUE(ExpectSameIndex(late));
}

TEST(ShardedIndexFastPath, SplitScanFindsWhatTheGeneralReaderFinds) {
  const std::string text = LargeIndex(20000);
  const std::size_t cut = text.find('\n', text.size() * 2 / 5);
  // Damage after the cut: a number for a shard, invalid UTF-8, a second
  // map closed early, a tensor listed in both parts.
  std::string number = text, utf8 = text, closed = text, twice = text;
  const std::size_t shard = text.find("\"model-", cut + 200);
  number.replace(shard, text.find('"', shard + 1) + 1 - shard, "7");
  utf8[text.find("proj", cut + 5000)] = '\xFF';
  closed.replace(text.find(",\n", cut + 300), 2, "},\n");
  const std::size_t first = text.find("\"model.layers.000001");
  const std::size_t late = text.find("\"model.layers.", cut + 100);
  twice.replace(late, 21, text.substr(first, 21));
  for (const std::string* t : {&number, &utf8, &closed}) EXPECT_FALSE(ExpectSameIndex(*t));
  EXPECT_TRUE(ExpectSameIndex(twice));  // the scan takes it; the check after it refuses it
  const auto refused = sharded::ParseIndex(twice, "i");
  EXPECT_EQ(refused.status().code(), StatusCode::kCorruption);
  EXPECT_NE(refused.status().message().find("model.layers.000001"), std::string::npos) << refused.status().message();
  // Edits near the cut, where the two parts meet.
  std::mt19937_64 rng(testing::TestSeed());
  int taken = 0;
  for (int i = 0; i < 150; ++i) {
    std::string t = text;
    const int edits = 1 + static_cast<int>(rng() % 2);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = cut - 100 + rng() % 200;
      switch (rng() % 3) {
        case 0: t[at] = "\"\\{}[],: \n\t0\xC3zF"[rng() % 15]; break;
        case 1: t.insert(t.begin() + static_cast<std::ptrdiff_t>(at), "\n\",:}"[rng() % 5]); break;
        default: t.erase(at, 1 + rng() % 4); break;
      }
    }
    taken += ExpectSameIndex(t) ? 1 : 0;
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(taken, 5);
  std::printf("%d of 150 took the fast path\n", taken);
}

}  // namespace
}  // namespace tensorsafe::safetensors
