// Options of the native .tsafe reader and writer (the resource limits that
// bound what an untrusted file can make a reader do are in limits.h).
//
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <string>

#include "tensorsafe/env.h"
#include "tensorsafe/limits.h"

namespace tensorsafe {

struct ReaderOptions {
  enum class Access {
    kMmap,   // map the file; Get() returns zero-copy views
    kPread,  // positional reads; Get() copies into a buffer (NFS, small RAM)
  };
  Access access = Access::kMmap;
  Limits limits;
  // Open() checks the checksum of the whole index (hash table, every entry,
  // metadata) and the no-overlap rule when the index is at most this many
  // bytes; larger indexes are checked entry by entry as entries are decoded
  // and in full by Verify(). 0 = always lazy; UINT64_MAX = always eager.
  std::uint64_t eager_index_bytes = std::uint64_t{4} << 20;
  // Threads that share a read of 32 MiB or more (ReadInto, and Get in kPread
  // mode), the caller included: 0 = one per core, up to 4; 1 = the caller
  // alone (as in a data-loader worker that already has a core to itself);
  // at most 64.
  unsigned read_threads = 0;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

struct WriterOptions {
  // File offset alignment of every tensor's data: a power of two from 1 to
  // 1 GiB. 64 suits SIMD loads; 4096 suits O_DIRECT and DMA.
  std::uint32_t alignment = 64;
  // fsync the file (and its directory after the rename) in Finish().
  bool sync = true;
  Limits limits;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default(). Create() makes its temporary file through it.
  Env* env = nullptr;
};

}  // namespace tensorsafe
