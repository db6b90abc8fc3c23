// Writes a small model-like .tsafe file with the C++ API: what `make demo`
// runs first. Usage: write_demo OUT.tsafe
#include <cmath>
#include <cstdio>
#include <vector>

#include "tensorsafe/writer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.tsafe\n", argv[0]);
    return 2;
  }
  auto writer = tensorsafe::Writer::Create(argv[1]);
  if (!writer.ok()) {
    std::fprintf(stderr, "%s\n", writer.status().ToString().c_str());
    return 1;
  }
  auto& w = **writer;
  std::vector<float> embed(8 * 4);
  for (std::size_t i = 0; i < embed.size(); ++i) embed[i] = std::sin(static_cast<float>(i));
  std::vector<float> bias = {0.5f, -0.25f, 0.125f, 0.0f};
  std::vector<std::int64_t> steps = {1000};
  using tensorsafe::DType;
  using tensorsafe::TensorView;
  tensorsafe::Status s =
      w.Add("embed.weight", TensorView::Contiguous(DType::kF32, {8, 4}, std::as_bytes(std::span(embed))),
            R"({"init":"sin"})");
  if (s.ok()) s = w.Add("head.bias", TensorView::Contiguous(DType::kF32, {4}, std::as_bytes(std::span(bias))));
  // A tensor streamed in chunks, as one larger than memory would be.
  if (s.ok()) s = w.BeginTensor("head.weight", DType::kF32, {4, 4});
  for (int row = 0; s.ok() && row < 4; ++row) {
    float r[4] = {0, 0, 0, 0};
    r[row] = 1.0f;
    s = w.Append(std::as_bytes(std::span(r)));
  }
  if (s.ok()) s = w.EndTensor();
  if (s.ok()) s = w.Add("step", TensorView::Contiguous(DType::kI64, {}, std::as_bytes(std::span(steps))));
  if (s.ok()) s = w.SetMetadata(R"({"framework":"demo","config":{"layers":2,"dims":[8,4]}})");
  if (s.ok()) s = w.Finish();
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("wrote %s: %llu tensors, %llu bytes\n", argv[1], static_cast<unsigned long long>(w.tensor_count()),
              static_cast<unsigned long long>(w.bytes_written()));
  return 0;
}
