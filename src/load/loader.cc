// Load, LoadInto and StartedLoad: one LoadJob (job.h) each, over every file
// of a plan (docs/LOAD.md).
#include <system_error>
#include <thread>
#include <utility>

#include "load/internal.h"
#include "load/job.h"
#include "tensorsafe/load.h"

namespace tensorsafe {

using internal::LoadJob;

struct StartedLoad::State {
  State(const LoadPlan& plan, const LoadOptions& o) : options(o), job(plan, options) {}
  LoadOptions options;  // the job keeps a reference
  LoadJob job;
  std::vector<std::span<std::byte>> data;
  LoadReport report;
  std::thread runner;
  bool finished = false;  // Finish or Cancel ran
};

StartedLoad::StartedLoad(std::unique_ptr<State> state) : s_(std::move(state)) {}

StartedLoad::~StartedLoad() {
  if (s_) Cancel();
}

Result<std::unique_ptr<StartedLoad>> StartedLoad::Start(const LoadPlan& plan, const LoadOptions& options) {
  auto s = std::make_unique<State>(plan, options);
  TS_RETURN_IF_ERROR(s->job.Build({}, true, &s->data));
  TS_RETURN_IF_ERROR(s->job.OpenFiles());
  State* raw = s.get();
  try {
    s->runner = std::thread([raw] { raw->report = raw->job.Run(); });
  } catch (const std::system_error&) {
    raw->report = raw->job.Run();  // no thread to be had: the load runs here, now
  }
  return std::unique_ptr<StartedLoad>(new StartedLoad(std::move(s)));
}

std::span<const std::span<std::byte>> StartedLoad::data() const { return s_->data; }

const std::shared_ptr<LoadArena>& StartedLoad::arena() const { return s_->job.arena(); }

void StartedLoad::WaitFaulted() const { s_->job.WaitFaulted(); }

Result<Loaded> StartedLoad::Finish() {
  if (s_->finished) return FailedPrecondition("StartedLoad::Finish: the load was finished or cancelled already");
  if (s_->runner.joinable()) s_->runner.join();
  s_->finished = true;
  TS_RETURN_IF_ERROR(s_->job.status());
  Loaded out;
  out.data = s_->data;  // data() stays valid
  out.report = std::move(s_->report);
  out.report.bytes_read = s_->job.report_bytes_read_.load();
  out.report.requests = s_->job.requests_done_.load();
  out.arena = s_->job.arena();
  return out;
}

void StartedLoad::Cancel() {
  if (s_->runner.joinable()) {
    s_->job.Stop();
    s_->runner.join();
  }
  s_->finished = true;
}

Result<Loaded> Load(const LoadPlan& plan, const LoadOptions& options) {
  TS_ASSIGN_OR_RETURN(std::unique_ptr<StartedLoad> started, StartedLoad::Start(plan, options));
  return started->Finish();
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
