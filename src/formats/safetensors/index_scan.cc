// The fast path of the sharded-checkpoint index reader: one pass over an
// index as huggingface_hub and transformers write it, straight from the
// file's bytes, with no DOM (whose buffers, six times the text, were most
// of the time spent on a 100,000-tensor index). It gives up at anything
// else, and sharded_index.cc's general reader takes the text.
#include <functional>
#include <new>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "formats/safetensors/plain_json.h"
#include "formats/safetensors/sharded_internal.h"
#include "util/text.h"

namespace tensorsafe::sharded::internal {
namespace {

// The entries of a weight map's second part, scanned on a helper thread
// from the first entry after a newline to the map's closing brace.
struct Tail {
  const char* start = nullptr;  // the first entry (set before the thread starts)
  const char* end = nullptr;    // just past the '}'; nullptr: not one entry list to it
  bool utf8 = true;             // of the text from the newline on
  std::vector<std::pair<std::string_view, std::string_view>> entries;
};

class TailScanner : safetensors::internal::PlainJson {
 public:
  using PlainJson::PlainJson;

  // Entries until the '}' that closes their map; false at anything else.
  bool Entries(Tail& tail) {
    for (bool closed = false; !closed;) {
      std::string_view name, shard;
      if (!String(name) || !Colon() || !String(shard)) return false;
      tail.entries.emplace_back(name, shard);
      if (!Next('}', closed)) return false;
    }
    tail.end = p_;
    return true;
  }
};

class IndexScanner : safetensors::internal::PlainJson {
 public:
  IndexScanner(std::string_view text, const IndexEntrySink& add) : PlainJson(text), add_(add) {}

  // The weight map's entries from tail.start on come from `tail` (whose
  // thread `join` waits for) when the scan reaches that point between two
  // entries; otherwise the scan goes on alone.
  void SplitAt(const Tail* tail, const std::function<void()>* join) {
    tail_ = tail;
    join_ = join;
  }

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
      if (!closed && tail_ != nullptr && p_ == tail_->start) {
        (*join_)();
        if (tail_->end == nullptr) return false;  // the general reader finds what is wrong there
        for (const auto& [n, sh] : tail_->entries) {
          if (!add_(n, sh)) return false;
        }
        p_ = tail_->end;
        return true;
      }
    }
    return true;
  }

  const IndexEntrySink& add_;
  const Tail* tail_ = nullptr;
  const std::function<void()>* join_ = nullptr;
};

// Below this, one thread: starting one (about 50 us here) would take much
// of the 0.1-0.2 ms a split saves on 1 MiB.
constexpr std::size_t kSplitBytes = 1 << 20;

}  // namespace

bool ScanCommonIndex(std::string_view text, std::string& metadata_json, const IndexEntrySink& add) {
  // A newline in valid JSON lies between tokens, so a map written one entry
  // a line (as the hub and transformers write it) can be cut at one: a
  // helper thread checks and scans the part after it while this one does
  // the rest and hands every entry to `add` in file order. The cut is
  // before the middle: `add` is the bigger half of an entry's cost.
  const std::size_t cut = text.size() >= kSplitBytes ? text.find('\n', text.size() * 2 / 5) : std::string_view::npos;
  const auto alone = [&] {
    if (!tensorsafe::internal::IsValidUtf8(text)) return false;
    return IndexScanner(text, add).Index(metadata_json);
  };
  if (cut == std::string_view::npos) return alone();
  std::size_t start = cut;
  while (start < text.size() &&
         (text[start] == ' ' || text[start] == '\n' || text[start] == '\r' || text[start] == '\t')) {
    ++start;
  }
  Tail tail;
  tail.start = text.data() + start;
  tail.entries.reserve((text.size() - start) / 64);
  std::thread helper;
  try {
    helper = std::thread([&] {
      tail.utf8 = tensorsafe::internal::IsValidUtf8(text.substr(cut));
      try {
        if (tail.utf8) TailScanner(text.substr(start)).Entries(tail);
      } catch (const std::bad_alloc&) {
        tail.end = nullptr;  // the caller's scan gives up at the cut, and the general reader reports
      }
    });
  } catch (const std::system_error&) {
    return alone();  // no thread to be had
  }
  const std::function<void()> join = [&] {
    if (helper.joinable()) helper.join();
  };
  // Joined however this returns (`add` may throw bad_alloc): a joinable
  // thread's destructor would end the process.
  struct Joiner {
    const std::function<void()>& join;
    ~Joiner() { join(); }
  } joiner{join};
  bool ok = false;
  if (tensorsafe::internal::IsValidUtf8(text.substr(0, cut))) {
    IndexScanner scanner(text, add);
    scanner.SplitAt(&tail, &join);
    ok = scanner.Index(metadata_json);
  }
  join();
  return ok && tail.utf8;
}

}  // namespace tensorsafe::sharded::internal
