// FormatLoadsInPlace (tensorsafe/load.h), read off the format table.
#include "tensorsafe/formats/registry.h"
#include "tensorsafe/load.h"

namespace tensorsafe {

bool FormatLoadsInPlace(Format format) { return format != Format::kUnknown && InfoOf(format).caps.loads_in_place; }

}  // namespace tensorsafe
