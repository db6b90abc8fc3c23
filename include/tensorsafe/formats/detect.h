// Deprecated: format detection moved into the format table,
// tensorsafe/formats/registry.h (Format, FormatName, DetectFormat,
// DetectFormatFromBytes). This forwarding header goes in the next release.
#pragma once

#include "tensorsafe/formats/registry.h"
