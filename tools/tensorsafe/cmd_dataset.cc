// `tensorsafe dataset create|info|verify|cat|merge`: sharded datasets
// (include/tensorsafe/dataset/, docs/DATASET.md §8).
//   dataset create OUT SRC... [--max-shard-bytes N] [--max-shard-samples N] [--zstd L] [--prefix P]
//   dataset info DIR [--shards]
//   dataset verify DIR
//   dataset cat DIR [INDEX] [--start N] [--limit N] [--all]
//   dataset merge OUT PART... [--overwrite] [--metadata JSON]
#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "command.h"
#include "exit_codes.h"
#include "progress.h"
#include "tensorsafe/dataset/dataset.h"
#include "tensorsafe/dataset/writer.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/reader.h"
#include "values.h"

namespace tensorsafe::cli {
namespace {

namespace fs = std::filesystem;
using namespace tensorsafe::dataset;

struct Args {
  std::string out, dir;
  std::vector<std::string> sources, parts, from;
  std::string cache_dir;
  std::uint64_t cache_limit = 0;  // bytes; 0 = none
  std::uint64_t max_bytes = std::uint64_t{64} << 20, max_samples = 0;
  int zstd = 0;
  std::string prefix = "shard", metadata;
  bool quiet = false, shards = false, overwrite = false, all = false;
  std::int64_t index = -1;
  std::uint64_t start = 0, limit = 0;
  CLI::App *create = nullptr, *info = nullptr, *verify = nullptr, *cat = nullptr, *merge = nullptr;
};

// --- create from files ------------------------------------------------------

// One file of a sample: WebDataset keys (DATASET.md §8.1): the key is the
// path up to the first dot of the basename, the field the rest.
struct SourceFile {
  std::string path;
  std::string suffix;  // after the key's dot: "image.npy", "cls", "meta.json"
};

bool EndsWith(std::string_view s, std::string_view t) {
  return s.size() >= t.size() && s.substr(s.size() - t.size()) == t;
}

// The fields one file gives: .npy -> one tensor field named by the whole
// suffix, as WebDataset (and OpenAny on a tar of the same files) names it;
// .tsafe -> one tensor field per tensor ("<rest>/<tensor>", or the
// tensor's name for "key.tsafe"), .json -> json, .txt -> str, else bytes.
struct LoadedField {
  std::string name;
  FieldKind kind;
  DType dtype = DType::kU8;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> owner;
};

Status LoadFile(const SourceFile& f, std::vector<LoadedField>& out) {
  if (EndsWith(f.suffix, ".npy") || f.suffix == "npy") {
    TS_ASSIGN_OR_RETURN(TensorSet set, npy::ReadFile(f.path));
    const Tensor& t = set.tensors.at(0);
    LoadedField lf{f.suffix, FieldKind::kTensor, t.info.dtype, {}, t.data, t.owner};
    for (auto d : t.info.shape) lf.shape.push_back(static_cast<std::int64_t>(d));
    out.push_back(std::move(lf));
    return Status::OK();
  }
  if (EndsWith(f.suffix, ".tsafe") || f.suffix == "tsafe") {
    const std::string rest = f.suffix == "tsafe" ? "" : f.suffix.substr(0, f.suffix.size() - 6);
    TS_ASSIGN_OR_RETURN(auto reader, Reader::Open(f.path));
    TS_ASSIGN_OR_RETURN(auto names, reader->Names());
    for (const std::string& n : names) {
      TS_ASSIGN_OR_RETURN(Tensor t, reader->Get(n));
      if (t.info.layout != Layout::kDense) return Unsupported(f.path + ": tensor " + n + " is sparse");
      LoadedField lf{rest.empty() ? n : rest + "/" + n, FieldKind::kTensor, t.info.dtype, {}, t.data, t.owner};
      for (auto d : t.info.shape) lf.shape.push_back(static_cast<std::int64_t>(d));
      out.push_back(std::move(lf));
    }
    return Status::OK();
  }
  auto region = std::make_shared<std::string>();
  {
    std::FILE* fp = std::fopen(f.path.c_str(), "rb");
    if (fp == nullptr) return IOError(f.path + ": cannot open", errno);
    char buf[1 << 16];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, fp)) > 0) region->append(buf, n);
    const bool err = std::ferror(fp);
    std::fclose(fp);
    if (err) return IOError(f.path + ": read failed", errno);
  }
  FieldKind kind = EndsWith(f.suffix, "json")  ? FieldKind::kJson
                   : EndsWith(f.suffix, "txt") ? FieldKind::kStr
                                               : FieldKind::kBytes;
  out.push_back({f.suffix, kind, DType::kU8, {}, std::as_bytes(std::span(region->data(), region->size())), region});
  return Status::OK();
}

using Groups = std::map<std::string, std::vector<SourceFile>>;  // key -> files, sorted

Status GroupDirectory(const std::string& src, Groups& groups) {
  std::error_code ec;
  if (!fs::is_directory(src, ec)) return InvalidArgument(src + ": not a directory");
  for (auto it = fs::recursive_directory_iterator(src, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const fs::path rel = fs::relative(it->path(), src);
    const std::string base = rel.filename().string();
    const auto dot = base.find('.');
    if (dot == 0 || dot == std::string::npos || dot + 1 == base.size()) continue;  // no key or no field
    const std::string key = (rel.parent_path() / base.substr(0, dot)).generic_string();
    groups[key].push_back({it->path().string(), base.substr(dot + 1)});
  }
  if (ec) return IOError(src + ": " + ec.message(), ec.value());
  return Status::OK();
}

// The schema of all samples: the same fields everywhere; tensor dims that
// vary become any-size.
Result<Schema> InferSchema(const Groups& groups) {
  Schema schema;
  bool first = true;
  for (const auto& [key, files] : groups) {
    std::vector<LoadedField> fields;
    for (const SourceFile& f : files) TS_RETURN_IF_ERROR(LoadFile(f, fields));
    std::sort(fields.begin(), fields.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    if (first) {
      for (const auto& lf : fields) {
        FieldSpec spec{lf.name, lf.kind, lf.dtype, lf.shape};
        schema.fields.push_back(std::move(spec));
      }
      first = false;
      continue;
    }
    std::string names_here, names_schema;
    for (const auto& lf : fields) names_here += " " + lf.name;
    for (const auto& f : schema.fields) names_schema += " " + f.name;
    if (names_here != names_schema) {
      return InvalidArgument("sample " + key + " has the fields" + names_here + " but the first sample has" +
                             names_schema);
    }
    for (std::size_t k = 0; k < fields.size(); ++k) {
      FieldSpec& f = schema.fields[k];
      const auto& lf = fields[k];
      if (lf.kind != f.kind || lf.dtype != f.dtype || lf.shape.size() != f.shape.size()) {
        return InvalidArgument("sample " + key + ": field " + lf.name +
                               " differs in kind, dtype or rank from the first sample");
      }
      for (std::size_t d = 0; d < f.shape.size(); ++d) {
        if (f.shape[d] != lf.shape[d]) f.shape[d] = kAnyDim;
      }
    }
  }
  if (first) return InvalidArgument("no samples found (files are named KEY.FIELD)");
  return schema;
}

// The reader options the commands share: --cache-dir is where remote shards
// are downloaded and zstd / MDS shards decompressed.
DatasetOptions OpenOptions(const Args& a) {
  DatasetOptions o;
  o.cache_dir = a.cache_dir;
  // LRU eviction of shards no process has pinned (docs/REMOTE.md, "Eviction").
  o.remote.cache_limit_bytes = a.cache_limit;
  // Every command reads shards in turn; an open remote shard stays pinned,
  // so under a limit only one is kept open.
  if (a.cache_limit != 0) o.max_open_shards = 1;
  return o;
}

// How `info` names the kind of the dataset.
std::string FormatName(const Dataset& ds) {
  const std::string kind = ds.shards().empty() ? "tsafe" : ds.shards()[0].kind;
  if (kind == "mds") return "MosaicML MDS (index.json version 2)";
  if (kind == "wds") return "WebDataset tar";
  return std::string(kIndexFormatName) + " " + std::string(kDatasetFormatVersion) +
         (IsRemoteUrl(ds.location()) ? " (remote)" : "");
}

Status Create(const Args& a) {
  DatasetWriterOptions opt;
  opt.max_shard_bytes = a.max_bytes;
  opt.max_shard_samples = a.max_samples;
  opt.zstd_level = a.zstd;
  opt.shard_prefix = a.prefix;
  opt.metadata_json = a.metadata;
  ProgressBar bar("writing", a.quiet, "samples");
  // Sources that are datasets (any location OpenAny takes: DATASET.md
  // "Locations") are copied; directories of files are grouped. A directory
  // counts as a dataset when it holds index.json; --from forces a dataset
  // (a directory of WebDataset .tar files).
  std::vector<std::shared_ptr<Dataset>> datasets;
  Groups groups;
  auto is_dataset = [](const std::string& src) {
    std::error_code ec;
    return IsRemoteUrl(src) || src.find('{') != std::string::npos ||
           (EndsWith(src, ".tar") && fs::is_regular_file(src, ec)) || fs::exists(fs::path(src) / kIndexFileName, ec);
  };
  if (a.from.empty() && a.sources.empty()) return InvalidArgument("give SRC or --from LOCATION");
  for (const std::string& src : a.from) {
    TS_ASSIGN_OR_RETURN(auto ds, OpenAny(src, OpenOptions(a)));
    datasets.push_back(std::move(ds));
  }
  for (const std::string& src : a.sources) {
    if (is_dataset(src)) {
      TS_ASSIGN_OR_RETURN(auto ds, OpenAny(src, OpenOptions(a)));
      datasets.push_back(std::move(ds));
    } else {
      TS_RETURN_IF_ERROR(GroupDirectory(src, groups));
    }
  }
  if (!datasets.empty() && !groups.empty()) {
    return InvalidArgument("mix of dataset and file sources; create from one kind at a time");
  }
  std::uint64_t total = 0;
  if (!datasets.empty()) {
    opt.schema = datasets[0]->schema();
    for (const auto& ds : datasets) total += ds->num_samples();
  } else {
    TS_ASSIGN_OR_RETURN(opt.schema, InferSchema(groups));
    total = groups.size();
  }
  TS_ASSIGN_OR_RETURN(auto w, DatasetWriter::Create(a.out, opt));
  std::uint64_t done = 0;
  std::vector<NamedValue> values;
  if (!datasets.empty()) {
    Sample s;
    for (const auto& ds : datasets) {
      auto it = ds->IterateRange(0, ds->num_samples());
      while (it.Next(s)) {
        values.clear();
        for (const FieldView& v : s.fields) values.push_back({v.spec->name, FieldValue::FromView(v)});
        TS_RETURN_IF_ERROR(w->Add(values));
        bar.Update(++done, total, false);
      }
      TS_RETURN_IF_ERROR(it.status());
    }
  } else {
    std::vector<LoadedField> fields;
    for (const auto& [key, files] : groups) {
      fields.clear();
      values.clear();
      for (const SourceFile& f : files) TS_RETURN_IF_ERROR(LoadFile(f, fields));
      for (const auto& lf : fields) {
        FieldValue v;
        v.kind = lf.kind;
        v.dtype = lf.dtype;
        v.shape = lf.shape;
        v.bytes = lf.bytes;
        values.push_back({lf.name, std::move(v)});
      }
      Status s = w->Add(values);
      if (!s.ok()) return s.WithContext("sample " + key + ": ");
      bar.Update(++done, total, false);
    }
  }
  TS_ASSIGN_OR_RETURN(DatasetIndex idx, w->Finish());
  bar.Update(done, total, true);
  fmt::print("wrote {}: {} samples in {} shards, {} bytes\n", a.out, idx.samples, idx.shards.size(),
             w->bytes_written());
  return Status::OK();
}

// --- info, verify, cat, merge ---------------------------------------------

std::string DescribeField(const FieldSpec& f) {
  std::string s = std::string(FieldKindName(f.kind));
  if (f.kind == FieldKind::kTensor) {
    s += " " + std::string(DTypeName(f.dtype)) + " [";
    for (std::size_t i = 0; i < f.shape.size(); ++i) {
      if (i) s += ", ";
      s += f.shape[i] == kAnyDim ? "*" : std::to_string(f.shape[i]);
    }
    s += "]";
  }
  return s;
}

Status Info(const Args& a) {
  TS_ASSIGN_OR_RETURN(auto ds, OpenAny(a.dir, OpenOptions(a)));
  std::uint64_t bytes = 0, stored = 0;
  for (const auto& s : ds->shards()) {
    bytes += s.bytes;
    stored += s.zstd ? s.zstd->bytes : s.bytes;
  }
  fmt::print("dataset: {}\nformat: {}\nsamples: {}\nshards: {}\nbytes: {} ({}), stored: {} ({})\n", a.dir,
             FormatName(*ds), ds->num_samples(), ds->shards().size(), bytes, HumanBytes(bytes), stored,
             HumanBytes(stored));
  fmt::print("schema:\n");
  for (const FieldSpec& f : ds->schema().fields)
    fmt::print("  {}: {}\n", nlohmann::json(f.name).dump(), DescribeField(f));
  if (!ds->metadata_json().empty()) fmt::print("metadata: {}\n", ds->metadata_json());
  if (a.shards) {
    fmt::print("{:>6}  {:>10}  {:>12}  {:16}  {}\n", "SHARD", "SAMPLES", "BYTES", "XXH3", "NAME");
    for (std::size_t i = 0; i < ds->shards().size(); ++i) {
      const ShardInfo& s = ds->shards()[i];
      fmt::print("{:>6}  {:>10}  {:>12}  {:16}  {}{}\n", i, s.samples, s.bytes, s.xxh3, s.name,
                 s.zstd ? " (zstd: " + s.zstd->name + ", " + std::to_string(s.zstd->bytes) + " bytes)" : "");
    }
  }
  return Status::OK();
}

int Verify(const Args& a) {
  auto ds = OpenAny(a.dir, OpenOptions(a));
  if (!ds.ok()) return Fail("dataset verify", ds.status());
  ProgressBar bar("verifying", a.quiet, "shards");
  std::vector<Status> problems;
  Status s =
      (*ds)->Verify(&problems, [&](std::size_t done, std::size_t total) { bar.Update(done, total, done == total); });
  if (!s.ok()) {
    bar.Abandon();
    for (std::size_t i = 1; i < problems.size(); ++i) fmt::print(stderr, "{}\n", problems[i].ToString());
    return Fail("dataset verify", s);
  }
  fmt::print("ok: {} samples in {} shards verified\n", (*ds)->num_samples(), (*ds)->shards().size());
  return kExitOk;
}

constexpr std::uint64_t kMaxJsonElements = 1000;  // numpy's summary threshold

nlohmann::json FieldJson(const FieldView& v, bool all) {
  using nlohmann::json;
  std::string_view text(reinterpret_cast<const char*>(v.bytes.data()), v.bytes.size());
  switch (v.spec->kind) {
    case FieldKind::kInt: return *AsInt(v);
    case FieldKind::kFloat: return *AsFloat(v);
    case FieldKind::kStr: return std::string(text);
    case FieldKind::kJson: {
      json j = json::parse(text, nullptr, false);
      return j.is_discarded() ? json(std::string(text)) : j;
    }
    case FieldKind::kBytes: {
      std::string hex;
      static const char* kHex = "0123456789abcdef";
      for (std::size_t i = 0; i < std::min<std::size_t>(v.bytes.size(), all ? v.bytes.size() : 32); ++i) {
        const auto b = static_cast<unsigned char>(v.bytes[i]);
        hex += kHex[b >> 4];
        hex += kHex[b & 15];
      }
      json o = {{"bytes", v.bytes.size()}, {"hex", hex}};
      return o;
    }
    case FieldKind::kTensor: {
      Shape shape(v.shape.begin(), v.shape.end());
      json o = {{"dtype", std::string(DTypeName(v.spec->dtype))}, {"shape", v.shape}};
      std::uint64_t count = 1;
      for (auto d : shape) count *= d;
      // Nested arrays for jq and friends; a big tensor gets numpy's summary
      // text instead, unless --all.
      if (all || count <= kMaxJsonElements) {
        o["values"] = TensorJson(v.spec->dtype, shape, v.bytes);
      } else {
        o["preview"] = FormatTensor(v.spec->dtype, shape, v.bytes, false);
      }
      return o;
    }
  }
  return nullptr;
}

Status Cat(const Args& a) {
  TS_ASSIGN_OR_RETURN(auto ds, OpenAny(a.dir, OpenOptions(a)));
  std::uint64_t begin = a.start, end = ds->num_samples();
  if (a.index >= 0) {
    begin = static_cast<std::uint64_t>(a.index);
    if (begin >= end) {
      return OutOfRange(a.dir + ": sample " + std::to_string(begin) + " is out of range (" + std::to_string(end) +
                        " samples)");
    }
    end = begin + 1;
  }
  if (a.limit != 0) end = std::min(end, begin + a.limit);
  auto it = ds->IterateRange(begin, end);
  Sample s;
  while (it.Next(s)) {
    nlohmann::ordered_json line;
    line["__index__"] = s.index;
    for (const FieldView& v : s.fields) line[v.spec->name] = FieldJson(v, a.all);
    fmt::print("{}\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  return it.status();
}

Status MergeCmd(const Args& a) {
  MergeOptions o;
  o.overwrite = a.overwrite;
  o.metadata_json = a.metadata;
  TS_ASSIGN_OR_RETURN(DatasetIndex idx, Merge(a.out, a.parts, o));
  fmt::print("merged {} parts into {}: {} samples in {} shards\n", a.parts.size(), a.out, idx.samples,
             idx.shards.size());
  return Status::OK();
}

int Run(const Args& a) {
  Status s;
  if (a.create->parsed())
    s = Create(a);
  else if (a.info->parsed())
    s = Info(a);
  else if (a.verify->parsed())
    return Verify(a);
  else if (a.cat->parsed())
    s = Cat(a);
  else if (a.merge->parsed())
    s = MergeCmd(a);
  if (!s.ok()) return Fail("dataset", s);
  return kExitOk;
}

std::function<int()> SetupCommand(CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.require_subcommand(1);
  a->create = sub.add_subcommand("create", "Write a dataset from directories of KEY.FIELD files or from datasets");
  a->create->add_option("OUT", a->out, "Output dataset: a directory or an s3://bucket/prefix")->required();
  a->create->add_option("SRC", a->sources,
                        "Directories of files (.npy, .tsafe, .json, .txt, other = bytes) or datasets (a directory "
                        "with index.json, native or MDS; a .tar, a brace pattern, an http(s) or s3 URL)");
  a->create->add_option("--from", a->from, "A dataset location to copy (any kind; e.g. a directory of .tar files)");
  a->create->add_option("--cache-dir", a->cache_dir, "Where remote shards are downloaded and shards decompressed");
  a->create->add_option("--cache-limit", a->cache_limit, "Remote shard cache size limit in bytes (0 = none)");
  a->create->add_option("--max-shard-bytes", a->max_bytes, "Close a shard at this many payload bytes (0 = no limit)");
  a->create->add_option("--max-shard-samples", a->max_samples, "Close a shard at this many samples (0 = no limit)");
  a->create->add_option("--zstd", a->zstd, "Compress shards with zstd at this level (1..22; 0 = off)");
  a->create->add_option("--prefix", a->prefix, "Shard file name prefix");
  a->create->add_option("--metadata", a->metadata, "User metadata (a JSON object) for index.json");
  a->create->add_flag("--quiet,-q", a->quiet, "No progress bar");
  a->info = sub.add_subcommand("info", "Samples, shards, schema and sizes of a dataset");
  a->info->add_option("LOCATION", a->dir, "Dataset: directory (native or MDS), .tar, brace pattern, http(s) or s3 URL")
      ->required();
  a->info->add_option("--cache-dir", a->cache_dir, "Where remote shards are downloaded and shards decompressed");
  a->info->add_option("--cache-limit", a->cache_limit, "Remote shard cache size limit in bytes (0 = none)");
  a->info->add_flag("--shards", a->shards, "List every shard");
  a->verify = sub.add_subcommand("verify", "Check every shard's size, hash, layout and checksums; exit 1 on damage");
  a->verify
      ->add_option("LOCATION", a->dir, "Dataset: directory (native or MDS), .tar, brace pattern, http(s) or s3 URL")
      ->required();
  a->verify->add_option("--cache-dir", a->cache_dir, "Where remote shards are downloaded and shards decompressed");
  a->verify->add_option("--cache-limit", a->cache_limit, "Remote shard cache size limit in bytes (0 = none)");
  a->verify->add_flag("--quiet,-q", a->quiet, "No progress bar");
  a->cat = sub.add_subcommand("cat", "Print samples as JSON lines");
  a->cat->add_option("LOCATION", a->dir, "Dataset: directory (native or MDS), .tar, brace pattern, http(s) or s3 URL")
      ->required();
  a->cat->add_option("--cache-dir", a->cache_dir, "Where remote shards are downloaded and shards decompressed");
  a->cat->add_option("--cache-limit", a->cache_limit, "Remote shard cache size limit in bytes (0 = none)");
  a->cat->add_option("INDEX", a->index, "Print only this sample");
  a->cat->add_option("--start", a->start, "First sample");
  a->cat->add_option("--limit", a->limit, "At most this many samples (0 = all)");
  a->cat->add_flag("--all", a->all, "Print every tensor element and byte");
  a->merge = sub.add_subcommand("merge", "Join part datasets inside OUT into one dataset without copying shards");
  a->merge->add_option("OUT", a->out, "Dataset directory that holds the parts")->required();
  a->merge->add_option("PART", a->parts, "Part directories (relative to OUT or absolute, inside OUT)")->required();
  a->merge->add_flag("--overwrite", a->overwrite, "Replace an existing OUT/index.json");
  a->merge->add_option("--metadata", a->metadata, "User metadata (a JSON object) for the merged index");
  return [a] { return Run(*a); };
}

}  // namespace

TS_REGISTER_COMMAND("dataset", "Sharded datasets: create, info, verify, cat, merge (docs/DATASET.md)", SetupCommand);

}  // namespace tensorsafe::cli
