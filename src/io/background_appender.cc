#include "io/background_appender.h"

#include <span>
#include <system_error>
#include <utility>

namespace tensorsafe::internal {

BackgroundAppender::BackgroundAppender(WritableFile* file, std::size_t buffer_size, bool use_thread)
    : file_(file), buffer_size_(buffer_size), no_thread_(!use_thread) {}

BackgroundAppender::~BackgroundAppender() {
  {
    std::unique_lock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool BackgroundAppender::StartThread() {
  if (thread_.joinable()) return true;
  if (no_thread_) return false;
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (const std::system_error&) {
    no_thread_ = true;
    return false;
  }
  return true;
}

Status BackgroundAppender::Submit(std::unique_ptr<std::byte[]>& buf, std::size_t n) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
  if (!error_.ok()) return error_;
  if (!StartThread()) {
    // No thread to be had (a process or container limit): write here.
    Status s = file_->Append({buf.get(), n});
    if (!s.ok()) error_ = s;
    return s;
  }
  inflight_ = std::move(buf);
  inflight_n_ = n;
  busy_ = true;
  buf = spare_ ? std::move(spare_) : std::unique_ptr<std::byte[]>(new std::byte[buffer_size_]);
  lock.unlock();
  cv_.notify_all();
  return Status::OK();
}

void BackgroundAppender::StartHash(StreamingHash* hash, std::span<const std::byte> bytes) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
  if (!StartThread()) {
    hash->Update(bytes);
    return;
  }
  hash_ = hash;
  hash_bytes_ = bytes;
  busy_ = true;
  lock.unlock();
  cv_.notify_all();
}

Status BackgroundAppender::Wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
  return error_;
}

void BackgroundAppender::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return busy_ || stop_; });
    if (!busy_) return;  // stop_ with nothing in flight
    if (hash_ != nullptr) {
      lock.unlock();
      hash_->Update(hash_bytes_);
      lock.lock();
      hash_ = nullptr;
      busy_ = false;
      cv_.notify_all();
      continue;
    }
    const std::span<const std::byte> bytes(inflight_.get(), inflight_n_);
    lock.unlock();
    Status s = file_->Append(bytes);
    lock.lock();
    if (!s.ok() && error_.ok()) error_ = std::move(s);
    spare_ = std::move(inflight_);
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace tensorsafe::internal
