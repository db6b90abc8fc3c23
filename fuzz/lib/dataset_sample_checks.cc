// CheckSourceSamples (dataset_checks.h): the ShardSource contract of
// dataset/sample.h, for every kind of shard.
#include <string>

#include "dataset_checks.h"
#include "fuzz_util.h"

namespace tensorsafe::fuzz {

namespace {

// FNV-1a in this (instrumented) file, not the xxhash library: ASan sees
// only the reads of instrumented code.
std::uint64_t Fnv(std::span<const std::byte> b) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::byte c : b) h = (h ^ static_cast<std::uint8_t>(c)) * 1099511628211ull;
  return h;
}

// The bytes a tensor of `dtype` and `shape` occupies, or -1 when the shape is
// negative, overflows or does not fill whole blocks of a packed dtype.
std::int64_t TensorBytes(DType dtype, const std::vector<std::int64_t>& shape) {
  const DTypeInfo& info = GetDTypeInfo(dtype);
  std::uint64_t elems = 1;
  for (std::int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(elems, static_cast<std::uint64_t>(d), &elems)) return -1;
  }
  if (elems % info.block_elems != 0) return -1;
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(elems / info.block_elems, std::uint64_t{info.block_bytes}, &bytes)) return -1;
  return bytes > (std::uint64_t{1} << 62) ? -1 : static_cast<std::int64_t>(bytes);
}

}  // namespace

std::vector<std::string> CheckSourceSamples(const dataset::ShardSource& source, std::string_view what,
                                            std::uint64_t max_samples) {
  const std::string w(what);
  const dataset::Schema& schema = source.schema();
  std::vector<std::string> lines;
  std::vector<dataset::FieldView> views;
  const std::uint64_t n = source.num_samples();
  for (std::uint64_t i = 0; i < n && i < max_samples; ++i) {
    Status s = source.Read(i, views);
    if (!s.ok()) {
      TS_FUZZ_CHECK(s.code() != StatusCode::kOutOfRange && s.code() != StatusCode::kInternal,
                    w + ": sample " + std::to_string(i) + " of " + std::to_string(n) + ": " + Describe(s));
      lines.push_back(Describe(s));
      continue;
    }
    TS_FUZZ_CHECK(views.size() == schema.fields.size(), w + ": sample " + std::to_string(i) + " has " +
                                                            std::to_string(views.size()) + " views for " +
                                                            std::to_string(schema.fields.size()) + " fields");
    std::string acc;
    for (std::size_t k = 0; k < views.size(); ++k) {
      const dataset::FieldView& v = views[k];
      const std::string label = w + ": sample " + std::to_string(i) + " field " + std::to_string(k);
      TS_FUZZ_CHECK(v.spec == &schema.fields[k], label + ": spec is not the schema's field");
      // Every byte, so ASan reports a view that runs past its buffer.
      std::uint64_t h = Fnv(v.bytes);
      acc.append(reinterpret_cast<const char*>(&h), sizeof h);
      switch (v.spec->kind) {
        case dataset::FieldKind::kInt:
        case dataset::FieldKind::kFloat:
          TS_FUZZ_CHECK(v.bytes.size() == 8, label + ": " + std::to_string(v.bytes.size()) + " bytes, not 8");
          break;
        case dataset::FieldKind::kTensor: {
          TS_FUZZ_CHECK(v.shape.size() == v.spec->shape.size(), label + ": rank " + std::to_string(v.shape.size()) +
                                                                    ", schema rank " +
                                                                    std::to_string(v.spec->shape.size()));
          for (std::size_t d = 0; d < v.shape.size(); ++d) {
            TS_FUZZ_CHECK(v.spec->shape[d] == dataset::kAnyDim || v.spec->shape[d] == v.shape[d],
                          label + ": dim " + std::to_string(d) + " is " + std::to_string(v.shape[d]) +
                              ", schema says " + std::to_string(v.spec->shape[d]));
            acc += std::to_string(v.shape[d]) + ",";
          }
          const std::int64_t want = TensorBytes(v.spec->dtype, v.shape);
          TS_FUZZ_CHECK(
              want >= 0 && static_cast<std::uint64_t>(want) == v.bytes.size(),
              label + ": " + std::to_string(v.bytes.size()) + " bytes for a tensor of " + std::to_string(want));
          break;
        }
        default: break;
      }
    }
    const std::uint64_t d = Fnv(AsBytes(acc));
    lines.push_back("ok " + std::to_string(d));
  }
  Status past = source.Read(n, views);
  TS_FUZZ_CHECK(past.code() == StatusCode::kOutOfRange,
                w + ": Read(" + std::to_string(n) + ") of " + std::to_string(n) + " samples: " + Describe(past));
  return lines;
}

}  // namespace tensorsafe::fuzz
