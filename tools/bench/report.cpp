#include "report.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/tag_match.hpp"
#include "pm/persist.hpp"

namespace pmhash::bench {

namespace {
// Values a run is configured with (the same in every repeat): no spread to report.
const std::set<std::string> kSetting = {"threads",  "keys", "key_size",      "value_size",
                                        "delay_ns", "ops",  "expect_all_ok", "expect_none_ok"};
}  // namespace

std::vector<Row> median_rows(const std::vector<std::vector<Row>>& repeats) {
  if (repeats.empty()) return {};
  std::vector<Row> out = repeats[0];
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<std::string> keys;
    for (auto& kv : out[i].values) keys.push_back(kv.first);
    for (const std::string& k : keys) {
      double& v = out[i].values[k];
      std::vector<double> xs;
      for (auto& rep : repeats)
        if (i < rep.size() && rep[i].values.count(k)) xs.push_back(rep[i].values.at(k));
      std::sort(xs.begin(), xs.end());
      v = xs.size() % 2 ? xs[xs.size() / 2] : (xs[xs.size() / 2 - 1] + xs[xs.size() / 2]) / 2;
      if (!kSetting.count(k)) {  // every measured number carries its spread
        out[i].values[k + "_min"] = xs.front();
        out[i].values[k + "_max"] = xs.back();
      }
    }
    out[i].values["repeats"] = double(repeats.size());
  }
  return out;
}

namespace {

std::string tag(const Row& r, const std::string& k) {
  auto it = r.tags.find(k);
  return it == r.tags.end() ? "" : it->second;
}
double val(const Row& r, const std::string& k) {
  auto it = r.values.find(k);
  return it == r.values.end() ? NAN : it->second;
}
std::string same_run_key(const Row& r, bool with_scheme) {
  std::ostringstream s;
  s << (with_scheme ? tag(r, "scheme") : "") << "|" << tag(r, "workload") << "|" << tag(r, "format")
    << "|" << tag(r, "dist") << "|" << val(r, "threads") << "|" << val(r, "keys") << "|"
    << val(r, "key_size") << "|" << val(r, "value_size");
  return s.str();
}

}  // namespace

void add_ratios(std::vector<Row>* rows) {
  std::map<std::string, double> off, dram, cuckoo;
  for (auto& r : *rows) {
    if (!r.values.count("mops") || tag(r, "workload") == "limit") continue;
    if (tag(r, "variant") == "off" && tag(r, "label").empty())
      off[same_run_key(r, true)] = val(r, "mops");
    if (tag(r, "variant") == "dram") dram[same_run_key(r, false)] = val(r, "mops");
    if (tag(r, "variant") == "cuckoo") cuckoo[same_run_key(r, false)] = val(r, "mops");
  }
  for (auto& r : *rows) {
    if (tag(r, "variant") != "pm" || !r.values.count("mops") || tag(r, "workload") == "limit")
      continue;
    auto a = off.find(same_run_key(r, true));
    if (a != off.end() && a->second > 0) r.values["vs_off"] = val(r, "mops") / a->second;
    auto b = dram.find(same_run_key(r, false));
    if (b != dram.end() && b->second > 0) r.values["vs_dram"] = val(r, "mops") / b->second;
    auto c = cuckoo.find(same_run_key(r, false));
    if (c != cuckoo.end() && c->second > 0) r.values["vs_cuckoo"] = val(r, "mops") / c->second;
  }
}

std::vector<std::string> count_violations(const std::vector<Row>& rows) {
  std::vector<std::string> v;
  for (auto& r : rows) {
    if (!r.values.count("ops")) continue;
    std::string what = tag(r, "scheme") + "/" + tag(r, "variant") + "/" + tag(r, "workload");
    double ops = val(r, "ops"), ok = val(r, "succeeded"), failed = val(r, "failed");
    if (ops != ok + failed) v.push_back(what + ": issued != succeeded + failed");
    if (val(r, "expect_none_ok") == 1 && ok != 0) v.push_back(what + ": a negative read succeeded");
    if (val(r, "expect_all_ok") == 1 && failed != 0 && tag(r, "workload") != "ycsb-d")
      v.push_back(what + ": " + std::to_string(int64_t(failed)) + " operations failed");
  }
  for (auto& r : rows)
    if (r.values.count("keys_intact") && val(r, "keys_intact") != 1)
      v.push_back(tag(r, "scheme") + "/" + tag(r, "workload") + ": keys lost across reopen");
  return v;
}

void print_table(const std::vector<Row>& rows, FILE* out) {
  std::fprintf(
      out,
      "%-10s %-6s %-12s %-8s %2s %-14s %13s %6s %8s %8s %9s %6s %6s %5s %5s %7s %7s %6s %6s "
      "%6s\n",
      "scheme", "var", "label", "format", "T", "workload", "Mops/s", "misses", "p50ns", "p99ns",
      "p99.99ns", "fl/op", "fe/op", "LF", "LFpap", "PMB/key", "DRB/key", "xoff", "xdram", "xcuck");
  for (auto& r : rows) {
    std::string w = tag(r, "workload");
    if (w.rfind("lfsweep", 0) == 0 && w != "lfsweep-negread") continue;  // see the JSON
    if (r.values.count("recovery_ms")) {
      std::fprintf(out,
                   "%-10s %-6s %-12s %-8s %2.0f %-14s open %.2f ms, ready %.2f ms, at %.0f keys\n",
                   tag(r, "scheme").c_str(), tag(r, "variant").c_str(), tag(r, "label").c_str(),
                   tag(r, "format").c_str(), val(r, "threads"), w.c_str(), val(r, "recovery_ms"),
                   val(r, "ready_ms"), val(r, "size"));
      continue;
    }
    auto num = [&](const char* k, const char* fmt) {
      char b[32];
      double x = val(r, k);
      if (std::isnan(x)) return std::string("-");
      std::snprintf(b, sizeof b, fmt, x);
      return std::string(b);
    };
    // The median with half its min-max range, when there were repeats.
    auto spread = [&](const char* k, const char* fmt) {
      std::string m = num(k, fmt);
      double x = val(r, k), lo = val(r, std::string(k) + "_min"),
             hi = val(r, std::string(k) + "_max");
      if (m == "-" || std::isnan(lo) || std::isnan(hi) || x <= 0 || val(r, "repeats") < 2) return m;
      char b[16];
      std::snprintf(b, sizeof b, "±%.0f%%", 50.0 * (hi - lo) / x);
      return m + b;
    };
    std::string p9999 = num("p9999_ns", "%.0f");
    if (p9999 == "-" && val(r, "latency_samples") >= 0) p9999 = "n/a";  // < 1e6 samples
    std::fprintf(
        out,
        "%-10s %-6s %-12s %-8s %2.0f %-14s %13s %6s %8s %8s %9s %6s %6s %5s %5s %7s %7s %6s %6s "
        "%6s\n",
        tag(r, "scheme").c_str(), tag(r, "variant").c_str(), tag(r, "label").c_str(),
        tag(r, "format").c_str(), val(r, "threads"), w.c_str(), spread("mops", "%.3f").c_str(),
        num("miss_equiv", "%.2f").c_str(), num("p50_ns", "%.0f").c_str(),
        num("p99_ns", "%.0f").c_str(), p9999.c_str(), num("flushes_per_op", "%.2f").c_str(),
        num("fences_per_op", "%.2f").c_str(), num("load_factor", "%.2f").c_str(),
        num("load_factor_paper", "%.2f").c_str(), num("pm_bytes_per_key", "%.1f").c_str(),
        num("dram_bytes_per_key", "%.1f").c_str(), num("vs_off", "%.2f").c_str(),
        num("vs_dram", "%.2f").c_str(), num("vs_cuckoo", "%.2f").c_str());
  }
}

namespace {

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o;
}

std::string json_num(double v) {
  if (std::isnan(v) || std::isinf(v)) return "null";
  char b[40];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "?";
}

}  // namespace

std::string machine_summary() {
  utsname u{};
  uname(&u);
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
  std::ostringstream s;
  s << "{\"cpu\": \"" << json_escape(cpu_model())
    << "\", \"cpus\": " << std::thread::hardware_concurrency()
    << ", \"memory_gib\": " << json_num(double(pages) * double(psize) / (1 << 30))
    << ", \"kernel\": \"" << u.release << "\", \"flush\": \""
    << pm::flush_instr_name(pm::best_flush_instruction()) << "\", \"tag_match\": \""
    << common::tag_match_name(common::best_tag_match()) << "\"}";
  return s.str();
}

std::string to_json(const std::vector<Row>& rows, const std::string& command,
                    const std::string& suite, int repeats) {
  std::ostringstream s;
  s << "{\n  \"tool\": \"pmhash-bench\",\n  \"schema\": 1,\n  \"command\": \""
    << json_escape(command) << "\",\n  \"suite\": \"" << json_escape(suite)
    << "\",\n  \"repeats\": " << repeats << ",\n  \"machine\": " << machine_summary()
    << ",\n  \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    s << "    {";
    bool first = true;
    for (auto& [k, v] : rows[i].tags) {
      s << (first ? "" : ", ") << "\"" << json_escape(k) << "\": \"" << json_escape(v) << "\"";
      first = false;
    }
    for (auto& [k, v] : rows[i].values) {
      s << (first ? "" : ", ") << "\"" << json_escape(k) << "\": " << json_num(v);
      first = false;
    }
    s << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  s << "  ]\n}\n";
  return s.str();
}

std::string to_csv(const std::vector<Row>& rows) {
  std::set<std::string> tags, values;
  for (auto& r : rows) {
    for (auto& [k, v] : r.tags) tags.insert(k);
    for (auto& [k, v] : r.values) values.insert(k);
  }
  std::ostringstream s;
  bool first = true;
  for (auto& k : tags) s << (first ? "" : ",") << k, first = false;
  for (auto& k : values) s << "," << k;
  s << "\n";
  for (auto& r : rows) {
    first = true;
    for (auto& k : tags) s << (first ? "" : ",") << tag(r, k), first = false;
    for (auto& k : values) s << "," << (r.values.count(k) ? json_num(r.values.at(k)) : "");
    s << "\n";
  }
  return s.str();
}

}  // namespace pmhash::bench
