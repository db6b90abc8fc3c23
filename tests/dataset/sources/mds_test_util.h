// The golden MDS datasets the MDS reader tests (mds_test.cc, mds_index_test.cc,
// mds_corruption_test.cc, mds_codecs_test.cc) start from: written by
// mosaicml-streaming (tests/golden/mds/make.py).
#pragma once

#include <string>

namespace tensorsafe::mds_test {

inline const std::string kGolden = std::string(TS_SOURCE_DIR) + "/tests/golden/mds/";

}  // namespace tensorsafe::mds_test
