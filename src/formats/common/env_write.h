// WriteFile of the foreign codecs through a given Env: fault injection in
// tests, and the byte-counting Env with which Convert reports progress
// (src/convert/). Each behaves exactly as the codec's public WriteFile, which
// calls it with Env::Default(). safetensors and gguf have the same function
// in their own internal headers.
#pragma once

#include <string>

#include "io/env.h"
#include "tensorsafe/formats/btf.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/formats/npz.h"
#include "tensorsafe/formats/tenbin.h"
#include "tensorsafe/formats/zio.h"

namespace tensorsafe::internal {

Status WriteNpyWithEnv(Env* env, const std::string& path, const TensorSet& set,
                       const npy::WriteOptions& options);
Status WriteNpzWithEnv(Env* env, const std::string& path, const TensorSet& set,
                       const npz::WriteOptions& options);
Status WriteTenbinWithEnv(Env* env, const std::string& path, const TensorSet& set,
                          const tenbin::WriteOptions& options);
Status WriteBtfWithEnv(Env* env, const std::string& path, const TensorSet& set,
                       const btf::WriteOptions& options);
Status WriteZioWithEnv(Env* env, const std::string& path, const TensorSet& set,
                       const zio::WriteOptions& options);

}  // namespace tensorsafe::internal
