// Times the safetensors header parse on a many-tensor file (the reference
// crate's weak spot: ~1.5 us per tensor). bench/safetensors_bench.py runs
// this and the reference package on the same file and prints the ratio.
//
//   safetensors_bench [--tensors N] [--reps R] [--file PATH]
//
// Writes PATH (default /tmp/tensorsafe_bench_<N>.safetensors, kept for the
// Python side), reads it back into memory, and prints one line per
// measurement:
//   <what> best_ms=<x> median_ms=<y> reps=<r>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorsafe/formats/safetensors.h"

namespace ts = tensorsafe;
namespace st = tensorsafe::safetensors;

namespace {

template <typename F>
void Time(const char* what, int reps, F&& f) {
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("%s best_ms=%.3f median_ms=%.3f reps=%d\n", what, ms.front(), ms[ms.size() / 2], reps);
  std::fflush(stdout);
}

// Names like a transformer's, a mix of dtypes; each shape makes 64 bytes.
ts::TensorSet MakeSet(int count, std::shared_ptr<std::string>& storage) {
  static const char* kParts[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "mlp.down_proj.weight",
                                 "mlp.up_proj.bias", "input_layernorm.weight"};
  const ts::DType kTypes[] = {ts::DType::kF32, ts::DType::kBF16, ts::DType::kF16, ts::DType::kU8};
  const ts::Shape kShapes[] = {{4, 4}, {8, 4}, {4, 8}, {8, 8}};
  storage = std::make_shared<std::string>(static_cast<std::size_t>(count) * 64, '\x3c');
  ts::TensorSet set;
  set.metadata_json = R"({"format":"pt"})";
  set.tensors.reserve(count);
  for (int i = 0; i < count; ++i) {
    ts::Tensor t;
    t.info.name = "model.layers." + std::to_string(i / 5) + "." + kParts[i % 5];
    t.info.dtype = kTypes[i % 4];
    t.info.shape = kShapes[i % 4];
    t.data = {reinterpret_cast<const std::byte*>(storage->data()) + 64 * static_cast<std::size_t>(i), 64};
    t.owner = storage;
    set.tensors.push_back(std::move(t));
  }
  return set;
}

}  // namespace

int main(int argc, char** argv) {
  int count = 100000;
  int reps = 15;
  std::string path;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tensors"))
      count = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--file"))
      path = argv[i + 1];
  }
  if (path.empty()) path = "/tmp/tensorsafe_bench_" + std::to_string(count) + ".safetensors";

  std::shared_ptr<std::string> storage;
  const ts::TensorSet set = MakeSet(count, storage);
  Time("tensorsafe_encode", std::max(1, reps / 5), [&] {
    auto r = st::Encode(set);
    if (!r.ok()) std::abort();
  });
  ts::Status s = st::WriteFile(path, set, st::WriteOptions{.sync = false});
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(file.data()), file.size());
  auto h = st::ParseHeader(bytes);
  if (!h.ok()) {
    std::fprintf(stderr, "%s\n", h.status().ToString().c_str());
    return 1;
  }
  std::printf("file path=%s tensors=%zu header_bytes=%llu file_bytes=%zu\n", path.c_str(), h->tensors.size(),
              static_cast<unsigned long long>(h->header_length), bytes.size());
  Time("tensorsafe_parse_header", reps, [&] {
    auto r = st::ParseHeader(bytes);
    if (!r.ok() || r->tensors.size() != static_cast<std::size_t>(count)) std::abort();
  });
  Time("tensorsafe_read_file", reps, [&] {
    auto r = st::ReadFile(path);
    if (!r.ok()) std::abort();
  });
  return 0;
}
