// The native stream wire format (docs/STREAM.md): encode/decode of the
// preamble, message header and descriptor block, in one place. Transports
// (fd, ZeroMQ, LMDB values) only move the pieces.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorsafe/options.h"
#include "tensorsafe/status.h"
#include "tensorsafe/stream/fd.h"
#include "tensorsafe/tensor_set.h"
#include "util/hash.h"

namespace tensorsafe::internal {

// STREAM.md §3: "\x89TSS\r\n\x1a\n", version 1.0, flags 0.
inline constexpr std::size_t kPreambleSize = 16;
inline constexpr std::uint16_t kStreamVersionMajor = 1;
inline constexpr std::uint16_t kStreamVersionMinor = 0;
inline constexpr std::array<std::uint8_t, 8> kStreamMagic = {0x89, 'T', 'S', 'S', '\r', '\n', 0x1a, '\n'};
// STREAM.md §4.
inline constexpr std::size_t kMessageHeaderSize = 64;
inline constexpr std::size_t kDataAlignment = 64;
inline constexpr std::size_t kDescriptorFixedSize = 40;
inline constexpr std::array<std::uint8_t, 4> kMessageMagic = {'T', 'S', 'M', 'G'};

// Persisted (STREAM.md §4): never renumber.
enum class MessageKind : std::uint8_t { kBatch = 1, kEnd = 2 };

std::string EncodePreamble();
// Checks magic, version and flags (STREAM.md §7 checks P1-P3).
Status DecodePreamble(std::span<const std::byte> bytes);

struct MessageHeader {
  MessageKind kind = MessageKind::kBatch;
  std::uint64_t sequence = 0;
  std::uint32_t tensor_count = 0;
  std::uint64_t descriptor_bytes = 0;
  std::uint64_t data_bytes = 0;
  std::uint64_t descriptor_checksum = 0;
  std::uint64_t total() const { return kMessageHeaderSize + descriptor_bytes + data_bytes; }
};

// 64 bytes with its checksum.
std::string EncodeHeader(const MessageHeader& h);
// Checks H1-H7 of STREAM.md §7 (not the sequence, which only a stream knows).
Result<MessageHeader> DecodeHeader(std::span<const std::byte> bytes, const StreamReaderOptions& options);

// A batch laid out for sending: `head` holds the message header and the
// descriptor block; tensor k's data goes at data region offset offsets[k]
// and is followed by pads[k] zero bytes.
struct EncodedBatch {
  std::string head;
  MessageHeader header;
  std::vector<std::uint64_t> offsets;
  std::vector<std::uint32_t> pads;
};
// Validates the batch (names, sizes, metadata) and hashes every tensor's
// data. Errors: kInvalidArgument, kLimitExceeded.
Result<EncodedBatch> EncodeBatch(const TensorSet& batch, std::uint64_t sequence, const Limits& limits);
// Just the header of an end-of-stream message.
std::string EncodeEndMessage(std::uint64_t sequence);

// One decoded descriptor (STREAM.md §5).
struct Descriptor {
  TensorInfo info;  // data_offset relative to the data region
};
struct DecodedDescriptors {
  std::string metadata_json;
  std::vector<Descriptor> tensors;
};
// Checks D1-D11 on the descriptor block of `header`.
Result<DecodedDescriptors> DecodeDescriptors(const MessageHeader& header, std::span<const std::byte> block,
                                             const StreamReaderOptions& options);
// Checks a data region fed in order, in pieces of any size: the zero
// padding (D12) and each tensor's checksum (X1, when `verify_data`) as its
// last byte arrives. Lets a receiver hash each piece right after reading it,
// while it is in cache, instead of a second pass over the whole region.
// `d` must outlive the verifier and have passed DecodeDescriptors (D10 puts
// the tensors in order inside data_bytes).
class DataVerifier {
 public:
  DataVerifier(const DecodedDescriptors& d, std::uint64_t data_bytes, bool verify_data);
  ~DataVerifier();
  // The next bytes of the region; more than remain is kInternal.
  Status Update(std::span<const std::byte> bytes);
  // OK when all data_bytes arrived and passed (else kInternal: a caller bug).
  Status Finish() const;

 private:
  Status EndTensor();
  const DecodedDescriptors& d_;
  std::uint64_t data_bytes_, pos_ = 0;
  std::size_t next_ = 0;  // the first tensor not yet checked
  bool verify_;
  std::unique_ptr<StreamingHash> hash_;
};
// Checks the data region with a DataVerifier, then BuildBatch.
Result<TensorSet> AssembleBatch(DecodedDescriptors d, std::span<const std::byte> data,
                                std::shared_ptr<const void> owner, const StreamReaderOptions& options);
// Builds the set of a data region that passed a DataVerifier: tensors view
// `data` sharing `owner`, or copies when misaligned for their type.
TensorSet BuildBatch(DecodedDescriptors d, std::span<const std::byte> data, std::shared_ptr<const void> owner);
// Checks X1 for one tensor whose bytes arrived separately (ZeroMQ frames).
Status CheckData(const TensorInfo& info, std::span<const std::byte> bytes, const StreamReaderOptions& options);

// The alignment a tensor of `dtype` needs to be used through a typed
// pointer: the element size, half of it for complex types, 1 for packed.
std::size_t NaturalAlignment(DType dtype);

// A 64-byte aligned heap buffer (posix_memalign), the owner of received
// messages.
class AlignedBuffer {
 public:
  static std::shared_ptr<AlignedBuffer> Allocate(std::size_t size);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  std::byte* data() const { return data_; }
  std::size_t capacity() const { return capacity_; }

 private:
  AlignedBuffer(std::byte* p, std::size_t n) : data_(p), capacity_(n) {}
  std::byte* data_;
  std::size_t capacity_;
};

}  // namespace tensorsafe::internal
