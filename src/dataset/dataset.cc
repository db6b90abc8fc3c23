// Dataset: the shard list, the lazily opened shards (LRU), random access and
// iteration (DATASET.md §6).
#include "tensorsafe/dataset/dataset.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <list>
#include <mutex>

#include "dataset/internal.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe::dataset {

namespace fs = std::filesystem;
using tensorsafe::internal::QuoteName;

const FieldView* Sample::Find(std::string_view name) const {
  for (const FieldView& f : fields) {
    if (f.spec != nullptr && f.spec->name == name) return &f;
  }
  return nullptr;
}

namespace {
Status KindError(const FieldView& v, std::string_view want) {
  return InvalidArgument("field " + (v.spec ? QuoteName(v.spec->name) : std::string("?")) + " is " +
                         std::string(v.spec ? FieldKindName(v.spec->kind) : "unknown") + ", not " + std::string(want));
}
}  // namespace

Result<std::int64_t> AsInt(const FieldView& v) {
  if (v.spec == nullptr || v.spec->kind != FieldKind::kInt || v.bytes.size() != 8) return KindError(v, "int");
  return static_cast<std::int64_t>(tensorsafe::internal::Load64(v.bytes.data()));
}

Result<double> AsFloat(const FieldView& v) {
  if (v.spec == nullptr || v.spec->kind != FieldKind::kFloat || v.bytes.size() != 8) return KindError(v, "float");
  return tensorsafe::internal::LoadLE<double>(v.bytes.data());
}

Result<std::string_view> AsText(const FieldView& v) {
  if (v.spec == nullptr ||
      (v.spec->kind != FieldKind::kStr && v.spec->kind != FieldKind::kJson && v.spec->kind != FieldKind::kBytes)) {
    return KindError(v, "str, json or bytes");
  }
  return std::string_view(reinterpret_cast<const char*>(v.bytes.data()), v.bytes.size());
}

class Dataset::Impl {
 public:
  std::string location;
  Schema schema;
  std::vector<ShardInfo> shards;
  std::vector<std::uint64_t> starts;  // shards.size() + 1 cumulative counts
  ShardOpener opener;
  ShardPrefetcher prefetch;
  DatasetOptions options;
  std::string metadata;

  // Hands the shards after `s` in index order, up to shard `last`, to the
  // prefetcher.
  void HintIndexOrder(std::size_t s, std::size_t last = SIZE_MAX) const {
    if (!prefetch || options.prefetch_shards == 0) return;
    std::vector<std::size_t> next;
    for (std::size_t k = s + 1; k < shards.size() && k <= last && next.size() < options.prefetch_shards; ++k) {
      next.push_back(k);
    }
    if (!next.empty()) prefetch(next);
  }

  // The LRU of open shards: `open[s]` is set while s is in `lru`
  // (front = most recent).
  mutable std::mutex mu;
  mutable std::vector<std::shared_ptr<const ShardSource>> open;
  mutable std::vector<std::list<std::size_t>::iterator> pos;
  mutable std::list<std::size_t> lru;

  std::size_t ShardOf(std::uint64_t i) const {
    // The last start <= i; starts[0] == 0 and i < starts.back().
    return static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), i) - starts.begin()) - 1;
  }

  // `*opened` (when given) tells whether the opener ran.
  Result<std::shared_ptr<const ShardSource>> Get(std::size_t s, bool* opened = nullptr) const {
    if (opened) *opened = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (open[s]) {
        lru.splice(lru.begin(), lru, pos[s]);
        return open[s];
      }
    }
    if (opened) *opened = true;
    // Opening maps and validates the shard: done without the lock so other
    // shards stay readable; two threads may race to open the same shard, and
    // the first to finish wins.
    auto src = opener(shards[s], s);
    if (!src.ok()) return src.status();
    if (*src == nullptr) return Internal(location + ": the opener returned no shard for " + QuoteName(shards[s].name));
    if ((*src)->num_samples() != shards[s].samples) {
      return Corruption(location + ": shard " + std::to_string(s) + " " + QuoteName(shards[s].name) + " holds " +
                        std::to_string((*src)->num_samples()) + " samples, the index says " +
                        std::to_string(shards[s].samples));
    }
    std::string why;
    if (!SameSchema(schema, (*src)->schema(), &why)) {
      return Corruption(location + ": shard " + std::to_string(s) + " " + QuoteName(shards[s].name) +
                        ": schema differs from the index: " + why);
    }
    std::lock_guard<std::mutex> lock(mu);
    if (open[s]) {
      lru.splice(lru.begin(), lru, pos[s]);
      return open[s];
    }
    open[s] = *src;
    lru.push_front(s);
    pos[s] = lru.begin();
    while (lru.size() > std::max<std::size_t>(options.max_open_shards, 1)) {
      const std::size_t victim = lru.back();
      lru.pop_back();
      open[victim].reset();  // users holding a Sample keep it alive
    }
    return *src;
  }
};

Dataset::Dataset(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Dataset::~Dataset() = default;

Result<std::shared_ptr<Dataset>> Dataset::FromShards(std::string location, Schema schema, std::vector<ShardInfo> shards,
                                                     ShardOpener opener, const DatasetOptions& options,
                                                     std::string metadata_json, ShardPrefetcher prefetch) {
  if (!opener) return InvalidArgument(location + ": no shard opener");
  auto impl = std::make_shared<Impl>();
  impl->location = std::move(location);
  impl->schema = std::move(schema);
  impl->shards = std::move(shards);
  impl->opener = std::move(opener);
  impl->prefetch = std::move(prefetch);
  impl->options = options;
  impl->metadata = std::move(metadata_json);
  impl->starts.reserve(impl->shards.size() + 1);
  impl->starts.push_back(0);
  for (std::size_t s = 0; s < impl->shards.size(); ++s) {
    if (impl->shards[s].samples == 0) {
      return InvalidArgument(impl->location + ": shard " + std::to_string(s) + " " + QuoteName(impl->shards[s].name) +
                             " has no samples");
    }
    auto next = tensorsafe::internal::CheckedAdd(impl->starts.back(), impl->shards[s].samples);
    if (!next) return InvalidArgument(impl->location + ": the sample total overflows 64 bits");
    impl->starts.push_back(*next);
  }
  impl->open.resize(impl->shards.size());
  impl->pos.resize(impl->shards.size());
  return std::make_shared<Dataset>(std::move(impl));
}

ShardOpener Dataset::NativeOpener(std::string root, Schema schema, DatasetOptions options) {
  std::error_code ec;
  fs::path real = fs::canonical(root, ec);
  std::string root_real = ec ? root : real.string();
  auto shared_schema = std::make_shared<const Schema>(std::move(schema));
  return [root_real, shared_schema, options](const ShardInfo& info,
                                             std::size_t s) -> Result<std::shared_ptr<const ShardSource>> {
    const std::string what = root_real + ": shard " + std::to_string(s) + " " + QuoteName(info.name);
    TS_RETURN_IF_ERROR(ValidateShardName(info.name, root_real));
    std::string path = (fs::path(root_real) / info.name).string();
    bool checked = false;  // hash already checked during decompression
    std::error_code ec;
    if (info.zstd) {
      TS_RETURN_IF_ERROR(ValidateShardName(info.zstd->name, root_real));
      // The decompressed file: next to the compressed one by default, else
      // content-addressed in the cache (shared by datasets safely).
      std::string target = options.cache_dir.empty()
                               ? path
                               : (fs::path(options.cache_dir) /
                                  (info.xxh3 + "-" + std::to_string(info.bytes) + std::string(kShardSuffix)))
                                     .string();
      if (!fs::exists(target, ec)) {
        const std::string zpath = (fs::path(root_real) / info.zstd->name).string();
        TS_RETURN_IF_ERROR(internal::ContainedRealPath(root_real, zpath, what).status());
        if (!options.cache_dir.empty()) fs::create_directories(options.cache_dir, ec);
        auto hex = [](const std::string& h) { return std::stoull(h, nullptr, 16); };
        TS_RETURN_IF_ERROR(internal::ZstdDecompressFile(zpath, {info.zstd->bytes, hex(info.zstd->xxh3)}, target,
                                                        {info.bytes, hex(info.xxh3)}, what));
        checked = true;
      }
      if (options.cache_dir.empty()) {
        TS_ASSIGN_OR_RETURN(path, internal::ContainedRealPath(root_real, target, what));
      } else {
        path = target;
      }
    } else {
      TS_ASSIGN_OR_RETURN(path, internal::ContainedRealPath(root_real, path, what));
    }
    if (options.verify_on_open && !checked) {
      TS_ASSIGN_OR_RETURN(auto d, internal::DigestFile(path));
      if (d.bytes != info.bytes || HashHex(d.xxh3) != info.xxh3) {
        return Corruption(what + ": file has " + std::to_string(d.bytes) + " bytes with XXH3 " + HashHex(d.xxh3) +
                          ", the index says " + std::to_string(info.bytes) + " bytes, " + info.xxh3);
      }
    }
    TS_ASSIGN_OR_RETURN(auto shard, TsafeShard::Open(path, options.shard, shared_schema.get(),
                                                     (fs::path(root_real) / info.name).string()));
    return std::shared_ptr<const ShardSource>(std::move(shard));
  };
}

Result<std::shared_ptr<Dataset>> Dataset::Open(const std::string& dir, const DatasetOptions& options) {
  TS_ASSIGN_OR_RETURN(DatasetIndex index, ReadIndexFile(dir, options.shard.limits));
  ShardOpener opener = NativeOpener(dir, index.schema, options);
  return FromShards(dir, std::move(index.schema), std::move(index.shards), std::move(opener), options,
                    std::move(index.metadata_json));
}

const std::string& Dataset::location() const { return impl_->location; }
std::uint64_t Dataset::num_samples() const { return impl_->starts.back(); }
const Schema& Dataset::schema() const { return impl_->schema; }
const std::vector<ShardInfo>& Dataset::shards() const { return impl_->shards; }
const std::string& Dataset::metadata_json() const { return impl_->metadata; }
std::uint64_t Dataset::shard_start(std::size_t s) const { return impl_->starts.at(s); }

Result<Dataset::Location> Dataset::Locate(std::uint64_t i) const {
  if (i >= num_samples()) {
    return OutOfRange(impl_->location + ": sample " + std::to_string(i) + " is out of range (" +
                      std::to_string(num_samples()) + " samples)");
  }
  const std::size_t s = impl_->ShardOf(i);
  return Location{s, i - impl_->starts[s]};
}

Result<std::shared_ptr<const ShardSource>> Dataset::OpenShard(std::size_t s) const {
  if (s >= impl_->shards.size()) {
    return OutOfRange(impl_->location + ": shard " + std::to_string(s) + " is out of range (" +
                      std::to_string(impl_->shards.size()) + " shards)");
  }
  return impl_->Get(s);
}

Status Dataset::Read(std::uint64_t i, Sample& out) const {
  TS_ASSIGN_OR_RETURN(Location loc, Locate(i));
  bool opened = false;
  TS_ASSIGN_OR_RETURN(out.owner, impl_->Get(loc.shard, &opened));
  if (opened) impl_->HintIndexOrder(loc.shard);
  out.index = i;
  return out.owner->Read(loc.local, out.fields);
}

SampleIterator Dataset::Iterate(std::vector<std::uint64_t> order) const {
  const std::uint64_t n = order.size();
  return SampleIterator(impl_, std::move(order), 0, n, false);
}

SampleIterator Dataset::IterateRange(std::uint64_t begin, std::uint64_t end) const {
  end = std::min(end, num_samples());
  begin = std::min(begin, end);
  return SampleIterator(impl_, {}, begin, end, true);
}

SampleIterator::SampleIterator(std::shared_ptr<const Dataset::Impl> ds, std::vector<std::uint64_t> order,
                               std::uint64_t begin, std::uint64_t end, bool ranged)
    : ds_(std::move(ds)), order_(std::move(order)), ranged_(ranged), begin_(begin), end_(end) {}

bool SampleIterator::Fail(Status s) {
  status_ = std::move(s);
  pos_ = end_ - begin_;  // stop for good
  return false;
}

// No more slots than max_open_shards: an open shard holds its mapping and,
// for a remote dataset, its pin in a cache that may have a size limit.
std::size_t SampleIterator::Slots() const {
  return std::min(kSlots, std::max<std::size_t>(ds_->options.max_open_shards, 1));
}

bool SampleIterator::Next(Sample& out) {
  if (!status_.ok() || begin_ + pos_ >= end_) return false;
  const std::uint64_t id = ranged_ ? begin_ + pos_ : order_[pos_];
  if (!cur_ || id < cur_start_ || id >= cur_end_) {
    if (id >= ds_->starts.back()) {
      return Fail(OutOfRange(ds_->location + ": sample " + std::to_string(id) + " at position " + std::to_string(pos_) +
                             " of the order is out of range (" + std::to_string(ds_->starts.back()) + " samples)"));
    }
    const std::size_t s = ds_->ShardOf(id);
    Slot& slot = slots_[s % Slots()];
    if (slot.shard != s) {
      auto src = ds_->Get(s);
      if (!src.ok()) return Fail(src.status());
      slot.shard = s;
      slot.src = std::move(*src);
      HintShardsAfter(s);
    }
    cur_ = slot.src;
    cur_start_ = ds_->starts[s];
    cur_end_ = ds_->starts[s + 1];
  }
  if (!ranged_ && pos_ + kAhead < order_.size()) Prefetch(order_[pos_ + kAhead]);
  Status st = cur_->Read(id - cur_start_, out.fields);
  if (!st.ok()) return Fail(std::move(st));
  if (out.owner != cur_) out.owner = cur_;
  out.index = id;
  ++pos_;
  return true;
}

void SampleIterator::HintShardsAfter(std::size_t s) {
  if (ranged_) return ds_->HintIndexOrder(s, end_ > begin_ ? ds_->ShardOf(end_ - 1) : 0);
  const std::size_t want = ds_->options.prefetch_shards;
  if (!ds_->prefetch || want == 0) return;
  // A bounded look ahead: shards are entered O(shards) times an epoch, and
  // a block shuffle mixes only a few shards at a time.
  constexpr std::uint64_t kWindow = 1 << 16;
  std::vector<std::size_t> next;
  std::uint64_t lo = 0, hi = 0;  // the shard range of the id last looked up
  for (std::uint64_t p = pos_ + 1; p < order_.size() && p <= pos_ + kWindow && next.size() < want; ++p) {
    const std::uint64_t id = order_[p];
    if (id >= lo && id < hi) continue;
    if (id >= ds_->starts.back()) break;  // Next() reports it in turn
    const std::size_t known = ds_->ShardOf(id);
    lo = ds_->starts[known];
    hi = ds_->starts[known + 1];
    if (known != s && std::find(next.begin(), next.end(), known) == next.end()) next.push_back(known);
  }
  if (!next.empty()) ds_->prefetch(next);
}

void SampleIterator::Prefetch(std::uint64_t id) {
  if (id >= ds_->starts.back()) return;  // Next() reports it in turn
  const std::size_t s = ds_->ShardOf(id);
  const Slot& slot = slots_[s % Slots()];
  if (slot.shard != s) return;  // not open here yet: no lock on this path
  if (!slot.src->Read(id - ds_->starts[s], ahead_).ok()) return;
  for (const FieldView& f : ahead_) {
    // The first two lines; the hardware prefetcher follows a sequential run.
    if (!f.bytes.empty()) __builtin_prefetch(f.bytes.data());
    if (f.bytes.size() > 64) __builtin_prefetch(f.bytes.data() + 64);
  }
}

Status Dataset::Verify(std::vector<Status>* problems,
                       const std::function<void(std::size_t, std::size_t)>& progress) const {
  Status first;
  auto note = [&](Status s) {
    if (first.ok()) first = s;
    if (problems) problems->push_back(std::move(s));
    return problems != nullptr;  // keep going?
  };
  const std::size_t total = impl_->shards.size();
  std::error_code ec;
  fs::path real = fs::canonical(impl_->location, ec);
  const std::string root = ec ? impl_->location : real.string();
  for (std::size_t s = 0; s < total; ++s) {
    const ShardInfo& info = impl_->shards[s];
    const std::string what = root + ": shard " + std::to_string(s) + " " + QuoteName(info.name);
    Status st;
    auto check_file = [&](const std::string& name, std::uint64_t bytes, const std::string& xxh3) -> Status {
      TS_ASSIGN_OR_RETURN(std::string path, internal::ContainedRealPath(root, (fs::path(root) / name).string(), what));
      TS_ASSIGN_OR_RETURN(auto d, internal::DigestFile(path));
      if (d.bytes != bytes || HashHex(d.xxh3) != xxh3) {
        return Corruption(what + ": " + name + " has " + std::to_string(d.bytes) + " bytes with XXH3 " +
                          HashHex(d.xxh3) + ", the index says " + std::to_string(bytes) + " bytes, " + xxh3);
      }
      return Status::OK();
    };
    if (info.kind == "tsafe" && fs::is_directory(root, ec)) {
      if (info.zstd) st = check_file(info.zstd->name, info.zstd->bytes, info.zstd->xxh3);
      // The raw file when present (a compressed shard's decompressed copy is
      // checked after OpenShard below decompresses it, if needed).
      if (st.ok() && (!info.zstd || fs::exists(fs::path(root) / info.name, ec))) {
        st = check_file(info.name, info.bytes, info.xxh3);
      }
    }
    if (st.ok()) {
      // Native: the tsafe checksums; MDS: the index's hashes of the raw
      // shard actually mapped (a cached copy included) and of its zip;
      // WebDataset: each sample read.
      auto src = impl_->Get(s);
      st = src.ok() ? (*src)->VerifyData() : src.status();
    }
    if (!st.ok() && !note(st)) return first;
    if (progress) progress(s + 1, total);
  }
  return first;
}

}  // namespace tensorsafe::dataset
