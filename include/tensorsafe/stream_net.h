// Moved to tensorsafe/stream/net.h; this forwarding header goes in a later release.
#pragma once
#include "tensorsafe/stream/net.h"
