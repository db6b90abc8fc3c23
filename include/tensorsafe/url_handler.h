// URLs of schemes tensorsafe does not read itself ("gs://", "hf://",
// "az://", "memory://", ...), served by a handler the embedding program
// registers; the Python package registers fsspec's filesystems
// (python/tensorsafe/_fsspec.py). Every reader behind the file seam
// (tensorsafe/env.h) then takes such URLs as it takes s3:// ones: a few
// requests for a .tsafe index, ranges for the tensors (docs/REMOTE.md).
// Datasets at such URLs go through the shard cache (docs/REMOTE.md,
// "Datasets"), which also lists prefixes and, for dataset writers, stores
// and removes objects when the handler can.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorsafe/status.h"

namespace tensorsafe {

// Called from the reading thread (several at once); must be thread-safe.
class UrlHandler {
 public:
  virtual ~UrlHandler() = default;
  struct Stat {
    std::uint64_t size = 0;
    std::string version;  // changes when the object does ("" when unknown)
  };
  virtual Result<Stat> StatUrl(const std::string& url) = 0;
  // Exactly out.size() bytes at `offset`.
  virtual Status ReadUrl(const std::string& url, std::uint64_t offset, std::span<std::byte> out) = 0;

  // Optional: a handler without them gives kUnsupported.
  struct Entry {
    std::string url;  // full URL, starting with the prefix asked for
    std::uint64_t size = 0;
    std::string version;
  };
  // Every object whose URL starts with `prefix` (a WebDataset prefix with no
  // index.json).
  virtual Result<std::vector<Entry>> ListUrl(const std::string& prefix) {
    return Unsupported(prefix + ": this URL handler cannot list");
  }
  // Stores the local file `path` as `url`, replacing any object there.
  virtual Status PutUrl(const std::string& url, const std::string& path) {
    (void)path;
    return Unsupported(url + ": this URL handler cannot store objects");
  }
  virtual Status RemoveUrl(const std::string& url) {
    return Unsupported(url + ": this URL handler cannot remove objects");
  }
};

// Sends every "scheme://..." path whose scheme is not s3, http, https or
// file to `handler` (null: no handler, and such paths are file names).
void SetUrlHandler(std::shared_ptr<UrlHandler> handler);

// Requests sent for remote tensor files by this process (every retry and
// every handler call counts).
std::uint64_t RemoteRequestCount();
// Bytes of remote tensor files fetched by this process (a retried range
// counts once): what opening or reading a URL cost.
std::uint64_t RemoteBytesFetched();

}  // namespace tensorsafe
