// Moved to tensorsafe/dataset/wds.h; this forwarding header goes in a later release.
#pragma once
#include "tensorsafe/dataset/wds.h"
