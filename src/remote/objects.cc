// tensorsafe/objects.h: documents at paths or URLs through the file seam.
#include "tensorsafe/objects.h"

#include <cerrno>

#include "remote/object_store.h"
#include "util/text.h"

namespace tensorsafe {

using internal::Str;

Status PublishBytes(const std::string& path, std::span<const std::byte> bytes, bool sync, Env* env) {
  if (env == nullptr) env = Env::Default();
  std::string tmp;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, env->NewTempFile(path, &tmp));
  Status s = f->Append(bytes);
  if (s.ok() && sync) s = f->Sync();
  const Status closed = f->Close();
  if (s.ok()) s = closed;
  if (s.ok()) s = env->Rename(tmp, path);
  if (!s.ok()) {
    (void)env->Remove(tmp);  // what a failed write or local rename left (an upload removes its own)
    return s;
  }
  return sync ? env->SyncDirOf(path) : Status::OK();
}

Result<std::string> ReadWhole(const std::string& path, std::uint64_t max_bytes, Env* env) {
  if (env == nullptr) env = Env::Default();
  auto opened = env->OpenRead(path);
  if (!opened.ok()) {
    const Status& s = opened.status();
    // A local file that is not there is kNotFound, as a missing object is.
    return s.error_number() == ENOENT ? Status(StatusCode::kNotFound, s.message()) : s;
  }
  std::unique_ptr<RandomAccessFile> f = std::move(*opened);
  if (f->size() > max_bytes) {
    return LimitExceeded(path + ": " + Str(f->size()) + " bytes exceeds the limit of " + Str(max_bytes));
  }
  std::string out(f->size(), '\0');
  TS_RETURN_IF_ERROR(f->ReadAt(0, std::as_writable_bytes(std::span<char>(out))));
  return out;
}

Result<std::vector<std::string>> ListUrls(const std::string& prefix) { return internal::ListObjects(prefix); }

Result<std::uint64_t> UrlObjectSize(const std::string& url) { return internal::ObjectSize(url); }

}  // namespace tensorsafe
