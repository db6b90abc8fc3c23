// Appends whole buffers to a WritableFile on a background thread, so that the
// kernel's copy of one chunk into the page cache overlaps the caller's work
// on the next. With 1 KiB tensors the two cost about the same (a tensor's
// checksum, index entry and copy against its share of the write()), so the
// writer spends half its time waiting on either alone (docs/format-bench.md).
//
// It also hashes a large tensor while the caller writes it (StartHash).
//
// Up to three buffers wait or are being written, in submission order. The
// first failed append is sticky: Submit and Wait return it from then on,
// and buffers queued after it are dropped (the file is abandoned). Until
// Wait returns, only the thread may touch the file.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tensorsafe/env.h"
#include "util/hash.h"

namespace tensorsafe::internal {

class BackgroundAppender {
 public:
  // `file` (not owned) must outlive this object; `buffer_size` is the size
  // of the buffers Submit swaps. `use_thread` false writes on the caller's
  // thread, as when no thread can be started (tests use it).
  BackgroundAppender(WritableFile* file, std::size_t buffer_size, bool use_thread = true);
  ~BackgroundAppender();  // writes what is queued, then ends the thread
  BackgroundAppender(const BackgroundAppender&) = delete;
  BackgroundAppender& operator=(const BackgroundAppender&) = delete;

  // Queues the first `n` bytes of `buf` and replaces `buf` by a free buffer
  // of buffer_size bytes, waiting while the queue is full. The thread starts
  // on the first call; when none can be started, the bytes are written here
  // and `buf` is kept.
  Status Submit(std::unique_ptr<std::byte[]>& buf, std::size_t n);
  // Starts hash->Update(bytes) on the thread, so that a large tensor is
  // hashed while the caller writes it: XXH3 runs at 4x the speed of the
  // kernel's copy, and the two overlap. Wait() waits for it; until then the
  // caller must keep `bytes` alive and not touch `hash`. Without a thread
  // it hashes here. Call when nothing is in flight (after Wait()).
  void StartHash(StreamingHash* hash, std::span<const std::byte> bytes);
  // Waits until nothing is in flight; the first append error, if any.
  Status Wait();

 private:
  void Run();
  // Starts the thread unless it runs or could not be started; false when
  // there is none.
  bool StartThread();
  // Nothing queued or being hashed (mu_ held).
  bool Idle() const { return queue_.empty() && hash_ == nullptr; }

  WritableFile* file_;
  std::size_t buffer_size_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Queued {
    std::unique_ptr<std::byte[]> buf;
    std::size_t n;
  };
  // Buffers to append, in order; the front is being written. Up to
  // kMaxQueued, so that a slow write or a slow stretch of the caller's work
  // is absorbed instead of stalling the other.
  static constexpr std::size_t kMaxQueued = 3;
  std::deque<Queued> queue_;
  std::vector<std::unique_ptr<std::byte[]>> free_;  // written buffers, for Submit to hand back
  StreamingHash* hash_ = nullptr;                   // a StartHash job, run with nothing queued
  std::span<const std::byte> hash_bytes_;
  bool stop_ = false;
  Status error_;
  std::thread thread_;
  bool no_thread_ = false;  // no thread (failed to start, or use_thread false): Submit writes
};

}  // namespace tensorsafe::internal
