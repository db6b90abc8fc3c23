// Moved to tensorsafe/stream/lmdb.h; this forwarding header goes in a later release.
#pragma once
#include "tensorsafe/stream/lmdb.h"
