#include "fuzz_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "util/hash.h"

namespace tensorsafe::fuzz {

void Fail(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "\n==== fuzz property failed at %s:%d\n%s\n", file, line, what.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string Describe(const Status& s) { return s.ok() ? "ok" : s.ToString(); }

namespace {
struct Scratch {
  std::string path;
  Scratch() {
    char name[] = "/tmp/tensorsafe-fuzz-XXXXXX";
    const int fd = ::mkstemp(name);
    if (fd < 0) Fail(__FILE__, __LINE__, "mkstemp failed");
    ::close(fd);
    path = name;
  }
  ~Scratch() { ::unlink(path.c_str()); }  // libFuzzer leaves through exit(): statics are destroyed
};
}  // namespace

const std::string& WriteScratch(std::span<const std::byte> data) {
  static Scratch scratch;
  const int fd = ::open(scratch.path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) Fail(__FILE__, __LINE__, "open " + scratch.path);
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) Fail(__FILE__, __LINE__, "write " + scratch.path);
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return scratch.path;
}

namespace {

// nullopt when the text is not a JSON object.
std::optional<nlohmann::json> ParseObject(std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

}  // namespace

std::uint64_t CheckSetInvariants(const TensorSet& set, std::string_view codec) {
  std::uint64_t digest = internal::Hash64(set.metadata_json);
  if (!set.metadata_json.empty()) {
    TS_FUZZ_CHECK(ParseObject(set.metadata_json).has_value(),
                  std::string(codec) + ": file metadata is not a JSON object: " + set.metadata_json);
  }
  for (const Tensor& t : set.tensors) {
    if (t.info.layout == Layout::kCoo) {  // BTF's COO records (FORMAT.md §6.2 region)
      auto parts = SplitCoo(t.info, t.data);
      TS_FUZZ_CHECK(parts.ok(),
                    std::string(codec) + ": COO tensor \"" + t.info.name + "\": " + Describe(parts.status()));
      digest ^= internal::Hash64(t.data) + internal::Hash64(t.info.name);
      continue;
    }
    auto want = DenseByteSize(t.info.dtype, t.info.shape);
    TS_FUZZ_CHECK(want.ok(), std::string(codec) + ": tensor \"" + t.info.name + "\" has an impossible shape " +
                                 ShapeToString(t.info.shape) + ": " + Describe(want.status()));
    TS_FUZZ_CHECK(*want == t.data.size(), std::string(codec) + ": tensor \"" + t.info.name + "\" has " +
                                              std::to_string(t.data.size()) + " bytes, its shape needs " +
                                              std::to_string(*want));
    TS_FUZZ_CHECK(t.data.empty() || t.owner != nullptr,
                  std::string(codec) + ": tensor \"" + t.info.name + "\" has bytes but no owner");
    digest ^= internal::Hash64(t.data) + internal::Hash64(t.info.name);
    if (!t.info.metadata_json.empty()) {
      TS_FUZZ_CHECK(ParseObject(t.info.metadata_json).has_value(),
                    std::string(codec) + ": tensor \"" + t.info.name +
                        "\" metadata is not a JSON object: " + t.info.metadata_json);
    }
  }
  return digest;
}

bool SameSet(const TensorSet& a, const TensorSet& b, std::string* why, bool compare_order) {
  auto meta_equal = [](const std::string& x, const std::string& y) {
    if (x.empty() || y.empty()) return x.empty() && y.empty();
    auto jx = ParseObject(x), jy = ParseObject(y);
    return jx && jy && *jx == *jy;
  };
  if (!meta_equal(a.metadata_json, b.metadata_json)) {
    *why = "file metadata " + a.metadata_json + " vs " + b.metadata_json;
    return false;
  }
  if (a.tensors.size() != b.tensors.size()) {
    *why = std::to_string(a.tensors.size()) + " tensors vs " + std::to_string(b.tensors.size());
    return false;
  }
  std::map<std::string, const Tensor*> by_name;
  for (const Tensor& t : b.tensors) by_name[t.info.name] = &t;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const Tensor& x = a.tensors[i];
    const Tensor* y = compare_order ? &b.tensors[i] : nullptr;
    if (!compare_order) {
      auto it = by_name.find(x.info.name);
      if (it == by_name.end()) {
        *why = "tensor \"" + x.info.name + "\" is missing";
        return false;
      }
      y = it->second;
    }
    const std::string who = "tensor " + std::to_string(i) + " \"" + x.info.name + "\"";
    if (x.info.name != y->info.name) {
      *why = who + ": name vs \"" + y->info.name + "\"";
      return false;
    }
    if (x.info.dtype != y->info.dtype) {
      *why = who + ": dtype " + std::string(DTypeName(x.info.dtype)) + " vs " + std::string(DTypeName(y->info.dtype));
      return false;
    }
    if (x.info.layout != y->info.layout || x.info.nnz != y->info.nnz || x.info.coalesced != y->info.coalesced) {
      *why = who + ": layout, nnz or coalesced flag differ";
      return false;
    }
    if (x.info.shape != y->info.shape) {
      *why = who + ": shape " + ShapeToString(x.info.shape) + " vs " + ShapeToString(y->info.shape);
      return false;
    }
    if (AsText(x.data) != AsText(y->data)) {
      *why = who + ": data differs";
      return false;
    }
    if (!meta_equal(x.info.metadata_json, y->info.metadata_json)) {
      *why = who + ": metadata " + x.info.metadata_json + " vs " + y->info.metadata_json;
      return false;
    }
  }
  return true;
}

Tensor OwnedTensor(std::string name, DType dtype, Shape shape, std::string bytes, std::string metadata) {
  auto buf = std::make_shared<std::string>(std::move(bytes));
  Tensor t;
  t.info.name = std::move(name);
  t.info.dtype = dtype;
  t.info.shape = std::move(shape);
  t.info.metadata_json = std::move(metadata);
  t.info.data_length = buf->size();
  t.data = AsBytes(*buf);
  t.owner = buf;
  return t;
}

}  // namespace tensorsafe::fuzz
