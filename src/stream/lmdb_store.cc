// LmdbStore (include/tensorsafe/stream/lmdb.h): values are native stream
// messages (docs/STREAM.md §4-5, §10).
#include "tensorsafe/stream/lmdb.h"

#include <lmdb.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "stream/native_codec.h"
#include "tensorsafe/formats/registry.h"
#include "tensorsafe/reader.h"
#include "util/hash.h"
#include "util/text.h"

namespace tensorsafe {
namespace {

using tensorsafe::internal::Str;

// One mapping from LMDB's return codes to ours.
Status MdbStatus(int rc, const std::string& what) {
  const std::string msg = what + ": " + ::mdb_strerror(rc);
  switch (rc) {
    case MDB_SUCCESS: return Status::OK();
    case MDB_NOTFOUND: return NotFound(msg);
    case MDB_MAP_FULL:
    case MDB_READERS_FULL:
    case MDB_TXN_FULL:
    case MDB_DBS_FULL: return LimitExceeded(msg);
    case MDB_BAD_VALSIZE: return InvalidArgument(msg);
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID:
    case MDB_VERSION_MISMATCH: return Corruption(msg);
    default: return rc > 0 ? IOError(msg, rc) : Internal(msg);
  }
}

MDB_val Val(std::string_view s) { return MDB_val{s.size(), const_cast<char*>(s.data())}; }

std::span<const std::byte> Bytes(const MDB_val& v) { return {static_cast<const std::byte*>(v.mv_data), v.mv_size}; }

Status CheckKey(std::string_view key, MDB_env* env) {
  const auto max = static_cast<std::size_t>(::mdb_env_get_maxkeysize(env));
  if (key.empty() || key.size() > max) {
    return InvalidArgument("key of " + Str(key.size()) + " bytes; LMDB keys are 1.." + Str(max) + " bytes");
  }
  return Status::OK();
}

}  // namespace

class LmdbStore::Impl {
 public:
  ~Impl() {
    if (env_ != nullptr) ::mdb_env_close(env_);
  }
  std::string path_;
  LmdbOptions opt_;
  MDB_env* env_ = nullptr;
  MDB_dbi dbi_ = 0;
};

// A write transaction that commits every `commit_bytes` (bulk loads) or
// only at the end (Put, PutMany). Aborts on destruction unless committed.
class WriteTxn {
 public:
  explicit WriteTxn(LmdbStore::Impl& s, std::uint64_t commit_bytes = UINT64_MAX) : s_(s), commit_bytes_(commit_bytes) {}
  ~WriteTxn() {
    if (txn_ != nullptr) ::mdb_txn_abort(txn_);
  }

  Status Put(std::string_view key, const TensorSet& batch) {
    TS_RETURN_IF_ERROR(CheckKey(key, s_.env_));
    TS_ASSIGN_OR_RETURN(internal::EncodedBatch e, internal::EncodeBatch(batch, 0, s_.opt_.write_limits));
    if (txn_ == nullptr) {
      TS_RETURN_IF_ERROR(MdbStatus(::mdb_txn_begin(s_.env_, nullptr, 0, &txn_), s_.path_ + ": begin write"));
    }
    MDB_val k = Val(key);
    MDB_val v{e.head.size() + e.header.data_bytes, nullptr};
    // MDB_RESERVE: encode straight into LMDB's page (one copy of the data).
    TS_RETURN_IF_ERROR(
        MdbStatus(::mdb_put(txn_, s_.dbi_, &k, &v, MDB_RESERVE), s_.path_ + ": put " + std::string(key)));
    auto* p = static_cast<std::byte*>(v.mv_data);
    std::memcpy(p, e.head.data(), e.head.size());
    p += e.head.size();
    for (std::size_t i = 0; i < batch.tensors.size(); ++i) {
      const auto& d = batch.tensors[i].data;
      if (!d.empty()) std::memcpy(p, d.data(), d.size());
      std::memset(p + d.size(), 0, e.pads[i]);
      p += d.size() + e.pads[i];
    }
    pending_ += v.mv_size;
    if (pending_ >= commit_bytes_) return Commit();
    return Status::OK();
  }

  Status Commit() {
    if (txn_ == nullptr) return Status::OK();
    MDB_txn* t = txn_;
    txn_ = nullptr;
    pending_ = 0;
    return MdbStatus(::mdb_txn_commit(t), s_.path_ + ": commit");
  }

 private:
  LmdbStore::Impl& s_;
  std::uint64_t commit_bytes_;
  MDB_txn* txn_ = nullptr;
  std::uint64_t pending_ = 0;
};

class LmdbSnapshot::Impl {
 public:
  ~Impl() {
    if (txn_ != nullptr) ::mdb_txn_abort(txn_);
  }
  std::shared_ptr<const LmdbStore> store_;  // keeps the environment open
  const LmdbStore::Impl* s_ = nullptr;
  MDB_txn* txn_ = nullptr;
  mutable std::mutex mu_;  // a transaction is used by one thread at a time

  Result<MDB_val> Raw(std::string_view key) const {
    const LmdbStore::Impl& s = *s_;
    TS_RETURN_IF_ERROR(CheckKey(key, s.env_));
    MDB_val k = Val(key), v{};
    const int rc = ::mdb_get(txn_, s.dbi_, &k, &v);
    if (rc == MDB_NOTFOUND) return NotFound(s.path_ + ": no key \"" + std::string(key) + "\"");
    TS_RETURN_IF_ERROR(MdbStatus(rc, s.path_ + ": get"));
    return v;
  }
};

LmdbSnapshot::LmdbSnapshot(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LmdbSnapshot::~LmdbSnapshot() = default;

Result<TensorSet> LmdbSnapshot::Get(std::string_view key) const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  TS_ASSIGN_OR_RETURN(MDB_val v, impl_->Raw(key));
  auto set = DecodeMessage(Bytes(v), shared_from_this(), impl_->s_->opt_.read);
  if (!set.ok()) return set.status().WithContext(impl_->s_->path_ + ": key \"" + std::string(key) + "\"");
  return set;
}

Result<std::vector<LmdbEntry>> LmdbSnapshot::List(std::string_view prefix) const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  const LmdbStore::Impl& s = *impl_->s_;
  MDB_cursor* cur = nullptr;
  TS_RETURN_IF_ERROR(MdbStatus(::mdb_cursor_open(impl_->txn_, s.dbi_, &cur), s.path_ + ": cursor"));
  std::unique_ptr<MDB_cursor, void (*)(MDB_cursor*)> guard(cur, ::mdb_cursor_close);
  std::vector<LmdbEntry> out;
  MDB_val k = Val(prefix), v{};
  int rc = ::mdb_cursor_get(cur, &k, &v, prefix.empty() ? MDB_FIRST : MDB_SET_RANGE);
  for (; rc == MDB_SUCCESS; rc = ::mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    std::string_view key(static_cast<const char*>(k.mv_data), k.mv_size);
    if (!key.starts_with(prefix)) {
      rc = MDB_NOTFOUND;  // past the prefix: done
      break;
    }
    auto h = internal::DecodeHeader(Bytes(v), s.opt_.read);
    if (!h.ok()) return h.status().WithContext(s.path_ + ": key \"" + std::string(key) + "\"");
    out.push_back(LmdbEntry{std::string(key), v.mv_size, h->tensor_count});
  }
  if (rc != MDB_NOTFOUND) return MdbStatus(rc, s.path_ + ": iterate");
  return out;
}

LmdbStore::LmdbStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LmdbStore::~LmdbStore() = default;
const std::string& LmdbStore::path() const { return impl_->path_; }

Result<std::shared_ptr<LmdbStore>> LmdbStore::Open(const std::string& path, const LmdbOptions& opt) {
  auto impl = std::make_unique<Impl>();
  impl->path_ = path;
  impl->opt_ = opt;
  if (opt.subdir && !opt.read_only) {
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      return IOError(path + ": mkdir: " + std::strerror(errno), errno);
    }
  }
  TS_RETURN_IF_ERROR(MdbStatus(::mdb_env_create(&impl->env_), path + ": create env"));
  TS_RETURN_IF_ERROR(MdbStatus(::mdb_env_set_mapsize(impl->env_, opt.map_size), path + ": map size"));
  TS_RETURN_IF_ERROR(MdbStatus(::mdb_env_set_maxreaders(impl->env_, opt.max_readers), path + ": max readers"));
  unsigned flags = MDB_NOTLS;  // snapshots are released by whichever thread drops the last view
  if (!opt.subdir) flags |= MDB_NOSUBDIR;
  if (opt.read_only) flags |= MDB_RDONLY;
  if (!opt.sync) flags |= MDB_NOSYNC;
  TS_RETURN_IF_ERROR(MdbStatus(::mdb_env_open(impl->env_, path.c_str(), flags, 0644), path + ": open"));
  MDB_txn* txn = nullptr;
  TS_RETURN_IF_ERROR(
      MdbStatus(::mdb_txn_begin(impl->env_, nullptr, opt.read_only ? MDB_RDONLY : 0, &txn), path + ": begin"));
  int rc = ::mdb_dbi_open(txn, nullptr, 0, &impl->dbi_);
  if (rc != MDB_SUCCESS) {
    ::mdb_txn_abort(txn);
    return MdbStatus(rc, path + ": open database");
  }
  TS_RETURN_IF_ERROR(MdbStatus(::mdb_txn_commit(txn), path + ": commit"));
  return std::make_shared<LmdbStore>(std::move(impl));
}

Status LmdbStore::Put(std::string_view key, const TensorSet& batch) {
  if (impl_->opt_.read_only) return FailedPrecondition(impl_->path_ + " is open read-only");
  WriteTxn w(*impl_);
  TS_RETURN_IF_ERROR(w.Put(key, batch));
  return w.Commit();
}

Status LmdbStore::PutMany(const std::vector<std::pair<std::string, TensorSet>>& items) {
  if (impl_->opt_.read_only) return FailedPrecondition(impl_->path_ + " is open read-only");
  WriteTxn w(*impl_);
  for (const auto& [k, b] : items) TS_RETURN_IF_ERROR(w.Put(k, b));
  return w.Commit();
}

Status LmdbStore::Delete(std::string_view key) {
  if (impl_->opt_.read_only) return FailedPrecondition(impl_->path_ + " is open read-only");
  TS_RETURN_IF_ERROR(CheckKey(key, impl_->env_));
  MDB_txn* txn = nullptr;
  TS_RETURN_IF_ERROR(MdbStatus(::mdb_txn_begin(impl_->env_, nullptr, 0, &txn), impl_->path_ + ": begin"));
  MDB_val k = Val(key);
  const int rc = ::mdb_del(txn, impl_->dbi_, &k, nullptr);
  if (rc != MDB_SUCCESS) {
    ::mdb_txn_abort(txn);
    if (rc == MDB_NOTFOUND) return NotFound(impl_->path_ + ": no key \"" + std::string(key) + "\"");
    return MdbStatus(rc, impl_->path_ + ": delete");
  }
  return MdbStatus(::mdb_txn_commit(txn), impl_->path_ + ": commit");
}

Result<std::shared_ptr<LmdbSnapshot>> LmdbStore::Snapshot() const {
  auto impl = std::make_unique<LmdbSnapshot::Impl>();
  impl->store_ = shared_from_this();
  impl->s_ = impl_.get();
  TS_RETURN_IF_ERROR(
      MdbStatus(::mdb_txn_begin(impl_->env_, nullptr, MDB_RDONLY, &impl->txn_), impl_->path_ + ": begin read"));
  return std::make_shared<LmdbSnapshot>(std::move(impl));
}

Result<TensorSet> LmdbStore::Get(std::string_view key) const {
  TS_ASSIGN_OR_RETURN(auto snap, Snapshot());
  std::shared_ptr<internal::AlignedBuffer> copy;
  {
    std::lock_guard<std::mutex> lock(snap->impl_->mu_);
    TS_ASSIGN_OR_RETURN(MDB_val v, snap->impl_->Raw(key));
    copy = internal::AlignedBuffer::Allocate(v.mv_size);
    if (!copy) return LimitExceeded("cannot allocate " + Str(v.mv_size) + " bytes");
    std::memcpy(copy->data(), v.mv_data, v.mv_size);
  }
  snap.reset();  // the copy needs no transaction
  auto set = DecodeMessage({copy->data(), copy->capacity()}, copy, impl_->opt_.read);
  if (!set.ok()) return set.status().WithContext(impl_->path_ + ": key \"" + std::string(key) + "\"");
  return set;
}

Result<std::vector<LmdbEntry>> LmdbStore::List(std::string_view prefix) const {
  TS_ASSIGN_OR_RETURN(auto snap, Snapshot());
  return snap->List(prefix);
}

// ---------------------------------------------------------------- bulk load

namespace {

std::string Stem(const std::string& path) {
  std::string s = std::filesystem::path(path).filename().string();
  if (s.size() > 6 && s.ends_with(".tsafe")) s.resize(s.size() - 6);
  return s;
}

std::string GroupKey(std::uint64_t g) {
  std::string s = std::to_string(g);
  return std::string(s.size() < 8 ? 8 - s.size() : 0, '0') + s;
}

}  // namespace

Result<std::uint64_t> LoadTsafeFile(LmdbStore& store, const std::string& path, const LmdbLoadOptions& opt) {
  if (store.impl_->opt_.read_only) return FailedPrecondition(store.path() + " is open read-only");
  TS_ASSIGN_OR_RETURN(auto reader, ExplainFormatMismatch(path, Format::kTsafe, Reader::Open(path)));
  TS_ASSIGN_OR_RETURN(std::string meta, reader->Metadata());
  if (meta == "{}") meta.clear();
  TS_ASSIGN_OR_RETURN(auto names, reader->Names());
  WriteTxn w(*store.impl_, opt.commit_bytes);
  TensorSet batch;
  batch.metadata_json = meta;
  std::uint64_t batches = 0;
  auto flush = [&](std::string key) -> Status {
    TS_RETURN_IF_ERROR(w.Put(key, batch));
    ++batches;
    batch.tensors.clear();
    return Status::OK();
  };
  for (std::size_t i = 0; i < names.size(); ++i) {
    TS_ASSIGN_OR_RETURN(Tensor t, reader->Get(names[i]));
    if (internal::Hash64(t.data) != t.info.data_checksum) {
      return Corruption(path + ": tensor \"" + names[i] + "\": data checksum mismatch");
    }
    batch.tensors.push_back(std::move(t));
    if (opt.tensors_per_batch == 1) {
      TS_RETURN_IF_ERROR(flush(opt.key_prefix + names[i]));
    } else if (opt.tensors_per_batch > 1 && batch.tensors.size() == opt.tensors_per_batch) {
      TS_RETURN_IF_ERROR(flush(opt.key_prefix + GroupKey(batches)));
    }
  }
  if (opt.tensors_per_batch == 0) {
    TS_RETURN_IF_ERROR(flush(opt.key_prefix + Stem(path)));
  } else if (!batch.tensors.empty()) {
    TS_RETURN_IF_ERROR(flush(opt.key_prefix + GroupKey(batches)));
  }
  TS_RETURN_IF_ERROR(w.Commit());
  return batches;
}

Result<std::uint64_t> LoadTsafeDirectory(LmdbStore& store, const std::string& dir, const LmdbLoadOptions& opt) {
  std::error_code ec;
  std::vector<std::string> files;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file() && it->path().extension() == ".tsafe") files.push_back(it->path().string());
  }
  if (ec) return IOError(dir + ": " + ec.message(), ec.value());
  std::sort(files.begin(), files.end());
  std::uint64_t total = 0;
  for (const std::string& f : files) {
    LmdbLoadOptions o = opt;
    if (opt.tensors_per_batch != 0) o.key_prefix += Stem(f) + "/";
    TS_ASSIGN_OR_RETURN(std::uint64_t n, LoadTsafeFile(store, f, o));
    total += n;
  }
  return total;
}

}  // namespace tensorsafe
