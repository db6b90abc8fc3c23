// Load and LoadInto: one LoadJob (job.h) each, over every file of a plan
// (docs/LOAD.md).
#include "load/internal.h"
#include "load/job.h"
#include "tensorsafe/load.h"

namespace tensorsafe {

using internal::LoadJob;

Result<Loaded> Load(const LoadPlan& plan, const LoadOptions& options) {
  LoadJob job(plan, options);
  Loaded out;
  TS_RETURN_IF_ERROR(job.Build({}, true, &out.data));
  TS_RETURN_IF_ERROR(job.OpenFiles());
  out.report = job.Run();
  out.report.bytes_read = job.report_bytes_read_.load();
  out.report.requests = job.requests_done_.load();
  TS_RETURN_IF_ERROR(job.status());
  out.arena = job.arena();
  return out;
}

Result<LoadReport> LoadInto(const LoadPlan& plan, std::span<const std::span<std::byte>> outs,
                            const LoadOptions& options) {
  TS_RETURN_IF_ERROR(internal::CheckBuffers(plan, outs));
  LoadJob job(plan, options);
  TS_RETURN_IF_ERROR(job.Build(outs, false, nullptr));
  TS_RETURN_IF_ERROR(job.OpenFiles());
  LoadReport report = job.Run();
  report.bytes_read = job.report_bytes_read_.load();
  report.requests = job.requests_done_.load();
  TS_RETURN_IF_ERROR(job.status());
  return report;
}

}  // namespace tensorsafe
