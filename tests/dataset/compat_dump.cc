// Prints every sample of an MDS dataset or of WebDataset tar shards as JSON
// lines, for tests/interop/test_dataset_compat.py to compare with what the
// reference readers return.
//
//   compat_dump mds <dataset-dir> <cache-dir>
//   compat_dump wds <shard.tar | pattern-with-braces>...
//
// Line kinds: {"shard": k, "schema": [...]} once per shard, then
// {"shard": k, "index": i, "fields": {name: value}} per sample, or
// {"shard": k, "index": i, "error": "..."} when Read fails. Values:
// {"kind": "tensor", "dtype": "f32", "shape": [..], "hex": ".."},
// {"kind": "bytes", "hex": ".."}, {"kind": "str" | "json", "text": ".."},
// {"kind": "int", "value": n}.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/hex.h"
#include "tensorsafe/dataset/mds.h"
#include "tensorsafe/dataset/sample.h"
#include "tensorsafe/dataset/wds.h"

using namespace tensorsafe;
using tensorsafe::testing::Hex;

namespace {

void Dump(std::size_t k, const dataset::ShardSource& src) {
  nlohmann::json schema = nlohmann::json::array();
  for (const auto& f : src.schema().fields) {
    nlohmann::json j = {{"name", f.name}, {"kind", std::string(dataset::FieldKindName(f.kind))}};
    if (f.kind == dataset::FieldKind::kTensor) {
      j["dtype"] = std::string(DTypeName(f.dtype));
      j["shape"] = f.shape;
    }
    schema.push_back(j);
  }
  std::cout << nlohmann::json{{"shard", k}, {"schema", schema}}.dump() << "\n";
  std::vector<dataset::FieldView> views;
  for (std::uint64_t i = 0; i < src.num_samples(); ++i) {
    nlohmann::json line = {{"shard", k}, {"index", i}};
    Status s = src.Read(i, views);
    if (!s.ok()) {
      line["error"] = s.ToString();
      std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      continue;
    }
    nlohmann::json fields = nlohmann::json::object();
    for (const auto& v : views) {
      nlohmann::json j = {{"kind", std::string(dataset::FieldKindName(v.spec->kind))}};
      std::string_view text(reinterpret_cast<const char*>(v.bytes.data()), v.bytes.size());
      switch (v.spec->kind) {
        case dataset::FieldKind::kTensor:
          j["dtype"] = std::string(DTypeName(v.spec->dtype));
          j["shape"] = v.shape;
          j["hex"] = Hex(v.bytes);
          break;
        case dataset::FieldKind::kStr:
        case dataset::FieldKind::kJson: j["text"] = std::string(text); break;
        case dataset::FieldKind::kInt:
        case dataset::FieldKind::kFloat: {
          std::int64_t n;
          std::memcpy(&n, v.bytes.data(), 8);
          j["value"] = n;
          break;
        }
        case dataset::FieldKind::kBytes: j["hex"] = Hex(v.bytes); break;
      }
      fields[v.spec->name] = j;
    }
    line["fields"] = fields;
    std::cout << line.dump() << "\n";
  }
}

int Fail(const Status& s) {
  std::cerr << "compat_dump: " << s.ToString() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: compat_dump mds <dir> <cache-dir> | compat_dump wds <tar>...\n";
    return 2;
  }
  std::string mode = argv[1];
  if (mode == "mds") {
    auto ds = mds::OpenIndex(argv[2]);
    if (!ds.ok()) return Fail(ds.status());
    mds::ShardOptions opt;
    if (argc > 3) opt.cache_dir = argv[3];
    for (std::size_t k = 0; k < ds->shards.size(); ++k) {
      auto src = mds::OpenShard(*ds, k, opt);
      if (!src.ok()) return Fail(src.status());
      Dump(k, **src);
    }
    return 0;
  }
  if (mode == "wds") {
    std::size_t k = 0;
    for (int a = 2; a < argc; ++a) {
      auto names = wds::ExpandBraces(argv[a]);
      if (!names.ok()) return Fail(names.status());
      for (const std::string& n : *names) {
        auto src = wds::OpenShard(n);
        if (!src.ok()) return Fail(src.status());
        Dump(k++, **src);
      }
    }
    return 0;
  }
  std::cerr << "compat_dump: unknown mode " << mode << "\n";
  return 2;
}
