// CheckDatasetIndex and CheckDatasetShard (dataset_checks.h): index.json and
// the columnar .tsafe shards of docs/DATASET.md.

#include <cstdlib>
#include <memory>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "dataset_checks.h"
#include "dataset_ds_checks.h"
#include "fuzz_util.h"
#include "tensorsafe/dataset/index.h"
#include "tensorsafe/dataset/shard.h"

namespace tensorsafe::fuzz {
namespace {

using dataset::DatasetIndex;

// Small limits: a hostile index must not make the check allocate much.
dataset::IndexLimits Limits() {
  dataset::IndexLimits l;
  l.max_index_bytes = 1 << 20;
  l.max_shards = 4096;
  l.max_fields = 256;
  l.max_rank = 16;
  l.max_json_depth = 16;
  return l;
}

bool IsHex16(const std::string& s) {
  if (s.size() != 16) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// A name inside the dataset directory (DATASET.md §3.2), checked again here.
bool SafeName(const std::string& n) {
  if (n.empty() || n.front() == '/' || n.find('\\') != std::string::npos || n.find('\0') != std::string::npos) {
    return false;
  }
  std::size_t start = 0;
  while (start <= n.size()) {
    std::size_t end = n.find('/', start);
    if (end == std::string::npos) end = n.size();
    const std::string seg = n.substr(start, end - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    start = end + 1;
  }
  return true;
}

void CheckIndexInvariants(const DatasetIndex& x, const std::string& what) {
  std::uint64_t total = 0;
  std::set<std::string> names;
  for (std::size_t s = 0; s < x.shards.size(); ++s) {
    const dataset::ShardInfo& sh = x.shards[s];
    const std::string label = what + ": shard " + std::to_string(s) + " \"" + sh.name + "\"";
    TS_FUZZ_CHECK(sh.samples > 0, label + ": 0 samples accepted");
    TS_FUZZ_CHECK(!__builtin_add_overflow(total, sh.samples, &total), label + ": sample total overflows");
    TS_FUZZ_CHECK(SafeName(sh.name), label + ": unsafe name accepted");
    TS_FUZZ_CHECK(IsHex16(sh.xxh3), label + ": xxh3 \"" + sh.xxh3 + "\" is not 16 hex digits");
    TS_FUZZ_CHECK(names.insert(sh.name).second, label + ": name listed twice");
    if (sh.zstd) {
      TS_FUZZ_CHECK(SafeName(sh.zstd->name), label + ": unsafe zstd name \"" + sh.zstd->name + "\" accepted");
      TS_FUZZ_CHECK(IsHex16(sh.zstd->xxh3), label + ": zstd xxh3 \"" + sh.zstd->xxh3 + "\" is not 16 hex digits");
      TS_FUZZ_CHECK(names.insert(sh.zstd->name).second, label + ": zstd name listed twice");
    }
  }
  TS_FUZZ_CHECK(total == x.samples,
                what + ": samples " + std::to_string(x.samples) + " but shards hold " + std::to_string(total));
  if (!x.metadata_json.empty()) {
    auto m = nlohmann::json::parse(x.metadata_json, nullptr, false);
    TS_FUZZ_CHECK(!m.is_discarded() && m.is_object(), what + ": metadata is not a JSON object: " + x.metadata_json);
  }
}

// DatasetIndex has no operator==: field by field, schema by SameSchema.
bool SameIndex(const DatasetIndex& a, const DatasetIndex& b, std::string* why) {
  if (!dataset::SameSchema(a.schema, b.schema, why)) return false;
  if (a.samples != b.samples || a.shards.size() != b.shards.size()) {
    *why = "sample or shard counts differ";
    return false;
  }
  for (std::size_t s = 0; s < a.shards.size(); ++s) {
    const auto &x = a.shards[s], &y = b.shards[s];
    const bool zx = x.zstd.has_value(), zy = y.zstd.has_value();
    if (x.name != y.name || x.samples != y.samples || x.bytes != y.bytes || x.xxh3 != y.xxh3 || x.kind != y.kind ||
        zx != zy ||
        (zx && (x.zstd->name != y.zstd->name || x.zstd->bytes != y.zstd->bytes || x.zstd->xxh3 != y.zstd->xxh3))) {
      *why = "shard " + std::to_string(s) + " differs";
      return false;
    }
  }
  const auto ma = nlohmann::json::parse(a.metadata_json.empty() ? "null" : a.metadata_json, nullptr, false);
  const auto mb = nlohmann::json::parse(b.metadata_json.empty() ? "null" : b.metadata_json, nullptr, false);
  if (ma != mb) {
    *why = "metadata differs: " + a.metadata_json + " vs " + b.metadata_json;
    return false;
  }
  return true;
}

}  // namespace

void CheckDatasetIndex(std::span<const std::byte> data) {
  const std::string what = "fuzz/index.json";
  Result<DatasetIndex> x = dataset::ParseIndex(AsText(data), what, Limits());
  if (!x.ok()) {
    const StatusCode c = x.status().code();
    TS_FUZZ_CHECK(c == StatusCode::kCorruption || c == StatusCode::kUnsupported || c == StatusCode::kLimitExceeded,
                  "index: unexpected error " + Describe(x.status()));
    TS_FUZZ_CHECK(x.status().message().find(what) != std::string::npos,
                  "index: the message does not name the index: " + x.status().message());
    return;
  }
  CheckIndexInvariants(*x, what);
  const std::string text = dataset::EncodeIndex(*x);
  Result<DatasetIndex> y = dataset::ParseIndex(text, what, Limits());
  TS_FUZZ_CHECK(y.ok(), "index: EncodeIndex output does not parse: " + Describe(y.status()) + "\n" + text);
  std::string why;
  TS_FUZZ_CHECK(SameIndex(*x, *y, &why), "index: parse(encode(x)) != x: " + why + "\n" + text);
  TS_FUZZ_CHECK(dataset::EncodeIndex(*y) == text, "index: the encoding is not a fixed point\n" + text);
  // The schema alone goes through the same pair.
  const std::string schema = dataset::SchemaToJson(x->schema);
  Result<dataset::Schema> s = dataset::SchemaFromJson(schema, what, Limits());
  TS_FUZZ_CHECK(s.ok() && dataset::SameSchema(*s, x->schema, &why),
                "index: schema round trip: " + Describe(s.status()) + " " + why + "\n" + schema);
}

namespace {

void CheckShardBytes(std::span<const std::byte> data) {
  dataset::ShardOptions mapped, pread;
  mapped.limits = pread.limits = Limits();
  mapped.reader.limits.max_tensor_count = pread.reader.limits.max_tensor_count = 4096;
  mapped.reader.limits.max_metadata_bytes = pread.reader.limits.max_metadata_bytes = 1 << 20;
  pread.reader.access = ReaderOptions::Access::kPread;
  // The buffer is a copy the shard owns, as a file mapping would be.
  auto owner = std::make_shared<std::string>(AsText(data));
  auto a = dataset::TsafeShard::OpenBuffer(AsBytes(*owner), owner, "fuzz.tsafe", mapped);
  auto b = dataset::TsafeShard::Open(WriteScratch(data), pread, nullptr, "fuzz.tsafe");
  TS_FUZZ_CHECK(a.ok() == b.ok(),
                "shard: mapped and pread opens disagree: " + Describe(a.status()) + " vs " + Describe(b.status()));
  if (!a.ok()) {
    TS_FUZZ_CHECK(a.status().code() != StatusCode::kInternal && a.status().code() != StatusCode::kOutOfRange,
                  "shard: unexpected error " + Describe(a.status()));
    return;
  }
  const dataset::TsafeShard& sa = **a;
  const dataset::TsafeShard& sb = **b;
  std::string why;
  TS_FUZZ_CHECK(dataset::SameSchema(sa.schema(), sb.schema(), &why), "shard: schemas differ: " + why);
  TS_FUZZ_CHECK(sa.num_samples() == sb.num_samples(), "shard: sample counts differ");
  // The schema is one an index may hold.
  TS_FUZZ_CHECK(dataset::ValidateSchema(sa.schema()).ok(),
                "shard: schema fails ValidateSchema: " + Describe(dataset::ValidateSchema(sa.schema())));
  const auto la = CheckSourceSamples(sa, "shard (mapped)");
  const auto lb = CheckSourceSamples(sb, "shard (pread)");
  TS_FUZZ_CHECK(la == lb, "shard: mapped and pread reads differ");
  // Opening against its own schema (as a reader with an index does) succeeds.
  auto c = dataset::TsafeShard::OpenBuffer(AsBytes(*owner), owner, "fuzz.tsafe", mapped, &sa.schema());
  TS_FUZZ_CHECK(c.ok(), "shard: open against its own schema: " + Describe(c.status()));

  const Status va = sa.VerifyData(), vb = sb.VerifyData();
  TS_FUZZ_CHECK(va.ok() == vb.ok(), "shard: mapped and pread verify disagree: " + Describe(va) + " vs " + Describe(vb));
  if (!va.ok()) return;
  // Verified: text fields hold what their kind says (VerifyData's promise).
  std::vector<dataset::FieldView> views;
  for (std::uint64_t i = 0; i < sa.num_samples() && i < (1u << 16); ++i) {
    if (!sa.Read(i, views).ok()) continue;
    for (const auto& v : views) {
      if (v.spec->kind == dataset::FieldKind::kJson) {
        TS_FUZZ_CHECK(nlohmann::json::accept(AsText(v.bytes)), "shard: verified json field does not parse");
      } else if (v.spec->kind == dataset::FieldKind::kStr) {
        // nlohmann's dump throws on invalid UTF-8.
        bool utf8 = true;
        try {
          (void)nlohmann::json(std::string(AsText(v.bytes))).dump();
        } catch (const nlohmann::json::exception&) {
          utf8 = false;
        }
        TS_FUZZ_CHECK(utf8, "shard: verified str field is not UTF-8");
      }
    }
  }
}

}  // namespace

void CheckDatasetShard(std::span<const std::byte> data) {
  CheckShardBytes(data);
  // With its checksums recomputed, so mutations of the metadata (schema,
  // sample count) and the column entries get past the index checksum.
  const std::string sealed = Reseal(data);
  if (sealed != AsText(data)) CheckShardBytes(AsBytes(sealed));
}

}  // namespace tensorsafe::fuzz
