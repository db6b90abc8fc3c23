// Small documents beside tensor files, at local paths or at URLs (s3://, and
// the schemes a UrlHandler serves), through the file seam (env.h): a
// document that names tensor files published beside them (tensorsafe.dcp's
// metadata) is stored the way the files are, whole or not at all, and read
// back the same way wherever they live.
//
// Thread safety: all functions are safe from many threads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensorsafe/env.h"
#include "tensorsafe/status.h"

namespace tensorsafe {

// Writes `bytes` as `path`: a temporary file renamed over it (fsynced with
// its directory when `sync`), or, at a URL, one upload. Nothing is left
// behind on failure. env nullptr: Env::Default().
Status PublishBytes(const std::string& path, std::span<const std::byte> bytes, bool sync, Env* env = nullptr);

// The whole file or object at `path`. kLimitExceeded, naming it, beyond
// `max_bytes` (nothing more is read); kNotFound when there is none.
Result<std::string> ReadWhole(const std::string& path, std::uint64_t max_bytes, Env* env = nullptr);

// Copies the file or object `from` to `to`, whole or not at all: between
// two s3:// objects on the server (no byte passes through this process),
// otherwise read into a temporary file beside `to` (under $TMPDIR for a
// URL) and published as PublishBytes publishes. env nullptr: Env::Default().
Status CopyFile(const std::string& from, const std::string& to, bool sync, Env* env = nullptr);

// The URLs of the objects whose URL starts with `prefix` (an s3:// URL or a
// scheme the UrlHandler lists); kUnsupported for others.
Result<std::vector<std::string>> ListUrls(const std::string& prefix);

// The size of the object at `url` (a HEAD, or the handler's stat);
// kNotFound when there is none.
Result<std::uint64_t> UrlObjectSize(const std::string& url);

}  // namespace tensorsafe
