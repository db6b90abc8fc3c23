// The shard cache at URLs a registered UrlHandler serves (the Python
// package's fsspec handler; here an in-memory one): base URLs keep their
// case, files are checked as downloads are, listings stay under the prefix,
// and a handler that cannot list says so.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <mutex>

#include "dataset/remote/url.h"
#include "support/temp_dir.h"
#include "tensorsafe/dataset/remote.h"
#include "tensorsafe/url_handler.h"
#include "util/hash.h"

namespace tensorsafe::dataset {
namespace {

class MapHandler : public UrlHandler {
 public:
  std::map<std::string, std::string> objects;
  bool can_list = true;
  int reads = 0;

  Result<Stat> StatUrl(const std::string& url) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = objects.find(url);
    if (it == objects.end()) return NotFound(url + ": no such object");
    return Stat{it->second.size(), "v1"};
  }
  Status ReadUrl(const std::string& url, std::uint64_t offset, std::span<std::byte> out) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++reads;
    auto it = objects.find(url);
    if (it == objects.end()) return NotFound(url + ": no such object");
    if (offset + out.size() > it->second.size()) return Corruption(url + ": short");
    std::memcpy(out.data(), it->second.data() + offset, out.size());
    return Status::OK();
  }
  Result<std::vector<Entry>> ListUrl(const std::string& prefix) override {
    if (!can_list) return UrlHandler::ListUrl(prefix);
    std::vector<Entry> out;
    for (const auto& [url, data] : objects) {
      if (url.rfind(prefix, 0) == 0) out.push_back(Entry{url, data.size(), "v1"});
    }
    return out;
  }

 private:
  std::mutex mu_;
};

class RemoteHandlerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    handler_ = std::make_shared<MapHandler>();
    SetUrlHandler(handler_);
  }
  void TearDown() override { SetUrlHandler(nullptr); }

  std::unique_ptr<ShardCache> Cache(const std::string& base) {
    ShardCacheOptions o;
    o.cache_dir = (dir_.path() / "cache").string();
    auto r = ShardCache::Open(base, std::move(o));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : nullptr;
  }

  std::shared_ptr<MapHandler> handler_;
  tensorsafe::testing::TempDir dir_;
};

TEST_F(RemoteHandlerTest, OtherSchemesAreRemoteOnlyWithAHandler) {
  EXPECT_TRUE(IsRemoteUrl("mem://b/x"));
  auto base = tensorsafe::internal::ParseBaseUrl("mem://My_Bucket/Data");
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  EXPECT_EQ(base->full, "mem://My_Bucket/Data/");  // not a host name: case kept
  EXPECT_EQ(tensorsafe::internal::ParseBaseUrl("HTTP://My_Host/x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tensorsafe::internal::ParseBaseUrl("mem://u:p@b/x").status().code(), StatusCode::kInvalidArgument);
  SetUrlHandler(nullptr);
  EXPECT_FALSE(IsRemoteUrl("mem://b/x"));
  EXPECT_EQ(tensorsafe::internal::ParseBaseUrl("mem://b/x").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(RemoteHandlerTest, FilesAreCheckedAndCachedAsDownloadsAre) {
  const std::string data(3 << 20, 'x');  // more than one piece of the reader
  handler_->objects["mem://b/ds/a.bin"] = data;
  handler_->objects["mem://b/ds/index.json"] = "{}";
  auto cache = Cache("mem://b/ds");
  ASSERT_NE(cache, nullptr);
  auto index = cache->FetchBytes("index.json");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(*index, "{}");
  const RemoteFile file{"a.bin", data.size(), tensorsafe::internal::Hash64(std::string_view(data))};
  auto got = cache->Fetch(file);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->size(), data.size());
  const int reads = handler_->reads;
  ASSERT_TRUE(cache->Fetch(file).ok());
  EXPECT_EQ(handler_->reads, reads);  // a hit

  handler_->objects["mem://b/ds/bad.bin"] = data;
  auto bad = cache->Fetch(RemoteFile{"bad.bin", data.size(), file.xxh3 ^ 1});
  EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
  EXPECT_NE(bad.status().message().find("GET mem://b/ds/bad.bin: XXH3-64"), std::string::npos)
      << bad.status().ToString();
  auto short_file = cache->Fetch(RemoteFile{"bad.bin", data.size() + 1, file.xxh3});
  EXPECT_EQ(short_file.status().code(), StatusCode::kCorruption);
  EXPECT_NE(short_file.status().message().find("the object has 3145728 bytes, the index says 3145729"),
            std::string::npos)
      << short_file.status().ToString();
  EXPECT_EQ(cache->Fetch(RemoteFile{"none.bin", 1, 0}).status().code(), StatusCode::kNotFound);
}

TEST_F(RemoteHandlerTest, ListingsStayUnderThePrefix) {
  handler_->objects["mem://b/ds/s-1.tar"] = "1";
  handler_->objects["mem://b/ds/s-0.tar"] = "00";
  handler_->objects["mem://b/ds/sub/s-2.tar"] = "2";  // not a shard of this prefix
  handler_->objects["mem://b/other/s-3.tar"] = "3";
  auto cache = Cache("mem://b/ds/");
  ASSERT_NE(cache, nullptr);
  auto listed = cache->List();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].name, "s-0.tar");
  EXPECT_EQ((*listed)[0].bytes, 2u);
  EXPECT_EQ((*listed)[1].name, "s-1.tar");
  handler_->can_list = false;
  EXPECT_EQ(cache->List().status().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace tensorsafe::dataset
