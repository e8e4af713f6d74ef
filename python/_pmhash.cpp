// The Python binding (pybind11): pmhash.Table wraps pmhash::Index. Operations release the
// GIL; errors become the exceptions declared here, carrying the library's message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pmhash/index.hpp"

namespace py = pybind11;
using namespace pmhash;

namespace {

// Exception classes by status code (created in PYBIND11_MODULE).
PyObject* exc_base = nullptr;
std::map<Code, PyObject*> exc_by_code;

[[noreturn]] void raise(const Status& s) {
  auto it = exc_by_code.find(s.code());
  PyObject* type = it != exc_by_code.end() ? it->second : exc_base;
  PyErr_SetString(type, s.message().c_str());
  throw py::error_already_set();
}

// Keys and values: bytes, bytearray, memoryview or str (UTF-8).
std::string as_bytes(const py::handle& h, const char* what) {
  if (py::isinstance<py::bytes>(h)) return std::string(h.cast<py::bytes>());
  if (py::isinstance<py::str>(h)) {  // UnicodeEncodeError for a lone surrogate
    Py_ssize_t n = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(h.ptr(), &n);
    if (utf8 == nullptr) throw py::error_already_set();
    return std::string(utf8, static_cast<size_t>(n));
  }
  if (PyObject_CheckBuffer(h.ptr())) {
    // Any buffer, strided or reversed too: copied out in logical (C) order.
    Py_buffer view;
    if (PyObject_GetBuffer(h.ptr(), &view, PyBUF_FULL_RO) != 0) throw py::error_already_set();
    std::string out(static_cast<size_t>(view.len), '\0');
    int rc = PyBuffer_ToContiguous(out.data(), &view, view.len, 'C');
    PyBuffer_Release(&view);
    if (rc != 0) throw py::error_already_set();
    return out;
  }
  throw py::type_error(std::string(what) + " must be bytes, bytearray, memoryview or str");
}

// close() from one thread while others still call: the index's own gate makes their calls
// finish or fail with ClosedError (Code::kClosed); the shared_ptr keeps the Index alive
// until the last call has returned. The GIL is never held while waiting.
class Table {
 public:
  explicit Table(std::unique_ptr<Index> idx) : idx_(std::move(idx)) {}

  void set(const py::handle& k, const py::handle& v) {
    std::string key = as_bytes(k, "key"), value = as_bytes(v, "value");
    call([&](Index& i) { return i.upsert(key, value); });
  }
  void insert(const py::handle& k, const py::handle& v) {
    std::string key = as_bytes(k, "key"), value = as_bytes(v, "value");
    call([&](Index& i) { return i.insert(key, value); });
  }
  void update(const py::handle& k, const py::handle& v) {
    std::string key = as_bytes(k, "key"), value = as_bytes(v, "value");
    call([&](Index& i) { return i.update(key, value); });
  }
  py::bytes getitem(const py::handle& k) {
    std::string key = as_bytes(k, "key"), value;
    call([&](Index& i) { return i.get(key, &value); });
    return py::bytes(value);
  }
  py::object get(const py::handle& k, py::object def) {
    std::string key = as_bytes(k, "key"), value;
    Status s = call_status([&](Index& i) { return i.get(key, &value); });
    if (s.code() == Code::kNotFound) return def;
    if (!s.ok()) raise(s);
    return py::bytes(value);
  }
  // Many gets in one call (Index::get_many: their cache misses overlap): a list of the
  // values, `default` for absent keys; any other failure raises, as get() does.
  py::list get_many(const py::iterable& keys, py::object def) {
    // A str or bytes is an iterable of characters, almost surely one key meant as a list.
    if (py::isinstance<py::str>(keys) || py::isinstance<py::bytes>(keys) ||
        py::isinstance<py::bytearray>(keys))
      throw py::type_error("get_many takes a list (an iterable) of keys, not one key");
    std::vector<std::string> ks;
    for (py::handle k : keys) ks.push_back(as_bytes(k, "key"));
    std::vector<std::string_view> views(ks.begin(), ks.end());
    std::vector<std::string> values(ks.size());
    std::vector<Status> statuses(ks.size());
    Status s = call_status([&](Index& i) { return i.get_many(views, values, statuses); });
    if (!s.ok()) raise(s);
    for (const Status& st : statuses)
      if (!st.ok() && st.code() != Code::kNotFound) raise(st);
    py::list out;
    for (size_t i = 0; i < ks.size(); ++i)
      out.append(statuses[i].ok() ? py::object(py::bytes(values[i])) : def);
    return out;
  }
  bool contains(const py::handle& k) {
    std::string key = as_bytes(k, "key"), value;
    Status s = call_status([&](Index& i) { return i.get(key, &value); });
    if (s.code() == Code::kNotFound) return false;  // a bad key raises, as get() does
    if (!s.ok()) raise(s);
    return true;
  }
  void delitem(const py::handle& k) {
    std::string key = as_bytes(k, "key");
    call([&](Index& i) { return i.remove(key); });
  }
  uint64_t len() {
    std::shared_ptr<Index> i = open_index();
    uint64_t n;
    {
      py::gil_scoped_release nogil;
      n = i->size();
    }
    if (i->is_closed()) raise({Code::kClosed, "the table is closed"});  // n may be a stub
    return n;
  }
  py::dict stats() {
    Stats st;
    {
      std::shared_ptr<Index> i = open_index();
      py::gil_scoped_release nogil;
      st = i->stats();
    }
    if (st.scheme.empty()) raise({Code::kClosed, "the table is closed"});
    py::dict d;
    d["scheme"] = st.scheme;
    d["format"] = format_name(st.format);
    d["mode"] = mode_name(st.mode);
    d["recovered_from_crash"] = st.recovered_from_crash;
    d["open_ms"] = st.open_ms;
    d["size"] = st.size;
    d["capacity_slots"] = st.capacity_slots;
    d["load_factor"] = st.load_factor;
    d["dram_bytes"] = st.dram_bytes;
    d["pm_bytes"] = st.pm_bytes;
    d["pool_bytes"] = st.pool_bytes;
    d["counters"] = st.counters;
    return d;
  }
  // (ok, report): the scheme's structural check plus the allocator's leak check.
  py::tuple check() {
    std::string report;
    Status s = call_status([&](Index& i) { return i.check(&report); });
    if (!s.ok() && s.code() != Code::kCorrupted) raise(s);
    return py::make_tuple(s.ok(), report);
  }
  // All items as a list of (key, value) (no concurrent writers while it runs).
  py::list items() {
    std::vector<std::pair<std::string, std::string>> v;
    bool closed = false;
    {
      std::shared_ptr<Index> i = open_index();
      py::gil_scoped_release nogil;
      i->for_each(
          [](void* ctx, std::string_view k, std::string_view val) {
            static_cast<decltype(v)*>(ctx)->emplace_back(k, val);
          },
          &v);
      if (i->is_closed()) closed = true;
    }
    if (closed) raise({Code::kClosed, "the table is closed"});
    py::list out;
    for (auto& [k, val] : v) out.append(py::make_tuple(py::bytes(k), py::bytes(val)));
    return out;
  }
  void close() {
    std::shared_ptr<Index> i;
    {
      std::lock_guard<std::mutex> l(mu_);
      i = idx_;
    }
    if (!i) return;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = i->close();  // waits for the calls in flight; later ones get kClosed
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      idx_.reset();
    }
    if (!s.ok()) raise(s);
  }
  bool closed() {
    std::lock_guard<std::mutex> l(mu_);
    return idx_ == nullptr;
  }

 private:
  std::shared_ptr<Index> open_index() {
    std::shared_ptr<Index> i;
    {
      std::lock_guard<std::mutex> l(mu_);
      i = idx_;
    }
    if (!i) raise({Code::kClosed, "the table is closed"});
    return i;
  }
  template <class F>
  Status call_status(F&& f) {
    std::shared_ptr<Index> i = open_index();
    py::gil_scoped_release nogil;
    return f(*i);
  }
  template <class F>
  void call(F&& f) {
    Status s = call_status(std::forward<F>(f));
    if (!s.ok()) raise(s);
  }

  std::mutex mu_;  // guards idx_ (the pointer), never held while waiting for anything
  std::shared_ptr<Index> idx_;
};

// A path: str, bytes or any os.PathLike (pathlib.Path), as os.fspath() takes it; a str is
// encoded as os.fsencode() does. A NUL byte is refused (the file system would see a shorter
// path).
std::string as_path(const py::handle& h) {
  py::object p = py::reinterpret_steal<py::object>(PyOS_FSPath(h.ptr()));
  if (!p) throw py::error_already_set();  // TypeError naming the type
  if (py::isinstance<py::str>(p)) {
    p = py::reinterpret_steal<py::object>(PyUnicode_EncodeFSDefault(p.ptr()));
    if (!p) throw py::error_already_set();
  }
  std::string path(p.cast<py::bytes>());
  if (path.find('\0') != std::string::npos)
    raise({Code::kInvalidArgument, "path contains a NUL byte"});
  return path;
}

std::unique_ptr<Table> open_table(const py::handle& path_like, const std::string& scheme,
                                  bool create, const std::string& format, uint64_t pool_size,
                                  const std::string& mode, uint64_t capacity_hint,
                                  const std::map<std::string, std::string>& params, bool prefault) {
  std::string path = as_path(path_like);
  Options o;
  o.scheme = scheme;
  o.create = create;
  if (format == "fixed")
    o.format = Format::kFixed;
  else if (format == "variable")
    o.format = Format::kVariable;
  else
    raise({Code::kInvalidArgument, "format must be 'fixed' or 'variable', not '" + format + "'"});
  static const std::map<std::string, Mode> modes = {{"auto", Mode::kAuto},
                                                    {"pm", Mode::kPm},
                                                    {"emulated", Mode::kEmulated},
                                                    {"msync", Mode::kMsync},
                                                    {"none", Mode::kNone}};
  auto m = modes.find(mode);
  if (m == modes.end())
    raise({Code::kInvalidArgument, "mode must be auto, pm, emulated, msync or none"});
  o.mode = m->second;
  if (pool_size != 0) o.pool_size = pool_size;
  o.capacity_hint = capacity_hint;
  o.params = params;
  o.prefault = prefault;
  std::unique_ptr<Index> idx;
  Status s;
  {
    py::gil_scoped_release nogil;
    s = Index::open(path, o, &idx);
  }
  if (!s.ok()) raise(s);
  return std::make_unique<Table>(std::move(idx));
}

PyObject* new_exception(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string full = std::string("pmhash.") + name;
  PyObject* e = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases, nullptr);
  if (e == nullptr) throw py::error_already_set();
  m.add_object(name, py::reinterpret_borrow<py::object>(e));
  return e;
}

}  // namespace

PYBIND11_MODULE(_pmhash, m) {
  m.doc() = "pmhash: persistent-memory hash indexes (C++ core)";
  exc_base = new_exception(m, "Error", PyExc_Exception, "Any pmhash error.");
  auto sub = [&](const char* name, PyObject* extra, const char* doc) {
    PyObject* bases = extra ? PyTuple_Pack(2, exc_base, extra) : PyTuple_Pack(1, exc_base);
    PyObject* e = new_exception(m, name, bases, doc);
    Py_DECREF(bases);
    return e;
  };
  PyObject* not_found = sub("NotFoundError", PyExc_KeyError, "Key (or pool file) absent.");
  PyObject* exists = sub("KeyExistsError", nullptr, "insert() of a key that is present.");
  PyObject* invalid = sub("InvalidArgumentError", PyExc_ValueError, "Bad key, value or option.");
  PyObject* bad_pool = sub("BadPoolError", nullptr,
                           "The file is not a usable pool: foreign, truncated, corrupted, "
                           "another scheme/format/version.");
  PyObject* busy = sub("PoolBusyError", nullptr, "The pool is open elsewhere.");
  PyObject* full = sub("PoolFullError", nullptr, "No space left in the pool.");
  PyObject* corrupted = sub("CorruptedError", nullptr, "A structural check failed.");
  PyObject* io = sub("IoError", PyExc_OSError, "The operating system refused.");
  PyObject* closed = sub("ClosedError", PyExc_ValueError, "The table was closed.");
  exc_by_code = {{Code::kNotFound, not_found},
                 {Code::kAlreadyExists, exists},
                 {Code::kInvalidArgument, invalid},
                 {Code::kUnknownScheme, invalid},
                 {Code::kNotAPool, bad_pool},
                 {Code::kTruncated, bad_pool},
                 {Code::kChecksumMismatch, bad_pool},
                 {Code::kUnsupportedVersion, bad_pool},
                 {Code::kSchemeMismatch, bad_pool},
                 {Code::kFormatMismatch, bad_pool},
                 {Code::kPoolBusy, busy},
                 {Code::kPoolFull, full},
                 {Code::kCorrupted, corrupted},
                 {Code::kIoError, io},
                 {Code::kClosed, closed}};

  py::class_<Table>(m, "Table")
      .def("__setitem__", &Table::set)
      .def("__getitem__", &Table::getitem)
      .def("__delitem__", &Table::delitem)
      .def("__contains__", &Table::contains)
      .def("__len__", &Table::len)
      .def("get", &Table::get, py::arg("key"), py::arg("default") = py::none())
      .def("get_many", &Table::get_many, py::arg("keys"), py::arg("default") = py::none(),
           "Values of many keys in one call (their lookups overlap); default for absent ones.")
      .def("insert", &Table::insert, "Adds a key; KeyExistsError if present.")
      .def("update", &Table::update, "Replaces a present key's value; NotFoundError if absent.")
      .def("stats", &Table::stats)
      .def("check", &Table::check)
      .def("items", &Table::items)
      // for key in table: the keys of items() (without __iter__, Python would call
      // __getitem__(0), 1, ... and fail on the integer key)
      .def("__iter__",
           [](Table& t) {
             py::list keys;
             for (py::handle item : t.items()) keys.append(item.cast<py::tuple>()[0]);
             return py::iter(keys);
           })
      .def("close", &Table::close)
      .def_property_readonly("closed", &Table::closed)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Table& t, const py::args&) { t.close(); });

  m.def("open", &open_table, py::arg("path"), py::arg("scheme") = "turbohash",
        py::arg("create") = true, py::arg("format") = "fixed", py::arg("pool_size") = 0,
        py::arg("mode") = "auto", py::arg("capacity_hint") = 0,
        py::arg("params") = std::map<std::string, std::string>{}, py::arg("prefault") = false);
  m.def("schemes", &pmhash::schemes);
}
