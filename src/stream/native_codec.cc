// Native stream wire format: docs/STREAM.md. Section numbers in comments
// point there; the reader checks are numbered as in §7.
#include "stream/native_codec.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <unordered_set>

#include "formats/codec_util.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/hash.h"
#include "util/text.h"

namespace tensorsafe::internal {
namespace {

using tensorsafe::internal::Str;

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// A JSON object, or empty; `what` names it in the message.
Status CheckMetadata(std::string_view json, const Limits& limits, const std::string& what) {
  if (json.empty()) return Status::OK();
  if (json.size() > limits.max_metadata_bytes) {
    return LimitExceeded(what + ": " + Str(json.size()) + " bytes of metadata exceed the limit " +
                         Str(limits.max_metadata_bytes));
  }
  Status s = ValidateJsonObject(json, limits.max_json_depth);
  if (!s.ok()) return Status(s.code(), what + ": " + s.message());
  return Status::OK();
}

}  // namespace

std::size_t NaturalAlignment(DType dtype) {
  const DTypeInfo& i = GetDTypeInfo(dtype);
  if (i.block_elems != 1) return 1;
  if (dtype == DType::kC64 || dtype == DType::kC128) return i.block_bytes / 2;
  return i.block_bytes;
}

std::shared_ptr<AlignedBuffer> AlignedBuffer::Allocate(std::size_t size) {
  void* p = nullptr;
  if (::posix_memalign(&p, kDataAlignment, size == 0 ? kDataAlignment : size) != 0) return nullptr;
  return std::shared_ptr<AlignedBuffer>(new AlignedBuffer(static_cast<std::byte*>(p), size));
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

std::string EncodePreamble() {
  std::string s(reinterpret_cast<const char*>(kStreamMagic.data()), kStreamMagic.size());
  Put16(s, kStreamVersionMajor);
  Put16(s, kStreamVersionMinor);
  Put32(s, 0);  // flags
  return s;
}

Status DecodePreamble(std::span<const std::byte> b) {
  if (b.size() < kPreambleSize) return Corruption("truncated: stream preamble is " + Str(b.size()) + " of 16 bytes");
  if (std::memcmp(b.data(), kStreamMagic.data(), 8) != 0) {
    return Corruption("not a tensorsafe stream: bad preamble magic");  // P1
  }
  const std::uint16_t major = Load16(b.data() + 8);
  if (major != kStreamVersionMajor) {  // P2
    return Unsupported("stream version " + Str(major) + "." + Str(Load16(b.data() + 10)) + "; this reader knows 1.x");
  }
  const std::uint32_t flags = Load32(b.data() + 12);
  if (flags != 0) return Unsupported("stream preamble flags 0x" + Str(flags) + " are unknown");  // P3
  return Status::OK();
}

std::string EncodeHeader(const MessageHeader& h) {
  std::string s(reinterpret_cast<const char*>(kMessageMagic.data()), 4);
  Put8(s, static_cast<std::uint8_t>(h.kind));
  Put8(s, 0);
  Put16(s, kMessageHeaderSize);
  Put64(s, h.sequence);
  Put32(s, h.tensor_count);
  Put32(s, 0);  // flags
  Put64(s, h.descriptor_bytes);
  Put64(s, h.data_bytes);
  Put64(s, h.descriptor_checksum);
  Put64(s, 0);  // reserved
  Put64(s, Hash64(std::string_view(s)));
  return s;
}

Result<MessageHeader> DecodeHeader(std::span<const std::byte> b, const StreamReaderOptions& opt) {
  if (b.size() < kMessageHeaderSize) {
    return Corruption("truncated: message header is " + Str(b.size()) + " of 64 bytes");
  }
  if (std::memcmp(b.data(), kMessageMagic.data(), 4) != 0) return Corruption("bad message magic");  // H1
  const std::uint64_t stored = Load64(b.data() + 56);
  const std::uint64_t computed = Hash64(b.first(56));
  if (stored != computed) return Corruption("message header checksum mismatch");  // H2
  MessageHeader h;
  const std::uint8_t kind = Load8(b.data() + 4);
  if (kind != 1 && kind != 2) return Corruption("message kind " + Str(kind) + " is undefined");  // H3
  h.kind = static_cast<MessageKind>(kind);
  if (Load8(b.data() + 5) != 0 || Load32(b.data() + 20) != 0 || Load64(b.data() + 48) != 0) {
    return Unsupported("message header has reserved bytes or flags set");  // H4
  }
  if (Load16(b.data() + 6) != kMessageHeaderSize) {  // H5
    return Corruption("message header_size " + Str(Load16(b.data() + 6)) + " is not 64");
  }
  h.sequence = Load64(b.data() + 8);
  h.tensor_count = Load32(b.data() + 16);
  h.descriptor_bytes = Load64(b.data() + 24);
  h.data_bytes = Load64(b.data() + 32);
  h.descriptor_checksum = Load64(b.data() + 40);
  if (h.descriptor_bytes % kDataAlignment != 0 || h.data_bytes % kDataAlignment != 0) {  // H6
    return Corruption("descriptor_bytes " + Str(h.descriptor_bytes) + " or data_bytes " + Str(h.data_bytes) +
                      " is not a multiple of 64");
  }
  auto total = CheckedAdd(h.descriptor_bytes, h.data_bytes);
  auto whole = total ? CheckedAdd(*total, kMessageHeaderSize) : std::nullopt;
  if (!whole || *whole > opt.max_message_bytes) {
    return LimitExceeded("message of " + (whole ? Str(*whole) : std::string("2^64+")) +
                         " bytes exceeds max_message_bytes " + Str(opt.max_message_bytes));
  }
  if (h.kind == MessageKind::kEnd && (h.tensor_count != 0 || *total != 0)) {  // H7
    return Corruption("end-of-stream message with " + Str(h.tensor_count) + " tensors and " + Str(*total) +
                      " body bytes");
  }
  if (h.tensor_count > opt.limits.max_tensor_count) {  // H9
    return LimitExceeded("batch of " + Str(h.tensor_count) + " tensors exceeds max_tensor_count " +
                         Str(opt.limits.max_tensor_count));
  }
  return h;
}

Result<EncodedBatch> EncodeBatch(const TensorSet& batch, std::uint64_t sequence, const Limits& limits) {
  if (batch.tensors.size() > limits.max_tensor_count || batch.tensors.size() > UINT32_MAX) {
    return LimitExceeded("batch of " + Str(batch.tensors.size()) + " tensors exceeds max_tensor_count " +
                         Str(limits.max_tensor_count));
  }
  TS_RETURN_IF_ERROR(CheckMetadata(batch.metadata_json, limits, "batch metadata"));
  if (batch.metadata_json.size() > UINT32_MAX) return LimitExceeded("batch metadata above 4 GiB");
  EncodedBatch e;
  std::string& s = e.head;
  s.assign(kMessageHeaderSize, '\0');  // filled last
  Put32(s, static_cast<std::uint32_t>(batch.metadata_json.size()));
  Put32(s, 0);
  s += batch.metadata_json;
  std::unordered_set<std::string_view> names;
  std::uint64_t offset = 0;
  for (std::size_t k = 0; k < batch.tensors.size(); ++k) {
    const Tensor& t = batch.tensors[k];
    const TensorInfo& i = t.info;
    const std::string what = "tensor " + Str(k) + " " + QuoteName(i.name);
    if (i.name.empty()) return InvalidArgument("tensor " + Str(k) + " has an empty name");
    if (i.name.size() > limits.max_name_bytes || i.name.size() > UINT16_MAX) {
      return LimitExceeded(what + ": name of " + Str(i.name.size()) + " bytes exceeds the limit");
    }
    if (!IsValidUtf8(i.name)) return InvalidArgument(what + ": name is not UTF-8");
    if (!names.insert(i.name).second) return InvalidArgument(what + ": duplicate name");
    if (i.layout != Layout::kDense) return InvalidArgument(what + ": only dense tensors can be sent");
    if (i.shape.size() > limits.max_rank) {
      return LimitExceeded(what + ": rank " + Str(i.shape.size()) + " exceeds max_rank " + Str(limits.max_rank));
    }
    TS_RETURN_IF_ERROR(CheckDenseSize(i.dtype, i.shape, t.data.size(), what));
    TS_RETURN_IF_ERROR(CheckMetadata(i.metadata_json, limits, what));
    if (i.metadata_json.size() > UINT32_MAX) return LimitExceeded(what + ": metadata above 4 GiB");
    const std::uint64_t len = t.data.size();
    auto padded = AlignUp(len, kDataAlignment);
    auto next = padded ? CheckedAdd(offset, *padded) : std::nullopt;
    if (!next) return OutOfRange(what + ": data region overflows");
    Put64(s, offset);
    Put64(s, len);
    Put64(s, Hash64(t.data));
    Put8(s, static_cast<std::uint8_t>(i.dtype));
    Put8(s, static_cast<std::uint8_t>(Layout::kDense));
    Put16(s, static_cast<std::uint16_t>(i.name.size()));
    Put32(s, static_cast<std::uint32_t>(i.metadata_json.size()));
    Put16(s, static_cast<std::uint16_t>(i.shape.size()));
    Put16(s, 0);
    Put32(s, 0);
    for (std::uint64_t d : i.shape) Put64(s, d);
    s += i.name;
    s += i.metadata_json;
    e.offsets.push_back(offset);
    e.pads.push_back(static_cast<std::uint32_t>(*padded - len));
    offset = *next;
  }
  s.append((kDataAlignment - s.size() % kDataAlignment) % kDataAlignment, '\0');
  e.header.kind = MessageKind::kBatch;
  e.header.sequence = sequence;
  e.header.tensor_count = static_cast<std::uint32_t>(batch.tensors.size());
  e.header.descriptor_bytes = s.size() - kMessageHeaderSize;
  e.header.data_bytes = offset;
  e.header.descriptor_checksum = Hash64(Bytes(s).subspan(kMessageHeaderSize));
  const std::string h = EncodeHeader(e.header);
  std::memcpy(s.data(), h.data(), kMessageHeaderSize);
  return e;
}

std::string EncodeEndMessage(std::uint64_t sequence) {
  MessageHeader h;
  h.kind = MessageKind::kEnd;
  h.sequence = sequence;
  h.descriptor_checksum = Hash64(std::span<const std::byte>());
  return EncodeHeader(h);
}

Result<DecodedDescriptors> DecodeDescriptors(const MessageHeader& h, std::span<const std::byte> block,
                                             const StreamReaderOptions& opt) {
  const Limits& lim = opt.limits;
  if (block.size() != h.descriptor_bytes) {
    return Corruption("descriptor block is " + Str(block.size()) + " bytes; header says " + Str(h.descriptor_bytes));
  }
  if (Hash64(block) != h.descriptor_checksum) return Corruption("descriptor block checksum mismatch");  // D1
  DecodedDescriptors d;
  std::uint64_t pos = 0;
  const std::uint64_t size = block.size();
  auto need = [&](std::uint64_t n, const std::string& what) -> Status {
    if (!RangeWithin(pos, n, size)) {
      return Corruption(what + " at descriptor offset " + Str(pos) + " + " + Str(n) + " runs past the block of " +
                        Str(size) + " bytes");
    }
    return Status::OK();
  };
  if (h.tensor_count > 0 || size > 0) {
    TS_RETURN_IF_ERROR(need(8, "batch metadata length"));  // D2
    const std::uint32_t mlen = Load32(block.data());
    if (Load32(block.data() + 4) != 0) return Corruption("reserved bytes after batch metadata length are set");
    pos = 8;
    TS_RETURN_IF_ERROR(need(mlen, "batch metadata"));
    d.metadata_json.assign(reinterpret_cast<const char*>(block.data() + pos), mlen);
    TS_RETURN_IF_ERROR(CheckMetadata(d.metadata_json, lim, "batch metadata"));
    pos += mlen;
  }
  std::unordered_set<std::string_view> names;
  std::uint64_t data_end = 0;
  d.tensors.reserve(h.tensor_count);
  for (std::uint32_t k = 0; k < h.tensor_count; ++k) {
    const std::string what = "descriptor " + Str(k);
    TS_RETURN_IF_ERROR(need(kDescriptorFixedSize, what));  // D3
    const std::byte* p = block.data() + pos;
    Descriptor desc;
    TensorInfo& i = desc.info;
    i.data_offset = Load64(p);
    i.data_length = Load64(p + 8);
    i.data_checksum = Load64(p + 16);
    const std::uint8_t code = Load8(p + 24);
    const std::uint8_t layout = Load8(p + 25);
    const std::uint16_t nlen = Load16(p + 26);
    const std::uint32_t tmlen = Load32(p + 28);
    const std::uint16_t rank = Load16(p + 32);
    if (Load16(p + 34) != 0 || Load32(p + 36) != 0) return Corruption(what + ": reserved bytes are set");
    auto dt = LookupDType(code);
    if (!dt) return Corruption(what + ": dtype code " + Str(code) + " is undefined");  // D4
    i.dtype = dt->dtype;
    if (layout != 0) return Unsupported(what + ": layout " + Str(layout) + " (only dense is defined)");  // D5
    if (rank > lim.max_rank) {                                                                           // D6
      return LimitExceeded(what + ": rank " + Str(rank) + " exceeds max_rank " + Str(lim.max_rank));
    }
    pos += kDescriptorFixedSize;
    TS_RETURN_IF_ERROR(need(std::uint64_t{8} * rank, what + " dims"));
    i.shape.resize(rank);
    for (std::uint16_t r = 0; r < rank; ++r) i.shape[r] = Load64(block.data() + pos + 8 * r);
    pos += std::uint64_t{8} * rank;
    TS_RETURN_IF_ERROR(need(nlen, what + " name"));  // D7
    i.name.assign(reinterpret_cast<const char*>(block.data() + pos), nlen);
    pos += nlen;
    if (i.name.empty()) return Corruption(what + ": empty name");
    if (nlen > lim.max_name_bytes) return LimitExceeded(what + ": name of " + Str(nlen) + " bytes exceeds the limit");
    if (!IsValidUtf8(i.name)) return Corruption(what + ": name is not UTF-8");
    const std::string named = what + " " + QuoteName(i.name);
    TS_RETURN_IF_ERROR(need(tmlen, named + " metadata"));  // D8
    i.metadata_json.assign(reinterpret_cast<const char*>(block.data() + pos), tmlen);
    pos += tmlen;
    TS_RETURN_IF_ERROR(CheckMetadata(i.metadata_json, lim, named));
    auto bytes = DenseByteSize(i.dtype, i.shape);  // D9
    if (!bytes.ok()) return Corruption(named + ": " + bytes.status().message());
    if (*bytes != i.data_length) {
      return Corruption(named + ": data_length " + Str(i.data_length) + " but shape " + ShapeToString(i.shape) +
                        " of " + std::string(DTypeName(i.dtype)) + " needs " + Str(*bytes));
    }
    // D10: in order, aligned, no overlap, inside the data region.
    if (i.data_offset % kDataAlignment != 0 || i.data_offset < data_end ||
        !RangeWithin(i.data_offset, i.data_length, h.data_bytes)) {
      return Corruption(named + ": data offset " + Str(i.data_offset) + " + length " + Str(i.data_length) +
                        " is unaligned, overlaps the previous tensor (ends " + Str(data_end) +
                        ") or exceeds data_bytes " + Str(h.data_bytes));
    }
    data_end = i.data_offset + i.data_length;
    if (!names.insert(d.tensors.emplace_back(std::move(desc)).info.name).second) {
      return Corruption(named + ": duplicate name");
    }
  }
  // D11: only zero padding after the last descriptor, and less than 64 bytes.
  if (size - pos >= kDataAlignment) return Corruption(Str(size - pos) + " unused bytes after the descriptors");
  for (std::uint64_t q = pos; q < size; ++q) {
    if (block[q] != std::byte{0}) return Corruption("descriptor padding byte at " + Str(q) + " is not zero");
  }
  auto end = AlignUp(data_end, kDataAlignment);
  if (!end || *end != h.data_bytes) {
    return Corruption("data_bytes " + Str(h.data_bytes) + " is not the aligned end of the last tensor " +
                      Str(data_end));
  }
  return d;
}

Status CheckData(const TensorInfo& i, std::span<const std::byte> bytes, const StreamReaderOptions& opt) {
  if (bytes.size() != i.data_length) {
    return Corruption("tensor " + QuoteName(i.name) + ": " + Str(bytes.size()) + " data bytes, descriptor says " +
                      Str(i.data_length));
  }
  if (opt.verify_data && Hash64(bytes) != i.data_checksum) {  // X1
    return Corruption("tensor " + QuoteName(i.name) + ": data checksum mismatch");
  }
  return Status::OK();
}

DataVerifier::DataVerifier(const DecodedDescriptors& d, std::uint64_t data_bytes, bool verify_data)
    : d_(d), data_bytes_(data_bytes), verify_(verify_data), hash_(std::make_unique<StreamingHash>()) {}

DataVerifier::~DataVerifier() = default;

Status DataVerifier::EndTensor() {
  const TensorInfo& i = d_.tensors[next_].info;
  if (verify_ && hash_->Digest() != i.data_checksum) {  // X1
    return Corruption("tensor " + QuoteName(i.name) + ": data checksum mismatch");
  }
  ++next_;
  hash_->Reset();
  return Status::OK();
}

Status DataVerifier::Update(std::span<const std::byte> bytes) {
  if (bytes.size() > data_bytes_ - pos_) {
    return Internal("data verifier fed " + Str(bytes.size()) + " bytes at " + Str(pos_) + " of " + Str(data_bytes_));
  }
  const auto& t = d_.tensors;
  while (true) {
    // Tensors that end here (zero-length ones included) are complete.
    while (next_ < t.size() && pos_ >= t[next_].info.data_offset + t[next_].info.data_length) {
      TS_RETURN_IF_ERROR(EndTensor());
    }
    if (bytes.empty()) return Status::OK();
    const bool in_data = next_ < t.size() && pos_ >= t[next_].info.data_offset;
    const std::uint64_t stop = next_ == t.size() ? data_bytes_
                               : in_data         ? t[next_].info.data_offset + t[next_].info.data_length
                                                 : t[next_].info.data_offset;
    const auto take = static_cast<std::size_t>(std::min<std::uint64_t>(bytes.size(), stop - pos_));
    if (in_data) {
      if (verify_) hash_->Update(bytes.first(take));
    } else {
      for (std::size_t q = 0; q < take; ++q) {  // D12
        if (bytes[q] != std::byte{0}) return Corruption("data padding byte at " + Str(pos_ + q) + " is not zero");
      }
    }
    pos_ += take;
    bytes = bytes.subspan(take);
  }
}

Status DataVerifier::Finish() const {
  if (pos_ != data_bytes_ || next_ != d_.tensors.size()) {
    return Internal("data verifier finished at " + Str(pos_) + " of " + Str(data_bytes_) + " bytes");
  }
  return Status::OK();
}

Result<TensorSet> AssembleBatch(DecodedDescriptors d, std::span<const std::byte> data,
                                std::shared_ptr<const void> owner, const StreamReaderOptions& opt) {
  DataVerifier v(d, data.size(), opt.verify_data);
  TS_RETURN_IF_ERROR(v.Update(data));
  TS_RETURN_IF_ERROR(v.Finish());
  return BuildBatch(std::move(d), data, std::move(owner));
}

TensorSet BuildBatch(DecodedDescriptors d, std::span<const std::byte> data, std::shared_ptr<const void> owner) {
  TensorSet set;
  set.metadata_json = std::move(d.metadata_json);
  set.tensors.reserve(d.tensors.size());
  for (Descriptor& desc : d.tensors) {
    TensorInfo& i = desc.info;
    auto bytes = data.subspan(i.data_offset, i.data_length);
    const std::size_t align = NaturalAlignment(i.dtype);
    set.tensors.push_back(ViewOrCopy(std::move(i), bytes, owner, align));
  }
  return set;
}

}  // namespace tensorsafe::internal

namespace tensorsafe {

Result<std::string> EncodeMessage(const TensorSet& batch, std::uint64_t sequence, const Limits& limits) {
  TS_ASSIGN_OR_RETURN(internal::EncodedBatch e, internal::EncodeBatch(batch, sequence, limits));
  std::string out = std::move(e.head);
  out.reserve(out.size() + e.header.data_bytes);
  for (std::size_t k = 0; k < batch.tensors.size(); ++k) {
    const auto& d = batch.tensors[k].data;
    out.append(reinterpret_cast<const char*>(d.data()), d.size());
    out.append(e.pads[k], '\0');
  }
  return out;
}

Result<TensorSet> DecodeMessage(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                                const StreamReaderOptions& options) {
  using namespace internal;
  TS_ASSIGN_OR_RETURN(MessageHeader h, DecodeHeader(bytes, options));
  if (h.kind != MessageKind::kBatch) return InvalidArgument("an end-of-stream message holds no batch");
  if (bytes.size() != h.total()) {
    return Corruption((bytes.size() < h.total() ? "truncated: message is " : "message is ") +
                      std::to_string(bytes.size()) + " bytes; its header says " + std::to_string(h.total()));
  }
  auto block = bytes.subspan(kMessageHeaderSize, h.descriptor_bytes);
  TS_ASSIGN_OR_RETURN(DecodedDescriptors d, DecodeDescriptors(h, block, options));
  return AssembleBatch(std::move(d), bytes.subspan(kMessageHeaderSize + h.descriptor_bytes), std::move(owner), options);
}

}  // namespace tensorsafe
