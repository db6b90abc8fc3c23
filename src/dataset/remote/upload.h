// Writing a dataset to S3 (docs/REMOTE.md, "Writing datasets to S3"): the
// DatasetWriter builds each shard in a local staging directory, as it would
// in a local dataset, and hands it here; it is uploaded and its local copy
// removed, so the disk holds one shard at a time. index.json goes last: the
// index is the commit, and a reader never sees a dataset whose shards are
// not all there.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tensorsafe/status.h"

namespace tensorsafe::dataset::internal {

class DatasetUploader {
 public:
  // `url`: s3://bucket/prefix (http(s) servers take no uploads:
  // kUnsupported). Fails with kFailedPrecondition when the prefix already
  // holds an index.json, as a local directory does. Creates the staging
  // directory under $TMPDIR.
  static Result<std::unique_ptr<DatasetUploader>> Start(const std::string& url);
  ~DatasetUploader();  // removes the staging directory
  DatasetUploader(const DatasetUploader&) = delete;
  DatasetUploader& operator=(const DatasetUploader&) = delete;

  const std::string& staging_dir() const { return staging_; }
  const std::string& base_url() const { return base_; }  // ends with '/'

  // PUTs staging_dir()/name to base_url() + name (multipart when large),
  // then removes the local file.
  Status Upload(const std::string& name);
  // Uploads staging_dir()/index.json after checking that none appeared at
  // the URL meanwhile (another writer).
  Status Commit();
  // Deletes every object Upload() stored (best effort: the first error is
  // returned, the rest are still tried).
  Status Abandon();

 private:
  DatasetUploader(std::string base, std::string staging) : base_(std::move(base)), staging_(std::move(staging)) {}
  std::string base_;
  std::string staging_;
  std::vector<std::string> uploaded_;
};

}  // namespace tensorsafe::dataset::internal
