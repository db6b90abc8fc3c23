// The safetensors header reader: every check of the reference crate, in its
// order (docs/formats/safetensors.md, "Reader checks"), on simdjson On-Demand.
//
// On-Demand validates only what is visited, so every value is visited: the
// schema fields are parsed here, and unknown fields (which the crate
// ignores) are walked in full by JsonScanner::Skip (json_scan.cc), so a
// header is accepted only if all of it is valid JSON.
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "formats/safetensors/internal.h"
#include "formats/safetensors/json_scan.h"
#include "tensorsafe/formats/safetensors.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/hash.h"
#include "util/text.h"

namespace tensorsafe::safetensors {
namespace {

namespace sj = simdjson::ondemand;
using internal::NumberClass;
using internal::ScanNumber;
using internal::TrimRight;
using internal::TypeName;
using tensorsafe::internal::CheckedAdd;
using tensorsafe::internal::CheckedMul;
using tensorsafe::internal::QuoteName;

constexpr std::uint64_t kLengthBytes = 8;
// Recursion guard: deeper limits than simdjson's own default are clamped.
constexpr std::uint32_t kDepthCeiling = 1024;

using tensorsafe::internal::Str;

using internal::DataSpan;
using internal::EntryBuilder;
using internal::HeaderEntries;

// A parser and a padded input buffer. One per thread is kept for headers up
// to kCachedHeaderBytes, so repeated parses do not fault in fresh buffers
// (about 6x the header: simdjson indexes every structural byte).
struct ParserCache {
  sj::parser parser;
  std::unique_ptr<char[]> buf;
  std::size_t capacity = 0;

  const char* Load(std::string_view text) {
    const std::size_t need = text.size() + simdjson::SIMDJSON_PADDING;
    if (capacity < need) {
      buf.reset(new char[need]);
      capacity = need;
    }
    std::memcpy(buf.get(), text.data(), text.size());
    std::memset(buf.get() + text.size(), ' ', simdjson::SIMDJSON_PADDING);
    return buf.get();
  }
};

constexpr std::uint64_t kCachedHeaderBytes = std::uint64_t{16} << 20;

ParserCache& ThreadCache() {
  thread_local ParserCache cache;
  return cache;
}

class JsonWalker : public internal::JsonScanner {
 public:
  JsonWalker(const char* text, std::size_t len, const ReadOptions& opt, HeaderEntries& out)
      : JsonScanner(text, len, kLengthBytes, std::min(opt.max_json_depth, kDepthCeiling)), out(out) {}

  Status Run(sj::document& doc);

  HeaderEntries& out;    // filled as the header is walked
  Status unknown_dtype;  // the first one; reported only if nothing worse is found

 private:
  Status ParseMetadata(sj::value& v);
  Status ParseEntry(std::string_view name, sj::value& v);
  Status ParseDTypeField(TensorInfo& info, DataSpan& span, sj::value& v);
  template <typename Sink>
  Status ParseUints(std::string_view name, std::string_view field, sj::value& v, Sink&& sink);

  static std::string Where(std::string_view name) { return "tensor " + QuoteName(name) + ": "; }
};

Status JsonWalker::Run(sj::document& doc) {
  doc_ = &doc;
  sj::json_type t;
  if (auto e = doc.type().get(t)) return JsonError(e);
  if (t != sj::json_type::object) {
    return Corruption("header is " + std::string(TypeName(t)) + ", not a JSON object");
  }
  TS_RETURN_IF_ERROR(CheckDepth(1));
  sj::object top;
  if (auto e = doc.get_object().get(top)) return JsonError(e);
  bool saw_metadata = false;
  for (auto field_result : top) {
    sj::field field;
    if (auto e = std::move(field_result).get(field)) return JsonError(e);
    std::string_view key;
    if (auto e = field.unescaped_key().get(key)) return JsonError(e);
    sj::value& value = field.value();
    if (key == "__metadata__") {
      if (saw_metadata) return Corruption("header has a second \"__metadata__\" key");
      saw_metadata = true;
      TS_RETURN_IF_ERROR(ParseMetadata(value));
    } else {
      TS_RETURN_IF_ERROR(ParseEntry(key, value));
    }
  }
  const char* loc = nullptr;
  if (!doc.current_location().get(loc)) {
    return Corruption("trailing characters after the header's JSON object at byte " +
                      Str(kLengthBytes + static_cast<std::uint64_t>(loc - text_)) + " of the file");
  }
  return Status::OK();
}

Status JsonWalker::ParseMetadata(sj::value& v) {
  sj::json_type t;
  if (auto e = v.type().get(t)) return JsonError(e);
  if (t == sj::json_type::null) {
    bool is_null = false;
    if (auto e = v.is_null().get(is_null); e || !is_null) return JsonError(e ? e : simdjson::N_ATOM_ERROR);
    return Status::OK();  // the crate reads null as absent
  }
  if (t != sj::json_type::object) {
    return Corruption("\"__metadata__\" is " + std::string(TypeName(t)) +
                      "; it must be an object of strings (or null)");
  }
  TS_RETURN_IF_ERROR(CheckDepth(2));
  out.has_metadata = true;
  sj::object obj;
  if (auto e = v.get_object().get(obj)) return JsonError(e);
  for (auto field_result : obj) {
    sj::field field;
    if (auto e = std::move(field_result).get(field)) return JsonError(e);
    std::string_view key;
    if (auto e = field.unescaped_key().get(key)) return JsonError(e);
    sj::value& fv = field.value();
    sj::json_type ft;
    if (auto e = fv.type().get(ft)) return JsonError(e);
    if (ft != sj::json_type::string) {
      return Corruption("\"__metadata__\": the value of " + QuoteName(key) + " is " + std::string(TypeName(ft)) +
                        "; metadata maps strings to strings");
    }
    std::string_view s;
    if (auto e = fv.get_string().get(s)) return JsonError(e);
    out.metadata.emplace_back(std::string(key), std::string(s));
  }
  if (const std::string* dup = out.RepeatedMetadataKey()) {
    return Corruption("\"__metadata__\" has the key " + QuoteName(*dup) + " twice");
  }
  return Status::OK();
}

Status JsonWalker::ParseEntry(std::string_view name, sj::value& v) {
  sj::json_type t;
  if (auto e = v.type().get(t)) return JsonError(e);
  if (t == sj::json_type::array) {
    // serde would read a positional [dtype, shape, offsets]; no writer makes it.
    return Corruption(Where(name) +
                      "the entry is an array; only the object form "
                      "{\"dtype\", \"shape\", \"data_offsets\"} is accepted");
  }
  if (t != sj::json_type::object) {
    return Corruption(Where(name) + "the entry is " + std::string(TypeName(t)) +
                      ", not an object with dtype, shape and data_offsets");
  }
  TS_RETURN_IF_ERROR(CheckDepth(2));
  sj::object obj;
  if (auto e = v.get_object().get(obj)) return JsonError(e);
  EntryBuilder entry = out.Add(name);
  TensorInfo& info = entry.info;
  DataSpan& span = entry.span;
  bool has_dtype = false, has_shape = false, has_offsets = false;
  for (auto field_result : obj) {
    sj::field field;
    if (auto e = std::move(field_result).get(field)) return JsonError(e);
    std::string_view key;
    if (auto e = field.unescaped_key().get(key)) return JsonError(e);
    sj::value& fv = field.value();
    if (key == "dtype") {
      if (has_dtype) return Corruption(Where(name) + "duplicate field \"dtype\"");
      has_dtype = true;
      TS_RETURN_IF_ERROR(ParseDTypeField(info, span, fv));
    } else if (key == "shape") {
      if (has_shape) return Corruption(Where(name) + "duplicate field \"shape\"");
      has_shape = true;
      TS_RETURN_IF_ERROR(ParseUints(name, "shape", fv, [&](std::size_t, std::uint64_t d) {
        entry.AddDim(d);
        return Status::OK();
      }));
      entry.EndShape();
    } else if (key == "data_offsets") {
      if (has_offsets) return Corruption(Where(name) + "duplicate field \"data_offsets\"");
      has_offsets = true;
      std::size_t count = 0;
      TS_RETURN_IF_ERROR(ParseUints(name, "data_offsets", fv, [&](std::size_t i, std::uint64_t d) {
        if (i >= 2) return Corruption(Where(name) + "data_offsets has more than 2 elements");
        (i == 0 ? span.begin : span.end) = d;
        count = i + 1;
        return Status::OK();
      }));
      if (count != 2) {
        return Corruption(Where(name) + "data_offsets has " + Str(count) + " element" + (count == 1 ? "" : "s") +
                          "; it must be [begin, end]");
      }
    } else {
      TS_RETURN_IF_ERROR(Skip(fv, 2));  // unknown fields are ignored, as by the crate
    }
  }
  // serde reports the first missing field in declaration order.
  if (!has_dtype) return Corruption(Where(name) + "missing field \"dtype\"");
  if (!has_shape) return Corruption(Where(name) + "missing field \"shape\"");
  if (!has_offsets) return Corruption(Where(name) + "missing field \"data_offsets\"");
  return Status::OK();
}

Status JsonWalker::ParseDTypeField(TensorInfo& info, DataSpan& span, sj::value& v) {
  sj::json_type t;
  if (auto e = v.type().get(t)) return JsonError(e);
  if (t != sj::json_type::string) {
    return Corruption(Where(info.name) + "dtype is " + std::string(TypeName(t)) + ", not a string such as \"F32\"");
  }
  std::string_view s;
  if (auto e = v.get_string().get(s)) return JsonError(e);
  span.rank = internal::RankOfName(s);
  if (span.rank >= 0) {
    info.dtype = internal::StDTypeAt(span.rank).dtype;
  } else if (unknown_dtype.ok()) {
    unknown_dtype = Unsupported(Where(info.name) + "unknown dtype " + QuoteName(s) +
                                " (safetensors names are upper-case, e.g. \"F32\", \"BF16\")");
  }
  return Status::OK();
}

template <typename Sink>
Status JsonWalker::ParseUints(std::string_view name, std::string_view field, sj::value& v, Sink&& sink) {
  sj::json_type t;
  if (auto e = v.type().get(t)) return JsonError(e);
  if (t != sj::json_type::array) {
    return Corruption(Where(name) + std::string(field) + " is " + std::string(TypeName(t)) +
                      ", not an array of integers");
  }
  TS_RETURN_IF_ERROR(CheckDepth(3));
  sj::array arr;
  if (auto e = v.get_array().get(arr)) return JsonError(e);
  std::size_t i = 0;
  for (auto element_result : arr) {
    sj::value el;
    if (auto e = std::move(element_result).get(el)) return JsonError(e);
    sj::json_type et;
    if (auto e = el.type().get(et)) return JsonError(e);
    auto item = [&] { return std::string(field) + "[" + Str(i) + "]"; };  // errors only
    if (et != sj::json_type::number) {
      return Corruption(Where(name) + item() + " is " + std::string(TypeName(et)) + ", not a non-negative integer");
    }
    const std::string_view tok = TrimRight(el.raw_json_token());
    std::uint64_t u = 0;
    switch (ScanNumber(tok, &u)) {
      case NumberClass::kUnsigned: break;
      case NumberClass::kNotJson:
        return Corruption(Where(name) + item() + " is not a valid JSON number: " + std::string(tok));
      default:
        return Corruption(Where(name) + item() + " is " + std::string(tok) + ", not an integer from 0 to 2^64-1");
    }
    TS_RETURN_IF_ERROR(sink(i, u));
    ++i;
  }
  return Status::OK();
}

// Refuses repeated tensor names, which the crate silently collapses to the
// last one (a parser differential: docs/PERMISSIVE.md, "Stricter").
Status CheckUniqueNames(const std::vector<TensorInfo>& infos) {
  if (infos.size() < 2) return Status::OK();
  std::size_t cap = 1;
  while (cap < infos.size() * 2) cap <<= 1;
  // Open addressing; a slot keeps 32 bits of the hash so that most probes
  // are settled without touching the (cache-cold) names.
  struct Slot {
    std::uint32_t tag;
    std::uint32_t index;  // UINT32_MAX = empty
  };
  std::vector<Slot> slots(cap, Slot{0, UINT32_MAX});
  for (std::uint32_t i = 0; i < infos.size(); ++i) {
    const std::string& name = infos[i].name;
    const std::uint64_t hash = tensorsafe::internal::Hash64(name);
    const std::uint32_t tag = static_cast<std::uint32_t>(hash >> 32);
    std::size_t h = hash & (cap - 1);
    while (slots[h].index != UINT32_MAX) {
      if (slots[h].tag == tag && infos[slots[h].index].name == name) {
        return Corruption("tensor name " + QuoteName(name) +
                          " appears twice in the header (tensor names must be unique)");
      }
      h = (h + 1) & (cap - 1);
    }
    slots[h] = Slot{tag, i};
  }
  return Status::OK();
}

std::string Range(const DataSpan& e) { return "[" + Str(e.begin) + ", " + Str(e.end) + "]"; }

// The crate's validate(): entries in (begin, end) order must tile the buffer
// from 0 with no hole or overlap, each exactly its dtype and shape's size.
Result<std::uint64_t> CheckOffsets(std::vector<DataSpan>& entries, const std::vector<TensorInfo>& infos) {
  auto less = [](const DataSpan& a, const DataSpan& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  };
  // Files from writers are already in data order; sort only when needed.
  // Stable so that ties (zero-size tensors) keep header order.
  if (!std::is_sorted(entries.begin(), entries.end(), less)) {
    std::stable_sort(entries.begin(), entries.end(), less);
  }
  std::uint64_t running = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const DataSpan& e = entries[i];
    const TensorInfo& info = infos[e.index];
    auto where = [&] { return "tensor " + QuoteName(info.name) + ": "; };  // errors only
    if (e.begin != running) {
      if (i == 0) {
        return Corruption(where() + "data_offsets " + Range(e) + " begin at " + Str(e.begin) +
                          ", but the first tensor's data must begin at 0");
      }
      const std::string prev = QuoteName(infos[entries[i - 1].index].name);
      if (e.begin > running) {
        return Corruption(where() + "data_offsets " + Range(e) + " leave a gap of " + Str(e.begin - running) +
                          " bytes after tensor " + prev + ", which ends at " + Str(running));
      }
      return Corruption(where() + "data_offsets " + Range(e) + " overlap tensor " + prev + ", which ends at " +
                        Str(running));
    }
    if (e.end < e.begin) {
      return Corruption(where() + "data_offsets " + Range(e) + " end before they begin");
    }
    running = e.end;
    const internal::StDType& st = internal::StDTypeAt(e.rank);
    std::optional<std::uint64_t> bits = 1;
    for (std::uint64_t d : info.shape) {
      bits = CheckedMul(*bits, d);
      if (!bits) break;
    }
    if (bits) bits = CheckedMul(*bits, st.bits);
    if (!bits) {
      return Corruption(where() + "the size of " + std::string(st.name) + " " + ShapeToString(info.shape) +
                        " overflows 64 bits");
    }
    if (*bits % 8 != 0) {
      return Corruption(where() + std::string(st.name) + " " + ShapeToString(info.shape) + " takes " + Str(*bits) +
                        " bits, not a whole number of bytes");
    }
    if (e.end - e.begin != *bits / 8) {
      return Corruption(where() + "data_offsets " + Range(e) + " hold " + Str(e.end - e.begin) + " bytes, but " +
                        std::string(st.name) + " " + ShapeToString(info.shape) + " takes " + Str(*bits / 8));
    }
  }
  return running;
}

}  // namespace

const std::string* internal::HeaderEntries::RepeatedMetadataKey() const {
  if (metadata.size() < 2) return nullptr;
  std::vector<const std::string*> keys;
  keys.reserve(metadata.size());
  for (const auto& kv : metadata) keys.push_back(&kv.first);
  std::sort(keys.begin(), keys.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
  auto dup =
      std::adjacent_find(keys.begin(), keys.end(), [](const std::string* a, const std::string* b) { return *a == *b; });
  return dup == keys.end() ? nullptr : *dup;
}

Result<Header> internal::ParseHeaderWith(std::span<const std::byte> prefix, std::uint64_t file_size,
                                         const ReadOptions& options, bool fast_path) {
  if (file_size < kLengthBytes) {
    return Corruption("file is " + Str(file_size) + " bytes, too short for the 8-byte header length");
  }
  if (prefix.size() < kLengthBytes) {
    return InvalidArgument("ParseHeader needs the first 8 bytes of the file, got " + Str(prefix.size()));
  }
  const std::uint64_t n = tensorsafe::internal::Load64(prefix.data());
  if (n > options.max_header_bytes) {
    return LimitExceeded("header length " + Str(n) + " exceeds the limit of " + Str(options.max_header_bytes) +
                         " bytes");
  }
  if (n > file_size - kLengthBytes) {
    return Corruption("header length " + Str(n) + " runs past the end of the file: 8 + " + Str(n) + " > file size " +
                      Str(file_size));
  }
  if (prefix.size() - kLengthBytes < n) {
    return InvalidArgument("ParseHeader needs the first " + Str(kLengthBytes + n) + " bytes of the file, got " +
                           Str(prefix.size()));
  }
  const char* text = reinterpret_cast<const char*>(prefix.data()) + kLengthBytes;
  const std::string_view header(text, static_cast<std::size_t>(n));
  if (!tensorsafe::internal::IsValidUtf8(header)) {
    return Corruption("header is not valid UTF-8 (bad sequence at byte " +
                      Str(kLengthBytes + internal::FirstInvalidUtf8(header)) + " of the file)");
  }
  // Friendlier messages for two known writer mistakes, both JSON errors anyway.
  if (header.size() >= 3 && header.substr(0, 3) == "\xEF\xBB\xBF") {
    return Corruption("header is not valid JSON: it starts with a UTF-8 byte order mark");
  }
  if (!header.empty() && header.back() == '\0') {
    return Corruption("header is not valid JSON: it ends with NUL bytes (only spaces may pad it)");
  }
  if (header.find_first_not_of(" \t\n\r") == std::string_view::npos) {
    return Corruption("header is not valid JSON: it is empty");
  }

  HeaderEntries entries;
  Status unknown_dtype;  // the general reader's, reported only if nothing worse is found
  // An entry takes at least ~50 header bytes, real ones 80 to 130: reserve
  // for all but dense headers (a reallocation moves every info; the
  // reserve itself touches no memory), and let those grow.
  entries.infos.reserve(static_cast<std::size_t>(n / 64));
  entries.spans.reserve(static_cast<std::size_t>(n / 64));
  // The fast path needs depth 3 (an entry's arrays); shallower limits are
  // the general reader's to report.
  if (!fast_path || std::min(options.max_json_depth, kDepthCeiling) < 3 ||
      !internal::ScanCommonHeader(header, entries)) {
    // simdjson reads past the end of its input, and the bytes after the
    // header are the file's (attacker-chosen) data: parse a private padded copy.
    ParserCache local;
    ParserCache& cache = n <= kCachedHeaderBytes ? ThreadCache() : local;
    const char* json = cache.Load(header);
    entries.Clear();
    JsonWalker walker(json, header.size(), options, entries);
    sj::document doc;
    auto err = cache.parser.iterate(json, header.size(), header.size() + simdjson::SIMDJSON_PADDING).get(doc);
    Status s;
    if (err) {
      s = Corruption(std::string("header is not valid JSON: ") + simdjson::error_message(err));
    } else {
      s = walker.Run(doc);
    }
    if (!s.ok()) return s;
    unknown_dtype = std::move(walker.unknown_dtype);
  }
  TS_RETURN_IF_ERROR(CheckUniqueNames(entries.infos));
  if (!unknown_dtype.ok()) return unknown_dtype;
  std::vector<DataSpan>& spans = entries.spans;
  TS_ASSIGN_OR_RETURN(const std::uint64_t data_length, CheckOffsets(spans, entries.infos));

  const std::uint64_t data_start = kLengthBytes + n;
  auto end = CheckedAdd(data_start, data_length);
  if (!end || *end != file_size) {
    if (!end || *end > file_size) {
      return Corruption("tensor data ends at byte " + (end ? Str(*end) : std::string("2^64+")) + " (8 + " + Str(n) +
                        " + " + Str(data_length) + "), past the end of the file (" + Str(file_size) +
                        " bytes): truncated");
    }
    const std::uint64_t extra = file_size - *end;
    return Corruption("file has " + Str(extra) + (extra == 1 ? " byte" : " bytes") +
                      " after the tensor data, which ends at byte " + Str(*end) + " (the data must end the file)");
  }

  Header h;
  h.header_length = n;
  h.data_start = data_start;
  h.data_length = data_length;
  bool in_order = true;
  for (std::size_t i = 0; i < spans.size() && in_order; ++i) in_order = spans[i].index == i;
  if (in_order) {
    h.tensors = std::move(entries.infos);
  } else {
    h.tensors.reserve(spans.size());
    for (const DataSpan& sp : spans) h.tensors.push_back(std::move(entries.infos[sp.index]));
  }
  for (std::size_t i = 0; i < spans.size(); ++i) {
    TensorInfo& info = h.tensors[i];
    info.data_offset = data_start + spans[i].begin;
    info.data_length = spans[i].end - spans[i].begin;
  }
  if (entries.has_metadata) {
    std::string& m = h.metadata_json;
    m.push_back('{');
    for (std::size_t i = 0; i < entries.metadata.size(); ++i) {
      if (i) m.push_back(',');
      internal::AppendJsonString(m, entries.metadata[i].first);
      m.push_back(':');
      internal::AppendJsonString(m, entries.metadata[i].second);
    }
    m.push_back('}');
  }
  return h;
}

Result<Header> ParseHeader(std::span<const std::byte> prefix, std::uint64_t file_size, const ReadOptions& options) {
  return internal::ParseHeaderWith(prefix, file_size, options, /*fast_path=*/true);
}

Result<Header> ParseHeader(std::span<const std::byte> file, const ReadOptions& options) {
  return ParseHeader(file, file.size(), options);
}

}  // namespace tensorsafe::safetensors
