#include "dataset_compat_checks.h"
#include "dataset_checks.h"

#include <cstdlib>
#include <vector>

#include "tensorsafe/dataset/mds.h"
#include "tensorsafe/dataset/wds.h"

namespace tensorsafe::fuzz {

void CheckMdsIndex(std::span<const std::byte> data) {
  auto ds = mds::ParseIndex(data, "fuzz/index.json");
  if (!ds.ok()) return;
  std::uint64_t total = 0;
  for (const auto& s : ds->shards) {
    if (s.columns.empty()) std::abort();
    total += s.samples;
  }
  if (total != ds->total_samples) std::abort();
}

void CheckWdsShard(std::span<const std::byte> data) {
  auto src = wds::OpenShardBytes(data, nullptr, "fuzz.tar");
  if (!src.ok()) return;
  // Views sized by kind, dtype and shape; Read(num_samples) is out of range.
  CheckSourceSamples(**src, "wds");
  std::vector<dataset::FieldView> views;
  for (std::uint64_t i = 0; i < (*src)->num_samples(); ++i) {
    if (!(*src)->Read(i, views).ok()) continue;
    for (const auto& v : views) {
      // Views lie in the input, or in the source's own storage (keys, ints).
      volatile std::byte sink{};
      if (!v.bytes.empty()) sink = v.bytes.front() ^ v.bytes.back();
      (void)sink;
      if (v.spec->kind == dataset::FieldKind::kInt && v.bytes.size() != 8) std::abort();
    }
  }
}

}  // namespace tensorsafe::fuzz
