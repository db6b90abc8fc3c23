// Moved to tensorsafe/stream/url.h; this forwarding header goes in a later release.
#pragma once
#include "tensorsafe/stream/url.h"
