#include "remote/object_store.h"

#include <filesystem>
#include <memory>

#include "remote/remote_file.h"
#include "remote/s3_client.h"
#include "tensorsafe/env.h"
#include "tensorsafe/url_handler.h"

namespace tensorsafe::internal {

Status CheckStorableUrl(const std::string& url) {
  if (s3::IsS3Url(url)) return s3::ParseS3Url(url).status();
  if (HandlerFor(url) != nullptr) return Status::OK();  // the handler says what it cannot do
  return Unsupported(url +
                     ": objects are stored at s3:// URLs and at URLs an fsspec handler serves; an http(s) "
                     "server takes no uploads");
}

Status PutObjectFromFile(const std::string& url, const std::string& path) {
  TS_RETURN_IF_ERROR(CheckStorableUrl(url));
  if (std::shared_ptr<UrlHandler> h = HandlerFor(url)) return h->PutUrl(url, path);
  TS_ASSIGN_OR_RETURN(s3::S3Location loc, s3::ParseS3Url(url));
  TS_ASSIGN_OR_RETURN(std::shared_ptr<s3::S3Client> client, SharedS3Client());
  // The upload reads the file through its mapping: the page cache, not a
  // copy in memory.
  TS_ASSIGN_OR_RETURN(std::shared_ptr<MappedRegion> region, Env::Default()->Map(path));
  return client->Put(loc, region->bytes());
}

Status DeleteObject(const std::string& url) {
  TS_RETURN_IF_ERROR(CheckStorableUrl(url));
  if (std::shared_ptr<UrlHandler> h = HandlerFor(url)) {
    Status s = h->RemoveUrl(url);
    return s.code() == StatusCode::kNotFound ? Status::OK() : s;
  }
  TS_ASSIGN_OR_RETURN(s3::S3Location loc, s3::ParseS3Url(url));
  TS_ASSIGN_OR_RETURN(std::shared_ptr<s3::S3Client> client, SharedS3Client());
  Status s = client->Delete(loc);
  return s.code() == StatusCode::kNotFound ? Status::OK() : s;
}

Result<std::vector<std::string>> ListObjects(const std::string& prefix) {
  TS_RETURN_IF_ERROR(CheckStorableUrl(prefix));
  std::vector<std::string> out;
  if (std::shared_ptr<UrlHandler> h = HandlerFor(prefix)) {
    TS_ASSIGN_OR_RETURN(std::vector<UrlHandler::Entry> entries, h->ListUrl(prefix));
    for (UrlHandler::Entry& e : entries) out.push_back(std::move(e.url));
    return out;
  }
  TS_ASSIGN_OR_RETURN(s3::S3Location loc, s3::ParseS3Url(prefix));
  TS_ASSIGN_OR_RETURN(std::shared_ptr<s3::S3Client> client, SharedS3Client());
  TS_ASSIGN_OR_RETURN(std::vector<s3::ListEntry> entries, client->List(loc.bucket, loc.key));
  for (const s3::ListEntry& e : entries) out.push_back("s3://" + loc.bucket + "/" + e.key);
  return out;
}

Status NotUpdatableInPlace(const std::string& url) {
  return Unsupported(url +
                     ": an object at a URL is replaced whole, not updated in place; update a local copy and "
                     "store it again (tensorsafe convert FILE URL)");
}

Result<std::uint64_t> ObjectSize(const std::string& url) {
  TS_RETURN_IF_ERROR(CheckStorableUrl(url));
  if (std::shared_ptr<UrlHandler> h = HandlerFor(url)) {
    TS_ASSIGN_OR_RETURN(UrlHandler::Stat st, h->StatUrl(url));
    return st.size;
  }
  TS_ASSIGN_OR_RETURN(s3::S3Location loc, s3::ParseS3Url(url));
  TS_ASSIGN_OR_RETURN(std::shared_ptr<s3::S3Client> client, SharedS3Client());
  TS_ASSIGN_OR_RETURN(s3::ObjectInfo info, client->Head(loc));
  return info.size;
}

std::string LocalTempDir() {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::temp_directory_path(ec);
  return ec ? std::string("/tmp") : p.string();
}

}  // namespace tensorsafe::internal
