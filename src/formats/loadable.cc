// Which formats the loader (tensorsafe/load.h) reads straight from disk:
// kept beside the format table, which is the one place that names formats.
#include "tensorsafe/load.h"

namespace tensorsafe {

bool FormatLoadsInPlace(Format format) {
  // Tensor bytes at TensorInfo::data_offset, data_length long, exactly as
  // they load: no compression (npz), byte swap (npy big-endian), pickle
  // (pytorch) or framing (zio, tenbin, btf) to undo.
  return format == Format::kTsafe || format == Format::kSafetensors || format == Format::kGguf;
}

}  // namespace tensorsafe
