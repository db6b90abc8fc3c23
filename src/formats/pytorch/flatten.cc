// Flattening an unpickled checkpoint (decoder.h): the walk that names
// every tensor by its dotted path, and the tensor-free values kept as JSON
// metadata (docs/formats/pytorch.md "Names" and "Values").
#include <cmath>

#include "formats/pytorch/decoder.h"
#include "util/text.h"

namespace tensorsafe::pytorch::internal {
namespace {

using tensorsafe::internal::QuoteName;

using tensorsafe::internal::Str;

}  // namespace

// Shared references are visited once per reference, so a pickle of
// nested shared lists (a billion laughs) could make the walk exponential:
// it may visit at most twice the values the pickle made (a state dict
// visits far fewer than it made), and never more than max_values.
Status Decoder::Visit() {
  if (++visits_ > visit_budget_) {
    return LimitExceeded(file_ + ": flattening visits more than " + Str(visit_budget_) +
                         " values (twice the values the pickle made, at most Limits::max_values): "
                         "a value shared that many times");
  }
  return Status::OK();
}

Status Decoder::Deep(std::uint32_t depth, const std::string& name) const {
  if (depth > lim_.max_depth) {
    return LimitExceeded(file_ + ": entry " + QuoteName(name) + ": containers nested deeper than " +
                         Str(lim_.max_depth) + " (Limits::max_depth; a container that holds itself nests forever)");
  }
  return Status::OK();
}

// Whether a tensor (or bare storage) lies anywhere inside `v`. Memoized
// per value; a value met again while in progress is a cycle.
Result<bool> Decoder::Holds(Value* v, std::uint32_t depth, const std::string& name) {
  if (v->kind == Kind::kTensor || v->kind == Kind::kStorage) return true;
  if (v->kind != Kind::kDict && v->kind != Kind::kList && v->kind != Kind::kTuple && v->kind != Kind::kSet) {
    return false;
  }
  if (v->holds_tensor >= 2) return v->holds_tensor == 3;
  if (v->holds_tensor == 1) {
    return Unsupported(file_ + ": entry " + QuoteName(name) + ": a container holds itself (a recursive structure)");
  }
  TS_RETURN_IF_ERROR(Visit());
  TS_RETURN_IF_ERROR(Deep(depth, name));
  v->holds_tensor = 1;
  bool any = false;
  for (std::size_t i = 0; i < v->items.size(); ++i) {
    if (v->kind == Kind::kDict && i % 2 == 0) continue;
    TS_ASSIGN_OR_RETURN(bool h, Holds(v->items[i], depth + 1, name));
    any = any || h;
  }
  v->holds_tensor = any ? 3 : 2;
  return any;
}

std::string Decoder::Join(const std::string& parent, const std::string& key, bool top) {
  return top ? key : parent + "." + key;
}

Status Decoder::Walk(Value* v, const std::string& name, std::uint32_t depth, bool top) {
  TS_RETURN_IF_ERROR(Visit());
  TS_RETURN_IF_ERROR(Deep(depth, name));
  if (v->kind == Kind::kTensor || v->kind == Kind::kStorage) return Add(name, v);
  const bool container = v->kind == Kind::kDict || v->kind == Kind::kList || v->kind == Kind::kTuple;
  bool open = container && top;
  if (container && !top) {
    TS_ASSIGN_OR_RETURN(open, Holds(v, depth, name));
  }
  if (v->kind == Kind::kSet) {
    TS_ASSIGN_OR_RETURN(bool h, Holds(v, depth, name));
    if (h)
      return Unsupported(file_ + ": entry " + QuoteName(name) + ": a set holding tensors has no order to name them by");
  }
  if (!open) {
    if (top) return Add(name, v);  // a top-level value that is no container
    TS_ASSIGN_OR_RETURN(Json j, ToJson(v, depth, name));
    return AddValue(name, std::move(j));
  }
  if (v->kind == Kind::kDict) {
    for (std::size_t i = 0; i < v->items.size(); i += 2) {
      auto key = internal::KeyText(*v->items[i]);
      if (!key) {
        return Unsupported(file_ + ": entry " + QuoteName(name) + ": a dict key that is " +
                           std::string(KindText(*v->items[i])) + " cannot name an entry (str, int, bool or None can)");
      }
      TS_RETURN_IF_ERROR(Walk(v->items[i + 1], Join(name, *key, top), depth + 1, false));
    }
  } else {
    for (std::size_t i = 0; i < v->items.size(); ++i) {
      TS_RETURN_IF_ERROR(Walk(v->items[i], Join(name, std::to_string(i), top), depth + 1, false));
    }
  }
  return Status::OK();
}

Status Decoder::Claim(const std::string& name) {
  if (!names_.insert(name).second) {
    return Unsupported(file_ + ": two entries flatten to the name " + QuoteName(name) +
                       " (a dotted key beside a nested one, or keys 1 and \"1\")");
  }
  return Status::OK();
}

Status Decoder::Add(const std::string& name, Value* v) {
  TS_RETURN_IF_ERROR(Claim(name));
  if (v->kind == Kind::kTensor) {
    entries_.push_back({name, static_cast<std::size_t>(v->i)});
    return Status::OK();
  }
  if (v->kind == Kind::kStorage) {
    // A bare storage (torch.save(t.untyped_storage())): a 1-D tensor of
    // its type.
    const StorageDecl& s = tables_->storages[static_cast<std::size_t>(v->i)];
    TensorDecl t;
    t.storage = static_cast<std::size_t>(v->i);
    t.dtype = s.type == internal::kUntyped ? *internal::FindTorchDType("uint8") : s.type;
    const internal::TorchDType& td = TorchDTypeAt(t.dtype);
    if (!td.dtype) {
      return Unsupported(file_ + ": storage " + QuoteName(s.key) + ": dtype torch." + std::string(td.name) +
                         " has no tensorsafe equivalent");
    }
    t.shape = {s.numel};
    t.stride = {1};
    tables_->tensors.push_back(std::move(t));
    entries_.push_back({name, tables_->tensors.size() - 1});
    return Status::OK();
  }
  TS_ASSIGN_OR_RETURN(Json j, ToJson(v, 0, name));
  names_.erase(name);
  return AddValue(name, std::move(j));
}

Status Decoder::AddValue(const std::string& name, Json j) {
  TS_RETURN_IF_ERROR(Claim(name));
  values_[name] = std::move(j);
  return Status::OK();
}

Json Decoder::Number(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  return d;
}

// A tensor-free value as JSON (docs/formats/pytorch.md "Values").
Result<Json> Decoder::ToJson(const Value* v, std::uint32_t depth, const std::string& name) {
  TS_RETURN_IF_ERROR(Visit());
  TS_RETURN_IF_ERROR(Deep(depth, name));
  switch (v->kind) {
    case Kind::kNone: return Json(nullptr);
    case Kind::kBool: return Json(v->i != 0);
    case Kind::kInt: return Json(v->i);
    case Kind::kBigInt: return Json(internal::BigIntText(v->s));
    case Kind::kFloat: return Number(v->re);
    case Kind::kComplex: return Json::array({Number(v->re), Number(v->im)});
    case Kind::kStr: return Json(v->s);
    case Kind::kBytes: {
      std::string text;  // each byte as the code point of that value (latin-1)
      for (char c : v->s) {
        const auto b = static_cast<unsigned char>(c);
        if (b < 0x80) {
          text += c;
        } else {
          text += static_cast<char>(0xc0 | (b >> 6));
          text += static_cast<char>(0x80 | (b & 0x3f));
        }
      }
      return Json(text);
    }
    case Kind::kGlobal: return Json(internal::GlobalName(v->g));
    case Kind::kTuple:
    case Kind::kList:
    case Kind::kSet: {
      Json a = Json::array();
      for (const Value* item : v->items) {
        TS_ASSIGN_OR_RETURN(Json j, ToJson(item, depth + 1, name));
        a.push_back(std::move(j));
      }
      return a;
    }
    case Kind::kDict: {
      Json o = Json::object();
      for (std::size_t i = 0; i < v->items.size(); i += 2) {
        auto key = internal::KeyText(*v->items[i]);
        if (!key) {
          return Unsupported(file_ + ": entry " + QuoteName(name) + ": a dict key that is " +
                             std::string(KindText(*v->items[i])) + " has no JSON spelling");
        }
        if (o.contains(*key)) {
          return Unsupported(file_ + ": entry " + QuoteName(name) + ": dict keys that are both spelt " +
                             QuoteName(*key));
        }
        TS_ASSIGN_OR_RETURN(Json j, ToJson(v->items[i + 1], depth + 1, name));
        o[*key] = std::move(j);
      }
      return o;
    }
    case Kind::kTensor:
    case Kind::kStorage:
    case Kind::kObject: break;  // kObject: Allow::kDcpMetadata only
  }
  return Internal(file_ + ": a tensor inside a value");
}

}  // namespace tensorsafe::pytorch::internal
