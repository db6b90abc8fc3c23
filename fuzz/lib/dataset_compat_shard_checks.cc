// CheckMdsShard (dataset_compat_shard_checks.h): a MosaicML MDS index entry
// and shard together.

#include <cstring>
#include <string>

#include "dataset/sources/mds/internal.h"
#include "dataset_checks.h"
#include "dataset_compat_shard_checks.h"
#include "fuzz_util.h"
#include "mem_env.h"
#include "tensorsafe/dataset/mds.h"

namespace tensorsafe::fuzz {
namespace {

mds::Limits SmallLimits() {
  mds::Limits l;
  l.max_index_bytes = 1 << 20;
  l.max_shards = 4096;
  l.max_columns = 256;
  l.max_name_bytes = 1024;
  l.max_shard_bytes = 16 << 20;
  l.max_rank = 16;
  return l;
}

void OpenAndRead(const std::string& path, const mds::ShardEntry& info, const std::string& what) {
  auto src = mds::OpenShardFile(path, info, SmallLimits());
  if (!src.ok()) {
    const StatusCode c = src.status().code();
    TS_FUZZ_CHECK(c == StatusCode::kCorruption || c == StatusCode::kUnsupported || c == StatusCode::kLimitExceeded ||
                      c == StatusCode::kIOError,
                  what + ": unexpected error " + Describe(src.status()));
    return;
  }
  TS_FUZZ_CHECK((*src)->num_samples() == info.samples, what + ": " + std::to_string((*src)->num_samples()) +
                                                           " samples, the index says " + std::to_string(info.samples));
  TS_FUZZ_CHECK((*src)->schema().fields.size() == info.columns.size(), what + ": one field per column");
  const auto first = CheckSourceSamples(**src, what);
  // Reads are pure: a second pass gives the same views and errors.
  TS_FUZZ_CHECK(CheckSourceSamples(**src, what) == first, what + ": a second read differs");
}

// Decodes `zip` as the index's codec says. OK only with exactly the index's
// raw size; otherwise kCorruption, never more output than the index's raw
// size; the same twice. What decodes opens and reads as a raw shard.
void DecodeAndRead(std::span<const std::byte> zip, const mds::ShardEntry& info) {
  auto codec = mds::internal::ParseCompression(info.compression);
  TS_FUZZ_CHECK(codec.ok(), "the index accepted compression \"" + info.compression + "\" that does not parse");
  std::string raw[2];
  Status st[2];
  for (int pass = 0; pass < 2; ++pass) {
    MemWritableFile out(&raw[pass], /*seekable=*/true);
    st[pass] = mds::internal::DecodeShard(*codec, zip, info.raw.bytes, "fuzz/zip", out);
    TS_FUZZ_CHECK(raw[pass].size() <= info.raw.bytes, "decoded " + std::to_string(raw[pass].size()) +
                                                          " bytes, past the index's " + std::to_string(info.raw.bytes));
    if (st[pass].ok()) {
      TS_FUZZ_CHECK(raw[pass].size() == info.raw.bytes, "decoded OK to other than the index's raw size");
    } else {
      TS_FUZZ_CHECK(st[pass].code() == StatusCode::kCorruption, "unexpected decode error " + Describe(st[pass]));
      TS_FUZZ_CHECK(st[pass].message().starts_with("fuzz/zip: "),
                    "the message does not name the file: " + Describe(st[pass]));
    }
  }
  TS_FUZZ_CHECK(st[0].code() == st[1].code() && st[0].message() == st[1].message() && raw[0] == raw[1],
                "decoding twice differs");
  if (!st[0].ok()) return;
  const std::string& path = WriteScratch({reinterpret_cast<const std::byte*>(raw[0].data()), raw[0].size()});
  OpenAndRead(path, info, "mds shard (decompressed as " + info.compression + ")");
}

}  // namespace

void CheckMdsShard(std::span<const std::byte> data) {
  // [u16 LE n][n bytes of index.json][the bytes of shard 0]
  if (data.size() < 2) return;
  const std::size_t n = static_cast<std::size_t>(data[0]) | static_cast<std::size_t>(data[1]) << 8;
  if (data.size() - 2 < n) return;
  auto index = mds::ParseIndex(data.subspan(2, n), "fuzz/index.json", SmallLimits());
  if (!index.ok() || index->shards.empty()) return;
  const std::span<const std::byte> shard = data.subspan(2 + n);
  mds::ShardEntry info = index->shards[0];
  // A compressed shard 0: the bytes as its compressed file, then (below) as
  // its raw shard too, as before.
  if (info.compressed) DecodeAndRead(shard, info);
  const std::string& path = WriteScratch(shard);
  OpenAndRead(path, info, "mds shard");
  // The size and sample count taken from the bytes, so mutated shards get
  // past those two checks to the offsets and the columns.
  info.raw.bytes = shard.size();
  if (shard.size() >= 4) {
    std::uint32_t count;
    std::memcpy(&count, shard.data(), 4);
    info.samples = count;
  }
  OpenAndRead(path, info, "mds shard (size and count from the bytes)");
}

}  // namespace tensorsafe::fuzz
