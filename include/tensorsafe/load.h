// The loader: tensors from files into memory at the storage's speed,
// whatever the state of the page cache and of the machine's memory
// (docs/LOAD.md).
//
// A LoadPlan lists where each wanted tensor lies: which file, which byte
// ranges. Load() reads every range of every file in one queue ordered by
// file offset, with O_DIRECT requests of `request_bytes` (4 MiB), several in
// flight, either straight into one fresh arena laid out as an image of the
// files (tensors keep their file offsets mod 4096, so no bounce copy is
// needed and a helper thread faults the arena in just ahead of the reads),
// or through per-thread bounce buffers into caller buffers. Where a file
// refuses O_DIRECT (tmpfs: EINVAL) it is read with ordinary preads and the
// result says so. Each tensor's XXH3-64 is checked on another thread as soon
// as its last byte has arrived, for formats that store one
// (Capabilities::checksums); for the others the result says there was
// nothing to verify.
//
// Thread safety: plans and results are values. Load() may run concurrently
// with other Loads; it starts and joins its own threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/formats/registry.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"

namespace tensorsafe {

// A contiguous run of a tensor's bytes in its file.
struct LoadRange {
  std::uint64_t offset = 0;  // absolute file offset
  std::uint64_t length = 0;
};

struct LoadItem {
  TensorInfo info;         // as the file's index says (whole tensor)
  std::uint32_t file = 0;  // into LoadPlan::files
  Shape shape;             // of what is loaded: info.shape, or the slice's
  // The bytes to load, in destination order, ascending and not overlapping:
  // one range for a whole tensor, one per row for a column block.
  std::vector<LoadRange> ranges;
  std::uint64_t bytes = 0;  // sum of the ranges' lengths
  bool checksum = false;    // info.data_checksum can be checked (whole tensor, format has one)
};

struct LoadPlan {
  struct File {
    std::string path;
    Format format = Format::kUnknown;
    std::uint64_t size = 0;
  };
  std::vector<File> files;
  // In file order, then offset order within each file.
  std::vector<LoadItem> items;
  std::uint64_t bytes = 0;  // sum of the items' bytes
};

// A block of every tensor of rank >= `min_rank` for tensor parallelism: of
// `parts` equal blocks along `dim` (0: rows, 1: columns), the one at `index`.
// A dimension not divisible by `parts` gives the last block the remainder.
struct RankSlice {
  std::uint32_t dim = 0;
  std::uint64_t index = 0;
  std::uint64_t parts = 1;
  std::uint32_t min_rank = 2;
};

struct PlanOptions {
  // Only these tensors (nullopt: all; empty: none). A name that no file
  // holds is kNotFound.
  std::optional<std::vector<std::string>> names;
  std::optional<RankSlice> slice;
};

// True when `format`'s tensors lie in its files exactly as they load, at
// TensorInfo::data_offset (tsafe, safetensors, gguf): the formats PlanLoad
// takes.
bool FormatLoadsInPlace(Format format);

// The plan for `paths`: each a .tsafe, safetensors or GGUF file, or a
// sharded checkpoint (an index or its directory; formats/sharded.h). Opens
// each file's index only: no tensor data is read. Errors: those of
// DetectFormat and of the formats' readers; kUnsupported for a format whose
// tensors are not stored as they load (FormatLoadsInPlace) or a
// sparse tensor; kInvalidArgument for a name held by two files or a slice
// that does not apply; kNotFound for a wanted name that no file holds.
Result<LoadPlan> PlanLoad(std::span<const std::string> paths, const PlanOptions& options = {});

struct LoadOptions {
  bool verify = true;  // check checksums where the format has them
  bool direct = true;  // O_DIRECT where the file system allows
  // A file whose pages are (nearly) all in the page cache already (mincore)
  // is copied from there with ordinary preads, at memory speed, rather than
  // read from the disk again.
  bool cached_buffered = true;
  std::uint64_t request_bytes = 4u << 20;  // per read; a multiple of 4096
  unsigned io_threads = 8;                 // reads in flight (threads with pread)
  unsigned verify_threads = 1;             // hashing threads
  // Fresh arena only: fault its pages in from a helper thread just ahead of
  // the reads.
  bool prefault = true;
  // Fresh arena only: transparent huge pages. 2 MiB pages fault at 5-10
  // GB/s where the VM's memory is backed and make each 4 MiB read one
  // device request, but fault at 0.2-0.6 GB/s where the host took the VM's
  // free memory back, where 4 KiB pages fault at 1-1.3 (docs/LOAD.md).
  // nullopt (auto): 2 MiB pages until 5 of the last 8 2 MiB chunks fault
  // slower than huge_page_min_gbps (timed by the helper, or by a reader
  // ahead of it), 4 KiB pages for the rest of the arena from there; 4 KiB
  // throughout without `prefault`.
  std::optional<bool> huge_pages;
  double huge_page_min_gbps = 1.0;
  // Tests: open(O_DIRECT) fails with this errno, as on file systems that
  // refuse it (tmpfs before Linux 6.6, some FUSE); 0 tries for real.
  int refuse_direct_errno = 0;
};

struct LoadReport {
  // Per plan file: true when read with O_DIRECT, else why not ("" when not
  // asked for).
  std::vector<bool> direct;
  std::vector<std::string> buffered_reason;
  std::uint64_t tensors = 0;
  std::uint64_t verified = 0;      // tensors whose checksum matched
  std::uint64_t unverifiable = 0;  // no checksum in the format, or a slice
  bool verify_requested = false;
  std::uint64_t bytes = 0;       // tensor bytes delivered
  std::uint64_t bytes_read = 0;  // bytes read from the files (alignment and gaps included)
  std::uint64_t requests = 0;
  double seconds = 0;
  // "verified 64 of 64 tensors (XXH3-64)", "nothing to verify: safetensors
  // stores no checksums", "not verified (verify=false)".
  std::string verification;
  // The fresh arena's pages as asked of the kernel: "4 KiB", "2 MiB", or
  // "2 MiB, then 4 KiB from byte N (2 MiB pages faulted at 0.31 GB/s, the
  // median of the last 8 chunks)"; "" for LoadInto.
  std::string pages;
};

// Memory the loader allocated: one anonymous mapping, released when the
// last owner goes.
class LoadArena {
 public:
  // `huge_pages`: 2 MiB-aligned, with MADV_HUGEPAGE, unless the kernel's
  // transparent huge pages are off.
  static Result<std::shared_ptr<LoadArena>> Allocate(std::uint64_t bytes, bool huge_pages);
  ~LoadArena();
  LoadArena(const LoadArena&) = delete;
  LoadArena& operator=(const LoadArena&) = delete;
  std::span<std::byte> bytes() const { return {base_, size_}; }
  bool huge_pages() const { return huge_; }
  // Bytes from `offset` (a multiple of 2 MiB) on fault as 4 KiB pages.
  void UseSmallPages(std::uint64_t offset);

 private:
  LoadArena(void* map, std::uint64_t map_size, std::byte* base, std::uint64_t size, bool huge)
      : map_(map), map_size_(map_size), base_(base), size_(size), huge_(huge) {}
  void* map_;
  std::uint64_t map_size_;
  std::byte* base_;
  std::uint64_t size_;
  bool huge_;
};

struct Loaded {
  // Parallel to plan.items: each tensor's bytes, viewing `arena`.
  std::vector<std::span<std::byte>> data;
  std::shared_ptr<LoadArena> arena;
  LoadReport report;
};

// Loads every item of `plan` into one fresh arena. Errors: kIOError naming
// the file, offset and errno; kCorruption naming the file, tensor, offset,
// length and both checksums when one does not match (the first in plan
// order); kOutOfRange when a file is shorter than its index said.
Result<Loaded> Load(const LoadPlan& plan, const LoadOptions& options = {});

// Load() on threads of its own, for a caller with work to do while the
// bytes arrive that needs only where each tensor will land: tensorsafe.load
// makes its torch tensors meanwhile (20,000 of them take 40-60 ms of
// Python). `plan` must outlive the object. Start fails as Load does before
// its reads (a file that does not open, a bad option).
class StartedLoad {
 public:
  static Result<std::unique_ptr<StartedLoad>> Start(const LoadPlan& plan, const LoadOptions& options = {});
  // Stops the reads where they are (Cancel) unless Finish ran.
  ~StartedLoad();
  StartedLoad(const StartedLoad&) = delete;
  StartedLoad& operator=(const StartedLoad&) = delete;

  // Parallel to plan.items: where each tensor's bytes will be, viewing
  // arena(). Nothing there is to be read before Finish returns OK.
  std::span<const std::span<std::byte>> data() const;
  const std::shared_ptr<LoadArena>& arena() const;
  // Returns once the helper has faulted the whole arena in (at once without
  // LoadOptions::prefault), or the reads stopped: from there, work beside
  // the reads no longer competes with the faulting, whose rate decides
  // huge_pages auto.
  void WaitFaulted() const;
  // Waits for every read and check: Load()'s result. kFailedPrecondition
  // when called again, or after Cancel.
  Result<Loaded> Finish();
  // Stops the reads and checks still to come and waits for the threads;
  // the arena's bytes are then unspecified.
  void Cancel();

 private:
  struct State;
  explicit StartedLoad(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

// Loads every item into `outs` (parallel to plan.items, each exactly the
// item's `bytes` long, caller-owned and best already faulted in), through
// aligned bounce buffers. Errors as Load's, and kInvalidArgument for a size
// that differs (naming the tensor and both sizes) or two buffers that
// overlap (naming both tensors). On error `outs` hold unspecified bytes.
Result<LoadReport> LoadInto(const LoadPlan& plan, std::span<const std::span<std::byte>> outs,
                            const LoadOptions& options = {});

// Reads a file mapping's pages in and maps them (MADV_POPULATE_READ, Linux
// 5.14), in 32 MiB pieces taken by `threads` threads (0: 4), for a caller
// that is about to use every byte: several pieces in flight overlap the
// disk with the page cache's allocations, which after an idle spell wait
// on the host. Where the kernel lacks it, asks for readahead of the whole
// range instead (MADV_WILLNEED) and returns false. Best effort: a piece
// that fails (a file truncated under the mapping) is left to fault later.
bool PopulateMapping(std::span<const std::byte> mapping, unsigned threads = 0);

}  // namespace tensorsafe
