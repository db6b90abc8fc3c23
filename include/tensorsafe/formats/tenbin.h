// WebDataset / tensorcom "tenbin" (.ten) codec: a stream of chunks
// `"~TenBin~" | int64 length | payload | zero padding to a multiple of 64`,
// two chunks per array (a header payload, then the raw C-order data).
// docs/formats/tenbin.md says exactly what is read and written and where we
// differ from webdataset; docs/PERMISSIVE.md lists what we accept beyond it.
//
// Naming: tenbin has an 8-byte "info" per array. It becomes the tensor name
// when it is non-empty (leading and trailing NULs aside), holds no NUL
// inside, is unique in the file and not another tensor's positional name;
// otherwise the tensor is named by its position ("0", "1",
// ...) and the info, when non-empty, is kept as metadata {"tenbin_info": ...}.
//
// Two levels of API: whole files/buffers (Decode, Encode, ReadFile,
// WriteFile), and chunk payloads (SplitChunks, DecodePayloads,
// EncodeHeaderPayload, EncodePayloads, JoinChunks) for tensorcom's ZeroMQ
// transport, which sends one frame per payload without magic or padding.
//
// Thread safety: all functions are pure or touch only their own files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/env.h"
#include "tensorsafe/limits.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::tenbin {

inline constexpr std::size_t kChunkAlignment = 64;   // payloads are padded to this
inline constexpr std::size_t kChunkHeaderSize = 16;  // magic + int64 length
inline constexpr std::size_t kInfoBytes = 8;

struct ReadOptions {
  // Bounds what a file can claim. Used here: max_rank (default 64; the
  // reference writer stops at 9) and max_tensor_count (arrays per buffer).
  Limits limits;
  // Reject padding bytes that are not zero (writers zero them; webdataset
  // ignores them, and so do we by default).
  bool require_zero_padding = false;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

struct WriteOptions {
  // webdataset's encoder refuses rank >= 10; readers do not care. Raise it
  // only for readers known to accept more.
  std::uint32_t max_rank = 9;
  // Use tensor names as infos (see the naming rule above). When false every
  // info is empty.
  bool names_as_infos = true;
  // WriteFile: fsync the file and its directory.
  bool sync = true;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

// Decodes a whole .ten buffer. Tensors view `bytes` and share `owner` when the
// data is aligned to its element size (always, for buffers aligned to 16);
// otherwise they own a copy. `display_name` prefixes error messages.
// Errors: kCorruption (bad magic, lengths past the end, missing padding, a
// header chunk without its data chunk, sizes that disagree), kUnsupported
// (unknown dtype string), kLimitExceeded (rank or count above the limits).
Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& options = {});
// Maps `path` and decodes it; tensors keep the mapping alive.
Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& options = {});

// Encodes every tensor of `set` (dense, little-endian) as header and data
// chunks. Errors: kUnsupported (a dtype tenbin lacks, e.g. bf16 or bool; rank
// above max_rank), kInvalidArgument (an info longer than 8 bytes or not
// ASCII; data size not matching shape; a non-dense tensor).
Result<std::string> Encode(const TensorSet& set, const WriteOptions& options = {});
// Writes the bytes Encode returns via a temporary file renamed over `path`;
// on error nothing is left behind. Streams: only headers are built in
// memory, each tensor's bytes are written from where they are.
Status WriteFile(const std::string& path, const TensorSet& set, const WriteOptions& options = {});

// True when `dtype` is in webdataset's dtype table (no bf16, bool, f8,
// complex or packed types).
bool HoldsDType(DType dtype);
// OK when every tensor of `set` reads back under its name (names travel as
// 8-byte infos; see Naming above). With `drop_names`, a name that cannot be
// an info is replaced by the tensor's position; without, kInvalidArgument
// names the first tensor whose name would not survive.
Status CheckNames(TensorSet& set, bool drop_names);

// ---- Chunk-level API (tensorcom) ----

// The header payload of one array: dtype string, info, ndim, dims.
struct ArrayHeader {
  DType dtype = DType::kF32;
  std::string info;  // at most 8 ASCII bytes (NULs allowed, as webdataset writes them)
  Shape shape;
};

// One array to encode. `data` holds the C-order elements; when `big_endian`
// is set they are byte-swapped to little-endian while encoding (tenbin has
// no byte-order field, so the bytes must be little-endian on the wire).
struct ArrayRef {
  ArrayHeader header;
  std::span<const std::byte> data;
  bool big_endian = false;
};

// The 24 + 8*ndim header payload bytes. Errors as for Encode.
Result<std::string> EncodeHeaderPayload(const ArrayHeader& header, const WriteOptions& options = {});
// The name an array whose INFO is `info` gets when no other array claims
// it (the naming rule above): webdataset's reading of the info, its NULs
// stripped at both ends, or "" (a positional name) when NULs remain inside.
std::string NameOfInfo(std::string_view info);
// Parses a header payload. Errors: kCorruption (size, negative ndim or dims),
// kUnsupported (dtype), kLimitExceeded (rank). Messages carry no context.
Result<ArrayHeader> DecodeHeaderPayload(std::span<const std::byte> payload, const ReadOptions& options = {});

// The payloads [header0, data0, header1, data1, ...] (tensorcom multipart
// frames). Data payloads are copies, converted to little-endian.
Result<std::vector<std::string>> EncodePayloads(std::span<const ArrayRef> arrays, const WriteOptions& options = {});
Result<std::vector<std::string>> EncodePayloads(const TensorSet& set, const WriteOptions& options = {});
// Frames payloads as chunks: magic, length, payload, zero padding to 64.
std::string JoinChunks(std::span<const std::string> payloads);

// Splits a chunked buffer into views of its payloads, checking magic, lengths
// and padding. Errors as for Decode.
Result<std::vector<std::span<const std::byte>>> SplitChunks(std::span<const std::byte> bytes,
                                                            const std::string& display_name,
                                                            const ReadOptions& options = {});
// Decodes payloads in pairs (header, data), e.g. received multipart frames.
// Tensors view the payloads (sharing `owner`) as Decode does. An odd count is
// kCorruption (a header without data).
Result<TensorSet> DecodePayloads(std::span<const std::span<const std::byte>> payloads,
                                 std::shared_ptr<const void> owner, const std::string& display_name,
                                 const ReadOptions& options = {});

}  // namespace tensorsafe::tenbin
