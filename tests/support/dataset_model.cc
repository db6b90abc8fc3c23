#include "support/dataset_model.h"

#include <cstdlib>
#include <cstring>

namespace tensorsafe::testing {

using dataset::FieldKind;
using dataset::FieldSpec;
using dataset::kAnyDim;
using dataset::Schema;

Schema RandomSchema(std::mt19937_64& rng, int max_fields) {
  static const char* kNames[] = {"x", "label", "a.b/c", "über", "img.jpg", "__key__", "j", "s/t.u", "n", "v"};
  Schema s;
  const int n = 1 + static_cast<int>(rng() % max_fields);
  std::vector<int> pick(10);
  for (int i = 0; i < 10; ++i) pick[i] = i;
  std::shuffle(pick.begin(), pick.end(), rng);
  for (int k = 0; k < n; ++k) {
    FieldSpec f;
    f.name = kNames[pick[k]];
    f.kind = static_cast<FieldKind>(rng() % 6);
    if (f.kind == FieldKind::kTensor) {
      f.dtype = static_cast<DType>(1 + rng() % kNumDTypes);
      const auto& info = GetDTypeInfo(f.dtype);
      const int rank = (info.block_elems > 1 ? 1 : 0) + static_cast<int>(rng() % 3);
      for (int d = 0; d < rank; ++d) {
        const bool any = rng() % 3 == 0;
        std::int64_t dim = static_cast<std::int64_t>(rng() % 4);
        if (d == rank - 1 && info.block_elems > 1) dim = static_cast<std::int64_t>(info.block_elems * (rng() % 3));
        f.shape.push_back(any ? kAnyDim : dim);
      }
    }
    s.fields.push_back(std::move(f));
  }
  return s;
}

ModelSample RandomSample(std::mt19937_64& rng, const Schema& schema, std::size_t max_bytes) {
  ModelSample out;
  for (const FieldSpec& f : schema.fields) {
    ModelValue v;
    v.kind = f.kind;
    v.dtype = f.dtype;
    auto rand_bytes = [&](std::size_t n) {
      std::string b(n, '\0');
      for (char& c : b) c = static_cast<char>(rng());
      return b;
    };
    switch (f.kind) {
      case FieldKind::kTensor: {
        const auto& info = GetDTypeInfo(f.dtype);
        std::uint64_t elems = 1;
        for (std::size_t d = 0; d < f.shape.size(); ++d) {
          std::int64_t dim = f.shape[d];
          if (dim == kAnyDim) {
            dim = static_cast<std::int64_t>(rng() % 5);
            if (d + 1 == f.shape.size() && info.block_elems > 1)
              dim = info.block_elems * static_cast<std::int64_t>(rng() % 3);
          }
          v.shape.push_back(dim);
          elems *= static_cast<std::uint64_t>(dim);
        }
        v.bytes = rand_bytes(elems / info.block_elems * info.block_bytes);
        break;
      }
      case FieldKind::kBytes: v.bytes = rand_bytes(rng() % (max_bytes + 1)); break;
      case FieldKind::kStr: {
        static const char* kTexts[] = {"", "hello", "ünïcödé ✓", "a\nb\"c", "日本語"};
        v.bytes = kTexts[rng() % 5];
        break;
      }
      case FieldKind::kJson: {
        static const char* kJson[] = {"{}", "[1,2,3]", "{\"a\":{\"b\":null}}", "\"s\"", "3.5", "true"};
        v.bytes = kJson[rng() % 6];
        break;
      }
      case FieldKind::kInt: {
        const std::int64_t x = static_cast<std::int64_t>(rng());
        v.bytes.assign(reinterpret_cast<const char*>(&x), 8);
        break;
      }
      case FieldKind::kFloat: {
        const double x = static_cast<double>(static_cast<std::int64_t>(rng() % 2000001) - 1000000) / 7.0;
        v.bytes.assign(reinterpret_cast<const char*>(&x), 8);
        break;
      }
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<dataset::NamedValue> ToNamed(const Schema& schema, const ModelSample& s) {
  std::vector<dataset::NamedValue> out;
  for (std::size_t k = 0; k < s.size(); ++k) {
    const ModelValue& m = s[k];
    auto bytes = std::as_bytes(std::span(m.bytes.data(), m.bytes.size()));
    dataset::FieldValue v;
    switch (m.kind) {
      case FieldKind::kTensor: v = dataset::FieldValue::Tensor(m.dtype, m.shape, bytes); break;
      case FieldKind::kBytes: v = dataset::FieldValue::Bytes(bytes); break;
      case FieldKind::kStr: v = dataset::FieldValue::Str(m.bytes); break;
      case FieldKind::kJson: v = dataset::FieldValue::Json(m.bytes); break;
      case FieldKind::kInt: {
        std::int64_t x;
        std::memcpy(&x, m.bytes.data(), 8);
        v = dataset::FieldValue::Int(x);
        break;
      }
      case FieldKind::kFloat: {
        double x;
        std::memcpy(&x, m.bytes.data(), 8);
        v = dataset::FieldValue::Float(x);
        break;
      }
    }
    out.push_back({schema.fields[k].name, std::move(v)});
  }
  // Fields in a different order than the schema: the writer matches by name.
  std::reverse(out.begin(), out.end());
  return out;
}

std::string Diff(const Schema& schema, const ModelSample& want, const dataset::Sample& got) {
  if (got.fields.size() != want.size()) return "field count " + std::to_string(got.fields.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    const auto& g = got.fields[k];
    const auto& w = want[k];
    const std::string label = "field " + std::to_string(k) + " (" + schema.fields[k].name + ")";
    if (g.spec != &got.owner->schema().fields[k]) return label + ": spec pointer";
    if (g.spec->name != schema.fields[k].name) return label + ": name";
    std::string bytes(reinterpret_cast<const char*>(g.bytes.data()), g.bytes.size());
    if (bytes != w.bytes)
      return label + ": bytes differ (" + std::to_string(bytes.size()) + " vs " + std::to_string(w.bytes.size()) + ")";
    if (w.kind == FieldKind::kTensor) {
      if (g.shape != w.shape) return label + ": shape";
      const std::uint32_t e = ElementSize(w.dtype);
      if (e > 1 && !g.bytes.empty() && reinterpret_cast<std::uintptr_t>(g.bytes.data()) % e != 0) {
        return label + ": view not aligned to " + std::to_string(e);
      }
    } else if (!g.shape.empty()) {
      return label + ": shape of a non-tensor";
    }
  }
  return {};
}

}  // namespace tensorsafe::testing
