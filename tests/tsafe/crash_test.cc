// Crash safety of the updater (FORMAT.md §10): a child process runs random
// transactions and is killed with SIGKILL, either at its Nth write or sync
// (optionally after writing half of it) or after a random delay. After each
// kill the file must open, verify, and equal exactly the last committed state
// or the state that the interrupted commit was making. The same file goes on
// to the next round, so recovery from every kind of debris is exercised too.
//
// TS_CRASH_ROUNDS (default 200) sets the number of kills; tests/crash_torture.sh
// runs 10,000 and prints the counts.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "support/fault_env.h"
#include "support/temp_dir.h"
#include "support/update_model.h"

namespace tensorsafe::testing {
namespace {

constexpr int kMaxTxnsPerChild = 12;

// The child: never returns.
[[noreturn]] void RunChild(const std::string& path, const std::string& log, std::uint64_t seed, std::int64_t crash_at,
                           bool torn, bool sync) {
  FaultEnv env;
  env.crash_at = crash_at;
  env.crash_torn = torn;
  UpdaterOptions opt;
  opt.sync = sync;
  auto m = LoadModel(path);
  if (!m.ok()) _exit(3);
  opt.env = &env;
  auto u = Updater::Open(path, opt);
  if (!u.ok()) _exit(4);
  std::mt19937_64 rng(seed);
  std::ofstream out(log, std::ios::trunc);
  for (int k = 1; k <= kMaxTxnsPerChild; ++k) {
    if (!RandomTransaction(rng, *m, u->get()).ok()) _exit(5);
    out << k << std::endl;  // flushed: survives SIGKILL in the page cache
  }
  _exit(0);
}

int LastCommitted(const std::string& log) {
  std::ifstream in(log);
  int k = 0, last = 0;
  while (in >> k) last = k;
  return last;
}

TEST(Crash, KilledUpdatersLeaveACommittedState) {
  const char* env_rounds = std::getenv("TS_CRASH_ROUNDS");
  const int rounds = env_rounds ? std::atoi(env_rounds) : 200;
  const std::uint64_t seed = env_rounds ? std::random_device{}() : 20261122;
  std::printf("crash test: %d rounds, seed %llu\n", rounds, static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  const std::string path = dir.File("crash.tsafe");
  const std::string log = dir.File("log");
  Model current;
  {
    std::mt19937_64 init(seed ^ 1);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(RandomTransaction(init, current, nullptr).ok());
  }
  ASSERT_TRUE(WriteModel(path, current).ok());
  int checked = 0, failures = 0, killed = 0, older = 0, newer = 0;
  for (int round = 0; round < rounds; ++round) {
    const std::uint64_t child_seed = rng();
    const int mode = static_cast<int>(rng() % 3);  // 0: at an op, 1: torn op, 2: timed
    const std::int64_t crash_at = mode < 2 ? 1 + static_cast<std::int64_t>(rng() % 40) : 0;
    const bool sync = rng() % 4 != 0;
    const int delay_us = static_cast<int>(rng() % 4000);
    std::remove(log.c_str());
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) RunChild(path, log, child_seed, crash_at, mode == 1, sync);
    if (mode == 2) {
      ::usleep(static_cast<useconds_t>(delay_us));
      ::kill(pid, SIGKILL);
    }
    int wstatus = 0;
    ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
    if (WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL) ++killed;
    ASSERT_TRUE(WIFSIGNALED(wstatus) || WEXITSTATUS(wstatus) == 0)
        << "round " << round << ": child failed with exit code " << WEXITSTATUS(wstatus);
    // Replay the child's transactions on the model.
    const int committed = LastCommitted(log);
    Model before = current;
    std::mt19937_64 replay(child_seed);
    for (int k = 0; k < committed; ++k) ASSERT_TRUE(RandomTransaction(replay, before, nullptr).ok());
    Model after = before;
    ASSERT_TRUE(RandomTransaction(replay, after, nullptr).ok());
    ++checked;
    for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
      ReaderOptions ropt;
      ropt.access = access;
      auto got = LoadModel(path, ropt);
      if (!got.ok()) {
        ++failures;
        ADD_FAILURE() << "round " << round << " (mode " << mode << ", op " << crash_at
                      << "): " << got.status().ToString();
        continue;
      }
      if (*got == before) {
        current = before;
        older += access == ReaderOptions::Access::kMmap;
      } else if (committed < kMaxTxnsPerChild && *got == after) {
        current = after;
        newer += access == ReaderOptions::Access::kMmap;
      } else {
        ++failures;
        ADD_FAILURE() << "round " << round << " (mode " << mode << ", op " << crash_at << ", committed " << committed
                      << "): content is neither state\n got " << Describe(*got) << "\nlast " << Describe(before);
      }
    }
    if (failures > 5) break;
  }
  std::printf(
      "crash test: %d files checked, %d failures (%d killed, %d at the last commit, %d at the interrupted one)\n",
      checked, failures, killed, older, newer);
  EXPECT_EQ(failures, 0);
  EXPECT_GE(killed, rounds / 2);
}

}  // namespace
}  // namespace tensorsafe::testing
