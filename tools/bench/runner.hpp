// pmhash-bench's engine: runs one configuration (scheme, variant, format, threads, keys,
// workloads) and returns one row per measurement.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "pmhash/index.hpp"
#include "workload.hpp"

namespace pmhash::bench {

struct RunConfig {
  std::string scheme = "turbohash";
  // "pm": the pool's persistence mode; "off": persistence off (flush/fence do nothing);
  // "dram": the DRAM reference table (abseil flat_hash_map behind striped locks);
  // "cuckoo": libcuckoo's concurrent cuckoo hash map (fine-grained locks; fixed-size 8-byte
  // keys and values in the fixed format).
  std::string variant = "pm";
  Format format = Format::kFixed;
  size_t key_size = 8, value_size = 8;
  int threads = 1;
  uint64_t keys = 1'000'000;  // loaded in the load phase
  uint64_t ops = 1'000'000;   // per run-phase workload
  DistSpec dist;
  bool sequential_keys = false;  // key = id (else a bijective scramble of it)
  // load is implicit; then any of: insert read negread update delete mixed ycsb-a ycsb-b
  // ycsb-c ycsb-d ycsb-f read-batch negread-batch; and lfsweep (load factor / probe distance over
  // inserts).
  std::vector<std::string> workloads = {"read"};
  // read-batch, negread-batch: keys per Index::get_many call.
  uint32_t batch = 16;
  Mode mode = Mode::kAuto;
  std::string pool_dir = "/dev/shm";
  uint64_t pool_size = 0;  // 0: sized from keys
  uint32_t delay_ns = 0;
  bool prefault = false;  // --prefault
  uint64_t capacity_hint = 0;
  std::map<std::string, std::string> params;
  std::string label;  // free text naming the experiment (e.g. "scope=8")
  bool recovery = true;
  // lfsweep: after each insert step, also delete up to 1,000 of the step's keys (timed:
  // lfsweep-delete) and insert them again (lfsweep-reinsert), so the load factor goes on.
  bool sweep_deletes = false;
  // Measure the limit (limit.hpp) first: a "limit" row, and every row gets miss_equiv.
  bool limit = false;
  // --routed (PMEH Fig. 14): the load and the read, negread and update phases hand each
  // operation to the worker thread whose partition owns its key (Index::owner; the ids are
  // drawn first from the run's distribution by one generator, so together the workers issue
  // exactly that sequence). kOwn: a worker issues only its partition's keys (a partition
  // without a worker fails the run); kHelp: a worker whose queue is empty takes operations
  // from the others' queues (the paper's idle threads helping busy zones).
  enum class Routing { kNone, kOwn, kHelp };
  Routing routed = Routing::kNone;
  bool pin = true;
  bool progress = true;
  uint64_t seed = 1;
  // Tests: called with every operation ('i' insert, 'u' update, 'g' get, 'r' remove) and its
  // key, from the thread that issues it (tests/bench_test.cpp checks the key streams).
  std::function<void(char op, const std::string& key)> on_op;
};

inline constexpr double kMinSamplesP9999 = 1e6;  // fewer: p99.99 is "n/a (<1e6 samples)"

struct Row {
  std::map<std::string, std::string> tags;
  std::map<std::string, double> values;
};

// Returns false (with *error) when the index cannot be opened or a phase cannot run.
bool run(const RunConfig& cfg, std::vector<Row>* rows, std::string* error);

}  // namespace pmhash::bench
