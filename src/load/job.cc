// LoadJob (job.h): the loader's requests, reads, faulting and checks. The
// machine facts behind the numbers are in ../shared/reference/cold-read.md:
// 4 MiB requests into memory that is already faulted and physically
// contiguous reach the disk's ceiling; a first touch of fresh memory on an
// idle VM costs more than the disk.
#include "load/job.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "tensorsafe/formats/registry.h"
#include "util/hash.h"
#include "util/text.h"

namespace tensorsafe::internal {
namespace {

// Ranges closer than this are read as one segment: a request costs about
// 0.4 ms of fixed service time here, which 64 KiB of extra transfer does not.
constexpr std::uint64_t kMergeGap = std::uint64_t{64} << 10;

std::uint64_t Down(std::uint64_t v) { return v & ~(kBlock - 1); }
std::uint64_t Up(std::uint64_t v) { return (v + kBlock - 1) & ~(kBlock - 1); }

}  // namespace

Status LoadJob::Build(std::span<const std::span<std::byte>> outs, bool arena_mode,
                      std::vector<std::span<std::byte>>* dests) {
  const std::size_t n = plan_.items.size();
  remaining_ = std::make_unique<std::atomic<std::uint64_t>[]>(n);
  dests_.resize(n);
  if (o_.request_bytes < kBlock || o_.request_bytes % kBlock) {
    return InvalidArgument("request_bytes " + Str(o_.request_bytes) + " is not a positive multiple of 4096");
  }
  // Segments per file: merged, aligned ranges.
  struct Seg {
    std::uint32_t file;
    std::uint64_t begin, end;  // aligned
    std::uint64_t image = 0;   // arena position of `begin`
  };
  std::vector<Seg> segs;
  for (std::size_t i = 0; i < n; ++i) {
    const LoadItem& it = plan_.items[i];
    remaining_[i].store(it.bytes, std::memory_order_relaxed);
    for (const LoadRange& r : it.ranges) {
      if (r.length == 0) continue;
      const std::uint64_t b = Down(r.offset), e = Up(r.offset + r.length);
      if (!segs.empty() && segs.back().file == it.file && b <= segs.back().end + kMergeGap && b >= segs.back().begin) {
        segs.back().end = std::max(segs.back().end, e);
      } else {
        segs.push_back({it.file, b, e});
      }
    }
  }
  std::uint64_t image = 0;
  for (Seg& s : segs) {
    s.image = image;
    image += s.end - s.begin;
  }
  image_bytes_ = image;
  std::uint64_t packed = 0;
  std::vector<std::uint64_t> packed_at(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    if (arena_mode && plan_.items[i].ranges.size() > 1) {
      packed = (packed + 63) & ~std::uint64_t{63};
      packed_at[i] = packed;
      packed += plan_.items[i].bytes;
    }
  }
  if (arena_mode) {
    TS_ASSIGN_OR_RETURN(
        arena_, LoadArena::Allocate(std::max<std::uint64_t>(image + packed, 1), o_.huge_pages.value_or(o_.prefault)));
  }
  std::byte* base = arena_mode ? arena_->bytes().data() : nullptr;

  // Where each item's range lands: in the image (single-range items of a
  // fresh arena) or at a destination the request copies to.
  struct Span {
    std::uint32_t item;
    std::uint64_t offset, length;
    std::byte* dst;  // nullptr: in place
  };
  std::vector<Span> spans;
  std::size_t seg = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const LoadItem& it = plan_.items[i];
    std::byte* out = nullptr;
    if (!arena_mode) {
      out = outs[i].data();  // of the item's size: CheckBuffers
    } else if (it.ranges.size() > 1) {
      out = base + image + packed_at[i];
    }
    std::uint64_t at = 0;
    for (const LoadRange& r : it.ranges) {
      if (r.length == 0) continue;
      while (!(segs[seg].file == it.file && segs[seg].begin <= r.offset && r.offset + r.length <= segs[seg].end)) {
        ++seg;
      }
      if (at == 0 && !out) dests_[i] = {base + segs[seg].image + (r.offset - segs[seg].begin), it.bytes};
      spans.push_back({static_cast<std::uint32_t>(i), r.offset, r.length, out ? out + at : nullptr});
      at += r.length;
    }
    if (out) dests_[i] = {out, it.bytes};
    if (it.bytes == 0) dests_[i] = {base ? base : outs.empty() ? nullptr : outs[i].data(), 0};
  }
  // Requests: each segment cut into request_bytes, each holding the
  // pieces of the spans it overlaps.
  std::size_t sp = 0;
  for (const Seg& s : segs) {
    const std::uint64_t fsize = plan_.files[s.file].size;
    for (std::uint64_t c0 = s.begin; c0 < s.end; c0 += o_.request_bytes) {
      const std::uint64_t c1 = std::min(s.end, c0 + o_.request_bytes);
      Request q{s.file,
                c0,
                c1 - c0,
                arena_mode ? base + s.image + (c0 - s.begin) : nullptr,
                arena_mode ? s.image + (c1 - s.begin) : 0,
                static_cast<std::uint32_t>(pieces_.size()),
                0};
      if (c0 >= fsize) break;
      for (std::size_t k = sp; k < spans.size() && spans[k].offset < c1; ++k) {
        const Span& x = spans[k];
        if (plan_.items[x.item].file != s.file) break;
        const std::uint64_t b = std::max(x.offset, c0), e = std::min(x.offset + x.length, c1);
        if (b < e) pieces_.push_back({x.item, b - c0, x.dst ? x.dst + (b - x.offset) : nullptr, e - b});
        if (x.offset + x.length <= c1 && k == sp) ++sp;
      }
      q.piece_count = static_cast<std::uint32_t>(pieces_.size() - q.first_piece);
      requests_.push_back(q);
    }
  }
  // Set here, before any thread starts: WaitFaulted may run before Run.
  fault_goal_ = arena_ && o_.prefault ? image_bytes_ : 0;
  faulted_.store(arena_ && o_.prefault ? 0 : std::numeric_limits<std::uint64_t>::max());
  fault_next_.store(arena_ && o_.prefault ? 0 : std::numeric_limits<std::uint64_t>::max());
  if (dests) *dests = dests_;
  return Status::OK();
}

Status LoadJob::OpenFiles() {
  files_ = std::make_unique<OpenFile[]>(plan_.files.size());
  for (std::size_t f = 0; f < plan_.files.size(); ++f) {
    const std::string& path = plan_.files[f].path;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return IOError(path + ": open: " + std::strerror(errno), errno);
    files_[f].buffered = Fd(fd);
    files_[f].cached = o_.cached_buffered && MostlyCached(fd, plan_.files[f].size);
    if (!o_.direct) {
      files_[f].use_buffered = true;
      files_[f].reason = "direct=false";
      continue;
    }
    if (files_[f].cached) {
      files_[f].use_buffered = true;
      files_[f].reason = "in the page cache (mincore): copied from there";
      continue;
    }
    fd = o_.refuse_direct_errno ? (errno = o_.refuse_direct_errno, -1)
                                : ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0) {
      files_[f].use_buffered = true;
      files_[f].reason = std::string("O_DIRECT refused by the file system (") + std::strerror(errno) + ")";
      continue;
    }
    files_[f].direct = Fd(fd);
  }
  return Status::OK();
}

LoadReport LoadJob::Run() {
  const auto t0 = std::chrono::steady_clock::now();
  report_.tensors = plan_.items.size();
  report_.verify_requested = o_.verify;
  bool any_checksum = false;
  std::uint64_t largest = 0;
  for (const LoadItem& it : plan_.items) {
    report_.bytes += it.bytes;
    any_checksum |= it.checksum;
    largest = std::max(largest, it.bytes);
  }
  bool all_cached = true;
  for (std::size_t f = 0; f < plan_.files.size(); ++f) all_cached &= files_[f].cached;
  // Into caller buffers from the page cache, verified: each reader hashes
  // what it has just read (ReadItems). Not when one item is over half the
  // bytes (one thread would read it all), nor from a cold file read
  // through the page cache (O_DIRECT refused, direct=false), where 4 MiB
  // requests keep the kernel's readahead whole.
  if (!arena_ && o_.verify && any_checksum && all_cached && largest * 2 <= report_.bytes) {
    for (std::uint32_t i = 0; i < plan_.items.size(); ++i) by_size_.push_back(i);
    std::stable_sort(by_size_.begin(), by_size_.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return plan_.items[a].bytes > plan_.items[b].bytes; });
  } else {
    for (std::size_t i = 0; i < plan_.items.size(); ++i) {
      if (plan_.items[i].bytes == 0) Completed(static_cast<std::uint32_t>(i));
    }
  }
  const bool hashed_reads = !by_size_.empty();
  if (arena_) report_.pages = arena_->huge_pages() ? "2 MiB" : "4 KiB";
  watch_pages_.store(arena_ && arena_->huge_pages() && !o_.huge_pages.has_value());
  std::vector<std::thread> threads;
  if (fault_goal_) threads.emplace_back([this] { Fault(); });
  const unsigned verifiers = o_.verify && any_checksum && !hashed_reads ? std::max(1u, o_.verify_threads) : 0;
  for (unsigned v = 0; v < verifiers; ++v) threads.emplace_back([this] { Verify(); });
  const std::size_t work = hashed_reads ? by_size_.size() : requests_.size();
  const unsigned io = std::max(1u, static_cast<unsigned>(std::min<std::size_t>(o_.io_threads, work)));
  std::vector<std::thread> readers;
  for (unsigned t = 1; t < io; ++t) readers.emplace_back([this, hashed_reads] { hashed_reads ? ReadItems() : Read(); });
  hashed_reads ? ReadItems() : Read();
  for (std::thread& t : readers) t.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    reads_done_ = true;
  }
  cv_.notify_all();
  Stop();
  for (std::thread& t : threads) t.join();
  report_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (std::size_t i = 0; i < plan_.files.size(); ++i) {
    const OpenFile& f = files_[i];
    report_.direct.push_back(!f.use_buffered.load());
    report_.buffered_reason.push_back(f.use_buffered.load() ? f.reason : "");
  }
  report_.verified = verified_.load();
  report_.unverifiable = 0;
  for (const LoadItem& it : plan_.items) report_.unverifiable += !it.checksum;
  if (!o_.verify) {
    report_.verification = "not verified (verify=false)";
  } else if (!any_checksum) {
    // Why not: no tensors; slices of a format with checksums (each covers
    // a whole tensor); tensors of formats that store none.
    auto has = [&](const LoadItem& it) { return InfoOf(plan_.files[it.file].format).caps.checksums; };
    const auto sliced = static_cast<std::uint64_t>(std::count_if(plan_.items.begin(), plan_.items.end(), has));
    constexpr const char* kWhole = " (a checksum covers a whole tensor)";
    if (plan_.items.empty()) {
      report_.verification = "nothing to verify: no tensors";
    } else if (sliced == plan_.items.size()) {
      report_.verification = std::string("nothing to verify: every tensor is a slice") + kWhole;
    } else {
      const LoadItem& other = *std::find_if_not(plan_.items.begin(), plan_.items.end(), has);
      report_.verification =
          "nothing to verify: " + std::string(FormatName(plan_.files[other.file].format)) + " stores no checksums";
      if (sliced) report_.verification += "; " + Str(sliced) + " slices" + kWhole;
    }
  } else {
    report_.verification = "verified " + Str(report_.verified) + " of " + Str(report_.tensors) + " tensors (XXH3-64)";
    if (report_.unverifiable) report_.verification += "; " + Str(report_.unverifiable) + " without a checksum";
  }
  return report_;
}

void LoadJob::Fault() {
  std::byte* base = arena_->bytes().data();
  constexpr std::uint64_t kStep = kHuge;
  while (!stop_.load(std::memory_order_relaxed)) {
    const std::uint64_t at = fault_next_.fetch_add(kStep);
    // Chunks are claimed in order and touched one at a time: everything
    // below `at` that this thread claimed is done (readers skipped the rest).
    faulted_.store(std::min(at, fault_goal_), std::memory_order_release);
    faulted_.notify_all();
    if (at >= fault_goal_) break;
    const std::uint64_t end = std::min(fault_goal_, at + kStep);
    const double cpu0 = ThreadCpuSeconds();
    for (std::uint64_t p = at; p < end; p += kBlock) {
      reinterpret_cast<volatile char*>(base)[p] = 0;
    }
    NoteFaults(end - at, ThreadCpuSeconds() - cpu0);
    faulted_.store(end, std::memory_order_release);
    faulted_.notify_all();
  }
  faulted_.store(std::numeric_limits<std::uint64_t>::max(), std::memory_order_release);
  faulted_.notify_all();
}

void LoadJob::NoteFaults(std::uint64_t bytes, double cpu) {
  if (!watch_pages_.load(std::memory_order_relaxed) || bytes < kHuge) return;
  const double gbps = static_cast<double>(bytes) / std::max(cpu, 1e-9) / 1e9;
  std::lock_guard<std::mutex> lock(mu_);
  if (!fault_watch_.Slow(gbps) || !watch_pages_.exchange(false)) return;
  const std::uint64_t from = (fault_next_.load() + kHuge - 1) & ~(kHuge - 1);
  if (from >= arena_->bytes().size()) return;  // every byte claimed already: nothing to switch
  arena_->UseSmallPages(from);
  report_.pages = "2 MiB, then 4 KiB from byte " + Str(from) + " (2 MiB pages faulted at " +
                  TwoDecimals(fault_watch_.Median()) + " GB/s, the median of the last " +
                  Str(internal::FaultWatch::kWindow) + " chunks)";
}

std::uint64_t LoadJob::ClaimFaulted(std::uint64_t end) {
  std::uint64_t claimed = fault_next_.load();
  while (claimed < end && !fault_next_.compare_exchange_weak(claimed, end)) {
  }
  const std::uint64_t need = std::min(claimed, end);  // what the helper had claimed below `end`
  for (std::uint64_t w; (w = faulted_.load(std::memory_order_acquire)) < need;) faulted_.wait(w);
  return end - need;
}

void LoadJob::Read() {
  std::shared_ptr<LoadArena> bounce;
  for (std::size_t i; (i = next_.fetch_add(1)) < requests_.size();) {
    if (stop_.load(std::memory_order_relaxed)) return;
    const Request& q = requests_[i];
    if (!q.in_place && files_[q.file].use_buffered.load(std::memory_order_relaxed)) {
      // From the page cache alignment buys nothing: each piece is read
      // straight into its buffer, one copy instead of two.
      if (Status s = ReadPieces(q); !s.ok()) return Fail(i, s);
      continue;
    }
    std::byte* buf = q.in_place;
    std::uint64_t unfaulted = 0;
    if (!buf) {
      if (!bounce) {
        // 2 MiB pages, as the ceiling's buffer: an evicted into= load
        // measured 947-990 ms against 1,051-1,080 with 4 KiB pages
        // (2 GiB in 64 tensors, three alternated runs, 2026-12-01).
        auto b = LoadArena::Allocate(o_.request_bytes, true);
        if (!b.ok()) return Fail(i, b.status());
        bounce = std::move(b).value();
        std::memset(bounce->bytes().data(), 0, o_.request_bytes);  // fault it once, reuse it
      }
      buf = bounce->bytes().data();
    } else {
      unfaulted = ClaimFaulted(q.fault_end);
    }
    const double cpu0 = unfaulted ? ThreadCpuSeconds() : 0;
    Status s = ReadRequest(q, buf);
    if (!s.ok()) return Fail(i, s);
    if (unfaulted) NoteFaults(unfaulted, ThreadCpuSeconds() - cpu0);
    for (std::uint32_t k = 0; k < q.piece_count; ++k) {
      const Piece& p = pieces_[q.first_piece + k];
      if (p.dst) std::memcpy(p.dst, buf + p.src, p.length);
      if (remaining_[p.item].fetch_sub(p.length, std::memory_order_acq_rel) == p.length) Completed(p.item);
    }
  }
}

Status LoadJob::ReadPieces(const Request& q) {
  const int fd = files_[q.file].buffered.get();
  for (std::uint32_t k = 0; k < q.piece_count; ++k) {
    const Piece& p = pieces_[q.first_piece + k];
    TS_RETURN_IF_ERROR(PreadExactly(fd, plan_.files[q.file].path, p.dst, p.length, q.offset + p.src));
    report_bytes_read_.fetch_add(p.length, std::memory_order_relaxed);
    requests_done_.fetch_add(1, std::memory_order_relaxed);
    if (remaining_[p.item].fetch_sub(p.length, std::memory_order_acq_rel) == p.length) Completed(p.item);
  }
  return Status::OK();
}

Status LoadJob::ReadRequest(const Request& q, std::byte* buf) {
  OpenFile& f = files_[q.file];
  const std::string& path = plan_.files[q.file].path;
  const std::uint64_t want = std::min(q.length, plan_.files[q.file].size - q.offset);
  std::uint64_t got = 0;
  while (got < want) {
    const bool buffered = f.use_buffered.load(std::memory_order_relaxed);
    // O_DIRECT needs aligned lengths: ask for the whole aligned request
    // and accept the short read at the end of the file.
    const std::uint64_t ask = buffered ? want - got : q.length - got;
    const ssize_t r =
        ::pread(buffered ? f.buffered.get() : f.direct.get(), buf + got, ask, static_cast<off_t>(q.offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EINVAL && !buffered) {
      // Open accepted O_DIRECT but the read did not (some FUSE and
      // network file systems): the rest of this file goes buffered.
      SwitchToBuffered(f, "O_DIRECT reads refused (EINVAL)");
      continue;
    }
    if (r < 0) {
      return IOError(
          path + ": read of " + Str(ask) + " bytes at offset " + Str(q.offset + got) + ": " + std::strerror(errno),
          errno);
    }
    if (r == 0) {
      return OutOfRange(path + ": ends at offset " + Str(q.offset + got) + ", before the " + Str(q.offset + want) +
                        " its index needs (the file changed since it was planned)");
    }
    got += static_cast<std::uint64_t>(r);
    if (!buffered && got < want && got % kBlock) SwitchToBuffered(f, "a short O_DIRECT read");
  }
  report_bytes_read_.fetch_add(got, std::memory_order_relaxed);
  requests_done_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

void LoadJob::SwitchToBuffered(OpenFile& f, const char* why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!f.use_buffered.load()) f.reason = why;
  f.use_buffered.store(true);
}

void LoadJob::Completed(std::uint32_t item) {
  if (!o_.verify || !plan_.items[item].checksum) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.push_back(item);
  }
  cv_.notify_one();
}

void LoadJob::Verify() {
  for (;;) {
    std::uint32_t item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !ready_.empty() || reads_done_; });
      if (ready_.empty()) return;
      item = ready_.front();
      ready_.pop_front();
    }
    Check(item, internal::Hash64(std::span<const std::byte>(dests_[item].data(), dests_[item].size())));
  }
}

void LoadJob::ReadItems() {
  internal::StreamingHash hash;
  for (std::size_t k; (k = next_.fetch_add(1)) < by_size_.size();) {
    if (stop_.load(std::memory_order_relaxed)) return;
    const std::uint32_t item = by_size_[k];
    const LoadItem& it = plan_.items[item];
    std::uint64_t at = 0, reads = 0;
    hash.Reset();
    for (const LoadRange& r : it.ranges) {
      const int fd = files_[it.file].buffered.get();
      const std::string& path = plan_.files[it.file].path;
      Status s = it.checksum
                     ? internal::PreadHashed(fd, path, dests_[item].data() + at, r.length, r.offset, hash, &reads)
                     : internal::PreadExactly(fd, path, dests_[item].data() + at, r.length, r.offset);
      if (!s.ok()) return Fail(item, s);
      reads += !it.checksum && r.length;
      at += r.length;
    }
    report_bytes_read_.fetch_add(it.bytes, std::memory_order_relaxed);
    requests_done_.fetch_add(reads, std::memory_order_relaxed);
    if (it.checksum) Check(item, hash.Digest());
  }
}

void LoadJob::Check(std::uint32_t item, std::uint64_t got) {
  const LoadItem& it = plan_.items[item];
  if (got == it.info.data_checksum) {
    verified_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (item < bad_item_) {
    bad_item_ = item;
    bad_ =
        Corruption(plan_.files[it.file].path + ": tensor " + QuoteName(it.info.name) + " (offset " +
                   Str(it.info.data_offset) + ", " + Str(it.info.data_length) + " bytes): data checksum " + Str(got) +
                   " does not match the index's " + Str(it.info.data_checksum) + " (the data is damaged)");
  }
}

void LoadJob::Fail(std::size_t request, Status s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (request < io_error_at_) {
    io_error_at_ = request;
    io_error_ = std::move(s);
  }
  Stop();
}

}  // namespace tensorsafe::internal
