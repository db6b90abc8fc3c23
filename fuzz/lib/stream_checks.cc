// CheckStream (fuzz_checks.h): the native stream message decoder and the fd
// stream reader under untrusted bytes.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "fuzz_checks.h"
#include "fuzz_util.h"
#include "tensorsafe/stream/fd.h"

namespace tensorsafe::fuzz {
namespace {

// Small limits: a hostile header must not make the checks allocate much.
StreamReaderOptions Options() {
  StreamReaderOptions o;
  o.max_message_bytes = std::uint64_t{64} << 20;
  o.limits.max_tensor_count = 4096;
  o.tenbin_arrays_per_batch = 2;
  return o;
}

// The bytes at a 64-byte aligned address (offset 0) or misaligned (offset 1).
std::shared_ptr<std::string> Place(std::span<const std::byte> data, std::size_t offset,
                                   std::span<const std::byte>* view) {
  auto buf = std::make_shared<std::string>(data.size() + 128, '\0');
  auto base = reinterpret_cast<std::uintptr_t>(buf->data());
  const std::size_t skip = (64 - base % 64) % 64 + offset;
  std::memcpy(buf->data() + skip, data.data(), data.size());
  *view = {reinterpret_cast<const std::byte*>(buf->data() + skip), data.size()};
  return buf;
}

void CheckMessage(std::span<const std::byte> data) {
  std::span<const std::byte> aligned, unaligned;
  auto a_owner = Place(data, 0, &aligned);
  auto u_owner = Place(data, 1, &unaligned);
  Result<TensorSet> a = DecodeMessage(aligned, a_owner, Options());
  Result<TensorSet> u = DecodeMessage(unaligned, u_owner, Options());
  TS_FUZZ_CHECK(a.ok() == u.ok(), "stream: aligned and unaligned decodes disagree: " + Describe(a.status()) + " vs " +
                                      Describe(u.status()));
  if (!a.ok()) {
    TS_FUZZ_CHECK(a.status().message() == u.status().message(),
                  "stream: different errors: " + a.status().message() + " vs " + u.status().message());
    return;
  }
  CheckSetInvariants(*a, "stream");
  std::string why;
  TS_FUZZ_CHECK(SameSet(*a, *u, &why), "stream: aligned and unaligned decodes differ: " + why);
  Result<std::string> again = EncodeMessage(*a, 0);
  TS_FUZZ_CHECK(again.ok(), "stream: a decoded message does not re-encode: " + Describe(again.status()));
  std::span<const std::byte> view;
  auto owner = Place(AsBytes(*again), 0, &view);
  Result<TensorSet> b = DecodeMessage(view, owner, Options());
  TS_FUZZ_CHECK(b.ok(), "stream: its own encoding does not decode: " + Describe(b.status()));
  TS_FUZZ_CHECK(SameSet(*a, *b, &why), "stream: re-encoding changed the batch: " + why);
}

void CheckFdStream(std::span<const std::byte> data) {
  const int fd = memfd_create("stream_fuzz", MFD_CLOEXEC);
  if (fd < 0) return;
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  if (done == data.size() && lseek(fd, 0, SEEK_SET) == 0) {
    auto reader = StreamReader::FromFd(fd, Options());
    TS_FUZZ_CHECK(reader.ok(), "stream: FromFd failed on a valid fd: " + Describe(reader.status()));
    for (int i = 0; i < 64; ++i) {
      Result<std::optional<TensorSet>> b = (*reader)->Next();
      if (!b.ok()) {
        // After an error every call fails (stream/fd.h).
        TS_FUZZ_CHECK(!(*reader)->Next().ok(), "stream: a reader delivered a batch after an error");
        break;
      }
      if (!b->has_value()) break;
      CheckSetInvariants(**b, "stream");
    }
  }
  close(fd);
}

}  // namespace

void CheckStream(std::span<const std::byte> data) {
  CheckMessage(data);
  CheckFdStream(data);
}

}  // namespace tensorsafe::fuzz
