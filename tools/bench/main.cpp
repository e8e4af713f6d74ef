// pmhash-bench: every scheme under the same workloads, pool mode and machine, in one run.
// See docs/bench.md (options, suites, JSON schema).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "index_impl.hpp"
#include "report.hpp"
#include "runner.hpp"

using namespace pmhash;
using namespace pmhash::bench;

namespace {

// `v` is a whole unsigned decimal number in [lo, hi] (no sign, blank or exponent).
bool whole_number(const std::string& v, uint64_t lo, uint64_t hi, uint64_t* out) {
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
  return !v.empty() && ec == std::errc() && end == v.data() + v.size() && *out >= lo && *out <= hi;
}

// Empty items are dropped; `empty`, when given, is set if there was one (or the list is empty).
std::vector<std::string> split(const std::string& s, char sep, bool* empty = nullptr) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  if (empty != nullptr && (s.empty() || s.front() == sep || s.back() == sep ||
                           s.find(std::string(2, sep)) != std::string::npos))
    *empty = true;
  return out;
}

const char* kUsage = R"(usage: pmhash-bench [options]
  --suite NAME          quick | compare | large | writes | churn | smartht | turbohash | wophi |
                        hdnh | pmeh
  --schemes a,b         schemes to run (default: all registered)
  --variants pm,off,dram,cuckoo  pm: persistent; off: persistence off; dram: abseil map behind
                        striped locks; cuckoo: libcuckoo (fixed 8-byte keys in fixed format)
  --sweep-deletes       lfsweep also times deletes of up to 1,000 keys per step (then
                        inserts them again): rows lfsweep-delete, lfsweep-reinsert
  --limit               first measure ns per dependent miss over a pool-sized buffer in the
                        pool dir ("limit" row); rows get misses = ns per op / ns per miss
  --format fixed|variable   --key-size N --value-size N (variable format)
  --threads 1,2         thread counts       --keys N (loaded)     --ops N (per workload)
  --workloads w,...     insert read negread update delete mixed ycsb-a ycsb-b ycsb-c
                        ycsb-d ycsb-f lfsweep   (YCSB-E is scans: hash indexes do not serve it)
                        read-batch negread-batch: read / negread through Index::get_many,
                        --batch N keys per call (default 16)
                        churn: the loaded keys under 10 x --keys random inserts of new keys and
                        deletes of live keys (live set steady); PM/DRAM bytes per key, LF in
                        rows churn-0 (after the load) .. churn-10
                        reload: reads, delete every loaded key, insert as many new ones,
                        reads again (TurboHash Figs. 11/12; rows reload-*)
  --dist D              uniform | zipfian:THETA | selfsimilar:H | latest
  --params k=v,...      scheme parameters (docs/schemes/*.md)   --label TEXT
  --mode auto|pm|emulated|msync   --pool-dir DIR   --pool-size BYTES
  --delay-ns N          injected PM write delay per flushed line
  --prefault            fault the whole pool in when it is created (Options::prefault), so
                        that no phase pays first-touch page faults (a table that grows does)
  --capacity-hint N     --repeat R (median of R runs)   --seed N   --no-recovery  --no-pin
  --sequential-keys     keys are 0, 1, 2, ... (default: a bijective scramble of them)
  --routed[=help]       PMEH Fig. 14: the load, read, negread and update ops are drawn first
                        and each handed to the worker owning its key's partition
                        (Index::owner); =help: idle workers take others' ops
  --json FILE  --csv FILE
)";

// The preset suites. Sizes fit 24 GiB and 2 cores; PMHASH_BENCH_SCALE (0..1] shrinks them.
std::vector<RunConfig> suite(const std::string& name, const RunConfig& base,
                             const std::vector<std::string>& schemes_list, double scale, bool* ok) {
  std::vector<RunConfig> v;
  auto n = [&](uint64_t x) { return std::max<uint64_t>(1000, uint64_t(double(x) * scale)); };
  // The DRAM reference tables (abseil, libcuckoo), 2 threads, the suites' four workloads.
  auto dram_references = [&](uint64_t keys, uint64_t ops) {
    for (std::string var : {"dram", "cuckoo"}) {
      RunConfig d = base;
      d.variant = var;
      d.threads = 2;
      d.keys = keys;
      d.ops = ops;
      d.workloads = {"read", "negread", "update", "delete"};
      d.recovery = false;
      v.push_back(d);
    }
  };
  *ok = true;
  if (name == "quick") {
    for (auto& s : schemes_list)
      for (std::string var : {"pm", "off"}) {
        RunConfig c = base;
        c.scheme = s;
        c.variant = var;
        c.threads = 2;
        c.keys = n(10'000'000);
        c.ops = n(5'000'000);      // delete half, so recovery is timed on a populated index
        c.capacity_hint = c.keys;  // schemes size their tables for the keys to be loaded
        c.workloads = {"read", "negread", "update", "delete"};
        v.push_back(c);
      }
    dram_references(n(10'000'000), n(5'000'000));
    for (auto& c : v) c.limit = true;
  } else if (name == "compare") {
    // docs/RESULTS.md's cross-scheme table: every scheme, fixed 8/8 and variable 16/16,
    // 1 and 2 threads, uniform and zipfian 0.99; every workload; persistence on and off,
    // and the DRAM reference table.
    for (Format f : {Format::kFixed, Format::kVariable})
      for (std::string dist : {"uniform", "zipfian:0.99"})
        for (int t : {1, 2}) {
          std::vector<std::pair<std::string, std::string>> runs;
          for (auto& s : schemes_list)
            for (std::string var : {"pm", "off"}) runs.push_back({s, var});
          runs.push_back({"", "dram"});
          runs.push_back({"", "cuckoo"});
          for (auto& [s, var] : runs) {
            RunConfig c = base;
            if (!s.empty()) c.scheme = s;
            c.variant = var;
            c.format = f;
            if (f == Format::kVariable) c.key_size = c.value_size = 16;
            DistSpec::parse(dist, &c.dist);
            c.threads = t;
            // PMEH: one zone set per worker (another scheme refuses the parameter).
            if (c.scheme == "pmeh") c.params["zone_threads"] = std::to_string(t);
            c.keys = n(1'000'000);
            c.ops = n(500'000);
            c.capacity_hint = c.keys;
            c.workloads = {"read",   "negread", "update", "ycsb-a", "ycsb-b",
                           "ycsb-c", "ycsb-f",  "ycsb-d", "delete"};
            c.recovery = var == "pm";
            c.limit = true;
            v.push_back(c);
          }
        }
  } else if (name == "large") {
    // The cross-scheme comparison near the papers' sizes (issues 17, 19): 20M keys, fixed
    // 8/8, 2 threads, 10M operations per phase; every scheme pre-sized (capacity hint =
    // keys) and growing from empty (no hint, label "no hint"), with the limit row and the
    // DRAM references.
    for (auto& s : schemes_list)
      for (bool hint : {true, false}) {
        RunConfig c = base;
        c.scheme = s;
        c.variant = "pm";
        c.threads = 2;
        c.keys = n(20'000'000);
        c.ops = n(10'000'000);
        c.capacity_hint = hint ? c.keys : 0;
        if (!hint) c.label = "no hint";
        if (s == "pmeh") c.params["zone_threads"] = "2";  // one zone set per worker
        c.workloads = {"read", "negread", "update", "delete"};
        c.recovery = hint;
        v.push_back(c);
      }
    dram_references(n(20'000'000), n(10'000'000));
    for (auto& c : v) c.limit = true;
  } else if (name == "writes") {
    // docs/RESULTS.md "Flushes and fences per write" (issue 18): every scheme, both formats,
    // one thread, a fixed seed; the persist counters are exact (timing does not change them).
    // Grown from empty (every resize the load causes is in its row) and pre-sized (capacity
    // hint = keys, label "pre-sized": the write paths alone, as the papers count them).
    for (auto& s : schemes_list)
      for (Format f : {Format::kFixed, Format::kVariable})
        for (bool sized : {false, true}) {
          RunConfig c = base;
          if (sized) c.capacity_hint = 200'000, c.label = "pre-sized";  // + the inserted keys
          c.scheme = s;
          c.variant = "pm";
          c.format = f;
          if (f == Format::kVariable) c.key_size = 16, c.value_size = 15;  // one-line items
          c.threads = 1;
          c.keys = 100'000;  // not scaled: the counts are the point
          c.ops = 100'000;
          c.seed = 1;
          c.workloads = {"insert", "update", "delete"};
          c.recovery = false;
          v.push_back(c);
        }
  } else if (name == "churn") {
    // docs/RESULTS.md "Space under churn" (issue 18): 100K live keys (capacity hint = live
    // keys) under 1M random inserts of new keys and deletes of live ones, both formats.
    for (auto& s : schemes_list)
      for (Format f : {Format::kFixed, Format::kVariable}) {
        RunConfig c = base;
        c.scheme = s;
        c.variant = "pm";
        c.format = f;
        if (f == Format::kVariable) c.key_size = 16, c.value_size = 15;  // one-line items
        c.threads = 1;
        c.keys = 100'000;  // not scaled: the ratio to the load is the point
        c.ops = 1'000'000;
        c.capacity_hint = c.keys;
        c.workloads = {"churn"};
        c.recovery = false;
        v.push_back(c);
      }
  } else if (name == "smartht") {
    // Figs. 5-6: insert (load), positive read, negative read, delete; 1 and 2 threads;
    // uniform and self-similar 0.2; negative reads with the VFL on and off (same run).
    for (std::string dist : {"uniform", "selfsimilar:0.2"})
      for (int t : {1, 2})
        for (bool filter : {true, false}) {
          RunConfig c = base;
          c.scheme = "smartht";
          DistSpec::parse(dist, &c.dist);
          c.threads = t;
          c.keys = n(5'000'000);
          c.ops = n(2'500'000);
          c.capacity_hint = c.keys;
          c.workloads = filter ? std::vector<std::string>{"read", "negread", "delete"}
                               : std::vector<std::string>{"negread"};
          if (!filter) {
            c.params["filter"] = "off";
            c.label = "filter=off";
          }
          c.recovery = false;
          v.push_back(c);
        }
    // Fig. 9: load factor over inserts, a table sized for 1/4 of the keys (long chains).
    {
      RunConfig c = base;
      c.scheme = "smartht";
      c.threads = 1;
      c.keys = 0;
      c.ops = 4'000'000;  // not scaled: the sweep must reach the maximum load factor
      c.params = {{"buckets", std::to_string(uint64_t{1} << 18)}, {"filter_keys", "1000000"}};
      c.workloads = {"lfsweep"};
      c.label = "lf";
      c.recovery = false;
      v.push_back(c);
    }
    // Table I: reopen after a clean close (saved VFL) and rebuild after a crash, with the
    // paper's single rebuild thread and with every core.
    for (uint64_t keys : {1'000'000ull, 10'000'000ull, 50'000'000ull})
      for (std::string rt : {"1", ""}) {
        RunConfig c = base;
        c.scheme = "smartht";
        c.threads = 2;
        c.keys = n(keys);
        c.ops = 0;
        c.capacity_hint = c.keys;
        c.workloads = {};
        c.label = "recovery";
        if (!rt.empty()) {
          c.params["recovery_threads"] = rt;
          c.label = "recovery 1 thread";
        }
        v.push_back(c);
      }
  } else if (name == "wophi") {
    // Figs. 3-5: flushes and latency per insertion as the main buckets fill (load factor of
    // the main buckets 0.05 .. 1.0 in 20 steps), random and sequential keys, with the PAB
    // and with chain buckets allocated on the write path. 2^16 main buckets x 4 slots.
    // Each also with the paper's emulated NVM write latency (Quartz, 600 ns): injected per
    // flushed line. Fig. 5: lfsweep-delete rows (deletion latency at each load factor).
    uint64_t mainb = uint64_t{1} << 16;
    for (uint32_t delay : {0u, 600u})
      for (bool seq : {false, true})
        for (bool pab : {true, false}) {
          RunConfig c = base;
          c.scheme = "wophi";
          c.threads = 1;
          c.keys = 0;
          c.ops = mainb * 4;
          c.sequential_keys = seq;
          c.delay_ns = delay;
          c.params = {{"buckets", std::to_string(mainb)}};
          if (!pab) c.params["pab"] = "off";
          c.workloads = {"lfsweep"};
          c.sweep_deletes = true;
          c.label = std::string(pab ? "pab" : "alloc-on-write") + (seq ? " seq" : " rand") +
                    (delay ? " delay=600" : "");
          c.recovery = false;
          v.push_back(c);
        }
    // Fig. 6: insert and delete latency with injected PM write delays (load factor 0.75).
    for (uint32_t d : {300u, 600u, 900u, 1200u}) {
      RunConfig c = base;
      c.scheme = "wophi";
      c.threads = 1;
      c.keys = mainb * 3;
      c.ops = mainb;
      c.delay_ns = d;
      c.params = {{"buckets", std::to_string(mainb)}};
      c.workloads = {"delete"};
      c.label = "delay=" + std::to_string(d);
      c.recovery = false;
      v.push_back(c);
    }
    // Fig. 7: insert and delete throughput on a YCSB-style load (zipfian order), 1 and 2
    // threads.
    for (int t : {1, 2}) {
      RunConfig c = base;
      c.scheme = "wophi";
      c.threads = t;
      c.keys = n(16'000'000);
      c.ops = c.keys;
      c.capacity_hint = c.keys;
      DistSpec::parse("zipfian:0.99", &c.dist);
      c.workloads = {"delete"};
      c.label = "ycsb";
      c.recovery = false;
      v.push_back(c);
    }
  } else if (name == "turbohash") {
    // Fig. 1 / §4.6: probe distance as the load factor grows, scopes 4, 8, 16; Fig. 10:
    // load factor over inserts.
    for (int scope : {4, 8, 16}) {
      RunConfig c = base;
      c.scheme = "turbohash";
      c.threads = 1;
      c.keys = 0;
      c.ops = 4'000'000;  // not scaled: the sweep must reach the maximum load factor
      c.params = {{"shards", "1024"}, {"buckets", "256"}, {"scope", std::to_string(scope)}};
      c.workloads = {"lfsweep"};
      c.label = "scope=" + std::to_string(scope);
      c.recovery = false;
      v.push_back(c);
    }
    // Fig. 1 at the paper's shard size (4096 shards x 16 buckets, the scope a whole shard):
    // 851,968 inserts put step 16 of the sweep at the paper's load factor 0.80 (÷13).
    {
      RunConfig c = base;
      c.scheme = "turbohash";
      c.threads = 1;
      c.keys = 0;
      c.ops = 851'968;  // not scaled: the load factor is the point
      c.params = {{"shards", "4096"}, {"buckets", "16"}, {"scope", "16"}};
      c.workloads = {"lfsweep"};
      c.label = "paper shards";
      c.recovery = false;
      v.push_back(c);
    }
    // §4.2: throughput of each operation, 1 and 2 threads, persistence on/off, SIMD on/off.
    for (int t : {1, 2})
      for (std::string var : {"pm", "off"})
        for (bool simd : {true, false}) {
          if (!simd && var == "off") continue;
          RunConfig c = base;
          c.scheme = "turbohash";
          c.variant = var;
          c.threads = t;
          c.keys = n(5'000'000);
          c.ops = n(5'000'000);
          c.workloads = {"read", "negread", "update", "delete"};
          if (!simd) {
            c.params["simd"] = "off";
            c.label = "simd=off";
          }
          c.recovery = false;
          v.push_back(c);
        }
    // §3.6: the variable format, 15-byte keys and values (the paper's KV-store setup).
    for (int t : {1, 2}) {
      RunConfig c = base;
      c.scheme = "turbohash";
      c.format = Format::kVariable;
      c.key_size = 15;
      c.value_size = 15;
      c.threads = t;
      c.keys = n(2'000'000);
      c.ops = n(2'000'000);
      c.workloads = {"read", "negread", "update", "delete"};
      c.recovery = false;
      v.push_back(c);
    }
    // §4.6, Figs. 11/12: delete every key and load as many new ones, at the paper's load
    // factors 0.6 and 0.8 (÷13; no resize before the delete), with and without the
    // same-size rehash of deleted slots (gc). Rows reload-*: probe distances and latency of
    // reads before and after, deleted slots left, same-size rehashes (c.shard_gc_rehashes).
    for (uint64_t keys : {510'000ull, 680'000ull})
      for (bool gc : {true, false}) {
        RunConfig c = base;
        c.scheme = "turbohash";
        c.threads = 1;
        c.keys = keys;  // not scaled: the load factor is the point
        c.ops = 1'000'000;
        c.params = {{"shards", "4096"}, {"buckets", "16"}, {"gc", gc ? "on" : "off"}};
        c.workloads = {"reload"};
        c.label = std::string("gc=") + (gc ? "on" : "off");
        c.recovery = false;
        v.push_back(c);
      }
    // §3.7: recovery after a crash at 1M, 10M, 50M keys (must not grow with keys).
    for (uint64_t keys : {1'000'000ull, 10'000'000ull, 50'000'000ull}) {
      RunConfig c = base;
      c.scheme = "turbohash";
      c.threads = 2;
      c.keys = n(keys);
      c.ops = 0;
      c.workloads = {};
      c.label = "recovery";
      v.push_back(c);
    }
  } else if (name == "hdnh") {
    auto hd = [&](const std::string& label) {
      RunConfig c = base;
      c.scheme = "hdnh";
      c.threads = 1;
      c.label = label;
      c.recovery = false;
      return c;
    };
    // Fig. 11a: segment size 256 B .. 256 KB, load (with resizes from one segment) and read.
    for (uint64_t seg : {256ull, 1024ull, 4096ull, 16384ull, 65536ull, 262144ull}) {
      RunConfig c = hd("segment=" + std::to_string(seg));
      c.keys = n(4'000'000);
      c.ops = n(4'000'000);
      c.params = {{"segment_bytes", std::to_string(seg)}};
      c.workloads = {"read"};
      v.push_back(c);
    }
    // Fig. 11b: slots per hot-table bucket 1, 2, 4, 8 (positive and negative reads, zipfian).
    for (int hs : {1, 2, 4, 8}) {
      RunConfig c = hd("hot_slots=" + std::to_string(hs));
      c.keys = n(4'000'000);
      c.ops = n(4'000'000);
      c.capacity_hint = c.keys;
      DistSpec::parse("zipfian:0.99", &c.dist);
      c.params = {{"hot_slots", std::to_string(hs)}};
      c.workloads = {"read", "negread"};
      v.push_back(c);
    }
    // Fig. 12: read throughput over zipfian skew, RAFL vs LRU vs no hot table.
    for (std::string s : {"0.5", "0.7", "0.9", "0.99", "1.1", "1.22"})
      for (std::string repl : {"rafl", "lru", "off"}) {
        RunConfig c = hd("hot=" + repl);
        c.keys = n(4'000'000);
        c.ops = n(4'000'000);
        c.capacity_hint = c.keys;
        DistSpec::parse("zipfian:" + s, &c.dist);
        c.params = {{"hot_table", repl}};
        c.workloads = {"read"};
        v.push_back(c);
      }
    // §3.2: PM slots read per positive and negative read, OCF on and off (hot table off).
    for (std::string ocf : {"on", "off"}) {
      RunConfig c = hd("ocf=" + ocf);
      c.keys = n(4'000'000);
      c.ops = n(4'000'000);
      c.capacity_hint = c.keys;
      c.params = {{"hot_table", "off"}, {"ocf", ocf}};
      c.workloads = {"read", "negread"};
      v.push_back(c);
    }
    // Figs. 13-14: insert (load), positive and negative read, 50/50, delete; 1 and 2 threads;
    // persistence on and off. Fig. 15: YCSB-A latency percentiles.
    for (int t : {1, 2})
      for (std::string var : {"pm", "off"}) {
        RunConfig c = hd("");
        c.variant = var;
        c.threads = t;
        c.keys = n(5'000'000);
        c.ops = n(5'000'000);
        c.workloads = {"read", "negread", "mixed", "ycsb-a", "delete"};
        v.push_back(c);
      }
    // §3.4: the synchronous write mechanism (background hot-table writer) vs inline.
    for (std::string sw : {"inline", "background"}) {
      RunConfig c = hd("sync_write=" + sw);
      c.keys = n(2'000'000);
      c.ops = n(2'000'000);
      c.params = {{"sync_write", sw}};
      c.workloads = {"update"};
      v.push_back(c);
    }
    // Table 1: recovery (OCF and hot table rebuilt) after a crash at 2M, 20M, 50M keys.
    for (uint64_t keys : {2'000'000ull, 20'000'000ull, 50'000'000ull}) {
      RunConfig c = hd("recovery");
      c.threads = 2;
      c.keys = n(keys);
      c.ops = 0;
      c.capacity_hint = c.keys;
      c.workloads = {};
      c.recovery = true;
      v.push_back(c);
    }
  } else if (name == "pmeh") {
    auto pm = [&](const std::string& label) {
      RunConfig c = base;
      c.scheme = "pmeh";
      c.threads = 1;
      c.label = label;
      c.recovery = false;
      return c;
    };
    // Zones are bound to as many threads as the run has (set after threads below).
    auto zones_for = [](RunConfig& c) { c.params["zone_threads"] = std::to_string(c.threads); };
    // Fig. 11 and Fig. 16: split multiple x segment size: load (inserts from the initial 64
    // segments), read, load factor and records moved by splits.
    for (int split : {2, 4, 8, 16})
      for (uint64_t seg : {4096ull, 8192ull, 16384ull, 32768ull, 65536ull, 131072ull}) {
        RunConfig c = pm("s" + std::to_string(split) + " seg=" + std::to_string(seg / 1024) + "K");
        c.keys = n(4'000'000);
        c.ops = n(4'000'000);
        c.params = {{"split", std::to_string(split)}, {"segment_bytes", std::to_string(seg)}};
        c.workloads = {"read"};
        zones_for(c);
        v.push_back(c);
      }
    // Fig. 15: load factor over inserts (20 steps) for 2/4/8/16-split, 32 KB segments.
    for (int split : {2, 4, 8, 16}) {
      RunConfig c = pm("lf s" + std::to_string(split));
      c.keys = 0;
      c.ops = 4'000'000;  // not scaled: 16-split's trough comes after ~2.7M inserts
      c.params = {{"split", std::to_string(split)}, {"segment_bytes", "32768"}};
      c.workloads = {"lfsweep"};
      zones_for(c);
      v.push_back(c);
    }
    // Figs. 12-13: insert (load), positive and negative read, 50/50, delete; 1 and 2 threads;
    // uniform and zipfian; the share of writes done lock-free is a counter.
    for (std::string dist : {"uniform", "zipfian:0.99"})
      for (int t : {1, 2}) {
        RunConfig c = pm("");
        DistSpec::parse(dist, &c.dist);
        c.threads = t;
        c.keys = n(5'000'000);
        c.ops = n(5'000'000);
        c.workloads = {"read", "negread", "mixed", "update", "delete"};
        zones_for(c);
        v.push_back(c);
      }
    // Fig. 14 as the paper sets it up: searches (and updates) over zipfian skew, 2 threads,
    // keys routed to the thread owning their zone (--routed): the opportunistic scheme
    // (idle threads help: routed=help) vs partition-only (no helping: each thread serves its
    // own zones, concurrency=partition refuses the rest), plus always-lock (helping, every
    // write locked). The ids are drawn from the distribution and handed to their owners.
    for (std::string th : {"0.6", "0.8", "0.99", "1.22"})
      for (std::string cc : {"opportunistic", "partition", "locked"}) {
        RunConfig c = pm("fig14 " + cc);
        DistSpec::parse("zipfian:" + th, &c.dist);
        c.threads = 2;
        c.keys = 2'000'000;  // not scaled: the setting of docs/RESULTS.md's Fig. 14 row
        c.ops = 4'000'000;
        c.params = {{"concurrency", cc}};
        c.routed = cc == "partition" ? RunConfig::Routing::kOwn : RunConfig::Routing::kHelp;
        c.workloads = {"read", "update"};
        zones_for(c);
        v.push_back(c);
      }
    // Table II: recovery after a crash at 1M, 10M, 50M keys (instant: flat).
    for (uint64_t keys : {1'000'000ull, 10'000'000ull, 50'000'000ull}) {
      RunConfig c = pm("recovery");
      c.threads = 2;
      c.keys = n(keys);
      c.ops = 0;
      c.workloads = {};
      c.recovery = true;
      zones_for(c);
      v.push_back(c);
    }
  } else {
    *ok = false;
  }
  return v;
}

}  // namespace

namespace pmhash::bench {
int bench_main(int argc, char** argv);
}

#ifndef PMHASH_BENCH_NO_MAIN
int main(int argc, char** argv) {
  return pmhash::bench::bench_main(argc, argv);
}
#endif

int pmhash::bench::bench_main(int argc, char** argv) {
  RunConfig base;
  std::string suite_name, json_path, csv_path;
  std::vector<std::string> scheme_list = schemes(), variants = {"pm"}, thread_list = {"1"};
  int repeat = 1;
  std::optional<uint64_t> key_size, value_size;  // given: checked against the format below
  bool empty_field = false;                      // a list option with an empty item
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "pmhash-bench: %s needs a value\n%s", a.c_str(), kUsage);
        std::exit(2);
      }
      return argv[++i];
    };
    // A whole unsigned decimal number in [lo, hi], or exit 2 naming the option (std::stoull
    // threw on words, uncaught, and wrapped "-1" round to 2^64 - 1).
    auto number = [&](uint64_t lo, uint64_t hi) -> uint64_t {
      std::string v = next();
      uint64_t n = 0;
      if (!whole_number(v, lo, hi, &n)) {
        std::fprintf(stderr, "pmhash-bench: %s takes a whole number from %llu to %llu, not '%s'\n",
                     a.c_str(), static_cast<unsigned long long>(lo),
                     static_cast<unsigned long long>(hi), v.c_str());
        std::exit(2);
      }
      return n;
    };
    constexpr uint64_t kAny = ~uint64_t{0};
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else if (a == "--suite")
      suite_name = next();
    else if (a == "--schemes")
      scheme_list = split(next(), ',', &empty_field);
    else if (a == "--variants")
      variants = split(next(), ',', &empty_field);
    else if (a == "--format") {
      std::string f = next();
      if (f != "fixed" && f != "variable") {
        std::fprintf(stderr, "pmhash-bench: bad --format\n");
        return 2;
      }
      base.format = f == "fixed" ? Format::kFixed : Format::kVariable;
    } else if (a == "--key-size")
      key_size = number(1, kMaxKeySize);
    else if (a == "--value-size")
      value_size = number(1, kMaxValueSize);
    else if (a == "--threads") {
      thread_list = split(next(), ',', &empty_field);
      for (auto& t : thread_list) {
        uint64_t n = 0;
        if (!whole_number(t, 1, 1024, &n)) {
          std::fprintf(stderr, "pmhash-bench: --threads takes numbers from 1 to 1024, not '%s'\n",
                       t.c_str());
          return 2;
        }
      }
    } else if (a == "--keys")
      base.keys = number(0, kAny);  // 0: lfsweep sizes itself
    else if (a == "--ops")
      base.ops = number(0, kAny);  // 0: a load (and recovery) only
    else if (a == "--workloads")
      base.workloads = split(next(), ',');
    else if (a == "--dist") {
      if (!DistSpec::parse(next(), &base.dist)) {
        std::fprintf(stderr, "pmhash-bench: bad --dist\n");
        return 2;
      }
    } else if (a == "--params") {
      for (auto& kv : split(next(), ',')) {
        size_t eq = kv.find('=');
        if (eq == std::string::npos) {
          std::fprintf(stderr, "pmhash-bench: --params takes k=v\n");
          return 2;
        }
        base.params[kv.substr(0, eq)] = kv.substr(eq + 1);
      }
    } else if (a == "--label")
      base.label = next();
    else if (a == "--mode") {
      std::string m = next();
      if (m != "pm" && m != "emulated" && m != "msync" && m != "auto") {
        std::fprintf(stderr, "pmhash-bench: unknown --mode '%s' (auto, pm, emulated, msync)\n",
                     m.c_str());
        return 2;
      }
      base.mode = m == "pm"         ? Mode::kPm
                  : m == "emulated" ? Mode::kEmulated
                  : m == "msync"    ? Mode::kMsync
                                    : Mode::kAuto;
    } else if (a == "--pool-dir")
      base.pool_dir = next();
    else if (a == "--pool-size")
      base.pool_size = number(1, kAny);
    else if (a == "--prefault")
      base.prefault = true;
    else if (a == "--delay-ns")
      base.delay_ns = static_cast<uint32_t>(number(0, 1'000'000));  // 1 ms per line at most
    else if (a == "--capacity-hint")
      base.capacity_hint = number(0, kAny);
    else if (a == "--repeat")
      repeat = static_cast<int>(number(1, 1000));
    else if (a == "--seed")
      base.seed = number(0, kAny);
    else if (a == "--no-recovery")
      base.recovery = false;
    else if (a == "--sequential-keys")
      base.sequential_keys = true;
    else if (a == "--routed")
      base.routed = RunConfig::Routing::kOwn;
    else if (a == "--routed=help")
      base.routed = RunConfig::Routing::kHelp;
    else if (a == "--sweep-deletes")
      base.sweep_deletes = true;
    else if (a == "--batch")
      base.batch = static_cast<uint32_t>(number(1, 4096));
    else if (a == "--limit")
      base.limit = true;
    else if (a == "--no-pin")
      base.pin = false;
    else if (a == "--json")
      json_path = next();
    else if (a == "--csv")
      csv_path = next();
    else {
      std::fprintf(stderr, "pmhash-bench: unknown option %s\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (empty_field || thread_list.empty() || scheme_list.empty() || variants.empty()) {
    std::fprintf(stderr,
                 "pmhash-bench: --threads, --schemes and --variants take non-empty, "
                 "comma-separated lists\n");
    return 2;
  }
  // Key and value sizes: the fixed format's are 8 bytes; the variable format's default to
  // 16-byte keys and 15-byte values (one-line items), whatever the order of the options.
  if (base.format == Format::kFixed && (key_size.value_or(8) != 8 || value_size.value_or(8) != 8)) {
    std::fprintf(stderr,
                 "pmhash-bench: the fixed format has 8-byte keys and values; use "
                 "--format variable for other sizes\n");
    return 2;
  }
  if (base.format == Format::kVariable) {
    base.key_size = key_size.value_or(16);
    base.value_size = value_size.value_or(15);
  }
  for (auto& var : variants)
    if (var != "pm" && var != "off" && var != "dram" && var != "cuckoo") {
      std::fprintf(stderr, "pmhash-bench: unknown variant '%s' (pm, off, dram, cuckoo)\n",
                   var.c_str());
      return 2;
    }
  const std::vector<std::string> known = schemes();
  for (auto& s : scheme_list)
    if (std::find(known.begin(), known.end(), s) == known.end()) {
      std::fprintf(stderr, "pmhash-bench: unknown scheme '%s'\n", s.c_str());
      return 2;
    }

  std::vector<RunConfig> configs;
  if (!suite_name.empty()) {
    const char* sc = std::getenv("PMHASH_BENCH_SCALE");
    double scale = sc ? std::atof(sc) : 1.0;
    if (scale <= 0 || scale > 1) scale = 1.0;
    bool ok;
    configs = suite(suite_name, base, scheme_list, scale, &ok);
    if (!ok) {
      std::fprintf(stderr,
                   "pmhash-bench: unknown suite '%s' (quick, compare, large, writes, churn, "
                   "smartht, turbohash, wophi, "
                   "hdnh, pmeh)\n",
                   suite_name.c_str());
      return 2;
    }
  } else {
    for (auto& s : scheme_list)
      for (auto& var : variants)
        for (auto& t : thread_list) {
          if ((var == "dram" || var == "cuckoo") && s != scheme_list.front()) continue;
          RunConfig c = base;
          c.scheme = s;
          c.variant = var;
          c.threads = std::stoi(t);
          configs.push_back(c);
        }
  }

  // Refuse a scheme parameter a run's scheme lacks or a bad value before anything runs: a
  // batch failed at that run, its finished rows lost (--params go to every scheme).
  for (auto& c : configs) {
    if (c.variant != "pm" && c.variant != "off") continue;  // the DRAM tables take none
    Options o;
    o.scheme = c.scheme;
    o.format = c.format;
    o.params = c.params;
    o.capacity_hint = c.capacity_hint;
    Status s = check_scheme_options(o);
    if (!s.ok()) {
      std::fprintf(stderr, "pmhash-bench: %s\n", s.to_string().c_str());
      return 2;
    }
  }
  // Variable keys are distinct for every id from 8 bytes on (workload.cpp KeySpace::key).
  for (auto& c : configs)
    if (c.format == Format::kVariable && c.key_size < 8) {
      std::fprintf(stderr,
                   "pmhash-bench: --key-size %zu: variable keys shorter than 8 bytes cannot be "
                   "distinct for every key id; use 8 or more\n",
                   c.key_size);
      return 2;
    }
  // Refuse a distribution a workload would not honour before anything runs (a suite too).
  for (auto& c : configs)
    for (auto& w : c.workloads) {
      std::string why;
      if (w != "ycsb-d" && !honours(w, c.dist, &why)) {
        std::fprintf(stderr, "pmhash-bench: %s\n", why.c_str());
        return 2;
      }
    }
  std::fprintf(stderr, "pmhash-bench: %zu runs x %d repeats; pool dir %s\n", configs.size(), repeat,
               base.pool_dir.c_str());
  // Repeats go round the configurations (every configuration once, then again), so a
  // configuration's min-max range spans the whole run and includes the machine's drift
  // between runs minutes apart, which back-to-back repeats would hide.
  std::vector<std::vector<std::vector<Row>>> reps(configs.size());
  for (int r = 0; r < repeat; ++r)
    for (size_t i = 0; i < configs.size(); ++i) {
      std::vector<Row> rows;
      std::string err;
      RunConfig cr = configs[i];
      cr.seed = configs[i].seed + r;
      if (!run(cr, &rows, &err)) {
        std::fprintf(stderr, "pmhash-bench: %s\n", err.c_str());
        return 1;
      }
      reps[i].push_back(std::move(rows));
    }
  std::vector<Row> all;
  for (auto& rep : reps)
    for (auto& row : median_rows(rep)) all.push_back(row);
  add_ratios(&all);
  std::string mode;
  for (auto& r : all)
    if (r.tags.count("mode") && r.tags["variant"] == "pm") mode = r.tags["mode"];
  std::printf("pmhash-bench — pool mode: %s (pool dir %s); machine: %s\n", mode.c_str(),
              base.pool_dir.c_str(), machine_summary().c_str());
  std::printf(
      "medians of %d run(s) (±: half the min-max range; every value's _min/_max in the JSON); "
      "xoff = throughput / same scheme with persistence off; xdram = throughput / DRAM "
      "reference table; LFpap = the paper's load factor where it counts capacity differently; "
      "p99.99: n/a (<1e6 samples)%s\n\n",
      repeat, repeat < 3 ? "\nWARNING: fewer than 3 runs: not a result to quote (--repeat 3)" : "");
  print_table(all, stdout);
  if (!json_path.empty()) std::ofstream(json_path) << to_json(all, command, suite_name, repeat);
  if (!csv_path.empty()) std::ofstream(csv_path) << to_csv(all);
  auto bad = count_violations(all);
  for (auto& b : bad) std::fprintf(stderr, "pmhash-bench: COUNT CHECK FAILED: %s\n", b.c_str());
  return bad.empty() ? 0 : 1;
}
