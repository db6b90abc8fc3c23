// BackgroundAppender: buffers reach the file whole and in submission order,
// three may wait while the file is slow, the first failed append is returned
// by every later Submit and by Wait, and destruction writes what is queued.
#include "io/background_appender.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <thread>

namespace tensorsafe::internal {
namespace {

constexpr std::size_t kSize = 64;

// Collects appends; fails the `fail_at`-th (1-based), can be slowed down,
// and can hold every append until Open() (after Hold()).
class RecordingFile final : public WritableFile {
 public:
  std::string bytes;
  int appends = 0;
  int fail_at = 0;
  std::chrono::milliseconds delay{0};
  std::atomic<std::thread::id> last_thread{};

  void Hold() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

  Status Append(std::span<const std::byte> b) override {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return open_; });
    }
    last_thread = std::this_thread::get_id();
    if (delay.count()) std::this_thread::sleep_for(delay);
    if (++appends == fail_at) return IOError("append " + std::to_string(appends) + " failed", ENOSPC);
    bytes.append(reinterpret_cast<const char*>(b.data()), b.size());
    return Status::OK();
  }
  bool seekable() const override { return false; }
  Status WriteAt(std::uint64_t, std::span<const std::byte>) override { return Internal("no"); }
  Status Sync() override { return Status::OK(); }
  Status Close() override { return Status::OK(); }
  std::uint64_t position() const override { return bytes.size(); }
  const std::string& name() const override { return name_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  std::string name_ = "recording";
};

std::unique_ptr<std::byte[]> Filled(char c, std::size_t n) {
  std::unique_ptr<std::byte[]> b(new std::byte[kSize]);
  std::memset(b.get(), c, n);
  return b;
}

TEST(BackgroundAppender, AppendsInOrderOnAnotherThread) {
  RecordingFile file;
  std::string want;
  {
    BackgroundAppender bg(&file, kSize);
    auto buf = Filled('a', kSize);
    for (int i = 0; i < 200; ++i) {
      const char c = static_cast<char>('a' + i % 26);
      const std::size_t n = 1 + static_cast<std::size_t>(i) % kSize;  // partial buffers too
      std::memset(buf.get(), c, n);
      want.append(n, c);
      const std::byte* handed = buf.get();
      ASSERT_TRUE(bg.Submit(buf, n).ok());
      ASSERT_NE(buf.get(), handed) << "Submit must hand back another buffer";
    }
    ASSERT_TRUE(bg.Wait().ok());
    EXPECT_EQ(file.bytes, want);
    EXPECT_NE(file.last_thread.load(), std::this_thread::get_id());
  }
  EXPECT_EQ(file.appends, 200);
}

// While the file holds the first buffer, two more are queued and Submit
// returns at once; the fourth waits for room, and all four arrive in order.
TEST(BackgroundAppender, ThreeBuffersWaitWhileTheFileIsSlow) {
  RecordingFile file;
  file.Hold();
  BackgroundAppender bg(&file, kSize);
  auto buf = Filled('a', kSize);
  auto submit = [&](char c) {
    std::memset(buf.get(), c, kSize);
    return bg.Submit(buf, 3);
  };
  std::future<bool> first_three;
  std::future<Status> fourth;
  // On any early return the gate opens before the futures and `bg` wait for
  // the thread, so a failing test fails instead of hanging.
  struct OpenAtExit {
    RecordingFile& f;
    ~OpenAtExit() { f.Open(); }
  } open_at_exit{file};
  first_three = std::async(std::launch::async, [&] {
    for (char c : {'a', 'b', 'c'}) {
      if (!submit(c).ok()) return false;
    }
    return true;
  });
  ASSERT_EQ(first_three.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(first_three.get());
  fourth = std::async(std::launch::async, [&] { return submit('d'); });
  EXPECT_EQ(fourth.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  file.Open();
  ASSERT_EQ(fourth.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(fourth.get().ok());
  ASSERT_TRUE(bg.Wait().ok());
  EXPECT_EQ(file.bytes, "aaabbbcccddd");
}

TEST(BackgroundAppender, FirstErrorIsSticky) {
  RecordingFile file;
  file.fail_at = 3;
  BackgroundAppender bg(&file, kSize);
  auto buf = Filled('x', kSize);
  Status first;
  int submitted = 0;
  for (; submitted < 10; ++submitted) {
    first = bg.Submit(buf, kSize);
    if (!first.ok()) break;
  }
  // The third append fails. Its error reaches a Submit once the thread has
  // written it: not before the fourth, and at the latest at the sixth, which
  // waits until at most two buffers (the fourth and fifth) are queued.
  ASSERT_FALSE(first.ok());
  EXPECT_GE(submitted, 3);
  EXPECT_LE(submitted, 5);
  EXPECT_EQ(first.code(), StatusCode::kIOError);
  EXPECT_EQ(first.message(), "append 3 failed");
  EXPECT_EQ(first.error_number(), ENOSPC);
  Status again = bg.Wait();
  EXPECT_EQ(again.message(), "append 3 failed");
  EXPECT_EQ(bg.Submit(buf, kSize).message(), "append 3 failed");
  EXPECT_EQ(file.bytes.size(), 2 * kSize);  // nothing after the failure
  EXPECT_EQ(file.appends, 3);               // the queued ones were dropped
}

TEST(BackgroundAppender, DestructionWaitsForTheWriteInFlight) {
  RecordingFile file;
  file.delay = std::chrono::milliseconds(50);
  {
    BackgroundAppender bg(&file, kSize);
    auto buf = Filled('z', 10);
    ASSERT_TRUE(bg.Submit(buf, 10).ok());
  }  // no Wait: the destructor must not leave the thread writing
  EXPECT_EQ(file.bytes, std::string(10, 'z'));
}

// Without a thread (none could be started) the bytes are written by Submit
// itself, the caller keeps its buffer, and an error is still sticky.
TEST(BackgroundAppender, WithoutAThreadSubmitWritesHere) {
  RecordingFile file;
  file.fail_at = 4;
  BackgroundAppender bg(&file, kSize, /*use_thread=*/false);
  auto buf = Filled('q', kSize);
  const std::byte* mine = buf.get();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(bg.Submit(buf, 5).ok());
    EXPECT_EQ(buf.get(), mine);
    EXPECT_EQ(file.last_thread.load(), std::this_thread::get_id());
    EXPECT_EQ(file.bytes.size(), 5u * (i + 1));  // written before Submit returned
  }
  EXPECT_EQ(bg.Submit(buf, 5).message(), "append 4 failed");
  EXPECT_EQ(bg.Wait().message(), "append 4 failed");
  EXPECT_EQ(bg.Submit(buf, 5).message(), "append 4 failed");
  EXPECT_EQ(file.appends, 4);
}

// StartHash hashes on the thread, after the write in flight and before the
// next one; without a thread it hashes before returning.
TEST(BackgroundAppender, StartHashGivesTheDigestAndKeepsOrder) {
  std::string data(3000, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + 7);
  const auto bytes = std::as_bytes(std::span<const char>(data));
  for (bool use_thread : {true, false}) {
    SCOPED_TRACE(use_thread ? "thread" : "no thread");
    RecordingFile file;
    file.delay = std::chrono::milliseconds(use_thread ? 20 : 0);
    BackgroundAppender bg(&file, kSize, use_thread);
    auto buf = Filled('h', kSize);
    ASSERT_TRUE(bg.Submit(buf, 9).ok());
    StreamingHash hash;
    hash.Update(bytes.first(1000));
    bg.StartHash(&hash, bytes.subspan(1000));
    if (!use_thread) EXPECT_EQ(hash.Digest(), Hash64(bytes));
    std::memset(buf.get(), 'i', kSize);
    ASSERT_TRUE(bg.Submit(buf, 4).ok());
    ASSERT_TRUE(bg.Wait().ok());
    EXPECT_EQ(hash.Digest(), Hash64(bytes));
    EXPECT_EQ(file.bytes, std::string(9, 'h') + std::string(4, 'i'));
  }
}

TEST(BackgroundAppender, NoThreadUntilTheFirstSubmit) {
  RecordingFile file;
  {
    BackgroundAppender bg(&file, kSize);
    EXPECT_TRUE(bg.Wait().ok());
  }
  EXPECT_EQ(file.appends, 0);
}

}  // namespace
}  // namespace tensorsafe::internal
