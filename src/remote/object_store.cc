#include "remote/object_store.h"

#include <filesystem>
#include <memory>

#include "remote/remote_file.h"
#include "remote/s3_client.h"
#include "tensorsafe/env.h"
#include "tensorsafe/url_handler.h"

namespace tensorsafe::internal {

namespace {

// Where an object at a URL lives: the handler's, or a bucket and key of
// the process's S3 client.
struct Store {
  std::shared_ptr<UrlHandler> handler;
  std::shared_ptr<s3::S3Client> client;
  s3::S3Location loc;
};

Result<Store> StoreFor(const std::string& url) {
  TS_RETURN_IF_ERROR(CheckStorableUrl(url));
  Store st;
  st.handler = HandlerFor(url);
  if (st.handler != nullptr) return st;
  TS_ASSIGN_OR_RETURN(st.loc, s3::ParseS3Url(url));
  TS_ASSIGN_OR_RETURN(st.client, SharedS3Client());
  return st;
}

}  // namespace

Status CheckStorableUrl(const std::string& url) {
  if (s3::IsS3Url(url)) return s3::ParseS3Url(url).status();
  if (HandlerFor(url) != nullptr) return Status::OK();  // the handler says what it cannot do
  return Unsupported(url +
                     ": objects are stored at s3:// URLs and at URLs an fsspec handler serves; an http(s) "
                     "server takes no uploads");
}

Status PutObjectFromFile(const std::string& url, const std::string& path) {
  TS_ASSIGN_OR_RETURN(Store st, StoreFor(url));
  if (st.handler != nullptr) return st.handler->PutUrl(url, path);
  // The upload reads the file through its mapping: the page cache, not a
  // copy in memory.
  TS_ASSIGN_OR_RETURN(std::shared_ptr<MappedRegion> region, Env::Default()->Map(path));
  return st.client->Put(st.loc, region->bytes());
}

Status CopyS3Object(const std::string& from, const std::string& to) {
  if (!s3::IsS3Url(from) || !s3::IsS3Url(to)) return Unsupported(from + " -> " + to + ": not two s3:// objects");
  TS_ASSIGN_OR_RETURN(Store dst, StoreFor(to));
  TS_ASSIGN_OR_RETURN(s3::S3Location src, s3::ParseS3Url(from));
  TS_ASSIGN_OR_RETURN(s3::ObjectInfo info, dst.client->Head(src));
  return dst.client->Copy(src, dst.loc, info.size);
}

Status DeleteObject(const std::string& url) {
  TS_ASSIGN_OR_RETURN(Store st, StoreFor(url));
  Status s = st.handler != nullptr ? st.handler->RemoveUrl(url) : st.client->Delete(st.loc);
  return s.code() == StatusCode::kNotFound ? Status::OK() : s;
}

Result<std::vector<std::string>> ListObjects(const std::string& prefix) {
  TS_ASSIGN_OR_RETURN(Store st, StoreFor(prefix));
  std::vector<std::string> out;
  if (st.handler != nullptr) {
    TS_ASSIGN_OR_RETURN(std::vector<UrlHandler::Entry> entries, st.handler->ListUrl(prefix));
    for (UrlHandler::Entry& e : entries) out.push_back(std::move(e.url));
    return out;
  }
  TS_ASSIGN_OR_RETURN(std::vector<s3::ListEntry> entries, st.client->List(st.loc.bucket, st.loc.key));
  for (const s3::ListEntry& e : entries) out.push_back("s3://" + st.loc.bucket + "/" + e.key);
  return out;
}

Status NotUpdatableInPlace(const std::string& url) {
  return Unsupported(url +
                     ": an object at a URL is replaced whole, not updated in place; update a local copy and "
                     "store it again (tensorsafe convert FILE URL)");
}

Result<std::uint64_t> ObjectSize(const std::string& url) {
  TS_ASSIGN_OR_RETURN(Store st, StoreFor(url));
  if (st.handler != nullptr) {
    TS_ASSIGN_OR_RETURN(UrlHandler::Stat stat, st.handler->StatUrl(url));
    return stat.size;
  }
  TS_ASSIGN_OR_RETURN(s3::ObjectInfo info, st.client->Head(st.loc));
  return info.size;
}

std::string LocalTempDir() {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::temp_directory_path(ec);
  return ec ? std::string("/tmp") : p.string();
}

}  // namespace tensorsafe::internal
