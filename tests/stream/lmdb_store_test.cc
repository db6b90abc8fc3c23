// LmdbStore: put/get/list/delete, zero-copy views and their lifetime
// (snapshot isolation, reader slots), damaged values, bulk loading.
#include <gtest/gtest.h>
#include <lmdb.h>

#include <cstring>

#include "stream/stream_test_util.h"
#include "support/temp_dir.h"
#include "tensorsafe/stream/lmdb.h"
#include "tensorsafe/writer.h"

namespace tensorsafe {
namespace {

using testing::AllDTypesBatch;
using testing::ExpectBatchEq;

std::shared_ptr<LmdbStore> OpenStore(const std::string& path, LmdbOptions o = {}) {
  o.map_size = std::uint64_t{1} << 30;
  o.sync = false;
  auto s = LmdbStore::Open(path, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : nullptr;
}

TensorSet Big(std::uint32_t seed) {
  TensorSet b;
  b.tensors.push_back(testing::RandomTensor("w", DType::kF32, {1 << 18}, seed));
  b.tensors.push_back(testing::RandomTensor("z", DType::kC128, {1000}, seed + 1));
  b.metadata_json = R"({"seed":)" + std::to_string(seed) + "}";
  return b;
}

TEST(LmdbStore, PutGetListDelete) {
  testing::TempDir dir;
  auto store = OpenStore(dir.File("db"));
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->Put("a", AllDTypesBatch(1)).ok());
  ASSERT_TRUE(store->PutMany({{"b/1", AllDTypesBatch(2)}, {"b/2", Big(3)}}).ok());
  ASSERT_TRUE(store->Put("c", TensorSet{}).ok());
  auto a = store->Get("a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ExpectBatchEq(AllDTypesBatch(1), *a);
  ExpectBatchEq(Big(3), *store->Get("b/2"));
  EXPECT_TRUE(store->Get("c")->tensors.empty());
  auto all = store->List();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].key, "a");
  EXPECT_EQ((*all)[0].tensor_count, AllDTypesBatch().tensors.size());
  EXPECT_EQ((*all)[0].value_bytes, EncodeMessage(AllDTypesBatch(1))->size());
  EXPECT_EQ((*all)[2].key, "b/2");
  EXPECT_EQ((*all)[2].tensor_count, 2u);
  auto b = store->List("b/");
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->size(), 2u);
  EXPECT_EQ((*b)[0].key, "b/1");
  EXPECT_EQ(store->List("zz")->size(), 0u);
  ASSERT_TRUE(store->Put("a", Big(9)).ok());  // replace
  ExpectBatchEq(Big(9), *store->Get("a"));
  ASSERT_TRUE(store->Delete("a").ok());
  EXPECT_EQ(store->Get("a").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Delete("a").code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Put("", Big(1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Put(std::string(600, 'k'), Big(1)).code(), StatusCode::kInvalidArgument);
  TensorSet dup = Big(1);
  dup.tensors.push_back(dup.tensors[0]);
  EXPECT_EQ(store->Put("d", dup).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Get("d").status().code(), StatusCode::kNotFound) << "a failed put stores nothing";
}

TEST(LmdbStore, PersistsAndOpensReadOnly) {
  testing::TempDir dir;
  {
    auto store = OpenStore(dir.File("db"));
    ASSERT_TRUE(store->Put("k", Big(1)).ok());
  }
  LmdbOptions ro;
  ro.read_only = true;
  auto store = OpenStore(dir.File("db"), ro);
  ASSERT_TRUE(store);
  ExpectBatchEq(Big(1), *store->Get("k"));
  EXPECT_EQ(store->Put("k", Big(2)).code(), StatusCode::kFailedPrecondition);
}

TEST(LmdbStore, SnapshotViewsAreZeroCopyAndOutliveEveryHandle) {
  testing::TempDir dir;
  auto store = OpenStore(dir.File("db"));
  ASSERT_TRUE(store->Put("k", Big(1)).ok());
  TensorSet view;
  const void* snapshot_address = nullptr;
  {
    auto snap = store->Snapshot();
    ASSERT_TRUE(snap.ok());
    snapshot_address = snap->get();
    auto got = (*snap)->Get("k");
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    view = std::move(*got);
  }
  // The views are LMDB's mapping, owned by the snapshot (no copy was made).
  for (const Tensor& t : view.tensors) {
    EXPECT_EQ(t.owner.get(), snapshot_address) << t.info.name;
    EXPECT_TRUE(testing::Aligned(t.data.data(), 16)) << t.info.name;
  }
  // Replace the value and drop our store handle: the views still show the
  // snapshot's (old) bytes, because they keep its read transaction open.
  ASSERT_TRUE(store->Put("k", Big(2)).ok());
  store.reset();
  ExpectBatchEq(Big(1), view);
  view = TensorSet{};
  auto again = OpenStore(dir.File("db"));
  ExpectBatchEq(Big(2), *again->Get("k"));
}

TEST(LmdbStore, ViewsHoldAReaderSlotCopiesDoNot) {
  testing::TempDir dir;
  LmdbOptions o;
  o.max_readers = 2;
  auto store = OpenStore(dir.File("db"), o);
  ASSERT_TRUE(store->Put("k", Big(1)).ok());
  TensorSet v1 = *(*store->Snapshot())->Get("k");  // the snapshot lives on in v1
  TensorSet v2 = *(*store->Snapshot())->Get("k");
  auto third = store->Snapshot();
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kLimitExceeded) << third.status().ToString();
  v1 = TensorSet{};  // releases one transaction
  TensorSet copy = *store->Get("k");
  auto fourth = store->Snapshot();
  ASSERT_TRUE(fourth.ok()) << "Get's copy holds no transaction";
  ExpectBatchEq(Big(1), copy);
  ExpectBatchEq(Big(1), v2);
}

TEST(LmdbStore, DamagedValueIsCorruption) {
  testing::TempDir dir;
  const std::string path = dir.File("db");
  {
    auto store = OpenStore(path);
    ASSERT_TRUE(store->Put("k", Big(1)).ok());
  }
  {  // flip one data byte behind the store's back
    MDB_env* env;
    ASSERT_EQ(mdb_env_create(&env), 0);
    ASSERT_EQ(mdb_env_set_mapsize(env, std::size_t{1} << 30), 0);
    ASSERT_EQ(mdb_env_open(env, path.c_str(), 0, 0644), 0);
    MDB_txn* txn;
    MDB_dbi dbi;
    ASSERT_EQ(mdb_txn_begin(env, nullptr, 0, &txn), 0);
    ASSERT_EQ(mdb_dbi_open(txn, nullptr, 0, &dbi), 0);
    MDB_val k{1, const_cast<char*>("k")}, v;
    ASSERT_EQ(mdb_get(txn, dbi, &k, &v), 0);
    std::string bytes(static_cast<const char*>(v.mv_data), v.mv_size);
    bytes[bytes.size() - 100] ^= 1;
    MDB_val nv{bytes.size(), bytes.data()};
    ASSERT_EQ(mdb_put(txn, dbi, &k, &nv, 0), 0);
    ASSERT_EQ(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
  }
  auto store = OpenStore(path);
  auto r = store->Get("k");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("key \"k\""), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("checksum"), std::string::npos) << r.status().ToString();
  EXPECT_EQ((*store->Snapshot())->Get("k").status().code(), StatusCode::kCorruption);
}

void WriteTsafe(const std::string& path, const TensorSet& set) {
  auto w = Writer::Create(path);
  ASSERT_TRUE(w.ok());
  for (const Tensor& t : set.tensors) {
    ASSERT_TRUE(
        (*w)->Add(t.info.name, TensorView::Contiguous(t.info.dtype, t.info.shape, t.data), t.info.metadata_json).ok());
  }
  if (!set.metadata_json.empty()) ASSERT_TRUE((*w)->SetMetadata(set.metadata_json).ok());
  ASSERT_TRUE((*w)->Finish().ok());
}

TEST(LmdbStore, BulkLoadFromFilesAndDirectories) {
  testing::TempDir dir;
  const TensorSet src = AllDTypesBatch(4);
  std::filesystem::create_directory(dir.path() / "in");
  WriteTsafe(dir.File("in/m1.tsafe"), src);
  WriteTsafe(dir.File("in/m2.tsafe"), Big(5));
  auto store = OpenStore(dir.File("db"));
  // One batch per tensor.
  auto n = LoadTsafeFile(*store, dir.File("in/m1.tsafe"), {.tensors_per_batch = 1, .key_prefix = "t/"});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, src.tensors.size());
  auto f32 = store->Get("t/f32");
  ASSERT_TRUE(f32.ok());
  ASSERT_EQ(f32->tensors.size(), 1u);
  EXPECT_EQ(f32->metadata_json, src.metadata_json);
  EXPECT_EQ(f32->tensors[0].info.metadata_json, src.tensors[11].info.metadata_json);
  // Groups of 10, and the whole file.
  n = LoadTsafeFile(*store, dir.File("in/m1.tsafe"), {.tensors_per_batch = 10, .key_prefix = "g/", .commit_bytes = 1});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, (src.tensors.size() + 9) / 10);
  EXPECT_EQ(store->Get("g/00000000")->tensors.size(), 10u);
  EXPECT_EQ(store->Get("g/00000002")->tensors.size(), src.tensors.size() - 20);
  n = LoadTsafeFile(*store, dir.File("in/m1.tsafe"), {.tensors_per_batch = 0});
  ASSERT_TRUE(n.ok());
  ExpectBatchEq(src, *store->Get("m1"));
  // A directory: each file's keys under its name.
  n = LoadTsafeDirectory(*store, dir.File("in"), {.tensors_per_batch = 1, .key_prefix = "d/"});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, src.tensors.size() + 2);
  EXPECT_EQ(store->List("d/m1/")->size(), src.tensors.size());
  auto w = store->Get("d/m2/w");
  ASSERT_TRUE(w.ok());
  ExpectBatchEq(testing::Filter(Big(5), [](const Tensor& t) { return t.info.name == "w"; }), *w);
  EXPECT_EQ(LoadTsafeFile(*store, dir.File("missing.tsafe")).status().code(), StatusCode::kIOError);
}

}  // namespace
}  // namespace tensorsafe
