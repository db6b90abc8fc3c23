#include "progress.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace tensorsafe::cli {

ProgressBar::ProgressBar(std::string label, bool quiet, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), enabled_(!quiet && ::isatty(STDERR_FILENO) == 1) {}

std::string ProgressLine(const std::string& label, std::uint64_t done, std::uint64_t total, bool final,
                         const std::string& unit) {
  constexpr int kWidth = 30;
  const double frac = final || total == 0 ? 1.0 : std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(kWidth - filled), '.');
  std::string amount;
  if (unit.empty()) {
    const auto shown = static_cast<std::uint64_t>(frac * static_cast<double>(total));
    amount = HumanBytes(shown) + " of " + HumanBytes(total);
  } else {
    // Counts are exact: the count done (the total when final), never a share.
    amount =
        HumanCount(final ? std::max(done, total) : std::min(done, total)) + " of " + HumanCount(total) + " " + unit;
  }
  return fmt::format("{} [{}] {:3.0f}%  {}", label, bar, frac * 100, amount);
}

void ProgressBar::Update(std::uint64_t done, std::uint64_t total, bool final) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!final && drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  drawn_ = true;
  // \r redraws the line; trailing spaces clear a longer previous one.
  fmt::print(stderr, "\r{}   {}", ProgressLine(label_, done, total, final, unit_), final ? "\n" : "");
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

std::string HumanCount(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace tensorsafe::cli
