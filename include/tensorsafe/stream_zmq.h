// Moved to tensorsafe/stream/zmq.h; this forwarding header goes in a later release.
#pragma once
#include "tensorsafe/stream/zmq.h"
