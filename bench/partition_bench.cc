// partition_bench: time to build one epoch's plan (docs/PARTITION.md §6)
// for 1M / 10M / 100M samples, beside filling an iota array of the same size
// and id width (the baseline, same run), reported as ratios.
//
//   partition_bench [--quick] [--max N] [--reps N]
//
// Figures (each the best of --reps runs; the machine is shared):
//   shuffle.fill   the whole epoch permutation, 32-bit ids (EpochShuffle::Fill)
//   plan.world     every worker's sample ids of a 2 nodes x 4 ranks x 2 workers
//                  world, shuffled (EpochPlan::WorkerIds for all 16 workers)
//   plan.worker    one worker's ids (what each DataLoader worker pays)
// Dataset: shards of 1000 samples, 8 canonical nodes, block 262144, global
// batch 256.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "tensorsafe/dataset/sampler.h"

using namespace tensorsafe;
using namespace tensorsafe::dataset;
using Clock = std::chrono::steady_clock;

namespace {

void Die(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

double Best(int reps, const std::function<void()>& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

volatile std::int64_t g_sink = 0;

}  // namespace

int main(int argc, char** argv) {
  std::int64_t max_n = 100'000'000;
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      max_n = 1'000'000;
      reps = 1;
    } else if (!std::strcmp(argv[i], "--max") && i + 1 < argc) {
      max_n = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: partition_bench [--quick] [--max N] [--reps N]\n");
      return 2;
    }
  }
  std::printf("%-12s %-13s %10s %10s %8s %12s\n", "samples", "what", "seconds", "iota s", "ratio", "ns/sample");
  for (std::int64_t n : {std::int64_t{1'000'000}, std::int64_t{10'000'000}, std::int64_t{100'000'000}}) {
    if (n > max_n) break;
    std::vector<std::int64_t> shards(static_cast<std::size_t>((n + 999) / 1000), 1000);
    shards.back() = n - 1000 * (static_cast<std::int64_t>(shards.size()) - 1);

    std::vector<std::uint32_t> ids32(static_cast<std::size_t>(n));
    const double iota32 = Best(reps, [&] {
      std::iota(ids32.begin(), ids32.end(), std::uint32_t{0});
      g_sink = ids32[static_cast<std::size_t>(n / 2)];
    });
    const double fill = Best(reps, [&] {
      auto s = EpochShuffle::Create(shards, 8, 9176, 1, 262144);
      Die(s.status(), "shuffle");
      Die(s->Fill(ids32), "fill");
      g_sink = ids32[static_cast<std::size_t>(n / 2)];
    });
    ids32 = {};

    SamplerState st;
    st.num_canonical_nodes = 8;
    st.global_batch_size = 256;
    st.shuffle = true;
    World world;
    world.num_nodes = 2;
    world.ranks_per_node = 4;
    world.workers_per_rank = 2;
    // Baseline for the per-worker figures: iota over int64 of the same total size.
    std::vector<std::int64_t> ids64(static_cast<std::size_t>(n));
    const double iota64 = Best(reps, [&] {
      std::iota(ids64.begin(), ids64.end(), std::int64_t{0});
      g_sink = ids64[static_cast<std::size_t>(n / 2)];
    });
    ids64 = {};
    double one_worker = 0;
    const double all = Best(reps, [&] {
      auto plan = EpochPlan::Create(shards, st, world);
      Die(plan.status(), "plan");
      std::int64_t total = 0;
      for (std::int64_t node = 0; node < 2; ++node) {
        for (std::int64_t r = 0; r < 4; ++r) {
          for (std::int64_t w = 0; w < 2; ++w) {
            World me = world;
            me.node = node;
            me.rank_of_node = r;
            me.worker_of_rank = w;
            const auto t0 = Clock::now();
            auto ids = plan->WorkerIds(me);
            Die(ids.status(), "worker ids");
            if (node == 0 && r == 0 && w == 0) {
              one_worker = std::chrono::duration<double>(Clock::now() - t0).count();
            }
            total += static_cast<std::int64_t>(ids->size());
          }
        }
      }
      if (total < n) Die(Internal("plan lost samples"), "plan");
      g_sink = total;
    });
    const auto row = [&](const char* what, double s, double base, std::int64_t count) {
      std::printf("%-12lld %-13s %10.4f %10.4f %8.1f %12.2f\n", static_cast<long long>(n), what, s, base, s / base,
                  1e9 * s / static_cast<double>(count));
    };
    row("shuffle.fill", fill, iota32, n);
    row("plan.world", all, iota64, n);
    row("plan.worker", one_worker, iota64 / 16, n / 16);
  }
  return 0;
}
