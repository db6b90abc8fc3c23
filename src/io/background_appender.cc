#include "io/background_appender.h"

#include <span>
#include <utility>

namespace tensorsafe::internal {

BackgroundAppender::BackgroundAppender(WritableFile* file, std::size_t buffer_size)
    : file_(file), buffer_size_(buffer_size) {}

BackgroundAppender::~BackgroundAppender() {
  {
    std::unique_lock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status BackgroundAppender::Submit(std::unique_ptr<std::byte[]>& buf, std::size_t n) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
  if (!error_.ok()) return error_;
  inflight_ = std::move(buf);
  inflight_n_ = n;
  busy_ = true;
  buf = spare_ ? std::move(spare_) : std::unique_ptr<std::byte[]>(new std::byte[buffer_size_]);
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  lock.unlock();
  cv_.notify_all();
  return Status::OK();
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
