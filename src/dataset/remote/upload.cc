#include "dataset/remote/upload.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "remote/object_store.h"
#include "remote/remote_file.h"
#include "remote/s3_client.h"
#include "tensorsafe/dataset/index.h"
#include "tensorsafe/env.h"

namespace tensorsafe::dataset::internal {

namespace fs = std::filesystem;
namespace s3 = tensorsafe::internal::s3;

namespace {

// OK when nothing is at `url`; kFailedPrecondition naming `why` when there is.
Status CheckAbsent(const std::string& url, const std::string& why) {
  const Status found = tensorsafe::internal::ObjectSize(url).status();
  if (found.ok()) return FailedPrecondition(url + " exists: " + why);
  if (found.code() == StatusCode::kNotFound) return Status::OK();
  return found;
}

}  // namespace

Result<std::unique_ptr<DatasetUploader>> DatasetUploader::Start(const std::string& url) {
  const bool other = tensorsafe::internal::HandlerFor(url) != nullptr;
  if (!s3::IsS3Url(url) && !other) {
    return Unsupported(url + ": datasets are written to local directories, s3:// prefixes and fsspec URLs; an " +
                       "http(s) server takes no uploads");
  }
  std::string base = url;
  if (base.back() != '/') base += '/';
  // The path after the bucket (s3) or scheme (others) has no empty segment.
  std::string path = base.substr(base.find("://") + 3);
  if (!other) {
    Result<s3::S3Location> loc = s3::ParseS3Url(base);
    if (!loc.ok()) return loc.status();
    path = loc->key;
  }
  if (path == "/" || path.find("//") != std::string::npos) {
    return InvalidArgument(url + ": empty path segment in the prefix");
  }
  TS_RETURN_IF_ERROR(CheckAbsent(base + std::string(kIndexFileName),
                                 "the prefix already holds a dataset; write parts to new prefixes"));
  std::string tmpl = (fs::path(tensorsafe::internal::LocalTempDir()) / "tensorsafe-upload-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return IOError(tmpl + ": mkdtemp: " + std::strerror(errno), errno);
  return std::unique_ptr<DatasetUploader>(new DatasetUploader(std::move(base), std::move(tmpl)));
}

DatasetUploader::~DatasetUploader() {
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

Status DatasetUploader::Upload(const std::string& name) {
  const std::string path = (fs::path(staging_) / name).string();
  const std::string url = base_ + name;
  // Recorded first: a PUT that fails after the server stored the object
  // (a multipart upload aborted late, a lost response) is still deleted.
  uploaded_.push_back(url);
  TS_RETURN_IF_ERROR(tensorsafe::internal::PutObjectFromFile(url, path));
  std::error_code ec;
  fs::remove(path, ec);
  return Status::OK();
}

Status DatasetUploader::Commit() {
  const std::string index_url = base_ + std::string(kIndexFileName);
  TS_RETURN_IF_ERROR(CheckAbsent(index_url, "index.json appeared while writing (another writer?)"));
  return tensorsafe::internal::PutObjectFromFile(index_url, (fs::path(staging_) / kIndexFileName).string());
}

Status DatasetUploader::Abandon() {
  Status first;
  for (const std::string& url : uploaded_) {
    Status s = tensorsafe::internal::DeleteObject(url);
    if (!s.ok() && first.ok()) first = s;
  }
  uploaded_.clear();
  return first;
}

}  // namespace tensorsafe::dataset::internal
