// Files named by URL (s3://bucket/key, http://, https://) behind the Env file
// seam (tensorsafe/env.h): Env::OpenRead and Env::MapWithFile send such paths
// here, so every format in the table reads them (docs/REMOTE.md).
//
// OpenRemoteFile returns positional reads done as ranged GETs. Opening costs
// one request: the last 1 MiB of the object, whose Content-Range gives the
// size (a trailer and index usually sit there). Small reads fetch whole 1 MiB
// blocks, kept in a per-object LRU of 64 blocks, so neighbouring reads
// (tensors stored side by side, a header then the entry after it) share one
// GET; reads of 4 MiB and more go straight to the caller's buffer as
// parallel ranged GETs. Blocks are kept per URL for the process, checked on
// every open against the ETag the first request returns, so a format sniff
// followed by an open reuses them.
//
// MapRemoteFile downloads the whole object into anonymous memory with
// parallel ranged GETs (the formats that parse a mapping).
//
// Thread safety: all functions and the returned files are safe from many
// threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "tensorsafe/env.h"
#include "tensorsafe/status.h"
#include "tensorsafe/url_handler.h"

namespace tensorsafe::internal {

// "s3://", "http://" or "https://" (any case), or any other "scheme://"
// while a UrlHandler is set.
bool IsRemotePath(std::string_view path);
// The registered UrlHandler when `path` is a "scheme://" URL of a scheme not
// read natively (not s3, http, https or file) and one is set; else null.
std::shared_ptr<UrlHandler> HandlerFor(std::string_view path);

Result<std::unique_ptr<RandomAccessFile>> OpenRemoteFile(const std::string& url);
Result<Env::MappedFile> MapRemoteFile(const std::string& url);

// The process's S3 client for the current environment (credentials, region
// and endpoint as remote/s3_config.h finds them), shared by every caller
// with the same settings. Errors: those of ResolveS3Config.
namespace s3 {
class S3Client;
}
Result<std::shared_ptr<s3::S3Client>> SharedS3Client();

// Requests sent for remote files by this process (every retry counts).
std::uint64_t RemoteRequestCount();
// Bytes of objects fetched for remote files by this process (what was
// asked for: a retried range counts once).
std::uint64_t RemoteBytesFetched();
// Forgets cached blocks and clients (tests that change the environment).
void ResetRemoteState();

}  // namespace tensorsafe::internal
