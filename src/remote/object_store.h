// Whole objects at URLs, stored, listed and removed: s3:// through the
// process's S3 client, other schemes through the registered UrlHandler
// (fsspec in Python). Env::Default() sends tensor files published at URLs
// here (a local temporary file, then one upload: docs/REMOTE.md), and the
// dataset writer its shards. HTTP(S) servers take no uploads.
//
// Thread safety: all functions are safe from many threads.
#pragma once

#include <string>
#include <vector>

#include "tensorsafe/status.h"

namespace tensorsafe::internal {

// OK when objects can be stored at `url`; kUnsupported naming it for an
// http(s) URL or a scheme no handler stores (nothing is asked of a server).
Status CheckStorableUrl(const std::string& url);
// Stores the local file `path` as `url`, replacing any object there (one
// PUT, or a multipart upload of a large file; a failed one is aborted).
Status PutObjectFromFile(const std::string& url, const std::string& path);
// Copies the s3:// object `from` to the s3:// URL `to` on the server (a
// HEAD for its size, then S3Client::Copy); kUnsupported when either is not
// an s3:// URL (objects.h's CopyFile then copies through a local file).
Status CopyS3Object(const std::string& from, const std::string& to);
// Removes the object at `url`; OK when there is none.
Status DeleteObject(const std::string& url);
// The URLs of the objects whose URL starts with `prefix`.
Result<std::vector<std::string>> ListObjects(const std::string& prefix);
// kUnsupported for updating the object at `url` in place (tensorsafe's
// updater, compact, metadata edits): objects are replaced whole.
Status NotUpdatableInPlace(const std::string& url);
// The size of the object at `url` (a HEAD, or the handler's stat);
// kNotFound when there is none.
Result<std::uint64_t> ObjectSize(const std::string& url);
// Where local files bound for URLs wait: $TMPDIR, else /tmp.
std::string LocalTempDir();

}  // namespace tensorsafe::internal
