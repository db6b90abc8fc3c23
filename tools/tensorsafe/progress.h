// A progress bar on stderr for long commands: drawn only when stderr is a
// terminal (isatty(2)) and the command was not given --quiet, at most ten
// times a second, and finished with a newline.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tensorsafe::cli {

class ProgressBar {
 public:
  // `label` starts the line ("converting"). `quiet` turns the bar off.
  ProgressBar(std::string label, bool quiet);
  // Redraws for `done` of `total` bytes (done may pass total: the bar stops
  // at 100%). `final` draws a full bar regardless of the rate limit (a
  // compressed output ends below its total) and ends the line.
  void Update(std::uint64_t done, std::uint64_t total, bool final);
  // Ends a drawn, unfinished line, so an error message starts on its own.
  void Abandon();
  bool enabled() const { return enabled_; }

 private:
  std::string label_;
  bool enabled_ = false;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

// "1.5 GiB", "12.0 KiB", "512 B".
std::string HumanBytes(std::uint64_t n);

}  // namespace tensorsafe::cli
