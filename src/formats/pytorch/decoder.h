// The decoder of one PyTorch checkpoint (checkpoint.cc): its container
// (zip archive or legacy stream), the unpickled object, and the flattening
// of that object into named tensors and JSON values (flatten.cc).
#pragma once

#include <nlohmann/json.hpp>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "formats/npy/zip.h"
#include "formats/pytorch/convention.h"
#include "formats/pytorch/pickle.h"
#include "tensorsafe/formats/pytorch.h"
#include "util/text.h"

namespace tensorsafe::pytorch::internal {

using Json = nlohmann::ordered_json;

class Decoder {
 public:
  Decoder(std::span<const std::byte> bytes, std::shared_ptr<const void> owner, const std::string& name,
          const ReadOptions& opt)
      : bytes_(bytes), owner_(std::move(owner)), file_(name), opt_(opt), lim_(opt.limits) {}

  Result<TensorSet> Run() {
    auto starts = [&](std::string_view m) {
      return bytes_.size() >= m.size() && std::memcmp(bytes_.data(), m.data(), m.size()) == 0;
    };
    if (starts("PK\x03\x04") || starts(std::string_view("PK\x05\x06", 4))) return Zip();
    if (bytes_.size() >= 262 && std::memcmp(bytes_.data() + 257, "ustar", 5) == 0) {
      return Unsupported(file_ +
                         ": a tar archive: the pre-1.0 torch.save format (storages, tensors, pickle "
                         "members), which torch.load refuses with weights_only=True too, is not supported");
    }
    if (!bytes_.empty() && static_cast<unsigned char>(bytes_[0]) == 0x80) return Legacy();
    // Nothing here starts like a checkpoint (a name like model.bin made us
    // look): unrecognised, as for any file no format claims.
    return Unsupported(file_ +
                       ": not a tensor file tensorsafe recognises: not a PyTorch checkpoint either, "
                       "being neither a zip archive (torch.save) nor the legacy format's magic-number "
                       "pickle (_use_new_zipfile_serialization=False)");
  }

 private:
  // --- the zip archive ------------------------------------------------------
  Result<TensorSet> Zip();

  std::string Where(const std::string& record) const {
    return file_ + ": member " + tensorsafe::internal::QuoteName(prefix_ + record);
  }

  // A record's bytes (a view: only stored members are read).
  Result<std::optional<std::span<const std::byte>>> Record(const std::string& record, bool required);

  Status CheckVersion();

  // --- the legacy stream ------------------------------------------------------
  Result<TensorSet> Legacy();

  // --- flattening -------------------------------------------------------------
  // Shared references are visited once per reference, so a pickle of
  // nested shared lists (a billion laughs) could make the walk exponential:
  // it may visit at most twice the values the pickle made (a state dict
  // visits far fewer than it made), and never more than max_values.
  Status Visit();
  Status Deep(std::uint32_t depth, const std::string& name) const;

  // Whether a tensor (or bare storage) lies anywhere inside `v`. Memoized
  // per value; a value met again while in progress is a cycle.
  Result<bool> Holds(Value* v, std::uint32_t depth, const std::string& name);

  static std::string Join(const std::string& parent, const std::string& key, bool top);

  Status Walk(Value* v, const std::string& name, std::uint32_t depth, bool top);

  Status Claim(const std::string& name);

  Status Add(const std::string& name, Value* v);

  Status AddValue(const std::string& name, Json j);

  static Json Number(double d);

  // A tensor-free value as JSON (docs/formats/pytorch.md "Values").
  Result<Json> ToJson(const Value* v, std::uint32_t depth, const std::string& name);

  // --- tensors ----------------------------------------------------------------
  Result<Tensor> Build(const std::string& name, const TensorDecl& t);

  Status Materialize(const std::string& name, std::uint64_t n);

  Result<TensorSet> Finish(internal::Unpickler& u, Value* root);

  std::string StemOfFile() const;

  std::span<const std::byte> bytes_;
  std::shared_ptr<const void> owner_;
  const std::string& file_;
  const ReadOptions& opt_;
  const Limits& lim_;
  // zip
  std::string prefix_;
  std::map<std::string, const tensorsafe::internal::zip::Entry*> members_;
  bool big_endian_ = false;
  // flattening
  internal::Tables* tables_ = nullptr;
  std::uint64_t visits_ = 0, visit_budget_ = 0;
  std::unordered_set<std::string> names_;
  std::vector<Entry> entries_;
  Json values_ = Json::object();
  std::uint64_t materialized_ = 0;
};

}  // namespace tensorsafe::pytorch::internal
