// Compressed MDS shards: hashes, and decompression (codecs.cc) into a cache
// directory (docs/formats/mds.md, "Compression and hashes").
#include <sys/stat.h>
#include <xxhash.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dataset/sources/mds/internal.h"
#include "io/atomic_file.h"
#include "tensorsafe/env.h"
#include "util/text.h"

namespace tensorsafe::mds::internal {
namespace {

using tensorsafe::Env;
using tensorsafe::internal::QuoteName;

// stat() without following a final symlink: the kind of file at `path`.
// Returns -1 when absent, else the size; kCorruption for a symlink or a
// non-regular file (issue: readers never leave the dataset directory).
Result<std::int64_t> RegularFileSize(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::int64_t{-1};
    return IOError(path + ": " + std::strerror(errno), errno);
  }
  if (!S_ISREG(st.st_mode)) return Corruption(path + ": not a regular file (symlinks are not followed)");
  return static_cast<std::int64_t>(st.st_size);
}

// Every directory component between `root` and the file must be a real
// directory, not a symlink that leads elsewhere.
Status CheckNoSymlinkDirs(const std::string& root, const std::string& rel) {
  std::size_t slash = 0;
  while ((slash = rel.find('/', slash)) != std::string::npos) {
    std::string dir = root + "/" + rel.substr(0, slash);
    struct stat st;
    if (lstat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
      return Corruption(dir + ": not a directory (symlinks are not followed)");
    }
    ++slash;
  }
  return Status::OK();
}

Status MakeDirs(const std::string& path) {
  std::string cur;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      return IOError(cur + ": mkdir: " + std::strerror(errno), errno);
    }
  }
  return Status::OK();
}

// The cache file name for `shard`'s raw bytes (mds.md "Compression and
// hashes"). Every MDS writer names its first shard shard.00000.mds, so the
// basename says nothing about which dataset a cached file came from:
//   raw-<algorithm>-<hex>-<raw bytes>.mds   an index digest of the raw shard
//                                           (whichever codec made it)
//   zip-<codec>-<algorithm>-<hex>-<raw bytes>.mds
//                                           else one of the zip: the raw
//                                           bytes are a function of the zip
//                                           and its codec (the same bytes may
//                                           decode under two codecs: brotli
//                                           and snappy have no magic)
//   at-<xxh3_64>-<raw bytes>.mds            else the zip file's identity: its
//                                           real path, size, mtime, device
//                                           and inode, plus the index entry
// The last keeps datasets at different paths apart, and a dataset rewritten
// in place (new inode or mtime) from its old cache file, without reading the
// zip on every open; the price is that such a cache file is found only
// while its zip exists unchanged.
Result<std::string> CacheFileName(const ShardEntry& shard, const std::string& zip_path, const std::string& in_root) {
  const std::string tail = "-" + std::to_string(shard.raw.bytes) + ".mds";
  if (const HashDigest* h = NamingDigest(shard.raw)) return "raw-" + h->algorithm + "-" + h->hex + tail;
  if (const HashDigest* h = NamingDigest(shard.zip)) {
    TS_ASSIGN_OR_RETURN(Codec codec, ParseCompression(shard.compression));
    return "zip-" + std::string(CodecName(codec)) + "-" + h->algorithm + "-" + h->hex + tail;
  }
  struct stat st;
  if (lstat(zip_path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound(zip_path + ": compressed shard not found (nor " + in_root + ")");
    return IOError(zip_path + ": " + std::strerror(errno), errno);
  }
  if (!S_ISREG(st.st_mode)) return Corruption(zip_path + ": not a regular file (symlinks are not followed)");
  std::unique_ptr<char, decltype(&std::free)> real(realpath(zip_path.c_str(), nullptr), std::free);
  if (!real) return IOError(zip_path + ": realpath: " + std::strerror(errno), errno);
  std::string id = std::string(real.get()) + '\0';
  for (std::uint64_t v : {static_cast<std::uint64_t>(st.st_size), static_cast<std::uint64_t>(st.st_mtim.tv_sec),
                          static_cast<std::uint64_t>(st.st_mtim.tv_nsec), static_cast<std::uint64_t>(st.st_dev),
                          static_cast<std::uint64_t>(st.st_ino), shard.zip.bytes, shard.raw.bytes, shard.samples}) {
    id += std::to_string(v) + ',';
  }
  id += shard.compression;
  return "at-" + Hex(XXH3_64bits(id.data(), id.size()), 16) + tail;
}

// Whether `cache_dir` is the dataset directory itself (OpenAny's default).
Result<bool> SameDirectory(const std::string& cache_dir, const std::string& root) {
  struct stat a, b;
  if (stat(cache_dir.c_str(), &a) != 0) {
    if (errno == ENOENT) return false;  // created at decompression
    return IOError(cache_dir + ": " + std::strerror(errno), errno);
  }
  if (stat(root.c_str(), &b) != 0) return IOError(root + ": " + std::strerror(errno), errno);
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

}  // namespace

// Decompresses `zip_path` into a temporary file renamed to `out_path` once
// its size and every xxh digest of both files check out: concurrent readers
// never see a partial shard, and a failure leaves nothing behind.
Status DecompressShard(const std::string& zip_path, const ShardEntry& shard, const std::string& out_path) {
  Env* env = Env::Default();
  TS_ASSIGN_OR_RETURN(Codec codec, ParseCompression(shard.compression));
  TS_ASSIGN_OR_RETURN(auto region, env->Map(zip_path));
  auto zip = region->bytes();
  if (zip.size() != shard.zip.bytes) {
    return Corruption(zip_path + ": " + std::to_string(zip.size()) + " bytes, the index says " +
                      std::to_string(shard.zip.bytes));
  }
  TS_RETURN_IF_ERROR(VerifyHashes(shard.zip, zip, zip_path));
  TS_ASSIGN_OR_RETURN(tensorsafe::internal::AtomicFile out, tensorsafe::internal::AtomicFile::Create(out_path, env));
  TS_RETURN_IF_ERROR(DecodeShard(codec, zip, shard.raw.bytes, zip_path, out.file()));
  // A cache entry, rebuilt from the archive after a crash: no fsync.
  return out.Commit(/*sync=*/false, [&]() -> Status {
    TS_ASSIGN_OR_RETURN(auto mapped, env->Map(out.temp_path()));
    return VerifyHashes(shard.raw, mapped->bytes(), zip_path + " (decompressed)");
  });
}

// A digest that may name a cached raw shard: one that every decompression
// checks (so a file under the name holds those bytes), of 64 bits or more
// (xxh32: about a 1% chance of a collision among 10,000 same-sized shards),
// and plain lower-case hex of the algorithm's length (it becomes a file name).
const HashDigest* NamingDigest(const FileRef& ref) {
  static constexpr struct {
    std::string_view algorithm;
    std::size_t hex_digits;
  } kStrong[] = {{"xxh128", 32}, {"xxh3_128", 32}, {"xxh3_64", 16}, {"xxh64", 16}};
  for (const auto& want : kStrong) {
    for (const HashDigest& h : ref.hashes) {
      if (h.algorithm == want.algorithm && h.hex.size() == want.hex_digits &&
          h.hex.find_first_not_of("0123456789abcdef") == std::string::npos) {
        return &h;
      }
    }
  }
  return nullptr;
}

std::string Hex(std::uint64_t v, int digits) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

bool XxhDigest(std::string_view algorithm, std::span<const std::byte> bytes, std::string* hex) {
  if (algorithm == "xxh3_64") {
    *hex = Hex(XXH3_64bits(bytes.data(), bytes.size()), 16);
  } else if (algorithm == "xxh64") {
    *hex = Hex(XXH64(bytes.data(), bytes.size(), 0), 16);
  } else if (algorithm == "xxh32") {
    *hex = Hex(XXH32(bytes.data(), bytes.size(), 0), 8);
  } else if (algorithm == "xxh128" || algorithm == "xxh3_128") {
    XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
    *hex = Hex(h.high64, 16) + Hex(h.low64, 16);
  } else {
    return false;
  }
  return true;
}

Status VerifyHashes(const FileRef& ref, std::span<const std::byte> bytes, const std::string& what) {
  for (const HashDigest& h : ref.hashes) {
    std::string got;
    if (!XxhDigest(h.algorithm, bytes, &got)) continue;  // sha1, md5, ...: not checked
    if (got != h.hex) {
      return Corruption(what + ": " + h.algorithm + " is " + got + ", the index says " + QuoteName(h.hex));
    }
  }
  return Status::OK();
}

Result<std::string> EnsureRawShard(const Index& dataset, const ShardEntry& shard, const ShardOptions& options) {
  const std::string& root = dataset.root;
  TS_RETURN_IF_ERROR(CheckNoSymlinkDirs(root, shard.raw.basename));
  const std::string in_root = root + "/" + shard.raw.basename;
  TS_ASSIGN_OR_RETURN(std::int64_t size, RegularFileSize(in_root));
  auto verify = [&](const std::string& path) -> Status {
    if (!options.verify_existing) return Status::OK();
    TS_ASSIGN_OR_RETURN(auto region, Env::Default()->Map(path));
    return VerifyHashes(shard.raw, region->bytes(), path);
  };
  if (size >= 0 || !shard.compressed) {
    if (size < 0) return NotFound(in_root + ": shard file not found");
    TS_RETURN_IF_ERROR(verify(in_root));
    return in_root;  // its size is checked against the index when mapped
  }
  if (options.cache_dir.empty()) {
    return FailedPrecondition(in_root + ": not found, and decompressing " + shard.zip.basename +
                              " needs a cache directory (ShardOptions::cache_dir)");
  }
  TS_RETURN_IF_ERROR(CheckNoSymlinkDirs(root, shard.zip.basename));
  const std::string zip_path = root + "/" + shard.zip.basename;
  TS_ASSIGN_OR_RETURN(bool in_place, SameDirectory(options.cache_dir, root));
  std::string cached = in_root;  // the dataset's own directory: its own name, as StreamingDataset does
  if (!in_place) {
    TS_ASSIGN_OR_RETURN(std::string name, CacheFileName(shard, zip_path, in_root));
    cached = options.cache_dir + "/" + name;
  }
  // Reuse by name and size only: a name from an index digest was written
  // only after decompression checked that digest, and one from the zip's
  // identity changes when the zip does, so re-hashing the raw shard on every
  // open (a full read, against O(1) access) is left to verify_existing.
  TS_ASSIGN_OR_RETURN(std::int64_t csize, RegularFileSize(cached));
  if (csize >= 0 && static_cast<std::uint64_t>(csize) == shard.raw.bytes) {
    TS_RETURN_IF_ERROR(verify(cached));
    return cached;
  }
  // Absent or of another size (a stale file): decompress over it.
  TS_ASSIGN_OR_RETURN(std::int64_t zsize, RegularFileSize(zip_path));
  if (zsize < 0) return NotFound(zip_path + ": compressed shard not found (nor " + in_root + ")");
  std::size_t slash = cached.rfind('/');
  TS_RETURN_IF_ERROR(MakeDirs(cached.substr(0, slash)));
  TS_RETURN_IF_ERROR(DecompressShard(zip_path, shard, cached));
  return cached;
}

}  // namespace tensorsafe::mds::internal
