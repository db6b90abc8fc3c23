// LmdbStore: a key -> batch store on LMDB. Each value is one native stream
// message (docs/STREAM.md §4-5: header, descriptors, data, checksummed), so a
// value read from the store is checked exactly like one read from a socket.
//
// Zero-copy reads and their lifetime. LMDB hands out pointers into its
// read-only mapping that are valid only while the read transaction that
// produced them is open. Here a read transaction is an LmdbSnapshot, and
// every Tensor that views the mapping holds a shared reference to its
// snapshot (Tensor::owner): the transaction stays open as long as any view
// of it exists, so a view can never outlive it, whichever thread drops it
// last (transactions are opened with MDB_NOTLS). The price of holding views
// is LMDB's: an open snapshot keeps its pages from being reused (the file
// grows under concurrent writes) and occupies one of max_readers slots. Drop
// the tensors, or use LmdbStore::Get, which copies, to hold data long-term.
//
// Alignment: tensor data sits at 64-byte offsets inside a value, but LMDB
// places values at its own alignment (16 bytes for large values on overflow
// pages, 2 for small ones on leaf pages). A view is returned when the data is
// aligned for its element type; otherwise that tensor is copied.
//
// Thread safety: LmdbStore may be shared by threads (LMDB allows one writer
// at a time; Put and Delete serialise). An LmdbSnapshot may be used from any
// thread, its calls are serialised.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/status.h"
#include "tensorsafe/stream/fd.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe {

struct LmdbOptions {
  // Most bytes the database may hold (LMDB's map size; virtual address space,
  // the file grows as needed). Put fails with kLimitExceeded beyond it.
  std::uint64_t map_size = std::uint64_t{64} << 30;
  bool read_only = false;
  // `path` is a directory (created when missing), as LMDB's default; false:
  // `path` is the data file itself (MDB_NOSUBDIR, plus "<path>-lock").
  bool subdir = true;
  unsigned max_readers = 126;
  bool sync = true;  // fsync on commit (false: MDB_NOSYNC)
  // Checks applied to values read back (limits, data checksums).
  StreamReaderOptions read;
  Limits write_limits;
};

// Size facts of one entry, from its message header only.
struct LmdbEntry {
  std::string key;
  std::uint64_t value_bytes = 0;
  std::uint32_t tensor_count = 0;
};

class LmdbStore;
struct LmdbLoadOptions;

// A read transaction: a consistent view of the whole store. Tensors returned
// by Get view LMDB's mapping and keep this snapshot open (see above).
class LmdbSnapshot : public std::enable_shared_from_this<LmdbSnapshot> {
 public:
  ~LmdbSnapshot();
  LmdbSnapshot(const LmdbSnapshot&) = delete;
  LmdbSnapshot& operator=(const LmdbSnapshot&) = delete;

  // The batch at `key`, viewing the mapping. Errors: kNotFound, kCorruption
  // (the value fails a check of STREAM.md §7), kIOError.
  Result<TensorSet> Get(std::string_view key) const;
  // Entries in key order whose key starts with `prefix`.
  Result<std::vector<LmdbEntry>> List(std::string_view prefix = {}) const;

  class Impl;
  explicit LmdbSnapshot(std::unique_ptr<Impl> impl);

 private:
  friend class LmdbStore;
  std::unique_ptr<Impl> impl_;
};

class LmdbStore : public std::enable_shared_from_this<LmdbStore> {
 public:
  // Opens (or creates) the store at `path`. Errors: kIOError (with errno),
  // kInvalidArgument.
  static Result<std::shared_ptr<LmdbStore>> Open(const std::string& path, const LmdbOptions& options = {});
  ~LmdbStore();
  LmdbStore(const LmdbStore&) = delete;
  LmdbStore& operator=(const LmdbStore&) = delete;

  // Stores `batch` at `key` (replacing any value) in its own transaction.
  // Keys are 1..511 bytes. Errors: kInvalidArgument (key, batch),
  // kLimitExceeded (map full), kIOError, kFailedPrecondition (read-only).
  Status Put(std::string_view key, const TensorSet& batch);
  // Stores many batches in one transaction (all or nothing).
  Status PutMany(const std::vector<std::pair<std::string, TensorSet>>& items);
  // kNotFound when absent.
  Status Delete(std::string_view key);

  // A copy of the batch at `key` that owns its memory (no transaction held).
  Result<TensorSet> Get(std::string_view key) const;
  Result<std::vector<LmdbEntry>> List(std::string_view prefix = {}) const;
  // Opens a read transaction (see LmdbSnapshot). Errors: kLimitExceeded when
  // all max_readers slots are taken, kIOError.
  Result<std::shared_ptr<LmdbSnapshot>> Snapshot() const;

  const std::string& path() const;

  class Impl;
  explicit LmdbStore(std::unique_ptr<Impl> impl);

 private:
  friend Result<std::uint64_t> LoadTsafeFile(LmdbStore&, const std::string&, const LmdbLoadOptions&);
  std::unique_ptr<Impl> impl_;
};

// Bulk loading from .tsafe files.
struct LmdbLoadOptions {
  // 1: one batch per tensor, key = prefix + tensor name.
  // N > 1: batches of N tensors in file order, key = prefix + 8-digit group
  //        number ("00000000", ...).
  // 0: the whole file is one batch, key = prefix + file name without ".tsafe".
  // The file's metadata travels as every batch's metadata; tensor metadata
  // stays with its tensor.
  std::uint32_t tensors_per_batch = 1;
  std::string key_prefix;
  // Commit after this many bytes of values: LMDB keeps a write transaction's
  // pages in memory until commit.
  std::uint64_t commit_bytes = std::uint64_t{256} << 20;
};

// Loads one .tsafe file (data checksums checked while copying). Returns the
// number of batches stored. Errors: those of Reader::Open and Put, and
// kCorruption for a tensor whose data checksum fails (earlier commits stay).
Result<std::uint64_t> LoadTsafeFile(LmdbStore& store, const std::string& path, const LmdbLoadOptions& options = {});
// Loads every *.tsafe file of `dir` (not recursive) in name order. For
// tensors_per_batch >= 1 each file's keys get "<file name without .tsafe>/"
// after the prefix.
Result<std::uint64_t> LoadTsafeDirectory(LmdbStore& store, const std::string& dir, const LmdbLoadOptions& options = {});

}  // namespace tensorsafe
