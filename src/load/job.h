// LoadJob: one load's requests, threads and checks (loader.cc runs it for
// Load, LoadInto and StartedLoad). Build plans the aligned requests over
// every file of a plan; Run reads them, with a helper thread faulting a fresh
// arena in ahead of the reads and verifiers hashing each tensor whose last
// byte has arrived.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "load/internal.h"
#include "tensorsafe/load.h"

namespace tensorsafe::internal {

// Bytes of a request that belong to an item: copied to `dst` when the read
// did not land there, and counted toward the item's completion.
struct Piece {
  std::uint32_t item;
  std::uint64_t src;  // offset in the request's buffer
  std::byte* dst;     // nullptr: the read landed in place
  std::uint64_t length;
};

struct Request {
  std::uint32_t file;
  std::uint64_t offset;     // aligned
  std::uint64_t length;     // aligned
  std::byte* in_place;      // read straight here (arena image), or nullptr: bounce buffer
  std::uint64_t fault_end;  // arena bytes that must be faulted first
  std::uint32_t first_piece, piece_count;
};

struct OpenFile {
  Fd direct, buffered;
  bool cached = false;  // mostly in the page cache when opened (mincore)
  std::atomic<bool> use_buffered{false};
  std::string reason;
};

class LoadJob {
 public:
  LoadJob(const LoadPlan& plan, const LoadOptions& o) : plan_(plan), o_(o) {}

  // Plans the requests. `arena` (nullptr for LoadInto) receives an image of
  // every read segment, then the packed destinations of multi-range items.
  Status Build(std::span<const std::span<std::byte>> outs, bool arena_mode, std::vector<std::span<std::byte>>* dests);

  Status OpenFiles();

  LoadReport Run();

  Status status() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!io_error_.ok()) return io_error_;
    return bad_item_ < plan_.items.size() ? bad_ : Status::OK();
  }
  const std::shared_ptr<LoadArena>& arena() const { return arena_; }
  // Returns once the helper has faulted the whole arena in (at once
  // without one), or the reads stopped.
  void WaitFaulted() const {
    for (std::uint64_t w; (w = faulted_.load(std::memory_order_acquire)) < fault_goal_;) faulted_.wait(w);
  }
  // Stops the reads and the faulting helper where they are, and frees any
  // reader waiting on the helper: at Run's end, on a failure, and for
  // StartedLoad::Cancel (Run then returns leaving the rest unread).
  void Stop() {
    stop_.store(true);
    faulted_.store(std::numeric_limits<std::uint64_t>::max());
    faulted_.notify_all();
  }

 private:
  // Faults the arena in ahead of the reads, a 2 MiB chunk at a time, each
  // claimed from fault_next_. A reader that finds the helper behind moves
  // fault_next_ past its own request and reads into unfaulted memory (the
  // kernel faults it), waiting only for the chunk the helper is touching:
  // a starved helper never stalls the reads.
  void Fault();

  // huge_pages auto: `bytes` of the arena faulted in `cpu` seconds of one
  // thread's CPU time (a stall on the host counts, a preemption does not),
  // by the helper or by a reader ahead of it. Where FaultWatch finds most
  // recent chunks under huge_page_min_gbps, the arena past everything
  // claimed takes 4 KiB pages.
  void NoteFaults(std::uint64_t bytes, double cpu);

  // Returns once no helper write can land in arena bytes below `end`, and
  // how many bytes below `end` this reader took from the helper (it faults
  // them itself).
  std::uint64_t ClaimFaulted(std::uint64_t end);

  void Read();

  // A caller-buffer request through the page cache: one pread per piece.
  Status ReadPieces(const Request& q);

  Status ReadRequest(const Request& q, std::byte* buf);

  void SwitchToBuffered(OpenFile& f, const char* why);

  void Completed(std::uint32_t item);

  void Verify();

  // From the page cache into caller buffers, verified: a reader takes a
  // whole item (largest first, so no thread is left with a big one at the
  // end) and hashes each 256 KiB it has read while the bytes are still in
  // its cache, where a verifier would read the item back from memory.
  void ReadItems();

  void Check(std::uint32_t item, std::uint64_t got);

  void Fail(std::size_t request, Status s);

  const LoadPlan& plan_;
  const LoadOptions& o_;
  std::vector<Request> requests_;
  std::vector<Piece> pieces_;
  std::vector<std::span<std::byte>> dests_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> remaining_;
  std::unique_ptr<OpenFile[]> files_;  // atomics: not movable
  std::shared_ptr<LoadArena> arena_;
  std::uint64_t image_bytes_ = 0;
  std::uint64_t fault_goal_ = 0;
  std::atomic<std::uint64_t> faulted_{0};          // arena bytes below this are faulted (or skipped)
  std::atomic<std::uint64_t> fault_next_{0};       // the helper's next chunk; readers push it past themselves
  std::atomic<bool> watch_pages_{false};           // huge_pages auto, not switched yet
  FaultWatch fault_watch_{o_.huge_page_min_gbps};  // under mu_
  std::atomic<std::size_t> next_{0};
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> verified_{0};
  std::vector<std::uint32_t> by_size_;  // items, largest first: ReadItems' queue (else empty)

 public:
  std::atomic<std::uint64_t> report_bytes_read_{0};
  std::atomic<std::uint64_t> requests_done_{0};

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::uint32_t> ready_;
  bool reads_done_ = false;
  Status io_error_;
  std::size_t io_error_at_ = std::numeric_limits<std::size_t>::max();
  Status bad_;
  std::size_t bad_item_ = std::numeric_limits<std::size_t>::max();
  LoadReport report_;
};

}  // namespace tensorsafe::internal
