// The key hash is part of the pool format: the variable format stores each key's XXH3-64 in
// its slot, and every scheme places keys by it. These values are XXH3-64's (the empty
// string's is the reference value xxHash documents); a change of hash function or seed
// would strand every key of an existing pool.
#include "common/hash.hpp"

#include <gtest/gtest.h>

#include <string>

namespace pmhash::testing {
namespace {

TEST(KeyHash, IsXXH3AsPoolsStoreIt) {
  EXPECT_EQ(common::hash_key(""), 0x2d06800538d394c2ull);
  EXPECT_EQ(common::hash_key("abc"), 0x78af5f94892f3950ull);
  EXPECT_EQ(common::hash_key("12345678"), 0x62e29b4cad9e2ef6ull);
  EXPECT_EQ(common::hash_key(std::string(300, 'x')), 0xa5d1b4607dc83554ull);
  EXPECT_EQ(common::hash_key("abc", 7), 0x48ff56f569e39912ull);
  EXPECT_EQ(common::hash_word(0x0123456789abcdefull), 0xb78df414284277a6ull);
}

}  // namespace
}  // namespace pmhash::testing
