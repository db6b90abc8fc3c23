// DataChecksum (include/tensorsafe/checksum.h): the index's data checksum.
#include "tensorsafe/checksum.h"

#include "util/hash.h"

namespace tensorsafe {

std::uint64_t DataChecksum(std::span<const std::byte> bytes) { return internal::Hash64(bytes); }

}  // namespace tensorsafe
