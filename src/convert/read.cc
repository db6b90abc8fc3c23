// ReadTensorSet: any supported file as a TensorSet of views (convert.h).
#include <nlohmann/json.hpp>

#include <cctype>
#include <string>

#include "tensorsafe/convert.h"
#include "tensorsafe/formats/btf.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/formats/npz.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/sharded.h"
#include "tensorsafe/formats/tenbin.h"
#include "tensorsafe/formats/zio.h"
#include "tensorsafe/reader.h"

namespace tensorsafe {
namespace {

// A .tsafe file through Reader: Get() views the mapping, so the set holds
// no tensor bytes of its own whatever the file's size.
Result<TensorSet> ReadTsafe(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::shared_ptr<Reader> reader, Reader::Open(path));
  TensorSet set;
  std::vector<std::string> names;
  TS_RETURN_IF_ERROR(reader->ForEach([&](const TensorInfo& info) {
    names.push_back(info.name);
    return true;
  }));
  set.tensors.reserve(names.size());
  for (const std::string& name : names) {
    TS_ASSIGN_OR_RETURN(Tensor t, reader->Get(name));
    if (t.info.metadata_json == "{}") t.info.metadata_json.clear();
    set.tensors.push_back(std::move(t));
  }
  // "" when the file has none (Metadata() gives "{}" then); an empty
  // object stored as such stays "{}", as safetensors' `"__metadata__":{}`.
  if (reader->summary().metadata_bytes != 0) {
    TS_ASSIGN_OR_RETURN(set.metadata_json, reader->Metadata());
  }
  return set;
}

// ZIO keeps a tensor's name as "name" in its metadata (zio.h); once it is
// the tensor's name it is redundant there, and the writer adds it back, so
// it is removed to keep zio -> tsafe -> zio exact and tsafe -> zio -> tsafe
// free of an extra key.
Result<TensorSet> ReadZio(const std::string& path) {
  TS_ASSIGN_OR_RETURN(TensorSet set, zio::ReadFile(path));
  for (Tensor& t : set.tensors) {
    if (t.info.metadata_json.empty()) continue;
    auto md = nlohmann::ordered_json::parse(t.info.metadata_json, nullptr, /*allow_exceptions=*/false);
    if (!md.is_object() || !md.contains("name") || md["name"] != t.info.name) continue;
    md.erase("name");
    t.info.metadata_json = md.empty() ? std::string() : md.dump();
  }
  return set;
}

}  // namespace

std::optional<Format> ParseFormat(std::string_view name) {
  std::string s(name);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "st") return Format::kSafetensors;
  if (s == "ten") return Format::kTenbin;
  for (Format f : {Format::kTsafe, Format::kSafetensors, Format::kNpy, Format::kNpz, Format::kGguf,
                   Format::kTenbin, Format::kBtf, Format::kZio}) {
    if (s == FormatName(f)) return f;
  }
  return std::nullopt;
}

Result<TensorSet> ReadTensorSet(const std::string& path_in, Format format) {
  std::string path = path_in;
  if (sharded::IsShardedPath(path)) {  // an index, or a directory (docs/SHARDED.md)
    TS_ASSIGN_OR_RETURN(path, sharded::ResolveCheckpoint(path));
    if (sharded::IsIndexName(path)) {
      TS_ASSIGN_OR_RETURN(sharded::Checkpoint ck, sharded::Open(path));
      return std::move(ck.set);
    }
  }
  if (format == Format::kUnknown) {
    TS_ASSIGN_OR_RETURN(format, DetectFormat(path));
  }
  switch (format) {
    case Format::kTsafe: return ReadTsafe(path);
    case Format::kSafetensors: return safetensors::ReadFile(path);
    case Format::kNpy: return npy::ReadFile(path);
    case Format::kNpz: return npz::ReadFile(path);
    case Format::kGguf: return gguf::ReadFile(path);
    case Format::kTenbin: return tenbin::ReadFile(path);
    case Format::kBtf: return btf::ReadFile(path);
    case Format::kZio: return ReadZio(path);
    case Format::kUnknown: break;
  }
  return Unsupported(path + ": not a tensor file tensorsafe recognises by its first bytes or its "
                            "extension; name its format explicitly");
}

}  // namespace tensorsafe
