// Moved to tensorsafe/stream/fd.h; this forwarding header goes in a later release.
#pragma once
#include "tensorsafe/stream/fd.h"
