// The fast path of the safetensors header reader: one pass over the header
// as writers make it, with no JSON parser, no padded copy and no unescaping.
// It gives up (false) at the first thing outside that form, and parse.cc's
// general reader, which holds every check and message, takes the header.
// Whatever it accepts is valid JSON that the general reader would read to
// the same entries (tests/formats/safetensors_fast_path_test.cc compares
// the two on mutated headers).
#include <cstdint>
#include <string_view>
#include <vector>

#include "formats/safetensors/internal.h"
#include "formats/safetensors/plain_json.h"

namespace tensorsafe::safetensors::internal {
namespace {

class HeaderScanner : PlainJson {
 public:
  using PlainJson::PlainJson;

  bool Header(HeaderEntries& out) {
    SkipSpace();
    if (!Eat('{')) return false;
    SkipSpace();
    if (Eat('}')) return AtEnd();
    bool saw_metadata = false;
    for (bool closed = false; !closed;) {
      std::string_view key;
      if (!String(key) || !Colon()) return false;
      if (Is(key, "__metadata__")) {
        if (saw_metadata || !Metadata(out)) return false;
        saw_metadata = true;
      } else if (!Entry(key, out)) {
        return false;
      }
      if (!Next('}', closed)) return false;
    }
    return AtEnd();
  }

 private:
  // "[" integers "]"; `sink(i, value)` false gives up.
  template <typename Sink>
  bool Uints(Sink&& sink) {
    if (!Eat('[')) return false;
    SkipSpace();
    if (Eat(']')) return true;
    for (std::size_t i = 0;; ++i) {
      std::uint64_t v = 0;
      std::string_view digits;
      bool closed = false;
      if (!Uint(v, digits) || !sink(i, v) || !Next(']', closed)) return false;
      if (closed) return true;
    }
  }

  bool Metadata(HeaderEntries& out) {
    if (!Eat('{')) return false;  // null and the rest: the general reader
    out.has_metadata = true;
    SkipSpace();
    if (!Eat('}')) {
      for (bool closed = false; !closed;) {
        std::string_view key, value;
        if (!String(key) || !Colon() || !String(value)) return false;
        out.metadata.emplace_back(std::string(key), std::string(value));
        if (!Next('}', closed)) return false;
      }
    }
    return out.RepeatedMetadataKey() == nullptr;  // an error the general reader words
  }

  enum class Field { kDType, kShape, kOffsets, kOther };

  // An entry's field name and its colon. The three fields as serde_json
  // writes them are matched whole; other spellings (spaces before the
  // colon) are read as strings. kOther: another name, or unreadable.
  Field NextField() {
    if (Literal("\"dtype\":")) return Field::kDType;
    if (Literal("\"shape\":")) return Field::kShape;
    if (Literal("\"data_offsets\":")) return Field::kOffsets;
    std::string_view key;
    if (!String(key) || !Colon()) return Field::kOther;
    if (Is(key, "dtype")) return Field::kDType;
    if (Is(key, "shape")) return Field::kShape;
    if (Is(key, "data_offsets")) return Field::kOffsets;
    return Field::kOther;
  }

  bool Entry(std::string_view name, HeaderEntries& out) {
    if (!Eat('{')) return false;
    EntryBuilder entry = out.Add(name);
    TensorInfo& info = entry.info;
    DataSpan& span = entry.span;
    bool has_dtype = false, has_shape = false, has_offsets = false;
    SkipSpace();
    for (bool closed = false; !closed;) {
      const Field field = NextField();
      SkipSpace();
      if (field == Field::kDType && !has_dtype) {
        has_dtype = true;
        std::string_view dtype;
        if (!String(dtype)) return false;
        span.rank = RankOfName(dtype);
        if (span.rank < 0) return false;  // the general reader words the unknown dtype
        info.dtype = StDTypeAt(span.rank).dtype;
      } else if (field == Field::kShape && !has_shape) {
        has_shape = true;
        if (!Uints([&](std::size_t, std::uint64_t d) {
              entry.AddDim(d);
              return true;
            })) {
          return false;
        }
        entry.EndShape();
      } else if (field == Field::kOffsets && !has_offsets) {
        has_offsets = true;
        std::size_t count = 0;
        const bool ok = Uints([&](std::size_t i, std::uint64_t d) {
          if (i >= 2) return false;
          (i == 0 ? span.begin : span.end) = d;
          count = i + 1;
          return true;
        });
        if (!ok || count != 2) return false;
      } else {
        return false;  // an unknown, repeated or unreadable field
      }
      if (!Next('}', closed)) return false;
    }
    return has_dtype && has_shape && has_offsets;
  }
};

}  // namespace

bool ScanCommonHeader(std::string_view header, HeaderEntries& out) { return HeaderScanner(header).Header(out); }

}  // namespace tensorsafe::safetensors::internal
