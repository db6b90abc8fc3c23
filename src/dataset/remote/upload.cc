#include "dataset/remote/upload.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "remote/remote_file.h"
#include "remote/s3_client.h"
#include "tensorsafe/dataset/index.h"
#include "tensorsafe/env.h"

namespace tensorsafe::dataset::internal {

namespace fs = std::filesystem;
using tensorsafe::internal::SharedS3Client;
namespace s3 = tensorsafe::internal::s3;

namespace {

Result<s3::S3Location> Location(const std::string& url) { return s3::ParseS3Url(url); }

// OK when nothing is at `url`; kFailedPrecondition naming `why` when there is.
Status CheckAbsent(const s3::S3Client& client, const std::string& url, const std::string& why) {
  TS_ASSIGN_OR_RETURN(s3::S3Location loc, Location(url));
  Result<s3::ObjectInfo> head = client.Head(loc);
  if (head.ok()) return FailedPrecondition(url + " exists: " + why);
  if (head.status().code() == StatusCode::kNotFound) return Status::OK();
  return head.status();
}

}  // namespace

Result<std::unique_ptr<DatasetUploader>> DatasetUploader::Start(const std::string& url) {
  if (!s3::IsS3Url(url)) {
    return Unsupported(url + ": datasets are written to local directories and s3:// prefixes; an http(s) server " +
                       "takes no uploads");
  }
  std::string base = url;
  if (base.back() != '/') base += '/';
  TS_ASSIGN_OR_RETURN(s3::S3Location loc, Location(base));
  if (loc.key == "/" || loc.key.find("//") != std::string::npos) {
    return InvalidArgument(url + ": empty path segment in the prefix");
  }
  TS_ASSIGN_OR_RETURN(std::shared_ptr<s3::S3Client> client, SharedS3Client());
  TS_RETURN_IF_ERROR(CheckAbsent(*client, base + std::string(kIndexFileName),
                                 "the prefix already holds a dataset; write parts to new prefixes"));
  std::error_code ec;
  fs::path tmp = fs::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  std::string tmpl = (tmp / "tensorsafe-upload-XXXXXX").string();
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
  TS_ASSIGN_OR_RETURN(s3::S3Location loc, Location(url));
  TS_ASSIGN_OR_RETURN(std::shared_ptr<s3::S3Client> client, SharedS3Client());
  {
    TS_ASSIGN_OR_RETURN(auto region, Env::Default()->Map(path));
    // Recorded first: a PUT that fails after the server stored the object
    // (a multipart upload aborted late, a lost response) is still deleted.
    uploaded_.push_back(url);
    TS_RETURN_IF_ERROR(client->Put(loc, region->bytes()));
  }
  std::error_code ec;
  fs::remove(path, ec);
  return Status::OK();
}

Status DatasetUploader::Commit() {
  TS_ASSIGN_OR_RETURN(std::shared_ptr<s3::S3Client> client, SharedS3Client());
  const std::string index_url = base_ + std::string(kIndexFileName);
  TS_RETURN_IF_ERROR(CheckAbsent(*client, index_url, "index.json appeared while writing (another writer?)"));
  const std::string path = (fs::path(staging_) / kIndexFileName).string();
  TS_ASSIGN_OR_RETURN(s3::S3Location loc, Location(index_url));
  TS_ASSIGN_OR_RETURN(auto region, Env::Default()->Map(path));
  return client->Put(loc, region->bytes());
}

Status DatasetUploader::Abandon() {
  Status first;
  Result<std::shared_ptr<s3::S3Client>> client = SharedS3Client();
  if (!client.ok()) return client.status();
  for (const std::string& url : uploaded_) {
    Result<s3::S3Location> loc = Location(url);
    Status s = loc.ok() ? (*client)->Delete(*loc) : loc.status();
    if (!s.ok() && s.code() != StatusCode::kNotFound && first.ok()) first = s;
  }
  uploaded_.clear();
  return first;
}

}  // namespace tensorsafe::dataset::internal
