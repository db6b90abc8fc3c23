// CheckGgufQuants (fuzz_checks.h).
#include <algorithm>
#include <cstdlib>
#include <vector>

#include "fuzz_checks.h"
#include "tensorsafe/cast.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/gguf_quants.h"

namespace tensorsafe::fuzz {

void CheckGgufQuants(std::span<const std::byte> data) {
  auto set = gguf::Decode(data, nullptr, "fuzz.gguf");
  if (!set.ok()) return;
  for (const Tensor& t : set->tensors) {
    if (t.data.size() > (std::size_t{1} << 22)) continue;  // bounded work per input
    auto f32 = gguf::DequantizeTensor(t, DType::kF32, {.threads = 1});
    if (!f32.ok()) continue;
    for (DType dt : {DType::kF16, DType::kBF16}) {
      auto h = gguf::DequantizeTensor(t, dt, {.threads = 1});
      if (!h.ok()) std::abort();  // f32 worked: so must this
      if (t.info.dtype == dt) {
        // Its own dtype: the stored bytes. Through f32 a signalling NaN
        // would come back quiet (narrowing sets the quiet bit, CAST.md).
        if (!std::equal(t.data.begin(), t.data.end(), h->data.begin(), h->data.end())) std::abort();
        continue;
      }
      std::vector<std::byte> want(h->data.size());
      if (!Cast(DType::kF32, f32->data, dt, want, 1).ok()) std::abort();
      if (!std::equal(want.begin(), want.end(), h->data.begin(), h->data.end())) std::abort();
    }
    if (auto q = gguf::FindQuantized(t.info); q && gguf::CanQuantize(q->type)) {
      (void)gguf::QuantizeTensor(*f32, q->type, {.threads = 1});
    }
  }
}

}  // namespace tensorsafe::fuzz
