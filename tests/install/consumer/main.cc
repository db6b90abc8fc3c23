// A project outside the tree that finds the installed package, writes a file
// and reads it back, and reads shard 0 of the golden MDS dataset of every
// codec (so zlib, libbz2, libbrotlidec, libsnappy and libzstd are linked
// for real): proof that `cmake --install` gives a usable library.
// Usage: consumer FILE.tsafe [GOLDEN_MDS_DIR CACHE_DIR]
#include <cstdio>
#include <string>

#include "tensorsafe/dataset/mds.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

int main(int argc, char** argv) {
  if (argc != 2 && argc != 4) return 2;
  const std::string path = argv[1];
  auto w = tensorsafe::Writer::Create(path);
  if (!w.ok()) return 1;
  const float v[2] = {1, 2};
  auto view = tensorsafe::TensorView::Contiguous(tensorsafe::DType::kF32, {2}, std::as_bytes(std::span(v)));
  if (!(*w)->Add("v", view).ok() || !(*w)->Finish().ok()) return 1;
  auto r = tensorsafe::Reader::Open(path);
  if (!r.ok() || (*r)->size() != 1 || !(*r)->Verify().ok()) return 1;
  std::printf("consumer: wrote and read back %s\n", path.c_str());
  if (argc == 4) {
    for (const char* codec : {"br", "bz2", "gz", "snappy", "zstd"}) {
      auto ds = tensorsafe::mds::OpenIndex(std::string(argv[2]) + "/" + codec);
      if (!ds.ok()) return 1;
      tensorsafe::mds::ShardOptions opt;
      opt.cache_dir = argv[3];
      auto shard = tensorsafe::mds::OpenShard(*ds, 0, opt);
      if (!shard.ok() || (*shard)->num_samples() != 4) {
        std::fprintf(stderr, "consumer: %s: %s\n", codec, shard.status().ToString().c_str());
        return 1;
      }
    }
    std::printf("consumer: read the MDS shards of every codec in %s\n", argv[2]);
  }
  return 0;
}
