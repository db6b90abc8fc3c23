// Internals of the safetensors codec shared by its files and its tests.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensorsafe/dtype.h"
#include "tensorsafe/env.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::safetensors::internal {

// One safetensors dtype. Its rank is its position in the crate's Dtype enum,
// which is also the writer's sort key (descending).
struct StDType {
  std::string_view name;
  DType dtype;
  std::uint32_t bits;  // per element; sizes are counted in bits, as the crate does
};

inline constexpr int kNumStDTypes = 22;
// Indexed by rank.
const StDType& StDTypeAt(int rank);
// Rank of a safetensors name, or -1.
int RankOfName(std::string_view name);
// Rank of a tensorsafe dtype, or -1 when the format lacks it.
int RankOfDType(DType dtype);

// Appends `s` as a JSON string escaped as serde_json does: `"` and `\`
// backslashed; \b \f \n \r \t short; other bytes below 0x20 as \u00xx (lower
// case); everything else, non-ASCII included, verbatim.
void AppendJsonString(std::string& out, std::string_view s);

// Byte offset of the first invalid UTF-8 sequence in `s`, or s.size().
std::size_t FirstInvalidUtf8(std::string_view s);

// Where a tensor's data lies, as its header entry says. Kept apart from its
// TensorInfo so that sorting by offsets moves small records, not whole infos.
struct DataSpan {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint32_t index = 0;  // into the infos parsed with it
  int rank = -1;            // safetensors dtype rank; -1 for an unknown dtype
};

// One entry being read: its info and span, and its shape gathered on the
// stack (most shapes are short) and allocated once at the end.
class EntryBuilder {
 public:
  EntryBuilder(TensorInfo& info, DataSpan& span) : info(info), span(span) {}
  void AddDim(std::uint64_t d) {
    if (rank_ < 8) {
      dims_[rank_] = d;
    } else {
      if (rank_ == 8) info.shape.assign(dims_, dims_ + 8);
      info.shape.push_back(d);
    }
    ++rank_;
  }
  void EndShape() {
    if (rank_ <= 8) info.shape.assign(dims_, dims_ + rank_);
  }
  TensorInfo& info;
  DataSpan& span;

 private:
  std::uint64_t dims_[8];
  std::size_t rank_ = 0;
};

// A header's entries as parsed, before the checks across entries.
struct HeaderEntries {
  std::vector<TensorInfo> infos;  // header order; name, dtype and shape set
  std::vector<DataSpan> spans;    // same order
  std::vector<std::pair<std::string, std::string>> metadata;
  bool has_metadata = false;

  // Empty again, keeping the vectors' capacity (the fast path's partial
  // work is dropped before the general reader starts).
  void Clear() {
    infos.clear();
    spans.clear();
    metadata.clear();
    has_metadata = false;
  }

  // The first metadata key, in byte order, that appears more than once, or
  // nullptr. The crate keeps the last of repeated keys; both readers refuse
  // the ambiguity.
  const std::string* RepeatedMetadataKey() const;

  // A new entry named `name`.
  EntryBuilder Add(std::string_view name) {
    TensorInfo& info = infos.emplace_back();
    info.name.assign(name);
    DataSpan& span = spans.emplace_back();
    span.index = static_cast<std::uint32_t>(spans.size() - 1);
    return EntryBuilder(info, span);
  }
};

// The fast path of ParseHeader (fast_header.cc): a scan of `header` (valid
// UTF-8, checked by the caller) that accepts only the form writers produce:
// no escapes, no unknown fields or dtypes, integers of at most 19 digits,
// "__metadata__" an object of strings at most once with distinct keys.
// It fills `out` exactly as the general parser would and returns true; on
// anything else it returns false, and the general parser, which reports
// every error, reads the header instead.
bool ScanCommonHeader(std::string_view header, HeaderEntries& out);

// A file's first bytes through its header (fewer when the length they
// give passes the file or options.max_header_bytes: ParseHeader then says
// what is wrong), in a buffer of exactly that size, not zeroed. Without
// `length_first`, in one read when the header fits in 64 KiB, else two (a
// round trip saved for files at URLs); with it, the 8-byte length, then
// the rest at once (a local file: a system call instead of a 64 KiB copy).
// ReadHeader parses them; sharded::Open first checks the magic in them.
struct HeaderBytes {
  std::unique_ptr<std::byte[]> data;
  std::size_t size = 0;
  std::span<std::byte> span() const { return {data.get(), size}; }
};
Result<HeaderBytes> ReadHeaderPrefix(const RandomAccessFile& file, const ReadOptions& options,
                                     bool length_first = false);

// ParseHeader with the fast path on or off (tests compare the two).
Result<Header> ParseHeaderWith(std::span<const std::byte> prefix, std::uint64_t file_size, const ReadOptions& options,
                               bool fast_path);

}  // namespace tensorsafe::safetensors::internal
