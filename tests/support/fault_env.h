// An Env that fails chosen operations, for fault-injection tests: the Nth
// write fails (optionally after writing part of its bytes), the Nth sync or
// rename fails, reads come back short.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>

#include "tensorsafe/env.h"

namespace tensorsafe::testing {

class FaultEnv : public Env {
 public:
  // Counters start at 1: fail_write = 3 fails the third Append/WriteAt.
  std::int64_t fail_write = 0;
  bool short_write = false;  // the failing write first writes half its bytes
  std::int64_t fail_sync = 0;
  bool fail_rename = false;
  bool short_read = false;  // every ReadAt of more than 1 byte fails as short
  int error_number = EIO;

  // Crash point: the process kills itself (SIGKILL) at the Nth write or sync
  // (counted together); a write there is first done halfway when
  // `crash_torn` is set, as a power cut inside a write might.
  std::int64_t crash_at = 0;
  bool crash_torn = false;

  std::int64_t writes = 0;
  std::int64_t syncs = 0;
  std::int64_t ops = 0;

  Result<std::unique_ptr<WritableFile>> NewTempFile(const std::string& final_path, std::string* tmp_path) override;
  Result<std::unique_ptr<WritableFile>> OpenForUpdate(const std::string& path) override;
  Result<std::unique_ptr<RandomAccessFile>> OpenRead(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
};

}  // namespace tensorsafe::testing
