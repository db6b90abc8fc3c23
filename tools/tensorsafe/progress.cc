#include "progress.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace tensorsafe::cli {

ProgressBar::ProgressBar(std::string label, bool quiet)
    : label_(std::move(label)), enabled_(!quiet && ::isatty(STDERR_FILENO) == 1) {}

void ProgressBar::Update(std::uint64_t done, std::uint64_t total, bool final) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!final && drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  drawn_ = true;
  constexpr int kWidth = 30;
  const double frac =
      final || total == 0 ? 1.0 : std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(kWidth - filled), '.');
  // \r redraws the line; trailing spaces clear a longer previous one.
  // The bytes shown are the data's share: headers can make `done` pass
  // `total`, compression keep it below.
  const auto shown = static_cast<std::uint64_t>(frac * static_cast<double>(total));
  fmt::print(stderr, "\r{} [{}] {:3.0f}%  {} of {}   {}", label_, bar, frac * 100, HumanBytes(shown),
             HumanBytes(total), final ? "\n" : "");
  std::fflush(stderr);
  if (final) drawn_ = false;
}

void ProgressBar::Abandon() {
  if (!enabled_ || !drawn_) return;
  fmt::print(stderr, "\n");
  drawn_ = false;
}

std::string HumanBytes(std::uint64_t n) {
  if (n < 1024) return fmt::format("{} B", n);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n) / 1024;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

}  // namespace tensorsafe::cli
