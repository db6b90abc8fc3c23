#include "io/background_appender.h"

#include <pthread.h>

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
    thread_ = std::thread([this] {
    // Named for top, perf and gdb; the name is advice (Linux only, 15 bytes).
#if defined(__linux__)
      (void)pthread_setname_np(pthread_self(), "tensorsafe-io");
#endif
      Run();
    });
  } catch (const std::system_error&) {
    no_thread_ = true;
    return false;
  }
  return true;
}

Status BackgroundAppender::Submit(std::unique_ptr<std::byte[]>& buf, std::size_t n) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return queue_.size() < kMaxQueued && hash_ == nullptr; });
  if (!error_.ok()) return error_;
  if (!StartThread()) {
    // No thread to be had (a process or container limit): write here.
    Status s = file_->Append({buf.get(), n});
    if (!s.ok()) error_ = s;
    return s;
  }
  queue_.push_back({std::move(buf), n});
  if (!free_.empty()) {
    buf = std::move(free_.back());
    free_.pop_back();
  } else {
    buf.reset(new std::byte[buffer_size_]);
  }
  lock.unlock();
  cv_.notify_all();
  return Status::OK();
}

void BackgroundAppender::StartHash(StreamingHash* hash, std::span<const std::byte> bytes) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return Idle(); });
  if (!StartThread()) {
    hash->Update(bytes);
    return;
  }
  hash_ = hash;
  hash_bytes_ = bytes;
  lock.unlock();
  cv_.notify_all();
}

Status BackgroundAppender::Wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return Idle(); });
  return error_;
}

void BackgroundAppender::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return !queue_.empty() || hash_ != nullptr || stop_; });
    if (hash_ != nullptr) {
      lock.unlock();
      hash_->Update(hash_bytes_);
      lock.lock();
      hash_ = nullptr;
      cv_.notify_all();
      continue;
    }
    if (queue_.empty()) return;  // stop_ with nothing queued
    // The front stays queued while it is written: Wait() sees it in flight.
    const std::span<const std::byte> bytes(queue_.front().buf.get(), queue_.front().n);
    const bool write = error_.ok();  // after a failure the file is abandoned: drop the rest
    lock.unlock();
    Status s = write ? file_->Append(bytes) : Status::OK();
    lock.lock();
    if (!s.ok() && error_.ok()) error_ = std::move(s);
    free_.push_back(std::move(queue_.front().buf));
    queue_.pop_front();
    cv_.notify_all();
  }
}

}  // namespace tensorsafe::internal
