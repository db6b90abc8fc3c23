// The fast path of the sharded-checkpoint index reader: one pass over an
// index as huggingface_hub and transformers write it, straight from the
// file's bytes, with no DOM (whose buffers, six times the text, were most
// of the time spent on a 100,000-tensor index). It gives up at anything
// else, and sharded_index.cc's general reader takes the text.
#include <string_view>

#include "formats/safetensors/plain_json.h"
#include "formats/safetensors/sharded_internal.h"
#include "util/text.h"

namespace tensorsafe::sharded::internal {
namespace {

class IndexScanner : safetensors::internal::PlainJson {
 public:
  IndexScanner(std::string_view text, const IndexEntrySink& add) : PlainJson(text), add_(add) {}

  bool Index(std::string& metadata_json) {
    SkipSpace();
    if (!Eat('{')) return false;
    bool has_map = false, has_meta = false;
    SkipSpace();
    for (bool closed = false; !closed;) {
      std::string_view key;
      if (!String(key) || !Colon()) return false;
      if (Is(key, "weight_map") && !has_map) {
        has_map = true;
        if (!WeightMap()) return false;
      } else if (Is(key, "metadata") && !has_meta) {
        has_meta = true;
        if (!Metadata(metadata_json)) return false;
      } else {
        return false;  // other keys, repeated keys
      }
      if (!Next('}', closed)) return false;
    }
    return has_map && AtEnd();
  }

 private:
  // An object of strings and integers, kept as compact JSON (what the
  // general reader's minify makes of it).
  bool Metadata(std::string& m) {
    if (!Eat('{')) return false;  // null and the rest: the general reader
    m = "{";
    SkipSpace();
    if (!Eat('}')) {
      for (bool closed = false; !closed;) {
        std::string_view key, value;
        if (!String(key) || !Colon()) return false;
        ((m += '"') += key) += "\":";
        if (Peek('"')) {
          if (!String(value)) return false;
          ((m += '"') += value) += '"';
        } else {
          std::uint64_t v = 0;
          if (!Uint(v, value)) return false;
          m += value;
        }
        if (!Next('}', closed)) return false;
        if (!closed) m += ',';
      }
    }
    m += '}';
    return true;
  }

  bool WeightMap() {
    if (!Eat('{')) return false;
    SkipSpace();
    if (Eat('}')) return true;
    for (bool closed = false; !closed;) {
      std::string_view name, shard;
      if (!String(name) || !Colon() || !String(shard)) return false;
      if (!add_(name, shard)) return false;
      if (!Next('}', closed)) return false;
    }
    return true;
  }

  const IndexEntrySink& add_;
};

}  // namespace

bool ScanCommonIndex(std::string_view text, std::string& metadata_json, const IndexEntrySink& add) {
  if (!tensorsafe::internal::IsValidUtf8(text)) return false;
  return IndexScanner(text, add).Index(metadata_json);
}

}  // namespace tensorsafe::sharded::internal
