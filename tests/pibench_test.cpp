// The PiBench plug-in, loaded the way PiBench loads it: dlopen, create_tree, then worker
// threads calling the methods directly with no set-up call.
#ifdef PMHASH_PIBENCH_SO
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <utility>

#include "../tools/pibench/tree_api.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

TEST(PiBench, PluginRunsAMultiThreadedWorkload) {
  void* lib = dlopen(PMHASH_PIBENCH_SO, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  using create_fn = tree_api* (*)(const tree_options_t&);
  auto create = reinterpret_cast<create_fn>(dlsym(lib, "create_tree"));
  ASSERT_NE(create, nullptr);
  for (std::string scheme : schemes()) {
    TempPool p;
    setenv("PMHASH_SCHEME", scheme.c_str(), 1);
    setenv("PMHASH_MODE", "emulated", 1);
    tree_options_t opt;
    opt.pool_path = p.path;
    opt.pool_size = 256u << 20;
    opt.num_threads = 2;
    tree_api* t = create(opt);
    ASSERT_NE(t, nullptr);
    std::atomic<int> errors{0};
    std::vector<std::thread> ts;
    for (int w = 0; w < 2; ++w)
      ts.emplace_back([&, w] {
        char v[8];
        for (uint64_t i = w; i < 20000; i += 2) {
          uint64_t k = i * 0x9E3779B97F4A7C15ull + 1;
          if (!t->insert(reinterpret_cast<char*>(&k), 8, reinterpret_cast<char*>(&i), 8)) errors++;
          if (t->insert(reinterpret_cast<char*>(&k), 8, reinterpret_cast<char*>(&i), 8)) errors++;
          if (!t->find(reinterpret_cast<char*>(&k), 8, v) || std::memcmp(v, &i, 8) != 0) errors++;
          uint64_t j = i + 1;
          if (!t->update(reinterpret_cast<char*>(&k), 8, reinterpret_cast<char*>(&j), 8)) errors++;
          if (i % 3 == 0 && !t->remove(reinterpret_cast<char*>(&k), 8)) errors++;
        }
      });
    for (auto& th : ts) th.join();
    EXPECT_EQ(errors.load(), 0) << scheme;
    char* out = nullptr;
    uint64_t k = 1;
    EXPECT_EQ(t->scan(reinterpret_cast<char*>(&k), 8, 10, out), 0);
    delete t;
  }
  unsetenv("PMHASH_SCHEME");
  unsetenv("PMHASH_MODE");
  // A bad scheme name: no index, a message, no crash.
  setenv("PMHASH_SCHEME", "no-such-scheme", 1);
  tree_options_t opt;
  TempPool p;
  opt.pool_path = p.path;
  EXPECT_EQ(create(opt), nullptr);
  unsetenv("PMHASH_SCHEME");
  // A typo in any setting is refused (it was read as the default), and no pool is made.
  for (auto [name, value] : {std::pair{"PMHASH_MODE", "dax"},
                             {"PMHASH_FORMAT", "FIXED"},
                             {"PMHASH_PARAMS", "shards"},
                             {"PMHASH_PARAMS", "=4"},
                             {"PMHASH_CAPACITY", "1e8"},
                             {"PMHASH_CAPACITY", "-5"},
                             {"PMHASH_CAPACITY", " -1"}}) {
    setenv(name, value, 1);
    EXPECT_EQ(create(opt), nullptr) << name << "=" << value;
    EXPECT_NE(access(p.path.c_str(), F_OK), 0) << name << "=" << value << " made a pool";
    unsetenv(name);
  }
  dlclose(lib);
}

}  // namespace
}  // namespace pmhash::testing
#endif
