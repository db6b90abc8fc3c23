// What the local (open_any.cc) and remote (open_remote.cc) openers of
// OpenAny share: schema merging across shards, index sniffing, and the MDS
// and WebDataset adapters over a function that opens one shard.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorsafe/dataset/dataset.h"
#include "tensorsafe/dataset/mds.h"

namespace tensorsafe::dataset::sources {

// Folds `next` (the schema of shard `shard`) into `merged`: same field names,
// kinds, dtypes and ranks in the same order; dims that differ become kAnyDim.
Status MergeInto(Schema& merged, const Schema& next, const std::string& location, const std::string& shard);

// What index.json text declares: "native", "mds" or an error naming `what`.
Result<std::string> IndexKindOf(const std::string& text, const std::string& what);

// Opens shard k of the caller's list (MDS: the index's shard numbers); must
// be thread-safe.
using SourceOpener = std::function<Result<std::shared_ptr<const ShardSource>>(std::size_t k)>;
// Told the caller's shard numbers that will be read soon; may be empty.
using SourcePrefetcher = std::function<void(std::span<const std::size_t> ks)>;

// An MDS dataset over `open`. `location` names it in messages and in the
// Dataset.
Result<std::shared_ptr<Dataset>> OpenMdsWith(const std::string& location, std::shared_ptr<const mds::Index> index,
                                             SourceOpener open, SourcePrefetcher prefetch,
                                             const DatasetOptions& options);

struct WdsShardRef {
  std::string name;  // the path or URL, as messages and Dataset::shards() show it
  std::uint64_t bytes = 0;
};

// A WebDataset dataset of `shards` over `open`. Counting samples scans each
// shard once here (a tar has no index); `prefetch`, when set, is told the
// next shards during that scan as well as while iterating.
Result<std::shared_ptr<Dataset>> OpenWdsWith(const std::string& location, std::vector<WdsShardRef> shards,
                                             SourceOpener open, SourcePrefetcher prefetch,
                                             const DatasetOptions& options);

// Datasets at http://, https:// and s3:// URLs (open_remote.cc).
Result<std::shared_ptr<Dataset>> OpenRemote(const std::string& url, const DatasetOptions& options);

}  // namespace tensorsafe::dataset::sources
