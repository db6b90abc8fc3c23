// ZIO messages carrying tensors (the TENS convention of brettviren/zio).
//
// A ZIO message is a list of frames: a header frame "ZIO" + level digit +
// 4-byte form + label (usually JSON, no length prefix), a 24-byte coordinate
// frame (origin, granule, seqno: little-endian u64), then payload frames.
// CLIENT/SERVER sockets carry it packed in one frame: each part prefixed by
// one length byte, or 0xFF and a big-endian u32 when it is 255 bytes or more.
// A TENS label is a JSON object whose "TENS" object lists the tensors:
// {"TENS":{"tensors":[{"dtype":"f","part":0,"shape":[2,3],"word":4}],
// "metadata":{...}}}. docs/formats/zio.md has the details and deviations.
//
// Naming: a tensor is named by its metadata's "name" when that is a unique
// string, else by its position in TENS.tensors ("0", "1", ...).
//
// The "file" functions (Decode, ReadFile, Encode, WriteFile) use the
// single-frame packing, the bytes a CLIENT/SERVER socket would carry.
//
// Thread safety: all functions are pure or touch only their own files.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorsafe/env.h"
#include "tensorsafe/limits.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::zio {

inline constexpr std::size_t kCoordSize = 24;
inline constexpr std::uint8_t kMaxLevel = 8;  // undefined, trace, ... fatal

struct ReadOptions {
  // Bounds what a message can claim. Used here: max_metadata_bytes (label
  // size, default 64 MiB), max_json_depth (64), max_tensor_count (entries of
  // TENS.tensors) and max_rank (64).
  Limits limits;
  // Remove a tensor's metadata "name" once it has become the tensor's name:
  // the writer adds it back, so zio -> tsafe -> zio stays exact and
  // tsafe -> zio -> tsafe gains no key. Off: the label's metadata as sent.
  bool strip_name_key = false;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

struct WriteOptions {
  // WriteFile: fsync the file and its directory.
  bool sync = true;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

// One ZIO message. Payload spans view memory kept alive by `owner` (or by
// the caller when `owner` is null).
struct Message {
  std::uint8_t level = 0;     // 0..8
  std::string form = "    ";  // exactly 4 bytes on the wire; shorter is space-padded
  std::string label;          // the rest of the header frame
  std::uint64_t origin = 0;
  std::uint64_t granule = 0;
  std::uint64_t seqno = 0;
  std::vector<std::span<const std::byte>> payload;
  std::shared_ptr<const void> owner;
};

// The frames [header, coord, payload...]. Errors: kInvalidArgument (level
// above 8, form longer than 4 bytes).
Result<std::vector<std::string>> EncodeFrames(const Message& message);
// Parses multipart frames; the payload spans view `frames` and the message
// shares `owner`. Errors: kCorruption (fewer than 2 frames, bad "ZIO"
// prefix or level, coordinate frame not 24 bytes), kLimitExceeded (label).
Result<Message> DecodeFrames(std::span<const std::span<const std::byte>> frames, std::shared_ptr<const void> owner,
                             const std::string& display_name, const ReadOptions& options = {});

// The single-frame (CLIENT/SERVER) encoding. Errors as EncodeFrames, and
// kInvalidArgument for a frame of 4 GiB or more.
Result<std::string> Pack(const Message& message);
// Splits a single frame into parts and parses them as DecodeFrames does.
Result<Message> Unpack(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                       const std::string& display_name, const ReadOptions& options = {});

// The tensors of a TENS message. Tensors view the payload frames (sharing
// message.owner) when the data is C-ordered, ascending and aligned to its
// element size; otherwise they own a C-ordered copy ("order" and "ascend"
// are honoured). TENS.metadata becomes the set's metadata_json. Errors:
// kInvalidArgument (label is a JSON object without "TENS"), kCorruption
// (label not JSON, malformed entries, parts out of range, frame sizes that
// disagree with shape and word), kUnsupported (dtype/word pairs without a
// tensorsafe dtype, "packing" other than dense, "pointer"), kLimitExceeded.
Result<TensorSet> ToTensorSet(const Message& message, const std::string& display_name, const ReadOptions& options = {});
// Appends the tensors of `set` to `base` as ZIO's tens::append does: each
// becomes a payload frame (viewing the tensor's bytes; the result's owner
// keeps them alive) and an entry {"dtype","metadata"?,"part","shape","word"}
// in label.TENS.tensors; set.metadata_json becomes TENS.metadata. A tensor
// whose name is not positional gets "name" in its metadata. The label is
// re-dumped compactly with sorted keys, as ZIO's C++ does. Errors:
// kUnsupported (dtype without a ZIO type: bf16, f8, packed types),
// kInvalidArgument (base label not a JSON object, bad metadata, data size).
Result<Message> AppendTensors(const Message& base, const TensorSet& set);
// AppendTensors to an empty message of form "TENS", level 0, coord 0.
Result<Message> FromTensorSet(const TensorSet& set);

// Unpack + ToTensorSet.
Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& options = {});
// Maps `path` and decodes it; tensors keep the mapping alive.
Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& options = {});
// FromTensorSet + Pack.
Result<std::string> Encode(const TensorSet& set, const WriteOptions& options = {});
// Writes the bytes Encode returns via a temporary file renamed over `path`;
// on error nothing is left behind. Streams: only headers are built in
// memory, each tensor's bytes are written from where they are.
Status WriteFile(const std::string& path, const TensorSet& set, const WriteOptions& options = {});

// True when `dtype` has a ZIO type (no bf16, f8 or packed types).
bool HoldsDType(DType dtype);
// OK when every tensor of `set` reads back under its name (names travel as
// metadata "name"; see Naming above), or `drop_names` consents to the names
// the reader will give; else kInvalidArgument naming the first that would
// not.
Status CheckNames(TensorSet& set, bool drop_names);

}  // namespace tensorsafe::zio
