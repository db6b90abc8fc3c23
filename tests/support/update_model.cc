#include "support/update_model.h"

#include <algorithm>

#include "tensorsafe/writer.h"

namespace tensorsafe::testing {
namespace {

ModelTensor RandomTensor(std::mt19937_64& rng) {
  ModelTensor t;
  static const DType kTypes[] = {DType::kU8, DType::kF32, DType::kI64, DType::kBF16};
  t.dtype = kTypes[rng() % 4];
  const std::size_t rank = rng() % 3;
  for (std::size_t d = 0; d < rank; ++d) t.shape.push_back(rng() % 20);
  const std::uint64_t n = *DenseByteSize(t.dtype, t.shape);
  t.bytes.resize(n);
  for (auto& c : t.bytes) c = static_cast<char>(rng());
  if (rng() % 3 == 0) t.metadata = R"({"v":)" + std::to_string(rng() % 100) + "}";
  return t;
}

TensorView View(const ModelTensor& t) {
  return TensorView::Contiguous(t.dtype, t.shape, std::as_bytes(std::span(t.bytes)));
}

}  // namespace

Result<Model> LoadModel(const std::string& path, ReaderOptions opt) {
  TS_ASSIGN_OR_RETURN(auto r, Reader::Open(path, opt));
  TS_RETURN_IF_ERROR(r->Verify());
  Model m;
  TS_ASSIGN_OR_RETURN(m.metadata, r->Metadata());
  if (m.metadata == "{}") m.metadata.clear();
  Status inner;
  TS_RETURN_IF_ERROR(r->ForEach([&](const TensorInfo& t) {
    auto g = r->Get(t.name);
    if (!g.ok()) {
      inner = g.status();
      return false;
    }
    m.order.push_back(t.name);
    m.tensors[t.name] = ModelTensor{
        t.dtype, t.shape, std::string(reinterpret_cast<const char*>(g->data.data()), g->data.size()), t.metadata_json};
    return true;
  }));
  TS_RETURN_IF_ERROR(inner);
  return m;
}

Status WriteModel(const std::string& path, const Model& m) {
  WriterOptions opt;
  opt.sync = false;
  TS_ASSIGN_OR_RETURN(auto w, Writer::Create(path, opt));
  for (const auto& name : m.order) {
    const ModelTensor& t = m.tensors.at(name);
    TS_RETURN_IF_ERROR(w->Add(name, View(t), t.metadata));
  }
  if (!m.metadata.empty()) TS_RETURN_IF_ERROR(w->SetMetadata(m.metadata));
  return w->Finish();
}

Status RandomTransaction(std::mt19937_64& rng, Model& m, Updater* u) {
  const int ops = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < ops; ++k) {
    const int op = static_cast<int>(rng() % 6);
    const bool empty = m.order.empty();
    if (op == 0 || empty) {  // add
      std::string name = "t" + std::to_string(rng() % 1000);
      ModelTensor t = RandomTensor(rng);
      if (m.tensors.count(name)) continue;
      if (u) TS_RETURN_IF_ERROR(u->Add(name, View(t), t.metadata));
      m.order.push_back(name);
      m.tensors[name] = std::move(t);
      continue;
    }
    const std::string name = m.order[rng() % m.order.size()];
    if (op == 1) {  // replace, keeping metadata
      ModelTensor t = RandomTensor(rng);
      t.metadata = m.tensors[name].metadata;
      if (u) TS_RETURN_IF_ERROR(u->Replace(name, View(t)));
      m.tensors[name] = std::move(t);
    } else if (op == 2) {  // remove
      if (u) TS_RETURN_IF_ERROR(u->Remove(name));
      m.tensors.erase(name);
      m.order.erase(std::find(m.order.begin(), m.order.end(), name));
    } else if (op == 3) {  // rename
      std::string to = "r" + std::to_string(rng() % 1000);
      if (m.tensors.count(to)) continue;
      if (u) TS_RETURN_IF_ERROR(u->Rename(name, to));
      m.tensors[to] = std::move(m.tensors[name]);
      m.tensors.erase(name);
      *std::find(m.order.begin(), m.order.end(), name) = to;
    } else if (op == 4) {  // tensor metadata
      std::string meta = R"({"m":)" + std::to_string(rng() % 100) + "}";
      if (u) TS_RETURN_IF_ERROR(u->SetTensorMetadata(name, meta));
      m.tensors[name].metadata = meta;
    } else {  // file metadata
      std::string meta = R"({"epoch":)" + std::to_string(rng() % 100) + "}";
      if (u) TS_RETURN_IF_ERROR(u->SetMetadata(meta));
      m.metadata = meta;
    }
  }
  if (u) return u->Commit();
  return Status::OK();
}

std::string Describe(const Model& m) {
  std::string s = "meta=" + m.metadata + " [";
  for (const auto& n : m.order) s += n + ":" + std::to_string(m.tensors.at(n).bytes.size()) + " ";
  return s + "]";
}

}  // namespace tensorsafe::testing
