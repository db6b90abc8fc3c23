// Opens any file the CLI can read: a .tsafe through Reader, an .npy or .npz
// through its codec as a TensorSet. Other detected formats are refused with
// kUnsupported until their codecs land.
#pragma once

#include <memory>
#include <string>

#include "tensorsafe/formats/detect.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::cli {

struct Source {
  std::string path;
  Format format = Format::kUnknown;
  std::shared_ptr<Reader> reader;  // kTsafe
  TensorSet set;                   // every other format
  std::uint64_t file_size = 0;
};

// `eager`: check the whole .tsafe index at open (verify).
Result<Source> OpenSource(const std::string& path, bool eager = false);

}  // namespace tensorsafe::cli
