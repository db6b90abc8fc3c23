#include "support/mds_files.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "dataset/internal.h"
#include "support/temp_dir.h"
#include "util/endian.h"

namespace tensorsafe::testing {
namespace {

void Put32(std::string& out, std::uint32_t v) {
  std::byte b[4];
  internal::Store32(b, v);
  out.append(reinterpret_cast<const char*>(b), 4);
}

std::string Xxh64Hex(const std::string& bytes) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(XXH64(bytes.data(), bytes.size(), 0)));
  return buf;
}

}  // namespace

void WriteZstdMds(const std::string& dir, std::int64_t first_x, const std::string& text, bool with_hashes,
                  std::uint32_t samples) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const nlohmann::json names = {"s", "x"}, encodings = {"str", "int64"}, sizes = {nullptr, 8};
  const std::string config =
      nlohmann::json{{"column_encodings", encodings}, {"column_names", names}, {"column_sizes", sizes},
                     {"compression", "zstd"},         {"format", "mds"},       {"version", 2}}
          .dump();
  std::string body;
  std::vector<std::uint32_t> offsets;
  const std::uint32_t start = 4 + 4 * (samples + 1) + static_cast<std::uint32_t>(config.size());
  for (std::uint32_t i = 0; i < samples; ++i) {
    offsets.push_back(start + static_cast<std::uint32_t>(body.size()));
    Put32(body, static_cast<std::uint32_t>(text.size()));  // sizes of the variable columns first
    body += text;
    std::byte x[8];
    internal::Store64(x, static_cast<std::uint64_t>(first_x + i));
    body.append(reinterpret_cast<const char*>(x), 8);
  }
  offsets.push_back(start + static_cast<std::uint32_t>(body.size()));
  std::string raw;
  Put32(raw, samples);
  for (std::uint32_t o : offsets) Put32(raw, o);
  raw += config + body;

  const std::string raw_path = dir + "/shard.00000.mds", zip_path = raw_path + ".zstd";
  WriteFileBytes(raw_path, raw);
  auto z = dataset::internal::ZstdCompressFile(raw_path, zip_path, 3, /*sync=*/false);
  ASSERT_TRUE(z.ok()) << z.status().ToString();
  fs::remove(raw_path);  // MDSWriter keeps only the zip
  const std::string zip = ReadFileBytes(zip_path);

  auto file_ref = [&](const std::string& basename, const std::string& bytes) {
    nlohmann::json hashes = nlohmann::json::object();
    if (with_hashes) hashes["xxh64"] = Xxh64Hex(bytes);
    return nlohmann::json{{"basename", basename}, {"bytes", bytes.size()}, {"hashes", hashes}};
  };
  nlohmann::json shard = {{"column_encodings", encodings},
                          {"column_names", names},
                          {"column_sizes", sizes},
                          {"compression", "zstd"},
                          {"format", "mds"},
                          {"hashes", with_hashes ? nlohmann::json{"xxh64"} : nlohmann::json::array()},
                          {"raw_data", file_ref("shard.00000.mds", raw)},
                          {"samples", samples},
                          {"size_limit", 1 << 26},
                          {"version", 2},
                          {"zip_data", file_ref("shard.00000.mds.zstd", zip)}};
  WriteFileBytes(dir + "/index.json", nlohmann::json{{"version", 2}, {"shards", {shard}}}.dump());
}

}  // namespace tensorsafe::testing
