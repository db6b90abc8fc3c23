// Moved to tensorsafe/dataset/mds.h; this forwarding header goes in a later release.
#pragma once
#include "tensorsafe/dataset/mds.h"
