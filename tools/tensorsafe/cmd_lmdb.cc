// `tensorsafe lmdb put|get|ls|rm`: the LMDB tensor store
// (include/tensorsafe/stream/lmdb.h).
//   lmdb put DB SOURCE [--group N] [--prefix P] [--key K]   SOURCE: .tsafe or a directory
//   lmdb get DB KEY [OUT.tsafe]
//   lmdb ls DB [PREFIX]
//   lmdb rm DB KEY
#include <fmt/core.h>

#include <filesystem>
#include <memory>

#include "command.h"
#include "exit_codes.h"
#include "stream_cli.h"
#include "tensorsafe/stream/lmdb.h"

namespace tensorsafe::cli {
namespace {

struct Args {
  std::string db, source, key, out, prefix;
  std::uint32_t group = 1;
  CLI::App *put = nullptr, *get = nullptr, *ls = nullptr, *rm = nullptr;
};

Result<std::shared_ptr<LmdbStore>> Open(const Args& a, bool read_only) {
  LmdbOptions o;
  o.read_only = read_only;
  if (read_only && !std::filesystem::exists(a.db)) return NotFound(a.db + ": no such store");
  return LmdbStore::Open(a.db, o);
}

Status Put(const Args& a) {
  TS_ASSIGN_OR_RETURN(auto store, Open(a, false));
  LmdbLoadOptions o;
  o.tensors_per_batch = a.group;
  o.key_prefix = a.prefix;
  std::uint64_t n = 0;
  if (std::filesystem::is_directory(a.source)) {
    TS_ASSIGN_OR_RETURN(n, LoadTsafeDirectory(*store, a.source, o));
  } else if (!a.key.empty()) {
    TS_ASSIGN_OR_RETURN(auto batches, SourceBatches(a.source, 0));
    TS_RETURN_IF_ERROR(store->Put(a.prefix + a.key, batches.front()));
    n = 1;
  } else {
    TS_ASSIGN_OR_RETURN(n, LoadTsafeFile(*store, a.source, o));
  }
  fmt::print("stored {} batches in {}\n", n, a.db);
  return Status::OK();
}

Status Get(const Args& a) {
  TS_ASSIGN_OR_RETURN(auto store, Open(a, true));
  TS_ASSIGN_OR_RETURN(auto snap, store->Snapshot());
  TS_ASSIGN_OR_RETURN(TensorSet b, snap->Get(a.key));  // views; the snapshot lives while b does
  if (!a.out.empty()) {
    TS_ASSIGN_OR_RETURN(auto sink, TsafeSink::Create(a.out));
    TS_RETURN_IF_ERROR(sink->Add(b));
    TS_RETURN_IF_ERROR(sink->Finish());
    fmt::print("wrote {} ({} tensors)\n", a.out, b.tensors.size());
    return Status::OK();
  }
  fmt::print("key: {}\ntensors: {}\nmetadata: {}\n", a.key, b.tensors.size(),
             b.metadata_json.empty() ? "{}" : b.metadata_json);
  for (const Tensor& t : b.tensors) {
    fmt::print("  {}  {}  {}  {}\n", t.info.name, DTypeName(t.info.dtype), ShapeToString(t.info.shape), t.data.size());
  }
  return Status::OK();
}

Status Ls(const Args& a) {
  TS_ASSIGN_OR_RETURN(auto store, Open(a, true));
  TS_ASSIGN_OR_RETURN(auto entries, store->List(a.prefix));
  std::size_t w = 3;
  for (const auto& e : entries) w = std::max(w, e.key.size());
  fmt::print("{:<{}}  {:>7}  {:>12}\n", "KEY", w, "TENSORS", "BYTES");
  for (const auto& e : entries) fmt::print("{:<{}}  {:>7}  {:>12}\n", e.key, w, e.tensor_count, e.value_bytes);
  return Status::OK();
}

Status Rm(const Args& a) {
  TS_ASSIGN_OR_RETURN(auto store, Open(a, false));
  return store->Delete(a.key);
}

int Run(const Args& a) {
  Status s;
  if (a.put->parsed())
    s = Put(a);
  else if (a.get->parsed())
    s = Get(a);
  else if (a.ls->parsed())
    s = Ls(a);
  else if (a.rm->parsed())
    s = Rm(a);
  if (!s.ok()) return Fail("lmdb", s);
  return kExitOk;
}

std::function<int()> SetupCommand(CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.require_subcommand(1);
  a->put = sub.add_subcommand("put", "Store a .tsafe file (or every .tsafe of a directory)");
  a->put->add_option("DB", a->db, "LMDB store directory (created when missing)")->required();
  a->put->add_option("SOURCE", a->source, ".tsafe file or directory")->required();
  a->put->add_option("--group", a->group, "Tensors per batch: 1 = one per tensor (key = name), N, 0 = whole file");
  a->put->add_option("--prefix", a->prefix, "Prefix of every key");
  a->put->add_option("--key", a->key, "Store the whole file as one batch under this key");
  a->get = sub.add_subcommand("get", "Show a batch, or write it to a .tsafe file");
  a->get->add_option("DB", a->db, "LMDB store directory")->required();
  a->get->add_option("KEY", a->key, "Key")->required();
  a->get->add_option("OUT", a->out, "Write the batch to this .tsafe file");
  a->ls = sub.add_subcommand("ls", "List keys with tensor counts and sizes");
  a->ls->add_option("DB", a->db, "LMDB store directory")->required();
  a->ls->add_option("PREFIX", a->prefix, "Only keys with this prefix");
  a->rm = sub.add_subcommand("rm", "Delete a key");
  a->rm->add_option("DB", a->db, "LMDB store directory")->required();
  a->rm->add_option("KEY", a->key, "Key")->required();
  return [a] { return Run(*a); };
}

}  // namespace

TS_REGISTER_COMMAND("lmdb", "LMDB tensor store: put, get, ls, rm", SetupCommand);

}  // namespace tensorsafe::cli
