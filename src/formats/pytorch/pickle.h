// The restricted unpickler behind the PyTorch codec (docs/formats/pytorch.md
// "The unpickler"). It interprets a pickle as data: every opcode it accepts
// builds or moves a plain value, and the only globals it resolves are a
// fixed table of names whose effect it implements itself (OrderedDict,
// torch.Size, the tensor rebuild functions, storage types, dtypes, ...).
// Nothing named in the file is imported or called.
//
// Values live in an Arena owned by the caller and refer to each other by
// raw pointers, so shared references and even cycles (a list appended to
// itself through the memo) cost nothing and leak nothing; the walk that
// flattens them (checkpoint.cc) bounds depth and visits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tensorsafe/dtype.h"
#include "tensorsafe/formats/pytorch.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"

namespace tensorsafe::pytorch::internal {

// A torch dtype the unpickler knows by name. `dtype` is empty for the ones
// tensorsafe has no equivalent for (complex32, quantized, bits, sub-byte
// placeholders): naming them is fine, building a tensor of them is
// kUnsupported.
struct TorchDType {
  std::string_view name;  // after "torch.": "float32", "float8_e4m3fn"
  std::optional<DType> dtype;
  std::uint32_t itemsize;  // bytes of one torch element (0 when unknown)
  bool f4x2 = false;       // float4_e2m1fn_x2: one byte holds two f4 elements
};
// Index into the table, or nullopt.
std::optional<std::uint16_t> FindTorchDType(std::string_view name);
const TorchDType& TorchDTypeAt(std::uint16_t index);

// What an allowed global stands for. kStorageType and kDType carry a
// TorchDType index (kStorageType: 0xffff = torch.storage.UntypedStorage).
enum class GlobalKind : std::uint8_t {
  kOrderedDict,                // collections.OrderedDict
  kCounter,                    // collections.Counter
  kRebuildTensor,              // torch._utils._rebuild_tensor
  kRebuildTensorV2,            // torch._utils._rebuild_tensor_v2
  kRebuildTensorV3,            // torch._utils._rebuild_tensor_v3
  kRebuildParameter,           // torch._utils._rebuild_parameter
  kRebuildParameterWithState,  // torch._utils._rebuild_parameter_with_state
  kRebuildFromTypeV2,          // torch._tensor._rebuild_from_type_v2
  kTensorClass,                // torch.Tensor
  kParameterClass,             // torch.nn.parameter.Parameter
  kSize,                       // torch.Size
  kDevice,                     // torch.device
  kCodecsEncode,               // _codecs.encode
  kBytearray,                  // builtins.bytearray
  kSet,                        // builtins.set
  kComplex,                    // builtins.complex
  kStorageType,                // torch.FloatStorage, ..., torch.storage.UntypedStorage
  kDType,                      // torch.float32, ...
  // Allow::kDcpMetadata only (dcp_metadata.cc):
  kDcpClass,   // a dataclass of DCP's metadata; arg: index into its table
  kGetLayout,  // torch.serialization._get_layout("torch.strided"): the name
  kMemFormat,  // torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING(n): n
  kPath,       // pathlib.PosixPath(*parts): the joined path
};

// Which globals a pickle may name: those torch.save writes for checkpoints,
// or, for the metadata pickle of DCP's default checkpoints, those plus DCP's
// metadata dataclasses, whose instances become kObject values.
enum class Allow : std::uint8_t { kCheckpoint, kDcpMetadata };
inline constexpr std::uint16_t kUntyped = 0xffff;

struct Global {
  GlobalKind kind;
  std::uint16_t arg = 0;
};

// Resolves "module.name" (after Python 2 names are mapped as pickle's
// _compat_pickle and torch's weights_only unpickler map them) against the
// allowlist. kUnsupported naming the global otherwise, with the reason when
// torch would have taken it (quantized, sparse, nested tensors, ...).
Result<Global> ResolveGlobal(std::string_view module, std::string_view name, Allow allow = Allow::kCheckpoint);
// "module.name" as the file spells it, mapped from Python 2 names.
std::string GlobalName(const Global& g);

enum class Kind : std::uint8_t {
  kNone,
  kBool,
  kInt,     // fits int64
  kBigInt,  // wider: s holds the two's complement bytes, little-endian
  kFloat,
  kComplex,
  kStr,    // UTF-8
  kBytes,  // bytes or bytearray
  kTuple,
  kList,
  kDict,  // dict, OrderedDict, Counter
  kSet,
  kGlobal,   // g
  kStorage,  // i: index into Tables::storages
  kTensor,   // i: index into Tables::tensors
  kObject,   // an instance of g (a kDcpClass); items: its BUILD state, if any
};

struct Value {
  Kind kind = Kind::kNone;
  std::int64_t i = 0;
  double re = 0, im = 0;
  Global g{};
  std::string s;
  // kTuple/kList/kSet: the items; kDict: key, value, key, value, ...
  std::vector<Value*> items;
  // kDict/kSet: canonical key -> position in items (of the key for dicts),
  // so a repeated key replaces its value as Python's dict does.
  std::unique_ptr<std::unordered_map<std::string, std::size_t>> index;
  // Flattening state (checkpoint.cc): 0 unknown, 1 in progress, 2 no
  // tensor inside, 3 holds a tensor.
  std::uint8_t holds_tensor = 0;
};

// A storage as the pickle declares it (persistent id).
struct StorageDecl {
  std::string key;
  std::uint16_t type = kUntyped;  // TorchDType index of the storage type
  std::uint64_t numel = 0;        // elements of `type` (bytes when untyped)
  std::uint64_t nbytes = 0;
  std::string location;
  // Legacy view storages: a byte range of another storage.
  std::optional<std::size_t> view_of;
  std::uint64_t view_offset = 0;  // bytes
  // Filled by the container: the bytes and where they sit in the file.
  bool resolved = false;
  std::span<const std::byte> bytes;
  std::uint64_t file_offset = 0;
  // The element size to swap when the data is big-endian (0: not yet known).
  std::uint32_t swap_unit = 0;
};

struct TensorDecl {
  std::size_t storage = 0;
  std::uint16_t dtype = 0;                   // TorchDType index
  std::uint64_t offset = 0;                  // in elements of dtype
  std::vector<std::uint64_t> shape, stride;  // torch's, in elements
};

// What the pickles of one checkpoint declare, across its pickles.
struct Tables {
  std::vector<StorageDecl> storages;
  std::unordered_map<std::string, std::size_t> storage_by_key;
  std::vector<TensorDecl> tensors;
};

// The persistent id layout: zip archives give ("storage", type, key,
// location, numel); the legacy stream adds a sixth item, a view (or None).
enum class PidForm { kZip, kLegacy };

// A restricted unpickler over one buffer, which may hold several pickles in
// a row (the legacy stream). Values and tables accumulate across Load calls;
// each Load has a fresh stack and memo, as each pickle.load() does.
class Unpickler {
 public:
  Unpickler(std::span<const std::byte> bytes, std::string where, const Limits& limits, PidForm form,
            Allow allow = Allow::kCheckpoint)
      : bytes_(bytes), where_(std::move(where)), limits_(limits), form_(form), allow_(allow) {}

  // Runs the pickle that starts at `pos` up to its STOP. On success returns
  // the value STOP pops and sets *end to the offset after STOP. Errors name
  // `where` and the offset: kCorruption (truncated, malformed, stack or memo
  // misuse, storage or tensor geometry torch would refuse), kUnsupported
  // (an opcode or global outside the allowlist, an operation on a value it
  // does not apply to), kLimitExceeded (Limits).
  Result<Value*> Load(std::size_t pos, std::size_t* end);

  Tables& tables() { return tables_; }
  std::size_t value_count() const { return arena_.size(); }

 private:
  class Run;
  Result<Value*> New(Kind kind);
  std::span<const std::byte> bytes_;
  std::string where_;
  const Limits& limits_;
  PidForm form_;
  Allow allow_;
  std::deque<Value> arena_;
  Tables tables_;
};

// The name an opcode byte has in pickletools ("BINUNICODE"), or "" for a
// byte that is no opcode.
std::string_view OpcodeName(std::uint8_t op);

// Python's str() of a dict key, for dotted names; nullopt for keys that
// cannot name an entry (floats, tuples, bytes, ...).
std::optional<std::string> KeyText(const Value& key);
// The decimal text of a kBigInt's two's complement little-endian bytes.
std::string BigIntText(std::string_view le);
// "an int", "a tuple", ... for messages.
std::string_view KindText(const Value& v);

}  // namespace tensorsafe::pytorch::internal
