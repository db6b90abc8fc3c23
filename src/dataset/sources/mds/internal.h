// Pieces of the MDS reader shared by its files (index, shard, codecs, cache).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tensorsafe/dataset/mds.h"
#include "tensorsafe/env.h"
#include "tensorsafe/status.h"

namespace tensorsafe::mds::internal {

// The numpy dtype names MDS uses (scalar encodings and ndarray dtypes).
bool DTypeOfNumpyName(std::string_view name, DType* out);
// ndarray's persisted dtype byte (encodings.py `_int2value_dtype`).
bool DTypeOfNdarrayCode(std::uint8_t code, DType* out);

// Parses one encoding string into `column` (codec, dtype, shape, size).
// kUnsupported for pkl and unknown names, kCorruption for malformed ndarray
// arguments.
Status ParseEncoding(std::string_view encoding, const Limits& limits, Column* column);

// A relative path inside the dataset directory: not empty, not absolute, no
// empty, "." or ".." component, no NUL. The message says which rule failed.
Status CheckRelativePath(std::string_view path);

// Lower-case hex digest of `bytes` for the xxhash algorithms we verify
// (xxh32, xxh64, xxh3_64, xxh128); false for any other algorithm.
bool XxhDigest(std::string_view algorithm, std::span<const std::byte> bytes, std::string* hex);

// Checks `bytes` against every digest of `ref` we can compute; the others are
// skipped. kCorruption names the file, the algorithm and both digests.
Status VerifyHashes(const FileRef& ref, std::span<const std::byte> bytes, const std::string& what);

// `v` in lower-case hex, zero-padded to `digits` (at most 16): digests as
// Python's xxhash prints them, and bytes in messages.
std::string Hex(std::uint64_t v, int digits);

// The compression families of MosaicML's streaming/base/compression.py
// (mds.md, "Compression and hashes").
enum class Codec : std::uint8_t { kBrotli, kBzip2, kGzip, kSnappy, kZstd };

// The codec of an index's "compression" value ("gz", "zstd:7", "snappy"),
// spelled as compression.py names them: "<family>" or "<family>:<level>",
// the level in decimal without sign or leading zero, in the family's range. kCorruption for a family we know with a
// level it does not have or spells otherwise, kUnsupported for anything else.
Result<Codec> ParseCompression(std::string_view compression);
// The family's name in an index: "br", "bz2", "gz", "snappy", "zstd".
std::string_view CodecName(Codec codec);

// Decodes the whole compressed shard `zip` into `out` (empty, at position
// 0), as MosaicML's decompress() for `codec` reads it, through a 1 MiB
// buffer whatever `raw_bytes` says. Output past `raw_bytes` stops the decoder.
// `name` (the compressed file) starts every message. OK only when exactly
// `raw_bytes` bytes were written. Errors: kCorruption (damaged, truncated,
// trailing bytes the codec's Python reader refuses, other than `raw_bytes`
// bytes), kIOError from `out`. On error `out` holds a prefix of garbage: the
// caller removes it.
Status DecodeShard(Codec codec, std::span<const std::byte> zip, std::uint64_t raw_bytes, const std::string& name,
                   tensorsafe::WritableFile& out);

// Decompresses `zip_path` into `out_path` through a temporary file renamed
// once the size and every xxh digest of both files check out: concurrent
// readers never see a partial shard, and a failure leaves nothing behind.
Status DecompressShard(const std::string& zip_path, const ShardEntry& shard, const std::string& out_path);

// The index digest that may name a cached copy of `ref` (64 bits or more,
// plain lower-case hex), or null.
const HashDigest* NamingDigest(const FileRef& ref);

// The path of the raw shard to map for `shard`, decompressing it into the
// cache when needed (cache.cc).
Result<std::string> EnsureRawShard(const Index& dataset, const ShardEntry& shard, const ShardOptions& options);

// The field a column maps to: bytes -> kBytes, str* -> kStr, int -> kInt,
// numpy scalars -> rank-0 kTensor, json -> kJson, ndarray -> kTensor with its
// fixed dtype/shape, kAnyDim for encoded dims. An ndarray column whose dtype
// or rank is encoded per sample takes them from `first` (the encoded prefix of
// the shard's sample 0; empty when the shard has none: dtype u8, rank 0).
Result<dataset::FieldSpec> FieldOf(const Column& column, std::span<const std::byte> first);

}  // namespace tensorsafe::mds::internal
