// The allowlist of the restricted unpickler (docs/formats/pytorch.md
// "Globals"): the names torch.save emits for state dicts and optimizer
// states, checked against torch 2.13.0's torch/serialization.py,
// torch/_tensor.py, torch/_utils.py and torch/_weights_only_unpickler.py.
#include <iterator>
#include <string>

#include "formats/pytorch/pickle.h"

namespace tensorsafe::pytorch::internal {
namespace {

using D = DType;

// Every dtype name torch 2.13 defines (str(dtype) without "torch."), so a
// checkpoint naming one is told precisely why it is refused.
constexpr TorchDType kDTypes[] = {
    {"float32", D::kF32, 4},
    {"float64", D::kF64, 8},
    {"float16", D::kF16, 2},
    {"bfloat16", D::kBF16, 2},
    {"complex64", D::kC64, 8},
    {"complex128", D::kC128, 16},
    {"uint8", D::kU8, 1},
    {"int8", D::kI8, 1},
    {"int16", D::kI16, 2},
    {"int32", D::kI32, 4},
    {"int64", D::kI64, 8},
    {"uint16", D::kU16, 2},
    {"uint32", D::kU32, 4},
    {"uint64", D::kU64, 8},
    {"bool", D::kBool, 1},
    {"float8_e4m3fn", D::kF8E4M3FN, 1},
    {"float8_e5m2", D::kF8E5M2, 1},
    {"float8_e4m3fnuz", D::kF8E4M3FNUZ, 1},
    {"float8_e5m2fnuz", D::kF8E5M2FNUZ, 1},
    {"float8_e8m0fnu", D::kF8E8M0, 1},
    {"float4_e2m1fn_x2", D::kF4E2M1, 1, true},
    // Known to torch, without a tensorsafe dtype.
    {"complex32", std::nullopt, 4},
    {"qint8", std::nullopt, 1},
    {"quint8", std::nullopt, 1},
    {"qint32", std::nullopt, 4},
    {"quint4x2", std::nullopt, 1},
    {"quint2x4", std::nullopt, 1},
    {"bits1x8", std::nullopt, 1},
    {"bits2x4", std::nullopt, 1},
    {"bits4x2", std::nullopt, 1},
    {"bits8", std::nullopt, 1},
    {"bits16", std::nullopt, 2},
    {"uint1", std::nullopt, 0},
    {"uint2", std::nullopt, 0},
    {"uint3", std::nullopt, 0},
    {"uint4", std::nullopt, 0},
    {"uint5", std::nullopt, 0},
    {"uint6", std::nullopt, 0},
    {"uint7", std::nullopt, 0},
    {"int1", std::nullopt, 0},
    {"int2", std::nullopt, 0},
    {"int3", std::nullopt, 0},
    {"int4", std::nullopt, 0},
    {"int5", std::nullopt, 0},
    {"int6", std::nullopt, 0},
    {"int7", std::nullopt, 0},
};

// The legacy typed storage classes (torch/storage.py, _LegacyStorage
// subclasses), as torch.<Name> and torch.cuda.<Name>.
struct StorageName {
  std::string_view name;
  std::string_view dtype;
};
constexpr StorageName kStorages[] = {
    {"FloatStorage", "float32"},
    {"DoubleStorage", "float64"},
    {"HalfStorage", "float16"},
    {"BFloat16Storage", "bfloat16"},
    {"LongStorage", "int64"},
    {"IntStorage", "int32"},
    {"ShortStorage", "int16"},
    {"CharStorage", "int8"},
    {"ByteStorage", "uint8"},
    {"BoolStorage", "bool"},
    {"ComplexFloatStorage", "complex64"},
    {"ComplexDoubleStorage", "complex128"},
    {"QInt8Storage", "qint8"},
    {"QUInt8Storage", "quint8"},
    {"QInt32Storage", "qint32"},
    {"QUInt4x2Storage", "quint4x2"},
    {"QUInt2x4Storage", "quint2x4"},
};

struct Named {
  std::string_view full;
  Global g;
};
constexpr Named kGlobals[] = {
    {"collections.OrderedDict", {GlobalKind::kOrderedDict}},
    {"collections.Counter", {GlobalKind::kCounter}},
    {"torch._utils._rebuild_tensor", {GlobalKind::kRebuildTensor}},
    {"torch._utils._rebuild_tensor_v2", {GlobalKind::kRebuildTensorV2}},
    {"torch._utils._rebuild_tensor_v3", {GlobalKind::kRebuildTensorV3}},
    {"torch._utils._rebuild_parameter", {GlobalKind::kRebuildParameter}},
    {"torch._utils._rebuild_parameter_with_state", {GlobalKind::kRebuildParameterWithState}},
    {"torch._tensor._rebuild_from_type_v2", {GlobalKind::kRebuildFromTypeV2}},
    {"torch.Tensor", {GlobalKind::kTensorClass}},
    {"torch.nn.parameter.Parameter", {GlobalKind::kParameterClass}},
    {"torch.Size", {GlobalKind::kSize}},
    {"torch.device", {GlobalKind::kDevice}},
    {"_codecs.encode", {GlobalKind::kCodecsEncode}},
    {"builtins.bytearray", {GlobalKind::kBytearray}},
    {"builtins.set", {GlobalKind::kSet}},
    {"builtins.complex", {GlobalKind::kComplex}},
    {"torch.storage.UntypedStorage", {GlobalKind::kStorageType, kUntyped}},
};

// DCP's metadata pickle (torch/distributed/checkpoint/metadata.py and
// filesystem.py, torch 2.13.0), for Allow::kDcpMetadata only: the classes
// whose instances are kept as their state (dcp_metadata.cc reads them), and
// the helpers their states are pickled with.
constexpr std::string_view kDcpClasses[] = {
    "torch.distributed.checkpoint.metadata.Metadata",
    "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
    "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
    "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
    "torch.distributed.checkpoint.metadata.TensorProperties",
    "torch.distributed.checkpoint.metadata.MetadataIndex",
    "torch.distributed.checkpoint.metadata.StorageMeta",
    "torch.distributed.checkpoint.filesystem._StorageInfo",
};
constexpr Named kDcpGlobals[] = {
    {"torch.serialization._get_layout", {GlobalKind::kGetLayout}},
    {"torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING", {GlobalKind::kMemFormat}},
    {"pathlib.PosixPath", {GlobalKind::kPath}},
    {"pathlib.PurePosixPath", {GlobalKind::kPath}},
};

// Globals torch's weights_only unpickler would take but that name objects
// tensorsafe cannot represent: refused with the reason.
struct Refused {
  std::string_view full;
  std::string_view why;
};
constexpr Refused kRefused[] = {
    {"torch._utils._rebuild_qtensor", "quantized tensors are not supported"},
    {"torch._utils._rebuild_sparse_tensor", "sparse tensors are not supported"},
    {"torch.serialization._get_layout", "sparse tensors are not supported"},
    {"torch._utils._rebuild_nested_tensor", "nested tensors are not supported"},
    {"torch._utils._rebuild_meta_tensor_no_storage", "meta tensors have no data to read"},
    {"torch._utils._rebuild_wrapper_subclass", "tensor subclasses without storage are not supported"},
    {"torch._utils._rebuild_device_tensor_from_numpy", "tensors rebuilt through NumPy are not supported"},
    {"torch._utils._rebuild_device_tensor_from_cpu_tensor",
     "tensors of devices without storage (XLA, MAIA, MTIA) are not supported"},
    {"torch.storage.TypedStorage", "TypedStorage objects are not supported as values"},
    {"torch.per_tensor_affine", "quantized tensors are not supported"},
    {"torch.per_channel_affine", "quantized tensors are not supported"},
    {"torch.per_tensor_symmetric", "quantized tensors are not supported"},
};

// pickle's _compat_pickle, as torch/_utils.py adapts it (IMPORT_MAPPING,
// NAME_MAPPING): protocol-2 pickles name builtins "__builtin__".
struct NameMap {
  std::string_view module, name, to_module, to_name;
};
constexpr NameMap kNameMapping[] = {
    {"__builtin__", "xrange", "builtins", "range"},
    {"__builtin__", "reduce", "functools", "reduce"},
    {"__builtin__", "intern", "sys", "intern"},
    {"__builtin__", "unichr", "builtins", "chr"},
    {"__builtin__", "unicode", "builtins", "str"},
    {"__builtin__", "long", "builtins", "int"},
    {"itertools", "izip", "builtins", "zip"},
    {"itertools", "imap", "builtins", "map"},
    {"itertools", "ifilter", "builtins", "filter"},
    {"itertools", "ifilterfalse", "itertools", "filterfalse"},
    {"itertools", "izip_longest", "itertools", "zip_longest"},
    {"UserDict", "IterableUserDict", "collections", "UserDict"},
    {"UserList", "UserList", "collections", "UserList"},
    {"UserString", "UserString", "collections", "UserString"},
    {"__builtin__", "basestring", "builtins", "str"},
    {"exceptions", "StandardError", "builtins", "Exception"},
    {"UserDict", "UserDict", "collections", "UserDict"},
};
struct ModuleMap {
  std::string_view from, to;
};
constexpr ModuleMap kImportMapping[] = {
    {"__builtin__", "builtins"},
    {"copy_reg", "copyreg"},
    {"Queue", "queue"},
    {"repr", "reprlib"},
    {"_abcoll", "collections.abc"},
    {"UserDict", "collections"},
    {"UserList", "collections"},
    {"UserString", "collections"},
    {"whichdb", "dbm"},
    {"StringIO", "io"},
    {"cStringIO", "io"},
};

std::string Mapped(std::string_view module, std::string_view name) {
  for (const NameMap& m : kNameMapping) {
    if (m.module == module && m.name == name) return std::string(m.to_module) + "." + std::string(m.to_name);
  }
  for (const ModuleMap& m : kImportMapping) {
    if (m.from == module) return std::string(m.to) + "." + std::string(name);
  }
  return std::string(module) + "." + std::string(name);
}

}  // namespace

std::optional<std::uint16_t> FindTorchDType(std::string_view name) {
  for (std::size_t i = 0; i < std::size(kDTypes); ++i) {
    if (kDTypes[i].name == name) return static_cast<std::uint16_t>(i);
  }
  return std::nullopt;
}

const TorchDType& TorchDTypeAt(std::uint16_t index) { return kDTypes[index]; }

Result<Global> ResolveGlobal(std::string_view module, std::string_view name, Allow allow) {
  const std::string full = Mapped(module, name);
  if (allow == Allow::kDcpMetadata) {
    for (std::size_t i = 0; i < std::size(kDcpClasses); ++i) {
      if (kDcpClasses[i] == full) return Global{GlobalKind::kDcpClass, static_cast<std::uint16_t>(i)};
    }
    for (const Named& n : kDcpGlobals) {
      if (n.full == full) return n.g;
    }
  }
  for (const Named& n : kGlobals) {
    if (n.full == full) return n.g;
  }
  for (std::string_view prefix : {std::string_view("torch."), std::string_view("torch.cuda.")}) {
    if (full.size() <= prefix.size() || full.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string_view rest = std::string_view(full).substr(prefix.size());
    for (const StorageName& s : kStorages) {
      if (s.name == rest) return Global{GlobalKind::kStorageType, *FindTorchDType(s.dtype)};
    }
    if (prefix == "torch.") {
      if (auto d = FindTorchDType(rest)) return Global{GlobalKind::kDType, *d};
    }
  }
  for (const Refused& r : kRefused) {
    if (r.full == full) return Unsupported("global " + full + " is refused: " + std::string(r.why));
  }
  if (full.rfind("torch.per_channel_", 0) == 0) {
    return Unsupported("global " + full + " is refused: quantized tensors are not supported");
  }
  if (full.size() > 6 && full.compare(full.size() - 6, 6, "Tensor") == 0 && full.rfind("torch.", 0) == 0) {
    return Unsupported("global " + full + " is refused: legacy tensor classes are not supported");
  }
  return Unsupported("global " + full +
                     " is not allowed: tensorsafe calls nothing named in a checkpoint and takes only the "
                     "globals torch.save writes for tensors and state dicts (docs/formats/pytorch.md)");
}

std::string GlobalName(const Global& g) {
  switch (g.kind) {
    case GlobalKind::kStorageType:
      if (g.arg == kUntyped) return "torch.storage.UntypedStorage";
      for (const StorageName& s : kStorages) {
        if (s.dtype == kDTypes[g.arg].name) return "torch." + std::string(s.name);
      }
      break;
    case GlobalKind::kDType: return "torch." + std::string(kDTypes[g.arg].name);
    case GlobalKind::kDcpClass: return g.arg < std::size(kDcpClasses) ? std::string(kDcpClasses[g.arg]) : "?";
    case GlobalKind::kGetLayout:
    case GlobalKind::kMemFormat:
    case GlobalKind::kPath:
      for (const Named& n : kDcpGlobals) {
        if (n.g.kind == g.kind) return std::string(n.full);
      }
      break;
    default:
      for (const Named& n : kGlobals) {
        if (n.g.kind == g.kind) return std::string(n.full);
      }
  }
  return "?";
}

}  // namespace tensorsafe::pytorch::internal
