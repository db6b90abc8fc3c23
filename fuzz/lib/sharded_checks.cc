// CheckShardedIndex (sharded_checks.h).
#include "sharded_checks.h"

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "formats/safetensors/sharded_internal.h"
#include "fuzz_util.h"
#include "tensorsafe/formats/sharded.h"

namespace tensorsafe::fuzz {

void CheckShardedIndex(std::span<const std::byte> data) {
  const std::string path = "fuzz/model.safetensors.index.json";
  auto idx = sharded::ParseIndex(AsText(data), path);
  // The fast path (the hub's form, no DOM) reads exactly as the general reader.
  auto general = sharded::internal::ParseIndexWith(AsText(data), path, {}, /*fast_path=*/false);
  TS_FUZZ_CHECK(Describe(general.status()) == Describe(idx.status()),
                "index: fast path " + Describe(idx.status()) + " vs general " + Describe(general.status()));
  if (idx.ok()) {
    TS_FUZZ_CHECK(general->metadata_json == idx->metadata_json && general->shards == idx->shards &&
                      general->weight_map == idx->weight_map && general->format == idx->format,
                  "index: fast path and general reader disagree");
  }
  if (!idx.ok()) {
    TS_FUZZ_CHECK(idx.status().message().rfind(path + ": ", 0) == 0,
                  "error without the index's path: " + Describe(idx.status()));
    return;
  }
  TS_FUZZ_CHECK(std::set<std::string>(idx->shards.begin(), idx->shards.end()).size() == idx->shards.size(),
                "shards repeat");
  for (std::size_t i = 1; i < idx->shards.size(); ++i) {
    TS_FUZZ_CHECK(idx->shards[i - 1] < idx->shards[i], "shards not sorted");
  }
  std::set<std::string> names;
  std::vector<std::pair<std::string, std::string>> map;
  for (const auto& [name, shard] : idx->weight_map) {
    TS_FUZZ_CHECK(shard < idx->shards.size(), "shard id out of range");
    TS_FUZZ_CHECK(names.insert(std::string(name)).second, "a tensor listed twice");
    map.emplace_back(std::string(name), idx->shards[shard]);
  }
  TS_FUZZ_CHECK(idx->format == Format::kSafetensors || idx->format == Format::kTsafe, "format");
  if (!idx->metadata_json.empty()) {
    auto md = nlohmann::json::parse(idx->metadata_json, nullptr, /*allow_exceptions=*/false);
    TS_FUZZ_CHECK(md.is_object(), "metadata is not an object: " + idx->metadata_json);
  }
  // Written back as the hub writes an index, it parses to the same map.
  auto text = sharded::IndexText(0, "", map);
  TS_FUZZ_CHECK(text.ok(), Describe(text.status()));
  auto again = sharded::ParseIndex(*text, path);
  TS_FUZZ_CHECK(again.ok(), Describe(again.status()) + " for\n" + *text);
  TS_FUZZ_CHECK(again->shards == idx->shards && again->weight_map == idx->weight_map, "round trip changed the map");
  TS_FUZZ_CHECK(again->metadata_json == "{\"total_size\":0}", again->metadata_json);
}

}  // namespace tensorsafe::fuzz
