// The `.metadata` of torch.distributed.checkpoint's default back-end
// (pytorch.h, DcpMetadataJson; docs/DCP.md "DCP's own checkpoints"): the
// restricted unpickler with DCP's metadata dataclasses allowed as data, then
// a walk that checks every field's type and writes the JSON document.
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "formats/pytorch/pickle.h"
#include "tensorsafe/formats/pytorch.h"
#include "util/checked_math.h"
#include "util/text.h"

namespace tensorsafe::pytorch {
namespace {

using internal::Kind;
using internal::KindText;
using internal::Value;
using tensorsafe::internal::QuoteName;
using Json = nlohmann::ordered_json;

class Walk {
 public:
  Walk(std::string file, const Limits& limits) : file_(std::move(file)), lim_(limits) {}

  Result<Json> Metadata(const Value* v) {
    TS_ASSIGN_OR_RETURN(const Value* st, State(v, "Metadata", "the top level"));
    Json out = Json::object();
    TS_ASSIGN_OR_RETURN(const Value* version, Field(st, "version", "Metadata", false));
    if (version && version->kind != Kind::kNone && version->kind != Kind::kStr) return Bad("Metadata.version", version);
    out["version"] = version && version->kind == Kind::kStr ? Json(version->s) : Json(nullptr);

    TS_ASSIGN_OR_RETURN(const Value* sdm, Field(st, "state_dict_metadata", "Metadata", true));
    if (sdm->kind != Kind::kDict) return Bad("Metadata.state_dict_metadata", sdm);
    Json items = Json::array();
    for (std::size_t i = 0; i < sdm->items.size(); i += 2) {
      if (sdm->items[i]->kind != Kind::kStr) return Bad("a key of Metadata.state_dict_metadata", sdm->items[i]);
      TS_ASSIGN_OR_RETURN(Json item, Item(sdm->items[i]->s, sdm->items[i + 1]));
      items.push_back(std::move(item));
    }
    out["items"] = std::move(items);

    TS_ASSIGN_OR_RETURN(const Value* sd, Field(st, "storage_data", "Metadata", false));
    Json storage = Json::array();
    if (sd && sd->kind != Kind::kNone) {
      if (sd->kind != Kind::kDict) return Bad("Metadata.storage_data", sd);
      for (std::size_t i = 0; i < sd->items.size(); i += 2) {
        TS_ASSIGN_OR_RETURN(Json s, Storage(sd->items[i], sd->items[i + 1]));
        storage.push_back(std::move(s));
      }
    }
    out["storage"] = std::move(storage);

    TS_ASSIGN_OR_RETURN(const Value* pd, Field(st, "planner_data", "Metadata", false));
    if (pd) {
      TS_ASSIGN_OR_RETURN(out["planner_data"], Plain(pd, 0, "Metadata.planner_data"));
    } else {
      out["planner_data"] = nullptr;
    }

    TS_ASSIGN_OR_RETURN(const Value* sm, Field(st, "storage_meta", "Metadata", false));
    if (sm && sm->kind != Kind::kNone) {
      TS_ASSIGN_OR_RETURN(const Value* s, State(sm, "StorageMeta", "Metadata.storage_meta"));
      Json m = Json::object();
      for (const char* f : {"checkpoint_id", "save_id", "load_id", "modules"}) {
        TS_ASSIGN_OR_RETURN(const Value* x, Field(s, f, "StorageMeta", false));
        if (x) {
          TS_ASSIGN_OR_RETURN(m[f], Plain(x, 0, std::string("StorageMeta.") + f));
        } else {
          m[f] = nullptr;
        }
      }
      out["storage_meta"] = std::move(m);
    } else {
      out["storage_meta"] = nullptr;
    }
    return out;
  }

 private:
  Status Bad(const std::string& what, const Value* v) const {
    return Corruption(file_ + ": " + what + " is " + std::string(KindText(*v)));
  }

  // The BUILD state of an instance of DCP class `cls` (a dict or a tuple).
  Result<const Value*> State(const Value* v, std::string_view cls, const std::string& where) const {
    const bool match = v->kind == Kind::kObject && internal::GlobalName(v->g).ends_with("." + std::string(cls));
    if (!match) {
      return Corruption(
          file_ + ": " + where + " is " +
          (v->kind == Kind::kObject ? "an object of " + internal::GlobalName(v->g) : std::string(KindText(*v))) +
          ", not " + std::string(cls));
    }
    if (v->items.empty()) return Corruption(file_ + ": " + where + ": a " + std::string(cls) + " without its fields");
    return v->items[0];
  }

  // A field of a dict state; nullptr when absent and not required.
  Result<const Value*> Field(const Value* state, std::string_view name, std::string_view cls, bool required) const {
    if (state->kind != Kind::kDict) {
      return Corruption(file_ + ": the fields of a " + std::string(cls) + " are " + std::string(KindText(*state)) +
                        ", not a dict");
    }
    for (std::size_t i = 0; i < state->items.size(); i += 2) {
      const Value* k = state->items[i];
      if (k->kind == Kind::kStr && k->s == name) return state->items[i + 1];
    }
    if (required) return Corruption(file_ + ": a " + std::string(cls) + " has no field " + std::string(name));
    return static_cast<const Value*>(nullptr);
  }

  Result<std::vector<std::int64_t>> Ints(const Value* v, const std::string& what) const {
    if (v->kind != Kind::kTuple && v->kind != Kind::kList) return Bad(what, v);
    if (v->items.size() > lim_.max_rank) {
      return LimitExceeded(file_ + ": " + what + " has " + std::to_string(v->items.size()) + " dimensions, more than " +
                           std::to_string(lim_.max_rank) + " (Limits::max_rank)");
    }
    std::vector<std::int64_t> out;
    for (const Value* d : v->items) {
      if (d->kind != Kind::kInt || d->i < 0) {
        return Corruption(file_ + ": " + what + " holds " +
                          (d->kind == Kind::kInt ? "the negative " + std::to_string(d->i) : std::string(KindText(*d))));
      }
      out.push_back(d->i);
    }
    return out;
  }

  Result<Json> Item(const std::string& fqn, const Value* v) {
    const std::string where = "item " + QuoteName(fqn);
    if (v->kind == Kind::kObject && internal::GlobalName(v->g).ends_with(".BytesStorageMetadata")) {
      return Json{{"fqn", fqn}, {"kind", "bytes"}};
    }
    TS_ASSIGN_OR_RETURN(const Value* st, State(v, "TensorStorageMetadata", where));
    TS_ASSIGN_OR_RETURN(const Value* props, Field(st, "properties", "TensorStorageMetadata", true));
    TS_ASSIGN_OR_RETURN(const Value* size, Field(st, "size", "TensorStorageMetadata", true));
    TS_ASSIGN_OR_RETURN(const Value* chunks, Field(st, "chunks", "TensorStorageMetadata", true));
    Json j{{"fqn", fqn}, {"kind", "tensor"}};
    TS_RETURN_IF_ERROR(Properties(props, where, j));
    TS_ASSIGN_OR_RETURN(std::vector<std::int64_t> shape, Ints(size, where + ": size"));
    j["size"] = shape;
    if (chunks->kind != Kind::kList && chunks->kind != Kind::kTuple) return Bad(where + ": chunks", chunks);
    Json cs = Json::array();
    for (const Value* c : chunks->items) {
      TS_ASSIGN_OR_RETURN(const Value* cst, State(c, "ChunkStorageMetadata", where + ": a chunk"));
      TS_ASSIGN_OR_RETURN(const Value* off, Field(cst, "offsets", "ChunkStorageMetadata", true));
      TS_ASSIGN_OR_RETURN(const Value* sz, Field(cst, "sizes", "ChunkStorageMetadata", true));
      TS_ASSIGN_OR_RETURN(std::vector<std::int64_t> o, Ints(off, where + ": chunk offsets"));
      TS_ASSIGN_OR_RETURN(std::vector<std::int64_t> s, Ints(sz, where + ": chunk sizes"));
      if (o.size() != shape.size() || s.size() != shape.size()) {
        return Corruption(file_ + ": " + where + ": a chunk of " + std::to_string(o.size()) + " offsets and " +
                          std::to_string(s.size()) + " sizes in a tensor of " + std::to_string(shape.size()) +
                          " dimensions");
      }
      for (std::size_t d = 0; d < shape.size(); ++d) {
        if (o[d] > shape[d] || s[d] > shape[d] - o[d]) {
          return Corruption(file_ + ": " + where + ": a chunk at offset " + std::to_string(o[d]) + " of size " +
                            std::to_string(s[d]) + " passes the tensor's " + std::to_string(shape[d]) +
                            " along dimension " + std::to_string(d));
        }
      }
      cs.push_back(Json{{"offsets", o}, {"sizes", s}});
    }
    j["chunks"] = std::move(cs);
    return j;
  }

  // TensorProperties: a tuple (dtype, layout, requires_grad, memory format,
  // pin_memory) since its __getstate__ (torch 2.1); a dict before.
  Status Properties(const Value* v, const std::string& where, Json& j) const {
    TS_ASSIGN_OR_RETURN(const Value* st, State(v, "TensorProperties", where + ": properties"));
    const Value *dtype = nullptr, *layout = nullptr, *grad = nullptr, *mem = nullptr, *pin = nullptr;
    if (st->kind == Kind::kTuple) {
      if (st->items.size() != 5) {
        return Corruption(file_ + ": " + where + ": TensorProperties of " + std::to_string(st->items.size()) +
                          " values, not 5");
      }
      dtype = st->items[0], layout = st->items[1], grad = st->items[2], mem = st->items[3], pin = st->items[4];
    } else {
      TS_ASSIGN_OR_RETURN(dtype, Field(st, "dtype", "TensorProperties", true));
      TS_ASSIGN_OR_RETURN(layout, Field(st, "layout", "TensorProperties", false));
      TS_ASSIGN_OR_RETURN(grad, Field(st, "requires_grad", "TensorProperties", false));
      TS_ASSIGN_OR_RETURN(pin, Field(st, "pin_memory", "TensorProperties", false));
    }
    if (dtype->kind != Kind::kGlobal || dtype->g.kind != internal::GlobalKind::kDType) {
      return Bad(where + ": the dtype", dtype);
    }
    j["dtype"] = std::string(internal::TorchDTypeAt(dtype->g.arg).name);
    if (layout && layout->kind != Kind::kStr) return Bad(where + ": the layout", layout);
    j["layout"] = layout ? layout->s : "torch.strided";
    if (grad && grad->kind != Kind::kBool) return Bad(where + ": requires_grad", grad);
    j["requires_grad"] = grad && grad->i != 0;
    if (mem && mem->kind != Kind::kInt) return Bad(where + ": the memory format", mem);
    j["memory_format"] = mem ? mem->i : 0;
    if (pin && pin->kind != Kind::kBool) return Bad(where + ": pin_memory", pin);
    j["pin_memory"] = pin && pin->i != 0;
    return Status::OK();
  }

  // storage_data: MetadataIndex -> _StorageInfo (FileSystemWriter's).
  Result<Json> Storage(const Value* key, const Value* info) {
    TS_ASSIGN_OR_RETURN(const Value* k, State(key, "MetadataIndex", "a key of Metadata.storage_data"));
    TS_ASSIGN_OR_RETURN(const Value* fqn, Field(k, "fqn", "MetadataIndex", true));
    if (fqn->kind != Kind::kStr) return Bad("MetadataIndex.fqn", fqn);
    const std::string where = "the storage of " + QuoteName(fqn->s);
    Json j{{"fqn", fqn->s}};
    TS_ASSIGN_OR_RETURN(const Value* off, Field(k, "offset", "MetadataIndex", false));
    if (off && off->kind != Kind::kNone) {
      TS_ASSIGN_OR_RETURN(j["offset"], Ints(off, where + ": offset"));
    } else {
      j["offset"] = nullptr;
    }
    TS_ASSIGN_OR_RETURN(const Value* index, Field(k, "index", "MetadataIndex", false));
    if (index && index->kind != Kind::kNone && index->kind != Kind::kInt) return Bad(where + ": index", index);
    j["index"] = index && index->kind == Kind::kInt ? Json(index->i) : Json(nullptr);

    TS_ASSIGN_OR_RETURN(const Value* s, State(info, "_StorageInfo", where));
    TS_ASSIGN_OR_RETURN(const Value* rel, Field(s, "relative_path", "_StorageInfo", true));
    TS_ASSIGN_OR_RETURN(const Value* fo, Field(s, "offset", "_StorageInfo", true));
    TS_ASSIGN_OR_RETURN(const Value* len, Field(s, "length", "_StorageInfo", true));
    TS_ASSIGN_OR_RETURN(const Value* tr, Field(s, "transform_descriptors", "_StorageInfo", false));
    if (rel->kind != Kind::kStr) return Bad(where + ": relative_path", rel);
    // A file of the checkpoint's directory: never outside it.
    const std::string& p = rel->s;
    if (p.empty() || p[0] == '/' || p == ".." || p.starts_with("../") || p.ends_with("/..") ||
        p.find("/../") != std::string::npos || p.find('\0') != std::string::npos) {
      return Corruption(file_ + ": " + where + ": relative_path " + QuoteName(p) +
                        " is not a path inside the checkpoint");
    }
    if (fo->kind != Kind::kInt || fo->i < 0) return Bad(where + ": offset", fo);
    if (len->kind != Kind::kInt || len->i < 0) return Bad(where + ": length", len);
    if (!tensorsafe::internal::CheckedAdd(static_cast<std::uint64_t>(fo->i), static_cast<std::uint64_t>(len->i))) {
      return Corruption(file_ + ": " + where + ": offset plus length overflows");
    }
    j["relative_path"] = p;
    j["file_offset"] = fo->i;
    j["length"] = len->i;
    Json transforms = Json::array();
    if (tr && tr->kind != Kind::kNone) {
      if (tr->kind != Kind::kList && tr->kind != Kind::kTuple) return Bad(where + ": transform_descriptors", tr);
      for (const Value* t : tr->items) {
        if (t->kind != Kind::kStr) return Bad(where + ": a transform descriptor", t);
        transforms.push_back(t->s);
      }
    }
    j["transforms"] = std::move(transforms);
    return j;
  }

  // planner_data and StorageMeta fields: plain values only.
  Result<Json> Plain(const Value* v, std::uint32_t depth, const std::string& what) {
    if (depth > lim_.max_depth) {
      return LimitExceeded(file_ + ": " + what + ": nested deeper than " + std::to_string(lim_.max_depth) +
                           " (Limits::max_depth)");
    }
    if (++visits_ > 2 * lim_.max_values) {
      return LimitExceeded(file_ + ": " + what + ": more than " + std::to_string(2 * lim_.max_values) +
                           " values visited (a value shared that many times)");
    }
    switch (v->kind) {
      case Kind::kNone: return Json(nullptr);
      case Kind::kBool: return Json(v->i != 0);
      case Kind::kInt: return Json(v->i);
      case Kind::kFloat: return Json(v->re);
      case Kind::kStr: return Json(v->s);
      case Kind::kTuple:
      case Kind::kList: {
        Json a = Json::array();
        for (const Value* item : v->items) {
          TS_ASSIGN_OR_RETURN(Json j, Plain(item, depth + 1, what));
          a.push_back(std::move(j));
        }
        return a;
      }
      case Kind::kDict: {
        Json o = Json::object();
        for (std::size_t i = 0; i < v->items.size(); i += 2) {
          if (v->items[i]->kind != Kind::kStr) return Bad(what + ": a key", v->items[i]);
          TS_ASSIGN_OR_RETURN(Json j, Plain(v->items[i + 1], depth + 1, what));
          o[v->items[i]->s] = std::move(j);
        }
        return o;
      }
      default: break;
    }
    return Unsupported(file_ + ": " + what + " holds " + std::string(KindText(*v)) +
                       (v->kind == Kind::kObject ? " of " + internal::GlobalName(v->g) : std::string()) +
                       ", which DCP's default planner and FileSystemWriter do not write");
  }

  std::string file_;
  const Limits& lim_;
  std::uint64_t visits_ = 0;
};

}  // namespace

Result<std::string> DcpMetadataJson(std::span<const std::byte> bytes, const std::string& display_name,
                                    const Limits& limits) {
  internal::Unpickler u(bytes, display_name, limits, internal::PidForm::kZip, internal::Allow::kDcpMetadata);
  std::size_t end = 0;
  TS_ASSIGN_OR_RETURN(Value * top, u.Load(0, &end));
  if (end != bytes.size()) {
    return Corruption(display_name + ": " + std::to_string(bytes.size() - end) +
                      " bytes follow the pickle's STOP at offset " + std::to_string(end - 1));
  }
  Walk walk(display_name, limits);
  TS_ASSIGN_OR_RETURN(Json j, walk.Metadata(top));
  return j.dump();
}

}  // namespace tensorsafe::pytorch
