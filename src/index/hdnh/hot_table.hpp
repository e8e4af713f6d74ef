// The hot table's slot encoding (§3.3, Fig. 5).
#pragma once

#include <cstdint>

namespace pmhash::hdnh {

// Hot-table slot metadata (§3.3, Fig. 5): bit 0 valid, bit 1 opmap, bit 2 hotmap, 3.. version.
namespace hot {
inline constexpr uint16_t kValid = 1, kBusy = 2, kHot = 4, kVersionOne = 8;
}

}  // namespace pmhash::hdnh
