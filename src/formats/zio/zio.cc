// ZIO TENS codec. Layout: docs/formats/zio.md §2-§4 (from formats.md §2).
#include "tensorsafe/formats/zio.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "formats/codec_util.h"
#include "io/internal.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe::zio {
namespace {

using json = nlohmann::json;

constexpr std::size_t kPrefixSize = 8;  // "ZIO" + level digit + 4-byte form
constexpr std::uint8_t kLongLength = 0xFF;

using tensorsafe::internal::Str;

// (NumPy kind, word) pairs, as ZIO's type_name and its HDF writer use them.
struct ZioType {
  DType dtype;
  char kind;
  std::uint64_t word;
};
constexpr ZioType kTypes[] = {
    {DType::kF16, 'f', 2}, {DType::kF32, 'f', 4},   {DType::kF64, 'f', 8}, {DType::kI8, 'i', 1},
    {DType::kI16, 'i', 2}, {DType::kI32, 'i', 4},   {DType::kI64, 'i', 8}, {DType::kU8, 'u', 1},
    {DType::kU16, 'u', 2}, {DType::kU32, 'u', 4},   {DType::kU64, 'u', 8}, {DType::kBool, 'b', 1},
    {DType::kC64, 'c', 8}, {DType::kC128, 'c', 16},
};

const ZioType* TypeOf(DType d) {
  for (const auto& t : kTypes) {
    if (t.dtype == d) return &t;
  }
  return nullptr;
}

// Parses JSON text, refusing nesting deeper than `max_depth` before it is
// built. `code` is the code for text that is not JSON.
Result<json> ParseJson(std::string_view text, std::uint32_t max_depth, StatusCode code, const std::string& what) {
  bool too_deep = false;
  auto cb = [&](int depth, json::parse_event_t, json&) {
    if (static_cast<std::uint32_t>(depth) > max_depth) too_deep = true;
    return !too_deep;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& e) {
    if (!too_deep) return Status(code, what + " is not JSON: " + e.what());
  }
  if (too_deep) return LimitExceeded(what + " is nested deeper than " + Str(max_depth));
  return j;
}

Result<std::string> HeaderFrame(const Message& m) {
  if (m.level > kMaxLevel) return InvalidArgument("level " + Str(m.level) + " is above 8");
  if (m.form.size() > 4) {
    return InvalidArgument("form " + internal::QuoteName(m.form) + " is " + Str(m.form.size()) +
                           " bytes; ZIO forms are 4");
  }
  std::string f = "ZIO";
  f += static_cast<char>('0' + m.level);
  f += m.form;
  f.append(4 - m.form.size(), ' ');  // as ZIO's set_form pads
  f += m.label;
  return f;
}

std::string CoordFrame(const Message& m) {
  std::string c;
  internal::Put64(c, m.origin);
  internal::Put64(c, m.granule);
  internal::Put64(c, m.seqno);
  return c;
}

// Reads an array of unsigned integers at j[key]; nullopt when absent.
Result<std::optional<std::vector<std::uint64_t>>> UintArray(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) return std::optional<std::vector<std::uint64_t>>();
  const json& a = j[key];
  std::vector<std::uint64_t> v;
  bool ok = a.is_array();
  if (ok) {
    for (const auto& x : a) {
      if (!x.is_number_unsigned()) {
        ok = false;
        break;
      }
      v.push_back(x.get<std::uint64_t>());
    }
  }
  if (!ok) return Corruption(where + ": \"" + key + "\" must be an array of non-negative integers");
  return std::optional<std::vector<std::uint64_t>>(std::move(v));
}

Result<std::uint64_t> Uint(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number_unsigned()) {
    return Corruption(where + ": \"" + key + "\" must be a non-negative integer");
  }
  return j[key].get<std::uint64_t>();
}

// Copies data stored in Boost general storage order (order[0] varies
// fastest; ascend[d] false stores dimension d backwards) into C order.
std::vector<std::byte> ToCOrder(std::span<const std::byte> src, const Shape& shape, std::uint64_t word,
                                const std::vector<std::uint64_t>& order, const std::vector<bool>& ascend) {
  const std::size_t rank = shape.size();
  std::vector<std::uint64_t> stride(rank);
  std::uint64_t s = word;  // products stay below src.size(), checked by the caller
  for (std::size_t k = 0; k < rank; ++k) {
    stride[order[k]] = s;
    s *= shape[order[k]];
  }
  std::vector<std::byte> out(src.size());
  if (out.empty()) return out;
  std::vector<std::uint64_t> idx(rank, 0);
  for (std::uint64_t e = 0; e * word < out.size(); ++e) {
    std::uint64_t off = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      off += (ascend[d] ? idx[d] : shape[d] - 1 - idx[d]) * stride[d];
    }
    std::memcpy(out.data() + e * word, src.data() + off, word);
    for (std::size_t d = rank; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// One TENS.tensors entry turned into a Tensor (named later).
Result<Tensor> DecodeEntry(const json& e, std::size_t i, const Message& m, const std::string& ctx,
                           const ReadOptions& opt, std::string* preferred_name) {
  const std::string where = ctx + "TENS tensor " + Str(i);
  if (!e.is_object()) return Corruption(where + ": not a JSON object");
  TS_ASSIGN_OR_RETURN(auto shape, UintArray(e, "shape", where));
  if (!shape) return Corruption(where + ": \"shape\" is missing");
  if (shape->size() > opt.limits.max_rank) {
    return LimitExceeded(where + ": rank " + Str(shape->size()) + " exceeds the limit of " + Str(opt.limits.max_rank));
  }
  TS_ASSIGN_OR_RETURN(std::uint64_t word, Uint(e, "word", where));
  if (!e.contains("dtype") || !e["dtype"].is_string() || e["dtype"].get<std::string>().size() != 1) {
    return Corruption(where + ": \"dtype\" must be a one-character string");
  }
  const char kind = e["dtype"].get<std::string>()[0];
  const ZioType* type = nullptr;
  for (const auto& t : kTypes) {
    if (t.kind == kind && t.word == word) type = &t;
  }
  if (!type) {
    return Unsupported(where + ": dtype " + internal::QuoteName(std::string(1, kind)) + " with word " + Str(word) +
                       " has no tensorsafe dtype");
  }
  if (e.contains("packing") && e["packing"] != "dense") {
    return Unsupported(where + ": packing " + e["packing"].dump() + " (only \"dense\" is defined)");
  }
  if (e.contains("pointer")) return Unsupported(where + ": \"pointer\" tensors are not in the message");
  std::uint64_t part = i;  // the spec's default: the entry's index
  if (e.contains("part")) {
    TS_ASSIGN_OR_RETURN(part, Uint(e, "part", where));
  }
  if (part >= m.payload.size()) {
    return Corruption(where + ": part " + Str(part) + ", but the message has " + Str(m.payload.size()) +
                      " payload frames");
  }
  const std::size_t rank = shape->size();
  std::vector<std::uint64_t> c_order(rank);
  for (std::size_t k = 0; k < rank; ++k) c_order[k] = rank - 1 - k;
  TS_ASSIGN_OR_RETURN(auto order, UintArray(e, "order", where));
  if (order) {
    std::vector<bool> seen(rank);
    bool perm = order->size() == rank;
    for (std::uint64_t d : *order) {
      if (!perm || d >= rank || seen[d]) {
        perm = false;
        break;
      }
      seen[d] = true;
    }
    if (!perm) {
      return Corruption(where + ": \"order\" " + e["order"].dump() + " is not a permutation of 0.." +
                        (rank ? Str(rank - 1) : std::string("-1")));
    }
  }
  std::vector<bool> ascend(rank, true);
  if (e.contains("ascend")) {
    const json& a = e["ascend"];
    bool ok = a.is_array() && a.size() == rank;
    for (std::size_t d = 0; ok && d < rank; ++d) {
      ok = a[d].is_boolean();
      if (ok) ascend[d] = a[d].get<bool>();
    }
    if (!ok) return Corruption(where + ": \"ascend\" must be an array of " + Str(rank) + " booleans");
  }
  std::string metadata;
  if (e.contains("metadata")) {
    if (!e["metadata"].is_object()) return Corruption(where + ": \"metadata\" must be a JSON object");
    metadata = e["metadata"].dump();
    const json& name = e["metadata"].contains("name") ? e["metadata"]["name"] : json();
    if (name.is_string()) *preferred_name = name.get<std::string>();
  }
  std::span<const std::byte> data = m.payload[part];
  auto size = DenseByteSize(type->dtype, *shape);
  if (!size.ok() || *size != data.size()) {
    return Corruption(where + ": payload frame " + Str(part) + " has " + Str(data.size()) + " bytes, but shape " +
                      ShapeToString(*shape) + " of word " + Str(word) + " needs " +
                      (size.ok() ? Str(*size) : "more than 2^64"));
  }
  TensorInfo info;
  info.dtype = type->dtype;
  info.shape = std::move(*shape);
  info.data_length = data.size();
  info.metadata_json = std::move(metadata);
  const bool plain = (!order || *order == c_order) && std::find(ascend.begin(), ascend.end(), false) == ascend.end();
  if (plain) return internal::ViewOrCopy(std::move(info), data, m.owner, ElementSize(type->dtype));
  auto c_data = ToCOrder(data, info.shape, word, order ? *order : c_order, ascend);
  return internal::OwnedTensor(std::move(info), std::move(c_data));
}

Result<json> ParseObjectArg(const std::string& text, const std::string& what) {
  auto j = ParseJson(text, Limits{}.max_json_depth, StatusCode::kInvalidArgument, what);
  if (!j.ok()) return Status(StatusCode::kInvalidArgument, j.status().message());
  if (!j->is_object()) return InvalidArgument(what + " is not a JSON object");
  return j;
}

// Keeps the base message's and every tensor's memory alive.
struct OwnerList {
  std::vector<std::shared_ptr<const void>> owners;
};

}  // namespace

Result<std::vector<std::string>> EncodeFrames(const Message& m) {
  std::vector<std::string> frames;
  TS_ASSIGN_OR_RETURN(std::string header, HeaderFrame(m));
  frames.push_back(std::move(header));
  frames.push_back(CoordFrame(m));
  for (const auto& p : m.payload) frames.emplace_back(reinterpret_cast<const char*>(p.data()), p.size());
  return frames;
}

Result<Message> DecodeFrames(std::span<const std::span<const std::byte>> frames, std::shared_ptr<const void> owner,
                             const std::string& display_name, const ReadOptions& opt) {
  const std::string ctx = internal::Context(display_name);
  if (frames.size() < 2) {
    return Corruption(ctx + "message has " + Str(frames.size()) +
                      " frames; ZIO needs a header frame and a coordinate frame");
  }
  const auto h = frames[0];
  if (h.size() < kPrefixSize) {
    return Corruption(ctx + "header frame is " + Str(h.size()) +
                      " bytes, shorter than the 8 of \"ZIO\", level and form");
  }
  const std::string_view hs(reinterpret_cast<const char*>(h.data()), h.size());
  if (hs.substr(0, 3) != "ZIO") {
    return Corruption(ctx + "header frame starts with " + internal::QuoteName(hs.substr(0, 3)) + ", not \"ZIO\"");
  }
  if (hs[3] < '0' || hs[3] > '0' + kMaxLevel) {
    return Corruption(ctx + "header frame: level " + internal::QuoteName(hs.substr(3, 1)) + " is not a digit 0..8");
  }
  if (h.size() - kPrefixSize > opt.limits.max_metadata_bytes) {
    return LimitExceeded(ctx + "label of " + Str(h.size() - kPrefixSize) + " bytes exceeds the limit of " +
                         Str(opt.limits.max_metadata_bytes));
  }
  if (frames[1].size() != kCoordSize) {
    return Corruption(ctx + "coordinate frame is " + Str(frames[1].size()) + " bytes, not 24");
  }
  Message m;
  m.level = static_cast<std::uint8_t>(hs[3] - '0');
  m.form = std::string(hs.substr(4, 4));
  m.label = std::string(hs.substr(kPrefixSize));
  m.origin = internal::Load64(frames[1].data());
  m.granule = internal::Load64(frames[1].data() + 8);
  m.seqno = internal::Load64(frames[1].data() + 16);
  m.payload.assign(frames.begin() + 2, frames.end());
  m.owner = std::move(owner);
  return m;
}

namespace {

// The single-frame packing (§1) as pieces: length prefixes, header and coord
// frames owned, payload frames viewed, so WriteFile streams the payloads.
Result<internal::Pieces> PackPieces(const Message& m) {
  TS_ASSIGN_OR_RETURN(std::string header, HeaderFrame(m));
  std::string coord = CoordFrame(m);
  const std::size_t nparts = 2 + m.payload.size();
  internal::Pieces out;
  for (std::size_t i = 0; i < nparts; ++i) {
    const std::uint64_t n = i == 0 ? header.size() : i == 1 ? coord.size() : m.payload[i - 2].size();
    if (n > UINT32_MAX) {
      return InvalidArgument("frame " + Str(i) + " is " + Str(n) +
                             " bytes; the single-frame encoding holds at most 4294967295");
    }
    std::string prefix;
    if (n < kLongLength) {
      internal::Put8(prefix, static_cast<std::uint8_t>(n));
    } else {
      internal::Put8(prefix, kLongLength);
      for (int shift = 24; shift >= 0; shift -= 8) internal::Put8(prefix, static_cast<std::uint8_t>(n >> shift));
    }
    if (i == 0) {
      out.Append(prefix + header);
    } else if (i == 1) {
      out.Append(prefix + coord);
    } else {
      out.Append(std::move(prefix));
      out.AppendView(m.payload[i - 2]);
    }
  }
  return out;
}

}  // namespace

Result<std::string> Pack(const Message& m) {
  TS_ASSIGN_OR_RETURN(auto pieces, PackPieces(m));
  return pieces.Join();
}

Result<Message> Unpack(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                       const std::string& display_name, const ReadOptions& opt) {
  const std::string ctx = internal::Context(display_name);
  std::vector<std::span<const std::byte>> parts;
  std::uint64_t pos = 0;
  while (pos < bytes.size()) {
    const std::string where = ctx + "part " + Str(parts.size()) + " at offset " + Str(pos);
    std::uint64_t n = internal::Load8(bytes.data() + pos++);
    if (n == kLongLength) {
      if (bytes.size() - pos < 4) {
        return Corruption(where + ": the 0xFF length marker needs 4 more bytes, " + Str(bytes.size() - pos) +
                          " remain");
      }
      n = 0;
      for (int k = 0; k < 4; ++k) n = (n << 8) | internal::Load8(bytes.data() + pos + k);
      pos += 4;
    }
    if (n > bytes.size() - pos) {
      return Corruption(where + ": length " + Str(n) + " exceeds the " + Str(bytes.size() - pos) +
                        " bytes that remain");
    }
    parts.push_back(bytes.subspan(pos, n));  // an empty last part is valid
    pos += n;
  }
  return DecodeFrames(parts, std::move(owner), display_name, opt);
}

Result<TensorSet> ToTensorSet(const Message& m, const std::string& display_name, const ReadOptions& opt) {
  const std::string ctx = internal::Context(display_name);
  TS_ASSIGN_OR_RETURN(json label,
                      ParseJson(m.label, opt.limits.max_json_depth, StatusCode::kCorruption, ctx + "label"));
  if (!label.is_object() || !label.contains("TENS")) {
    return InvalidArgument(ctx + "label has no \"TENS\" object: not a TENS message");
  }
  const json& tens = label["TENS"];
  if (!tens.is_object() || !tens.contains("tensors") || !tens["tensors"].is_array()) {
    return Corruption(ctx + "label: \"TENS\" must be an object with a \"tensors\" array");
  }
  const json& entries = tens["tensors"];
  if (entries.size() > opt.limits.max_tensor_count) {
    return LimitExceeded(ctx + Str(entries.size()) + " TENS tensors exceed the limit of " +
                         Str(opt.limits.max_tensor_count));
  }
  TensorSet set;
  if (tens.contains("metadata")) {
    if (!tens["metadata"].is_object()) return Corruption(ctx + "label: \"TENS.metadata\" must be a JSON object");
    set.metadata_json = tens["metadata"].dump();
  }
  std::vector<std::string> preferred(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    TS_ASSIGN_OR_RETURN(Tensor t, DecodeEntry(entries[i], i, m, ctx, opt, &preferred[i]));
    set.tensors.push_back(std::move(t));
  }
  const auto names = internal::AssignNames(preferred);
  for (std::size_t i = 0; i < names.size(); ++i) set.tensors[i].info.name = names[i];
  if (opt.strip_name_key) {
    for (Tensor& t : set.tensors) {
      if (t.info.metadata_json.empty()) continue;
      auto md = nlohmann::ordered_json::parse(t.info.metadata_json, nullptr, /*allow_exceptions=*/false);
      if (!md.is_object() || !md.contains("name") || md["name"] != t.info.name) continue;
      md.erase("name");
      t.info.metadata_json = md.empty() ? std::string() : md.dump();
    }
  }
  return set;
}

Result<Message> AppendTensors(const Message& base, const TensorSet& set) {
  Message m = base;
  auto owners = std::make_shared<OwnerList>();
  owners->owners.push_back(base.owner);
  try {
    json label = json::object();
    if (!base.label.empty()) {
      TS_ASSIGN_OR_RETURN(label, ParseObjectArg(base.label, "base label"));
    }
    json& tens = label["TENS"];
    if (tens.is_null()) tens = json::object();
    if (!tens.is_object()) return InvalidArgument("base label: \"TENS\" is not an object");
    json& entries = tens["tensors"];
    if (entries.is_null()) entries = json::array();
    if (!entries.is_array()) return InvalidArgument("base label: \"TENS.tensors\" is not an array");
    for (std::size_t k = 0; k < set.tensors.size(); ++k) {
      const Tensor& t = set.tensors[k];
      const std::string what = "tensor " + Str(k) + " " + internal::QuoteName(t.info.name);
      const ZioType* type = TypeOf(t.info.dtype);
      if (!type) {
        return Unsupported(what + ": dtype " + std::string(DTypeName(t.info.dtype)) +
                           " has no ZIO TENS type (f2 f4 f8 i1-i8 u1-u8 b1 c8 c16)");
      }
      if (t.info.layout != Layout::kDense) return InvalidArgument(what + ": not a dense tensor");
      TS_RETURN_IF_ERROR(internal::CheckDenseSize(t.info.dtype, t.info.shape, t.data.size(), what));
      json md;
      if (!t.info.metadata_json.empty()) {
        TS_ASSIGN_OR_RETURN(md, ParseObjectArg(t.info.metadata_json, what + " metadata"));
      }
      if (!t.info.name.empty() && !internal::IsPositionalName(t.info.name, entries.size()) &&
          !(md.is_object() && md.contains("name"))) {
        md["name"] = t.info.name;
      }
      json e = {{"dtype", std::string(1, type->kind)},
                {"part", m.payload.size()},
                {"shape", t.info.shape},
                {"word", type->word}};
      if (!md.is_null()) e["metadata"] = std::move(md);
      entries.push_back(std::move(e));
      m.payload.push_back(t.data);
      owners->owners.push_back(t.owner);
    }
    if (!set.metadata_json.empty()) {
      TS_ASSIGN_OR_RETURN(tens["metadata"], ParseObjectArg(set.metadata_json, "set metadata"));
    }
    m.label = label.dump();  // std::map keys: sorted, compact, like ZIO's C++
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("cannot build the TENS label: ") + e.what());
  }
  m.owner = std::move(owners);
  return m;
}

Result<Message> FromTensorSet(const TensorSet& set) {
  Message base;
  base.form = "TENS";
  return AppendTensors(base, set);
}

Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& opt) {
  TS_ASSIGN_OR_RETURN(Message m, Unpack(bytes, std::move(owner), display_name, opt));
  return ToTensorSet(m, display_name, opt);
}

Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& opt) {
  TS_ASSIGN_OR_RETURN(auto region, internal::EnvOr(opt.env)->Map(path));
  return Decode(region->bytes(), region, path, opt);
}

Result<std::string> Encode(const TensorSet& set, const WriteOptions&) {
  TS_ASSIGN_OR_RETURN(Message m, FromTensorSet(set));
  return Pack(m);
}

Status WriteFile(const std::string& path, const TensorSet& set, const WriteOptions& opt) {
  // The message's payload frames view the tensors' bytes (AppendTensors).
  auto message = FromTensorSet(set);
  if (!message.ok()) return message.status().WithContext(path);
  auto pieces = PackPieces(*message);
  if (!pieces.ok()) return pieces.status().WithContext(path);
  return WritePiecesAtomically(path, *pieces, opt.sync, opt.env);
}

bool HoldsDType(DType dtype) { return TypeOf(dtype) != nullptr; }

Status CheckNames(TensorSet& set, bool drop_names) {
  const std::vector<std::string> back =
      internal::ReadBackNames(set, "name", [](std::string_view stored) { return std::string(stored); });
  return internal::CheckReadBackNames(
      set, back, drop_names, [](const Tensor&) { return std::string("its ZIO metadata \"name\" differs or clashes"); });
}

}  // namespace tensorsafe::zio
