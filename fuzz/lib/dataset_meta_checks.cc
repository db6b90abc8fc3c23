// CheckSamplerState and CheckRemoteName (dataset_checks.h).
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "dataset/remote/url.h"
#include "dataset_checks.h"
#include "fuzz_util.h"
#include "tensorsafe/dataset/remote.h"
#include "tensorsafe/dataset/sampler.h"

namespace tensorsafe::fuzz {
namespace {

using dataset::SamplerState;

void CheckCanonical(const SamplerState& s, const std::string& context) {
  const std::string text = dataset::EncodeSamplerState(s);
  Result<SamplerState> back = dataset::DecodeSamplerState(text);
  TS_FUZZ_CHECK(back.ok(), context + ": the encoding does not decode: " + Describe(back.status()) + "\n" + text);
  TS_FUZZ_CHECK(*back == s, context + ": decode(encode(x)) != x\n" + text);
  TS_FUZZ_CHECK(dataset::EncodeSamplerState(*back) == text, context + ": the encoding is not canonical\n" + text);
}

// A value in [lo, hi] most of the time; sometimes a raw int64 (mostly out of
// range) so the decoder's range checks run on the encoder's output too.
std::int64_t Pick(Input& in, std::int64_t lo, std::int64_t hi, bool* in_range) {
  if (in.Byte() % 16 == 0) {
    const std::int64_t v = static_cast<std::int64_t>((std::uint64_t{in.U32()} << 32) | in.U32());
    if (v < lo || v > hi) *in_range = false;
    return v;
  }
  const std::uint64_t span = static_cast<std::uint64_t>(hi - lo) + 1;
  const std::uint64_t r = (std::uint64_t{in.U32()} << 32) | in.U32();
  return lo + static_cast<std::int64_t>(r % span);
}

// The decoder's ranges (src/dataset/sampling/sampler.cc; partition.h constants).
void CheckBuiltState(std::span<const std::byte> data) {
  Input in(data);
  SamplerState s;
  bool in_range = true;
  s.mode = in.Bool() ? dataset::PartitionMode::kSeed : dataset::PartitionMode::kElastic;
  s.partition = in.Bool() ? dataset::PartitionAlgo::kRelaxed : dataset::PartitionAlgo::kOrig;
  s.epoch = Pick(in, 0, std::int64_t{1} << 62, &in_range);
  s.sample_in_epoch = Pick(in, 0, dataset::kMaxPartitionSamples * 2, &in_range);
  s.seed = (std::uint64_t{in.U32()} << 32) | in.U32();
  s.num_canonical_nodes = Pick(in, 1, dataset::kMaxWorldDim, &in_range);
  s.global_batch_size = Pick(in, 0, std::int64_t{1} << 40, &in_range);
  s.shuffle = in.Bool();
  if (in.Bool()) s.shuffle_block_size = Pick(in, 1, dataset::kMaxPartitionSamples, &in_range);
  if (in.Bool()) s.initial_nodes = Pick(in, 1, dataset::kMaxWorldDim, &in_range);
  if (in.Bool()) {
    dataset::WorkerPosition w;
    w.world.num_nodes = Pick(in, 1, dataset::kMaxWorldDim, &in_range);
    w.world.ranks_per_node = Pick(in, 1, dataset::kMaxWorldDim, &in_range);
    w.world.workers_per_rank = Pick(in, 1, dataset::kMaxWorldDim, &in_range);
    w.world.node = Pick(in, 0, std::max<std::int64_t>(w.world.num_nodes, 1) - 1, &in_range);
    w.world.rank_of_node = Pick(in, 0, std::max<std::int64_t>(w.world.ranks_per_node, 1) - 1, &in_range);
    w.world.worker_of_rank = Pick(in, 0, std::max<std::int64_t>(w.world.workers_per_rank, 1) - 1, &in_range);
    w.samples = Pick(in, 0, dataset::kMaxPartitionSamples * 2, &in_range);
    s.worker = w;
  }
  if (in_range) {
    CheckCanonical(s, "sampler state built from the input");
    return;
  }
  const std::string text = dataset::EncodeSamplerState(s);
  Result<SamplerState> back = dataset::DecodeSamplerState(text);
  TS_FUZZ_CHECK(!back.ok() && back.status().code() == StatusCode::kInvalidArgument,
                "sampler state: an out-of-range field was not refused: " + Describe(back.status()) + "\n" + text);
}

// The rule of remote.h, written out again: 1 to 1024 bytes of
// [A-Za-z0-9._~+=,@-] in '/'-separated segments, none empty, "." or "..".
bool ModelAccepts(std::string_view name) {
  if (name.empty() || name.size() > 1024) return false;
  std::size_t seg_start = 0;
  for (std::size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '/') {
      const std::string_view seg = name.substr(seg_start, i - seg_start);
      if (seg.empty() || seg == "." || seg == "..") return false;
      seg_start = i + 1;
      continue;
    }
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("._~+=,@-").find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

// One cache for the whole process: Open() creates directories and takes the
// cache lock, too slow to repeat per input. Nothing is ever downloaded.
dataset::ShardCache& Cache() {
  static dataset::ShardCache* cache = [] {
    char dir[] = "/tmp/tensorsafe-fuzz-remote-XXXXXX";
    if (::mkdtemp(dir) == nullptr) Fail(__FILE__, __LINE__, "mkdtemp failed");
    dataset::ShardCacheOptions o;
    o.cache_dir = dir;
    o.max_concurrent_downloads = 1;
    auto c = dataset::ShardCache::Open("https://Data.Example.com:8443/sets/v1", o);
    if (!c.ok()) Fail(__FILE__, __LINE__, "ShardCache::Open: " + Describe(c.status()));
    return c->release();
  }();
  return *cache;
}

void CheckName(std::string_view name) {
  const Status valid = dataset::ValidateRelativeName(name);
  TS_FUZZ_CHECK(valid.ok() == ModelAccepts(name), "remote name \"" + std::string(name) +
                                                      "\": ValidateRelativeName says " + Describe(valid) +
                                                      ", the model says the opposite");
  dataset::ShardCache& cache = Cache();
  Input in(AsBytes(name));
  const dataset::RemoteFile file{std::string(name), in.U32(), (std::uint64_t{in.U32()} << 32) | in.U32()};
  Result<std::string> url = cache.UrlFor(name);
  Result<std::string> path = cache.LocalPathFor(file);
  if (!valid.ok()) {
    TS_FUZZ_CHECK(!url.ok() && url.status().code() == StatusCode::kInvalidArgument,
                  "UrlFor accepted a rejected name: " + Describe(url.status()));
    TS_FUZZ_CHECK(!path.ok() && path.status().code() == StatusCode::kInvalidArgument,
                  "LocalPathFor accepted a rejected name: " + Describe(path.status()));
    return;
  }
  TS_FUZZ_CHECK(url.ok(), "UrlFor refused a valid name: " + Describe(url.status()));
  TS_FUZZ_CHECK(*url == cache.base_url() + std::string(name), "URL " + *url + " is not the base URL + the name");
  TS_FUZZ_CHECK(path.ok(), "LocalPathFor refused a valid name: " + Describe(path.status()));
  const std::size_t slash = path->rfind('/');
  TS_FUZZ_CHECK(slash != std::string::npos, "local path " + *path + " has no directory");
  const std::string dir = path->substr(0, slash), leaf = path->substr(slash + 1);
  TS_FUZZ_CHECK(dir.size() >= 6 && dir.compare(dir.size() - 6, 6, "/files") == 0 && dir.front() == '/',
                "local path " + *path + " is not in <cache>/files/");
  TS_FUZZ_CHECK(!leaf.empty() && leaf != "." && leaf != "..", "local path " + *path + " has no file name");
  Result<std::string> again = cache.LocalPathFor(file);
  TS_FUZZ_CHECK(again.ok() && *again == *path, "LocalPathFor is not deterministic");
  // Every valid name of the same dataset gets its own directory entry: the
  // directory is the same for any name.
  Result<std::string> other = cache.LocalPathFor({"x", 1, 2});
  TS_FUZZ_CHECK(other.ok() && other->substr(0, other->rfind('/')) == dir, "LocalPathFor changed directory");
}

void CheckBaseAndName(std::string_view base_text, std::string_view name) {
  Result<internal::BaseUrl> base = internal::ParseBaseUrl(base_text);
  if (!base.ok()) {
    TS_FUZZ_CHECK(base.status().code() == StatusCode::kInvalidArgument, "base URL: " + Describe(base.status()));
    return;
  }
  const internal::BaseUrl& b = *base;
  TS_FUZZ_CHECK(b.scheme == "http" || b.scheme == "https", "base URL scheme " + b.scheme);
  TS_FUZZ_CHECK(!b.authority.empty(), "base URL without a host: " + b.full);
  TS_FUZZ_CHECK(!b.path.empty() && b.path.front() == '/' && b.path.back() == '/', "base URL path " + b.path);
  TS_FUZZ_CHECK(b.full == b.scheme + "://" + b.authority + b.path, "base URL parts do not make " + b.full);
  Result<internal::BaseUrl> again = internal::ParseBaseUrl(b.full);
  TS_FUZZ_CHECK(again.ok() && again->full == b.full,
                "normalizing " + b.full + " again gives " + (again.ok() ? again->full : Describe(again.status())));
  Result<std::string> url = internal::JoinUrl(b, name);
  if (!ModelAccepts(name)) {
    TS_FUZZ_CHECK(!url.ok(), "JoinUrl accepted a name the rule rejects: " + std::string(name));
    return;
  }
  // libcurl's second check may still refuse (a base URL it reads otherwise);
  // what is accepted must be the base followed by the name.
  if (url.ok()) TS_FUZZ_CHECK(*url == b.full + std::string(name), "joined URL " + *url + " is not base + name");
}

}  // namespace

void CheckSamplerState(std::span<const std::byte> data) {
  Result<SamplerState> s = dataset::DecodeSamplerState(AsText(data));
  if (s.ok()) {
    CheckCanonical(*s, "sampler state decoded from the input");
  } else {
    TS_FUZZ_CHECK(s.status().code() == StatusCode::kInvalidArgument || s.status().code() == StatusCode::kLimitExceeded,
                  "sampler state: unexpected error " + Describe(s.status()));
  }
  CheckBuiltState(data);
}

void CheckRemoteName(std::span<const std::byte> data) {
  const std::string_view text = AsText(data);
  CheckName(text);
  const std::size_t nl = text.find('\n');
  if (nl != std::string_view::npos) {
    CheckName(text.substr(nl + 1));
    CheckBaseAndName(text.substr(0, nl), text.substr(nl + 1));
  }
}

}  // namespace tensorsafe::fuzz
