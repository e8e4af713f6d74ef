// libFuzzer target: a small pool of one scheme and format (chosen by the first input byte),
// patched by the rest of the input — records of {offset u24, byte} — then opened, checked,
// read, written and closed, in process. Build and run: `make fuzz` (needs clang).
// Without libFuzzer (-DPMHASH_FUZZ_STANDALONE) main() runs each file named on the command
// line once, to replay a crash input.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "index_impl.hpp"

namespace {

using namespace pmhash;

const char* const kSchemes[] = {"turbohash", "smartht", "wophi", "hdnh", "pmeh", "lineht"};

std::map<std::string, std::string> small_params(const std::string& s) {
  if (s == "turbohash") return {{"shards", "2"}, {"buckets", "1"}, {"scope", "4"}};
  if (s == "smartht") return {{"buckets", "4"}, {"stripe", "2"}, {"filter_keys", "16"}};
  if (s == "wophi")
    return {{"buckets", "4"}, {"stripe", "2"}, {"pab_buckets", "2"}, {"pab_grow", "inline"}};
  if (s == "hdnh") return {{"segment_bytes", "256"}, {"segments", "1"}};
  if (s == "lineht") return {{"shards", "2"}, {"buckets", "2"}, {"probe", "2"}};
  return {{"segment_bytes", "2048"}, {"split", "4"}, {"zones", "1"}, {"depth", "0"}};
}

std::string key(int i, bool fixed) {
  std::string k = fixed ? std::string(8, '\0') : "key-" + std::to_string(i);
  if (fixed) std::memcpy(k.data(), &i, sizeof i);
  return k;
}

Options options(int config) {
  Options o;
  o.scheme = kSchemes[config / 2];
  o.format = config % 2 ? Format::kVariable : Format::kFixed;
  o.mode = Mode::kNone;  // the file is rewritten each run: nothing to make durable
  o.pool_size = 2u << 20;
  o.params = small_params(o.scheme);
  return o;
}

OpenHooks hooks() {
  OpenHooks h;
  h.chunk_size = 64u << 10;
  return h;
}

std::vector<char> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

// The ten original pools, built once per process.
const std::vector<char>& original(int config, const std::string& path) {
  static std::vector<char> pools[10];
  if (pools[config].empty()) {
    unlink(path.c_str());
    std::unique_ptr<Index> idx;
    if (!open_index(path, options(config), hooks(), &idx).ok()) std::abort();
    bool fixed = config % 2 == 0;
    for (int i = 0; i < 100; ++i) (void)idx->insert(key(i, fixed), key(i + 7, true));
    (void)idx->close();
    idx.reset();
    pools[config] = read_all(path);
  }
  return pools[config];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const std::string path = "/dev/shm/pmhash-fuzz-" + std::to_string(getpid()) + ".pool";
  int config = data[0] % 10;
  std::vector<char> bytes = original(config, path);
  for (size_t i = 1; i + 4 <= size; i += 4) {
    uint32_t off = data[i] | (data[i + 1] << 8) | (uint32_t{data[i + 2]} << 16);
    if (off < bytes.size()) bytes[off] = static_cast<char>(data[i + 3]);
  }
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  Options o = options(config);
  o.create = false;
  std::unique_ptr<Index> idx;
  if (open_index(path, o, hooks(), &idx).ok()) {
    std::string report, v;
    (void)idx->impl()->check(&report);
    bool fixed = config % 2 == 0;
    for (int i = 0; i < 110; ++i) (void)idx->get(key(i, fixed), &v);
    for (int i = 0; i < 20; ++i) {
      (void)idx->upsert(key(i, fixed), key(i, true));
      (void)idx->insert(key(500 + i, fixed), key(i, true));
      (void)idx->remove(key(i + 40, fixed));
    }
    (void)idx->close();
  } else if (read_all(path) != bytes) {
    std::abort();  // a refused open changed the file
  }
  return 0;
}

#ifdef PMHASH_FUZZ_STANDALONE
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::vector<char> in = read_all(argv[i]);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(in.data()), in.size());
    std::printf("%s: ok\n", argv[i]);
  }
  return 0;
}
#endif
