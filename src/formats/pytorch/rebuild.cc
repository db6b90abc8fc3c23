// What the allowed torch globals build (Unpickler::Run, unpickler_run.h):
// storages from persistent ids, tensors from the _rebuild_tensor family
// with their geometry checked against the storage, and the few callables
// and classes a state dict holds (docs/formats/pytorch.md "Globals").
#include "formats/pytorch/unpickler_run.h"
#include "util/checked_math.h"

namespace tensorsafe::pytorch::internal {

using tensorsafe::internal::CheckedAdd;
using tensorsafe::internal::CheckedMul;
using tensorsafe::internal::QuoteName;

Result<std::string> Unpickler::Run::KeyOf(const Value* v, std::string_view what) const {
  if (!IsStrLike(v)) {
    return Corrupt("the persistent id's " + std::string(what) + " is " + std::string(KindText(*v)) + ", not a string");
  }
  return v->s;
}

// BINPERSID: ("storage", storage type, key, location, numel[, view]).
Result<Value*> Unpickler::Run::PersistentLoad(Value* pid) {
  if (pid->kind != Kind::kTuple || pid->items.empty()) {
    return Refuse("the persistent id is " + std::string(KindText(*pid)) +
                  "; torch.save writes a tuple (\"storage\", ...)");
  }
  const std::vector<Value*>& t = pid->items;
  if (!IsStrLike(t[0]) || t[0]->s != "storage") {
    if (IsStrLike(t[0]) && t[0]->s == "module") {
      return Refuse(
          "a pickled nn.Module class (torch.save(model) rather than model.state_dict()) is not "
          "supported: it would need the module's code");
    }
    return Refuse("only persistent ids of type \"storage\" are allowed");
  }
  const std::size_t want = u_.form_ == PidForm::kZip ? 5 : 6;
  if (t.size() != want) {
    return Corrupt("a storage persistent id of " + Str(t.size()) + " items; this container writes " + Str(want));
  }
  if (t[1]->kind != Kind::kGlobal || t[1]->g.kind != GlobalKind::kStorageType) {
    return Corrupt("the storage type is " + std::string(KindText(*t[1])) + ", not a storage class");
  }
  const std::uint16_t type = t[1]->g.arg;
  TS_ASSIGN_OR_RETURN(std::string key, KeyOf(t[2], "key"));
  TS_ASSIGN_OR_RETURN(std::string location, KeyOf(t[3], "location"));
  if (t[4]->kind != Kind::kInt || t[4]->i < 0) {
    return Corrupt("storage " + QuoteName(key) + ": the element count is " + std::string(KindText(*t[4])) +
                   (t[4]->kind == Kind::kInt ? " below zero" : "") + ", not a count");
  }
  const std::uint64_t numel = static_cast<std::uint64_t>(t[4]->i);
  const std::uint32_t esize = type == kUntyped ? 1 : TorchDTypeAt(type).itemsize;
  auto nbytes = CheckedMul(numel, esize);
  if (!nbytes) return Corrupt("storage " + QuoteName(key) + ": " + Str(numel) + " elements overflow 64-bit sizes");
  TS_ASSIGN_OR_RETURN(std::size_t index, Declare(key, type, numel, *nbytes, location));
  if (u_.form_ == PidForm::kLegacy && t[5]->kind != Kind::kNone) {
    // (view key, offset, size) in elements of the root's type.
    const Value* view = t[5];
    if (view->kind != Kind::kTuple || view->items.size() != 3 || view->items[1]->kind != Kind::kInt ||
        view->items[2]->kind != Kind::kInt || view->items[1]->i < 0 || view->items[2]->i < 0) {
      return Corrupt("storage " + QuoteName(key) + ": the view is not (key, offset, size)");
    }
    TS_ASSIGN_OR_RETURN(std::string view_key, KeyOf(view->items[0], "view key"));
    const auto off = static_cast<std::uint64_t>(view->items[1]->i);
    const auto size = static_cast<std::uint64_t>(view->items[2]->i);
    auto end = CheckedAdd(off, size);
    if (!end || *end > numel) {
      return Corrupt("storage view " + QuoteName(view_key) + ": elements " + Str(off) + " + " + Str(size) +
                     " lie outside storage " + QuoteName(key) + " of " + Str(numel));
    }
    TS_ASSIGN_OR_RETURN(std::size_t v, Declare(view_key, type, size, size * esize, location));
    StorageDecl& sd = u_.tables_.storages[v];
    if (sd.view_of && (*sd.view_of != index || sd.view_offset != off * esize)) {
      return Corrupt("storage view " + QuoteName(view_key) + " is declared twice with different roots");
    }
    if (v == index) return Corrupt("storage " + QuoteName(key) + " is declared as a view of itself");
    sd.view_of = index;
    sd.view_offset = off * esize;
    index = v;
  }
  TS_ASSIGN_OR_RETURN(Value * s, New(Kind::kStorage));
  s->i = static_cast<std::int64_t>(index);
  return s;
}

Result<std::size_t> Unpickler::Run::Declare(const std::string& key, std::uint16_t type, std::uint64_t numel,
                                            std::uint64_t nbytes, const std::string& location) {
  Tables& tb = u_.tables_;
  auto it = tb.storage_by_key.find(key);
  if (it != tb.storage_by_key.end()) {
    const StorageDecl& d = tb.storages[it->second];
    // torch.save never declares a key twice differently; torch.load would
    // silently keep the first declaration.
    if (d.type != type || d.numel != numel) {
      return Corrupt("storage " + QuoteName(key) + " is declared as " + GlobalName({GlobalKind::kStorageType, d.type}) +
                     " of " + Str(d.numel) + " elements, then as " + GlobalName({GlobalKind::kStorageType, type}) +
                     " of " + Str(numel));
    }
    return it->second;
  }
  StorageDecl d;
  d.key = key;
  d.type = type;
  d.numel = numel;
  d.nbytes = nbytes;
  d.location = location;
  tb.storages.push_back(std::move(d));
  tb.storage_by_key.emplace(key, tb.storages.size() - 1);
  return tb.storages.size() - 1;
}

Result<std::vector<std::uint64_t>> Unpickler::Run::Dims(const Value* v, std::string_view what) const {
  if (v->kind != Kind::kTuple && v->kind != Kind::kList) {
    return Corrupt("the tensor's " + std::string(what) + " is " + std::string(KindText(*v)) + ", not a tuple");
  }
  if (v->items.size() > u_.limits_.max_rank) {
    return LimitExceeded(At() + "a tensor of rank " + Str(v->items.size()) + ", more than " + Str(u_.limits_.max_rank) +
                         " (Limits::max_rank)");
  }
  std::vector<std::uint64_t> out;
  out.reserve(v->items.size());
  for (const Value* d : v->items) {
    if (d->kind != Kind::kInt) {
      return Corrupt("the tensor's " + std::string(what) + " holds " + std::string(KindText(*d)));
    }
    if (d->i < 0) return Corrupt("the tensor's " + std::string(what) + " holds " + std::to_string(d->i));
    out.push_back(static_cast<std::uint64_t>(d->i));
  }
  return out;
}

// _rebuild_tensor(storage, offset, size, stride) and its v2/v3 forms: the
// geometry torch's set_() accepts, checked against the storage.
Result<Value*> Unpickler::Run::RebuildTensor(GlobalKind kind, const std::vector<Value*>& a) {
  const std::size_t n = a.size();
  const bool ok_arity = kind == GlobalKind::kRebuildTensor     ? n == 4
                        : kind == GlobalKind::kRebuildTensorV2 ? n == 6 || n == 7
                                                               : n == 7 || n == 8;
  if (!ok_arity) return Corrupt(GlobalName({kind}) + " called with " + Str(n) + " arguments");
  if (a[0]->kind != Kind::kStorage) {
    return Corrupt(GlobalName({kind}) + ": the storage argument is " + std::string(KindText(*a[0])));
  }
  const std::size_t si = static_cast<std::size_t>(a[0]->i);
  const StorageDecl& sd = u_.tables_.storages[si];
  std::uint16_t dtype;
  if (kind == GlobalKind::kRebuildTensorV3) {
    if (a[6]->kind != Kind::kGlobal || a[6]->g.kind != GlobalKind::kDType) {
      return Corrupt("_rebuild_tensor_v3: the dtype argument is " + std::string(KindText(*a[6])));
    }
    dtype = a[6]->g.arg;
  } else {
    dtype = sd.type == kUntyped ? *FindTorchDType("uint8") : sd.type;
  }
  const TorchDType& td = TorchDTypeAt(dtype);
  if (!td.dtype || td.itemsize == 0) {
    return Refuse("storage " + QuoteName(sd.key) + ": dtype torch." + std::string(td.name) +
                  " has no tensorsafe equivalent");
  }
  if (a[1]->kind != Kind::kInt || a[1]->i < 0) {
    return Corrupt("the storage offset is " + std::string(KindText(*a[1])) +
                   (a[1]->kind == Kind::kInt ? " below zero" : ""));
  }
  if (kind != GlobalKind::kRebuildTensor) {
    if (a[4]->kind != Kind::kBool) return Corrupt("requires_grad is " + std::string(KindText(*a[4])));
    if (a[5]->kind != Kind::kDict && a[5]->kind != Kind::kNone) {
      return Corrupt("backward_hooks is " + std::string(KindText(*a[5])) + ", not a dict");
    }
    const std::size_t meta = kind == GlobalKind::kRebuildTensorV2 ? 6 : 7;
    if (n > meta && a[meta]->kind != Kind::kDict && a[meta]->kind != Kind::kNone) {
      return Corrupt("the tensor metadata is " + std::string(KindText(*a[meta])) + ", not a dict");
    }
  }
  TensorDecl t;
  t.storage = si;
  t.dtype = dtype;
  t.offset = static_cast<std::uint64_t>(a[1]->i);
  TS_ASSIGN_OR_RETURN(t.shape, Dims(a[2], "size"));
  TS_ASSIGN_OR_RETURN(t.stride, Dims(a[3], "stride"));
  if (t.shape.size() != t.stride.size()) {
    return Corrupt("the tensor has " + Str(t.shape.size()) + " sizes and " + Str(t.stride.size()) + " strides");
  }
  // The non-zero dimensions' product must fit (NumPy's rule, so the
  // verdict does not depend on where a zero dimension sits).
  std::uint64_t nonzero = 1, last = t.offset;
  bool empty = false;
  for (std::uint64_t d : t.shape) {
    if (d == 0) {
      empty = true;
      continue;
    }
    auto m = CheckedMul(nonzero, d);
    if (!m) return Corrupt("the tensor's dimensions " + ShapeToString(t.shape) + " multiply past 2^64");
    nonzero = *m;
  }
  if (td.f4x2 && !t.shape.empty() && t.shape.back() > (std::uint64_t{1} << 62)) {
    return Corrupt("a float4_e2m1fn_x2 dimension of " + Str(t.shape.back()) + " bytes");
  }
  const std::uint64_t numel = empty ? 0 : nonzero;
  if (numel != 0) {
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      auto step = CheckedMul(t.shape[i] - 1, t.stride[i]);
      auto sum = step ? CheckedAdd(last, *step) : std::nullopt;
      if (!sum) return Corrupt("the tensor's extent overflows 64 bits");
      last = *sum;
    }
    // The last element's end, in bytes, must lie within the storage.
    auto end = CheckedAdd(last, 1);
    auto end_bytes = end ? CheckedMul(*end, td.itemsize) : std::nullopt;
    if (!end_bytes || *end_bytes > sd.nbytes) {
      return Corrupt("a tensor of size " + ShapeToString(t.shape) + ", stride " + ShapeToString(t.stride) +
                     " and offset " + Str(t.offset) + " of torch." + std::string(td.name) + " needs " +
                     (end_bytes ? Str(*end_bytes) : std::string("more than 2^64")) + " bytes of storage " +
                     QuoteName(sd.key) + ", which has " + Str(sd.nbytes));
    }
  }
  if (td.f4x2 && t.shape.empty()) {
    return Refuse("a 0-dimensional float4_e2m1fn_x2 tensor (two f4 elements with no dimension to hold them)");
  }
  u_.tables_.tensors.push_back(std::move(t));
  TS_ASSIGN_OR_RETURN(Value * v, New(Kind::kTensor));
  v->i = static_cast<std::int64_t>(u_.tables_.tensors.size() - 1);
  return v;
}

// A callable global applied to `args` (REDUCE), or a class instantiated
// (NEWOBJ). Each case is the whole of what that global may do here.
Result<Value*> Unpickler::Run::Call(const Global& g, Value* args_tuple, bool newobj) {
  if (args_tuple->kind != Kind::kTuple) {
    return Corrupt("the arguments are " + std::string(KindText(*args_tuple)) + ", not a tuple");
  }
  const std::vector<Value*>& a = args_tuple->items;
  const std::string name = GlobalName(g);
  auto arity = [&](std::string_view want) {
    return Corrupt(name + " called with " + Str(a.size()) + " arguments (" + std::string(want) + ")");
  };
  switch (g.kind) {
    case GlobalKind::kOrderedDict:
    case GlobalKind::kCounter: {
      TS_ASSIGN_OR_RETURN(Value * d, New(Kind::kDict));
      if (a.empty()) return d;
      if (a.size() != 1 || newobj || (a[0]->kind != Kind::kList && a[0]->kind != Kind::kTuple)) {
        return arity("none, or one list of pairs");
      }
      for (Value* pair : a[0]->items) {
        if ((pair->kind != Kind::kTuple && pair->kind != Kind::kList) || pair->items.size() != 2) {
          return Corrupt(name + ": an item of its list is not a (key, value) pair");
        }
        TS_RETURN_IF_ERROR(SetItem(d, pair->items[0], pair->items[1]));
      }
      return d;
    }
    case GlobalKind::kParameterClass:
      if (!newobj) break;
      [[fallthrough]];
    case GlobalKind::kRebuildParameter:
    case GlobalKind::kRebuildParameterWithState: {
      // Parameter(data[, requires_grad]); _rebuild_parameter(data,
      // requires_grad, hooks[, state]): the data tensor itself.
      const std::size_t want = g.kind == GlobalKind::kParameterClass     ? 0
                               : g.kind == GlobalKind::kRebuildParameter ? 3
                                                                         : 4;
      if (want == 0 ? (a.empty() || a.size() > 2) : a.size() != want) return arity("a tensor and its flags");
      if (a[0]->kind != Kind::kTensor) return Corrupt(name + ": the data is " + std::string(KindText(*a[0])));
      if (a.size() > 1 && a[1]->kind != Kind::kBool) {
        return Corrupt(name + ": requires_grad is " + std::string(KindText(*a[1])));
      }
      return a[0];
    }
    case GlobalKind::kRebuildTensor:
    case GlobalKind::kRebuildTensorV2:
    case GlobalKind::kRebuildTensorV3:
      if (newobj) break;
      return RebuildTensor(g.kind, a);
    case GlobalKind::kRebuildFromTypeV2: {
      // (func, new_type, args, state): a tensor with Python attributes,
      // or of a subclass; only plain tensors and parameters are taken,
      // and the attributes (`state`) are dropped.
      if (newobj) break;
      if (a.size() != 4) return arity("func, type, args, state");
      if (a[0]->kind != Kind::kGlobal ||
          (a[0]->g.kind != GlobalKind::kRebuildTensor && a[0]->g.kind != GlobalKind::kRebuildTensorV2 &&
           a[0]->g.kind != GlobalKind::kRebuildTensorV3 && a[0]->g.kind != GlobalKind::kRebuildParameter &&
           a[0]->g.kind != GlobalKind::kRebuildParameterWithState)) {
        return Refuse(name + ": the rebuild function must be a tensor rebuild function");
      }
      if (a[1]->kind != Kind::kGlobal ||
          (a[1]->g.kind != GlobalKind::kTensorClass && a[1]->g.kind != GlobalKind::kParameterClass)) {
        return Refuse(name + ": tensor subclasses other than torch.nn.Parameter are not supported");
      }
      if (a[3]->kind != Kind::kDict && a[3]->kind != Kind::kNone && a[3]->kind != Kind::kTuple) {
        return Corrupt(name + ": the state is " + std::string(KindText(*a[3])));
      }
      return Call(a[0]->g, a[2], false);
    }
    case GlobalKind::kSize: {
      if (a.size() != 1 || (a[0]->kind != Kind::kTuple && a[0]->kind != Kind::kList)) {
        return arity("one tuple");
      }
      for (const Value* d : a[0]->items) {
        if (d->kind != Kind::kInt) return Corrupt("torch.Size of " + std::string(KindText(*d)));
      }
      TS_ASSIGN_OR_RETURN(Value * t, New(Kind::kTuple));
      t->items = a[0]->items;
      return t;
    }
    case GlobalKind::kDevice: {
      // torch.device("cpu"), torch.device("cuda", 0): its str().
      if (newobj || a.empty() || a.size() > 2 || a[0]->kind != Kind::kStr ||
          (a.size() == 2 && a[1]->kind != Kind::kInt && a[1]->kind != Kind::kNone)) {
        return arity("a type string and an optional index");
      }
      std::string s = a[0]->s;
      if (a.size() == 2 && a[1]->kind == Kind::kInt) s += ":" + std::to_string(a[1]->i);
      return MakeStr(s, false);
    }
    case GlobalKind::kCodecsEncode: {
      // How protocol 2 pickles bytes: _codecs.encode(text, "latin1").
      if (newobj || a.size() != 2 || a[0]->kind != Kind::kStr || a[1]->kind != Kind::kStr ||
          (a[1]->s != "latin1" && a[1]->s != "latin-1")) {
        return arity("a str and \"latin1\"");
      }
      std::string out;
      const std::string& s = a[0]->s;
      for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) {
          out += static_cast<char>(c);
          ++i;
        } else if ((c & 0xe0) == 0xc0 && c <= 0xc3 && i + 1 < s.size()) {
          out += static_cast<char>(((c & 0x03) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3f));
          i += 2;
        } else {
          return Corrupt("_codecs.encode: a character beyond latin-1");
        }
      }
      return MakeStr(out, true);
    }
    case GlobalKind::kBytearray: {
      if (newobj || a.size() > 1 || (a.size() == 1 && a[0]->kind != Kind::kBytes)) return arity("none, or bytes");
      return MakeStr(a.empty() ? std::string_view() : std::string_view(a[0]->s), true);
    }
    case GlobalKind::kSet: {
      if (newobj || a.size() > 1 ||
          (a.size() == 1 && a[0]->kind != Kind::kList && a[0]->kind != Kind::kTuple && a[0]->kind != Kind::kSet)) {
        return arity("none, or a list");
      }
      TS_ASSIGN_OR_RETURN(Value * s, New(Kind::kSet));
      if (a.size() == 1) {
        for (Value* item : a[0]->items) TS_RETURN_IF_ERROR(AddToSet(s, item));
      }
      return s;
    }
    case GlobalKind::kComplex: {
      if (newobj || a.empty() || a.size() > 2) return arity("a real and an imaginary part");
      double parts[2] = {0, 0};
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i]->kind == Kind::kFloat) {
          parts[i] = a[i]->re;
        } else if (a[i]->kind == Kind::kInt || a[i]->kind == Kind::kBool) {
          parts[i] = static_cast<double>(a[i]->i);
        } else {
          return Corrupt("complex() of " + std::string(KindText(*a[i])));
        }
      }
      TS_ASSIGN_OR_RETURN(Value * c, New(Kind::kComplex));
      c->re = parts[0];
      c->im = parts[1];
      return c;
    }
    case GlobalKind::kDcpClass: {
      // cls.__new__(cls): the instance is its state, set by BUILD.
      if (!newobj) break;
      if (!a.empty()) return arity("none");
      TS_ASSIGN_OR_RETURN(Value * o, New(Kind::kObject));
      o->g = g;
      return o;
    }
    case GlobalKind::kGetLayout:
      // _get_layout("torch.strided"): the layout's name, as data.
      if (newobj || a.size() != 1 || a[0]->kind != Kind::kStr || a[0]->s.rfind("torch.", 0) != 0) {
        return arity("one \"torch.<layout>\" string");
      }
      return a[0];
    case GlobalKind::kMemFormat:
      // The enum built from its value (0, 1 or 2).
      if (newobj || a.size() != 1 || a[0]->kind != Kind::kInt || a[0]->i < 0 || a[0]->i > 2) {
        return arity("one of 0, 1, 2");
      }
      return a[0];
    case GlobalKind::kPath: {
      // PosixPath(*parts), joined as pathlib joins them.
      if (newobj) break;
      std::string path;
      for (const Value* p : a) {
        if (p->kind != Kind::kStr) return Corrupt(name + " of " + std::string(KindText(*p)));
        if (!p->s.empty() && p->s[0] == '/') {
          path = p->s;
        } else if (!p->s.empty()) {
          path += (path.empty() || path.back() == '/') ? p->s : "/" + p->s;
        }
      }
      return MakeStr(path.empty() ? "." : path, false);
    }
    default: break;
  }
  return Refuse(std::string(newobj ? "instantiating " : "calling ") + name + " is not supported");
}

Status Unpickler::Run::Build(Value* inst, Value* state) {
  // torch's unpickler lets BUILD set attributes of an OrderedDict (a
  // state_dict's _metadata, the modules' versions): accepted, dropped.
  if (inst->kind == Kind::kDict) {
    if (state->kind != Kind::kDict && state->kind != Kind::kNone && state->kind != Kind::kTuple) {
      return Corrupt("the state of a dict is " + std::string(KindText(*state)));
    }
    return Status::OK();
  }
  if (inst->kind == Kind::kObject) {
    if (state->kind != Kind::kDict && state->kind != Kind::kTuple) {
      return Corrupt("the state of " + GlobalName(inst->g) + " is " + std::string(KindText(*state)));
    }
    if (!inst->items.empty()) return Corrupt("a second BUILD of one " + GlobalName(inst->g));
    inst->items.push_back(state);
    return Status::OK();
  }
  return Refuse("BUILD of " + std::string(KindText(*inst)) + " is not supported (only a dict's attributes are)");
}

}  // namespace tensorsafe::pytorch::internal
