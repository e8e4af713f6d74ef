#include <algorithm>
#include <chrono>
#include <map>
#include <new>
#include <set>
#include <system_error>
#include <utility>
#include <vector>

#include "index_impl.hpp"

namespace pmhash {

const char* code_name(Code c) {
  switch (c) {
    case Code::kOk:
      return "ok";
    case Code::kNotFound:
      return "not found";
    case Code::kAlreadyExists:
      return "already exists";
    case Code::kInvalidArgument:
      return "invalid argument";
    case Code::kNotAPool:
      return "not a pool";
    case Code::kTruncated:
      return "truncated";
    case Code::kChecksumMismatch:
      return "checksum mismatch";
    case Code::kUnsupportedVersion:
      return "unsupported version";
    case Code::kSchemeMismatch:
      return "scheme mismatch";
    case Code::kFormatMismatch:
      return "format mismatch";
    case Code::kPoolBusy:
      return "pool busy";
    case Code::kPoolFull:
      return "pool full";
    case Code::kUnknownScheme:
      return "unknown scheme";
    case Code::kIoError:
      return "I/O error";
    case Code::kCorrupted:
      return "corrupted";
    case Code::kClosed:
      return "closed";
  }
  return "?";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(code_name(code_)) + ": " + message();
}

const char* format_name(Format f) {
  return f == Format::kFixed ? "fixed" : "variable";
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kAuto:
      return "auto";
    case Mode::kPm:
      return "pm";
    case Mode::kEmulated:
      return "emulated";
    case Mode::kMsync:
      return "msync";
    case Mode::kNone:
      return "none";
  }
  return "?";
}

PersistCounters thread_persist_counters() {
  return pm::tls_counters;
}

std::vector<std::string> schemes() {
  std::vector<std::string> v;
  for (auto* f : all_schemes()) v.push_back(f->name);
  return v;
}

Status IndexImpl::full_status(const Status& s) const {
  if (!pm::Allocator::file_system_was_full()) return s;
  return {Code::kPoolFull,
          s.message() + " (the file system holding the sparse pool file '" + pool->path() +
              "' has no room for its pages: free space there or prefault the pool)"};
}

Status IndexImpl::check_key(std::string_view key) const {
  if (key_size_ok(key)) return Status::Ok();
  if (!items->variable())
    return {Code::kInvalidArgument,
            "fixed pools take 8-byte keys, got " + std::to_string(key.size()) + " bytes"};
  if (key.empty()) return {Code::kInvalidArgument, "empty key"};
  return {Code::kInvalidArgument, "key of " + std::to_string(key.size()) +
                                      " bytes exceeds the limit of " + std::to_string(kMaxKeySize)};
}

Status IndexImpl::check_value(std::string_view value) const {
  if (items->variable()) {
    if (value.empty()) return {Code::kInvalidArgument, "empty value"};
    if (value.size() > kMaxValueSize)
      return {Code::kInvalidArgument, "value of " + std::to_string(value.size()) +
                                          " bytes exceeds the limit of " +
                                          std::to_string(kMaxValueSize)};
  } else if (value.size() != 8) {
    return {Code::kInvalidArgument,
            "fixed pools take 8-byte values, got " + std::to_string(value.size()) + " bytes"};
  }
  return Status::Ok();
}

// The pool's recorded count stops being a lower bound: dropped, durably, before the first
// remove of this open can commit.
void IndexImpl::drop_record() {
  std::lock_guard<std::mutex> g(record_mu);
  if (!holds_record.load(std::memory_order_relaxed)) return;
  pool->drop_recorded_count();
  holds_record.store(false, std::memory_order_release);
}

// Until the first write after a clean open, the items the scheme iterates must be the count
// the close recorded.
// After a clean open and before any write, the index holds exactly the recorded count. While
// the record stands otherwise (after a crash, or after inserts: nothing was removed since
// the last clean close, pm::Pool::drop_recorded_count), it is a lower bound.
bool IndexImpl::check_recorded_count(std::string* report) const {
  const bool exact = recorded_known && !written.load(std::memory_order_relaxed);
  if (!exact && !holds_record.load(std::memory_order_acquire)) return true;
  uint64_t n = 0;
  scheme->for_each([&](const common::Slot&) { ++n; });
  if (exact ? n == recorded_count : n >= recorded_count) return true;
  *report += "the last clean close recorded " + std::to_string(recorded_count) + " live items" +
             (exact ? "" : " and none was removed since") + "; the index holds " +
             std::to_string(n) + "\n";
  return false;
}

bool IndexImpl::check(std::string* report) const {
  scheme->wait_idle();  // background work allocates and links blocks too
  std::string r;
  bool ok = alloc->validate(true, &r).ok();
  ok &= scheme->check(&r);
  // allocated == reachable: every allocated block is referenced once, and nothing else.
  std::map<uint64_t, uint64_t> allocated;
  alloc->for_each_allocated([&](uint64_t off, uint64_t size) { allocated[off] = size; });
  std::set<uint64_t> reachable;
  auto owned = [&](uint64_t off) {
    if (!reachable.insert(off).second) {
      ok = false;
      r += "block " + std::to_string(off) + " is referenced twice\n";
    }
    if (!allocated.count(off)) {
      ok = false;
      r += "block " + std::to_string(off) + " is referenced but not allocated\n";
    }
  };
  scheme->for_each_reachable(owned);
  alloc->spares().for_each(owned);  // marked ahead, not yet taken (pm::SpareBlocks)
  size_t leaked = 0;
  for (auto& [off, size] : allocated) {
    if (reachable.count(off)) continue;
    ok = false;
    if (++leaked <= 5)
      r += "block " + std::to_string(off) + " (" + std::to_string(size) +
           " bytes) is allocated but unreachable (leak)\n";
  }
  if (leaked > 5) r += std::to_string(leaked) + " leaked blocks in all\n";
  ok &= check_recorded_count(&r);
  if (report) *report += r;
  return ok;
}

// Shuts the gate (later calls get kClosed), waits for the calls inside, then shuts down:
// the scheme stops its background work and saves what its paper saves, everything retired
// is freed, and the pool is marked clean. A second close() waits for the first.
void IndexImpl::close() {
  gate.shut();
  std::lock_guard<std::mutex> g(close_mu);
  if (closed) return;
  // The count a clean reopen checks the buckets against (taken while the scheme still runs:
  // SmartHT's size() may wait for its filter rebuild).
  uint64_t live = pool->read_only() ? 0 : scheme->size();
  // Spares (pm::SpareBlocks) back first: no call is in flight and no background worker
  // takes them, and what the scheme's close allocates may need their room.
  alloc->spares().give_back();
  if (!pool->read_only()) scheme->close();  // a private mapping: nothing to save
  scheme->stop();
  epochs->drain();
  if (!pool->read_only()) {
    alloc->write_back();  // the frees pm::Allocator::unmark left unflushed
    pool->record_count(live);
  }
  pool->set_clean(true);
  closed = true;
}

static Status closed_status() {
  return {Code::kClosed, "the index is closed"};
}

static Status refused_status(const IndexImpl& impl) {
  if (impl.gate.is_shut()) return closed_status();
  return {Code::kInvalidArgument, "more than " + std::to_string(pm::ThreadRegistry::kMaxThreads) +
                                      " threads use this index at once"};
}

static Status open_index_resolved(const std::string& path, const Options& options,
                                  const OpenHooks& hooks, std::unique_ptr<IndexImpl>* out,
                                  std::chrono::steady_clock::time_point t0);

// A published pool never opens empty. The live count the last clean close recorded
// (pm::Pool::record_count) is compared with what the buckets hold: after a clean close in
// full where the scheme walks every bucket at open anyway, else (and after a crash, when the
// record is a lower bound: no remove since) at least one item when the count is not 0. A
// zeroed page over every bucket of a small table otherwise reads as a valid empty table.
static Status verify_recorded_count(const SchemeContext& ctx, const SchemeFactory& f) {
  uint64_t recorded = 0;
  bool known = false;
  Status s = ctx.pool.recorded_count(&recorded, &known);
  if (!s.ok() || !known || f.items_found == nullptr) return s;
  const bool exact = ctx.pool.was_clean() && f.full_count_at_open;
  uint64_t enough = exact ? UINT64_MAX : std::min<uint64_t>(recorded, 1);
  if (enough == 0) return Status::Ok();
  uint64_t found = f.items_found(ctx, enough);
  if (exact ? found == recorded : found > 0) return Status::Ok();
  std::string held =
      ctx.pool.was_clean()
          ? "the last clean close recorded " + std::to_string(recorded) + " live items"
          : "the pool held " + std::to_string(recorded) +
                " live items at its last clean close and none was removed since";
  return {Code::kCorrupted, std::string(f.name) + ": " + held + ", but the buckets hold " +
                                (exact ? std::to_string(found) : std::string("none")) +
                                " (damaged buckets; the count is at offset " +
                                std::to_string(pm::kMutableHeaderOffset + 24) + ")"};
}

// A new variable-format table that leaves its pool no room for one item (the smallest: a
// 1-byte key and a 1-byte value) would open and then refuse every insert (HDNH's default levels
// filled a 4 MiB pool): such a pool is refused at creation instead. The test changes
// nothing: a trial reservation made a 64-byte slab that kept a small pool's last chunk from
// larger items for good (helper-44's review).
static bool room_for_an_item(SchemeContext& ctx) {
  return ctx.alloc.has_room_for(8 + 1 + 1);  // lengths, key, value (common/items)
}

// A scheme sizes DRAM structures from its layout (LineHT's per-shard arrays, HDNH's OCF,
// SmartHT's filter); the kernel may refuse them. Nothing throws out of the API: that is an
// error here, and a pool being created is then removed.
// *refused: the system refused memory or a thread (the pool's structures are not at fault).
static Status create_or_open(const SchemeFactory& f, SchemeContext& ctx, bool fresh, bool clean,
                             std::unique_ptr<Scheme>* out, bool* refused) {
  *refused = true;
  try {
    Status s = fresh ? f.create(ctx, out) : f.open(ctx, clean, out);
    *refused = false;
    if (s.ok() && fresh && ctx.items.variable() && !room_for_an_item(ctx)) {
      out->reset();
      return {Code::kPoolFull, "pool too small: the new " + std::string(f.name) +
                                   " table leaves no room for an item"};
    }
    return s;
  } catch (const std::bad_alloc&) {
    out->reset();
    return {Code::kIoError, "out of memory: the " + std::string(f.name) +
                                " index's DRAM structures for this pool could not be allocated"};
  } catch (const std::system_error& e) {
    out->reset();
    return {Code::kIoError,
            "the " + std::string(f.name) + " index could not start a thread: " + e.what()};
  }
}

// Read-only checks of everything open and recovery will follow first: allocator metadata,
// the root and published words, the scheme's root (SchemeFactory::validate). The one write
// allowed before: finishing a committed allocator transaction (a redo log whose checksum
// and entries are valid), since the root a scheme validates may be in it.
// `real`: the arguments the pool was opened with, when it is the real pool (not a shadow).
static Status validate_before_open(SchemeContext& ctx, const SchemeFactory& f, std::string* report,
                                   bool* fresh, const pm::PoolArgs* real);

// A crashed pool's committed redo log is replayed before the root and the scheme can be
// validated. To refuse a damaged pool without changing it, the replay and the validation
// first run in a shadow: a private copy-on-write view of the same file.
static Status validate_in_shadow(const std::string& path, pm::PoolArgs pa, const SchemeFactory& f,
                                 const Options& options, std::string* report) {
  pa.read_only = pa.shadow = true;
  pa.create = false;
  pa.hook = nullptr;
  std::unique_ptr<pm::Pool> pool;
  Status s = pm::Pool::open(path, pa, &pool);
  if (!s.ok()) return s;
  auto threads = pm::ThreadRegistry::make();
  pm::Allocator alloc(*pool);
  common::Items items(pool->format(), alloc);
  pm::Epochs epochs;
  SchemeContext ctx{*pool,
                    alloc,
                    epochs,
                    *threads,
                    items,
                    options,
                    common::Params::parse(pool->params()),
                    common::Params(options.params)};
  bool fresh = false;
  return validate_before_open(ctx, f, report, &fresh, nullptr);
}

static Status validate_before_open(SchemeContext& ctx, const SchemeFactory& f, std::string* report,
                                   bool* fresh, const pm::PoolArgs* real) {
  Status s = ctx.alloc.validate(false, report);
  if (!s.ok()) return s;
  if (ctx.alloc.has_committed_log()) {
    if (real != nullptr && !ctx.pool.read_only()) {
      s = validate_in_shadow(ctx.pool.path(), *real, f, ctx.options, report);
      if (!s.ok()) return s;
    }
    ctx.alloc.replay_committed();
  }
  s = ctx.pool.check_root_state();
  if (!s.ok()) {
    if (report) *report += s.message() + "\n";
    return s;
  }
  *fresh = ctx.pool.root() == 0;
  if (*fresh || f.validate == nullptr) return Status::Ok();
  s = f.validate(ctx);
  if (s.ok()) s = verify_recorded_count(ctx, f);
  if (!s.ok() && report) *report += s.message() + "\n";
  return s;
}

// The scheme's layout and run-time parameters, each in its range; a name the scheme never
// asks for is refused too (a misspelt parameter silently left its default in force).
static Status check_params(const SchemeFactory& f, const Options& options, common::Params* layout) {
  common::Params given(options.params);
  Status s = f.layout(options, given, layout);
  if (s.ok() && f.runtime != nullptr) s = f.runtime(given);
  if (!s.ok()) return s;
  std::vector<std::string> unknown = given.unasked();
  if (unknown.empty()) return Status::Ok();
  std::string known;
  for (const std::string& k : given.asked()) known += (known.empty() ? "" : ", ") + k;
  return {Code::kInvalidArgument, std::string(f.name) + ": unknown parameter '" + unknown[0] +
                                      "' (its parameters: " + known + ")"};
}

static Status unknown_scheme(const std::string& name) {
  std::string names;
  for (auto& n : schemes()) names += (names.empty() ? "" : ", ") + n;
  return {Code::kUnknownScheme, "unknown scheme '" + name + "' (known: " + names + ")"};
}

Status check_scheme_options(const Options& options) {
  const SchemeFactory* f = find_scheme(options.scheme);
  if (f == nullptr) return unknown_scheme(options.scheme);
  common::Params layout;
  return check_params(*f, options, &layout);
}

Status open_index(const std::string& path, const Options& options, const OpenHooks& hooks,
                  std::unique_ptr<Index>* out) {
  auto t0 = std::chrono::steady_clock::now();
  if (path.empty() || path.find('\0') != std::string::npos)  // the OS would see a shorter path
    return {Code::kInvalidArgument, "the pool path is empty or holds a NUL byte"};
  Options opts = options;
  if (hooks.any_scheme) {  // take scheme and format from the pool's header
    pm::PoolArgs pa;
    pa.any_format = true;
    pa.read_only = true;
    std::unique_ptr<pm::Pool> probe;
    Status ps = pm::Pool::open(path, pa, &probe);
    if (!ps.ok()) return ps;
    opts.scheme = probe->scheme();
    opts.format = probe->format();
  }
  std::unique_ptr<IndexImpl> impl;
  Status s = open_index_resolved(path, opts, hooks, &impl, t0);
  if (s.ok()) out->reset(new Index(std::move(impl)));
  return s;
}

static Status open_index_resolved(const std::string& path, const Options& options,
                                  const OpenHooks& hooks, std::unique_ptr<IndexImpl>* out,
                                  std::chrono::steady_clock::time_point t0) {
  const SchemeFactory* f = find_scheme(options.scheme);
  if (f == nullptr) return unknown_scheme(options.scheme);
  if (options.format != Format::kFixed && options.format != Format::kVariable)
    return {Code::kInvalidArgument, "format " +
                                        std::to_string(static_cast<uint32_t>(options.format)) +
                                        " is not one of fixed(0), variable(1)"};
  if (!pm::valid_mode(options.mode))
    return {Code::kInvalidArgument, "mode " + std::to_string(static_cast<uint32_t>(options.mode)) +
                                        " is not one of " + pm::mode_range()};
  common::Params layout;
  Status s = check_params(*f, options, &layout);
  if (!s.ok()) return s;

  auto impl = std::make_unique<IndexImpl>();
  impl->options = options;
  pm::PoolArgs pa;
  pa.scheme = options.scheme;
  pa.format = options.format;
  pa.mode = options.mode;
  pa.delay_ns = options.pm_write_delay_ns;
  pa.create = options.create;
  pa.pool_size = options.pool_size;
  if (hooks.chunk_size != 0) pa.chunk_size = hooks.chunk_size;
  pa.params = layout.serialize();
  pa.hook = hooks.persist_hook;
  pa.read_only = hooks.read_only;
  s = pm::Pool::open(path, pa, &impl->pool);
  if (!s.ok()) return s;
  pm::Pool& pool = *impl->pool;
  pool.mutations = hooks.mutations;

  impl->threads = pm::ThreadRegistry::make();
  impl->alloc = std::make_unique<pm::Allocator>(pool);
  impl->items = std::make_unique<common::Items>(pool.format(), *impl->alloc);
  impl->epochs = std::make_unique<pm::Epochs>();
  pm::Allocator* alloc = impl->alloc.get();
  pm::Epochs* epochs = impl->epochs.get();
  alloc->on_free = [alloc, epochs](uint64_t off) {
    epochs->retire([alloc, off] { alloc->release(off); });
  };
  SchemeContext ctx{pool,
                    *impl->alloc,
                    *impl->epochs,
                    *impl->threads,
                    *impl->items,
                    impl->options,
                    common::Params::parse(pool.params()),
                    common::Params(options.params)};
  bool fresh = false;
  s = validate_before_open(ctx, *f, hooks.report, &fresh, &pa);
  if (!s.ok()) return s;
  // Prefaulted only once validated: a refused pool's file keeps its size on disk.
  if (options.prefault && !pool.read_only()) {
    s = pool.prefault();
    if (!s.ok()) {
      if (fresh) pool.abandon_creation();
      return s;
    }
  }

  // A pool created before session 19 may hold its redo logs and chunk table in holes
  // (pm::Pool::back); best effort: on a full file system they stay as they were.
  if (!pool.read_only()) (void)pool.back(0, pool.header().bitmap_offset);

  // Validated: from here on the file is ours. Mark it in use, so a crash from now on means
  // recovery; then the allocator's and the scheme's recovery.
  bool clean = pool.was_clean();
  if (!fresh) {
    bool known = false;
    (void)pool.recorded_count(&impl->recorded_count, &known);  // validated above
    impl->recorded_known = known && clean;
    impl->holds_record.store(known);
  }
  pool.set_clean(false);
  impl->alloc->recover(fresh);  // fresh: creation never finished, nothing is reachable
  pm::Allocator::forget_file_system_full();
  bool refused = false;
  s = create_or_open(*f, ctx, fresh, clean, &impl->scheme, &refused);
  if (!s.ok() && fresh) pool.abandon_creation();
  // Refused DRAM or a thread: the pool is as it was, so a clean one stays clean (the next
  // open takes the fast path and trusts its recorded count).
  if (!s.ok() && refused && !fresh && clean) pool.set_clean(true);
  if (s.code() == Code::kPoolFull) s = impl->full_status(s);
  if (s.code() == Code::kPoolFull && fresh && options.capacity_hint != 0)  // say what sized it
    s = {Code::kPoolFull, s.message() + " (the initial table sized from capacity_hint " +
                              std::to_string(options.capacity_hint) +
                              ": pass a smaller hint or a larger pool_size)"};
  if (!s.ok()) return s;
  impl->recovered = !fresh && !clean;
  impl->open_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  *out = std::move(impl);
  return Status::Ok();
}

Index::Index(std::unique_ptr<IndexImpl> impl) : impl_(std::move(impl)) {}

Index::~Index() {
  if (impl_) impl_->close();
}

Status Index::open(const std::string& path, const Options& options, std::unique_ptr<Index>* out) {
  return open_index(path, options, OpenHooks{}, out);
}

// Every call takes a thread id (refused past kMaxThreads threads at once) and passes the
// gate that close() shuts (common/op_gate.hpp). Keyed calls give the scheme its prefetch
// hint first (IndexImpl::hint_key).
#define PMHASH_ENTER(on_refused)                           \
  unsigned tid = impl_->threads->try_id();                 \
  if (tid == pm::ThreadRegistry::kNoId) return on_refused; \
  common::OpGate::Pass pass(impl_->gate, tid);             \
  if (!pass) return on_refused

Status Index::insert(std::string_view key, std::string_view value) {
  impl_->hint_key(key);
  PMHASH_ENTER(refused_status(*impl_));
  Status s = impl_->check_key(key);
  if (s.ok()) s = impl_->check_value(value);
  return s.ok() ? impl_->write([&] { return impl_->scheme->put(key, value, PutMode::kInsert); })
                : s;
}

Status Index::upsert(std::string_view key, std::string_view value) {
  impl_->hint_key(key);
  PMHASH_ENTER(refused_status(*impl_));
  Status s = impl_->check_key(key);
  if (s.ok()) s = impl_->check_value(value);
  return s.ok() ? impl_->write([&] { return impl_->scheme->put(key, value, PutMode::kUpsert); })
                : s;
}

Status Index::update(std::string_view key, std::string_view value) {
  impl_->hint_key(key);
  PMHASH_ENTER(refused_status(*impl_));
  Status s = impl_->check_key(key);
  if (s.ok()) s = impl_->check_value(value);
  return s.ok() ? impl_->write([&] { return impl_->scheme->put(key, value, PutMode::kUpdate); })
                : s;
}

Status Index::get(std::string_view key, std::string* value) const {
  impl_->hint_key(key);
  PMHASH_ENTER(refused_status(*impl_));
  Status s = impl_->check_key(key);
  return s.ok() ? impl_->scheme->get(key, value) : s;
}

// Prefetching kGetAhead keys ahead: far enough for the misses of the next lookups to
// overlap the current one's, near enough that the lines are still cached when it comes to
// them (docs/schemes/lineht.md "A batch lookup").
static constexpr size_t kGetAhead = 8;

Status Index::get_many(std::span<const std::string_view> keys, std::span<std::string> values,
                       std::span<Status> statuses) const {
  if (values.size() != keys.size() || statuses.size() != keys.size())
    return {Code::kInvalidArgument, "get_many: keys, values and statuses differ in size"};
  auto refused = [&] {
    Status s = refused_status(*impl_);
    std::fill(statuses.begin(), statuses.end(), s);
    return s;
  };
  size_t n = keys.size();
  for (size_t i = 0; i < std::min(n, kGetAhead); ++i) impl_->hint_key(keys[i]);
  PMHASH_ENTER(refused());
  for (size_t i = 0; i < n; ++i) {
    if (i + kGetAhead < n) impl_->hint_key(keys[i + kGetAhead]);
    Status s = impl_->check_key(keys[i]);
    statuses[i] = s.ok() ? impl_->scheme->get(keys[i], &values[i]) : s;
  }
  return Status::Ok();
}

Status Index::remove(std::string_view key) {
  impl_->hint_key(key);
  PMHASH_ENTER(refused_status(*impl_));
  if (impl_->holds_record.load(std::memory_order_acquire)) impl_->drop_record();
  Status s = impl_->check_key(key);
  return s.ok() ? impl_->write([&] { return impl_->scheme->remove(key); }) : s;
}

// size() and for_each() report only what a crash keeps: LineHT's and TurboHash's walks flush
// the commit words of writes in flight (pm::load_flushed), HDNH's and PMEH's the buckets
// their writers hold (pm::flush_reported), and the answer waits for one fence if the walk
// flushed anything; SmartHT and WOPHI read under their writers' locks (docs/design.md).
static void fence_if_flushed_since(const pm::Pool& pool, uint64_t flushes) {
  if (pm::tls_counters.flushes != flushes) pool.persister().fence();
}

uint64_t Index::size() const {
  uint64_t n = 0;
  (void)count(&n);  // 0 when refused
  return n;
}

Status Index::count(uint64_t* n) const {
  *n = 0;
  PMHASH_ENTER(refused_status(*impl_));
  uint64_t f0 = pm::tls_counters.flushes;
  *n = impl_->scheme->size();
  fence_if_flushed_since(*impl_->pool, f0);
  return Status::Ok();
}

// Pure functions of the open's configuration (the scheme object lives until ~Index): no
// thread slot is taken, so a dispatcher thread routing keys does not take a worker's.
uint32_t Index::partitions() const {
  return impl_->scheme->partitions();
}

uint32_t Index::owner(std::string_view key) const {
  return impl_->scheme->owner(key);
}

uint32_t Index::partition() const {
  PMHASH_ENTER(kNoPartition);
  return impl_->scheme->partition_of_thread(tid);
}

Stats Index::stats() const {
  Stats st;
  PMHASH_ENTER(st);
  st.scheme = impl_->pool->scheme();
  st.format = impl_->pool->format();
  st.mode = impl_->pool->mode();
  st.recovered_from_crash = impl_->recovered;
  st.open_ms = impl_->open_ms;
  uint64_t f0 = pm::tls_counters.flushes;
  st.size = impl_->scheme->size();
  fence_if_flushed_since(*impl_->pool, f0);  // as Index::size
  st.capacity_slots = impl_->scheme->capacity_slots();
  st.load_factor = st.capacity_slots ? double(st.size) / double(st.capacity_slots) : 0.0;
  st.dram_bytes = impl_->scheme->dram_bytes();
  st.pm_bytes = impl_->alloc->allocated_bytes();
  st.pool_bytes = impl_->pool->size();
  st.layout = impl_->pool->params();
  impl_->scheme->counters(&st.counters);
  return st;
}

// Alone at the gate: a check that runs beside writers or background work reports blocks
// that are allocated but not yet linked as leaks, and reads what they are writing.
Status Index::check(std::string* report) const {
  if (common::OpGate::inside_any_call())  // it would wait for that call: a deadlock
    return {Code::kInvalidArgument, "check() called from inside a for_each callback"};
  unsigned tid = impl_->threads->try_id();
  if (tid == pm::ThreadRegistry::kNoId) return refused_status(*impl_);
  common::OpGate::Exclusive alone(impl_->gate, tid);
  if (!alone) return refused_status(*impl_);
  std::string r;
  bool ok = impl_->check(&r);
  if (report) *report = r;
  if (ok) return Status::Ok();
  return {Code::kCorrupted, r.substr(0, r.find('\n'))};
}

void Index::for_each(void (*fn)(void*, std::string_view, std::string_view), void* ctx) const {
  PMHASH_ENTER();
  const common::Items& items = *impl_->items;
  std::string v;
  // s is a copy, each word read once (Scheme::for_each): a slot rewritten meanwhile cannot
  // give the key of one item and the value of another (the variable format reads both from
  // the item the value names).
  // In pieces, where the scheme walks so: a piece's pairs are copied inside its read-side
  // section and fn is called after it has ended, so fn may wait for another thread's write
  // (a write that reclaims memory waits for every section).
  std::vector<std::pair<std::string, std::string>> piece;
  auto copy = [&](const common::Slot& s) {
    std::string k = items.slot_key_bytes(s);
    if (items.read_value(s.value, &v)) piece.emplace_back(std::move(k), v);
  };
  uint64_t f0 = pm::tls_counters.flushes;
  auto call_back = [&] {
    fence_if_flushed_since(*impl_->pool, f0);  // as Index::size
    f0 = pm::tls_counters.flushes;
    for (auto& [k, val] : piece) fn(ctx, k, val);
    piece.clear();
  };
  if (impl_->scheme->for_each_in_pieces(copy, call_back)) return;
  impl_->scheme->for_each([&](const common::Slot& s) {
    std::string k = items.slot_key_bytes(s);
    if (items.read_value(s.value, &v)) fn(ctx, k, v);
  });
}

bool Index::is_closed() const {
  return impl_->gate.is_shut();
}

Status Index::close() {
  impl_->close();
  return Status::Ok();
}

}  // namespace pmhash
