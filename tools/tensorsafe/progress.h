// A progress bar on stderr for long commands: drawn only when stderr is a
// terminal (isatty(2)) and the command was not given --quiet, at most ten
// times a second, and finished with a newline. It counts bytes ("1.5 GiB of
// 3.0 GiB") or things ("120 of 5,000 samples").
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tensorsafe::cli {

class ProgressBar {
 public:
  // `label` starts the line ("converting"). `quiet` turns the bar off.
  // `unit`: "" counts bytes; otherwise the plural noun of what is counted
  // ("samples", "shards").
  ProgressBar(std::string label, bool quiet, std::string unit = "");
  // Redraws for `done` of `total` (done may pass total: the bar stops at
  // 100%). `final` draws a full bar regardless of the rate limit (a
  // compressed output ends below its total) and ends the line.
  void Update(std::uint64_t done, std::uint64_t total, bool final);
  // Ends a drawn, unfinished line, so an error message starts on its own.
  void Abandon();
  bool enabled() const { return enabled_; }

 private:
  std::string label_, unit_;
  bool enabled_ = false;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

// The text of one bar line (no "\r", no newline): "writing [####......]  40%
// 40 of 100 samples". Bytes: the data's share of `total` ("1.5 MiB of 3.0
// MiB"; headers can make `done` pass `total`, compression keep it below).
std::string ProgressLine(const std::string& label, std::uint64_t done, std::uint64_t total, bool final,
                         const std::string& unit);

// "1.5 GiB", "12.0 KiB", "512 B".
std::string HumanBytes(std::uint64_t n);
// "1,234,567".
std::string HumanCount(std::uint64_t n);

}  // namespace tensorsafe::cli
