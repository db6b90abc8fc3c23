// tensorsafe/objects.h: documents at paths or URLs through the file seam.
#include "tensorsafe/objects.h"

#include <algorithm>
#include <cerrno>
#include <vector>

#include "remote/object_store.h"
#include "util/text.h"

namespace tensorsafe {

using internal::Str;

namespace {

// Ends `f`, a temporary file NewTempFile made for `path` whose writing ended
// with `s`: synced when `sync`, closed and renamed over `path`; removed on
// any failure (an upload removes its own).
Status Publish(Env* env, WritableFile& f, const std::string& tmp, const std::string& path, bool sync, Status s) {
  if (s.ok() && sync) s = f.Sync();
  const Status closed = f.Close();
  if (s.ok()) s = closed;
  if (s.ok()) s = env->Rename(tmp, path);
  if (!s.ok()) {
    (void)env->Remove(tmp);
    return s;
  }
  return sync ? env->SyncDirOf(path) : Status::OK();
}

}  // namespace

Status PublishBytes(const std::string& path, std::span<const std::byte> bytes, bool sync, Env* env) {
  if (env == nullptr) env = Env::Default();
  std::string tmp;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, env->NewTempFile(path, &tmp));
  return Publish(env, *f, tmp, path, sync, f->Append(bytes));
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

Status CopyFile(const std::string& from, const std::string& to, bool sync, Env* env) {
  if (env == nullptr) env = Env::Default();
  Status server = internal::CopyS3Object(from, to);
  if (server.code() != StatusCode::kUnsupported) return server;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> in, env->OpenRead(from));
  std::string tmp;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> out, env->NewTempFile(to, &tmp));
  constexpr std::uint64_t kChunk = std::uint64_t{8} << 20;
  std::vector<std::byte> buf(
      static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, std::max<std::uint64_t>(in->size(), 1))));
  Status s;
  for (std::uint64_t at = 0; s.ok() && at < in->size(); at += buf.size()) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), in->size() - at));
    s = in->ReadAt(at, {buf.data(), n});
    if (s.ok()) s = out->Append({buf.data(), n});
  }
  return Publish(env, *out, tmp, to, sync, s);
}

Result<std::vector<std::string>> ListUrls(const std::string& prefix) { return internal::ListObjects(prefix); }

Result<std::uint64_t> UrlObjectSize(const std::string& url) { return internal::ObjectSize(url); }

}  // namespace tensorsafe
