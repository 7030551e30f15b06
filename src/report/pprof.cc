#include "report/pprof.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>

#include <google/protobuf/stubs/logging.h>

#include "common/printable.h"
#include "proto/profile.pb.h"
#include "report/frames.h"
#include "report/write_file.h"

namespace ljprof::report {

namespace pp = perftools::profiles;

namespace {

// ---------------------------------------------------------------------------------------------
// Files and gzip

struct FileCloser {
  void operator()(FILE* f) const {
    if (f) fclose(f);
  }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

Result<std::string> read_capped(const std::string& path, uint64_t max_bytes) {
  FilePtr f(fopen(path.c_str(), "rb"));
  if (!f) return make_error("{}: cannot open: {}", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f.get()), &st) != 0) return make_error("{}: stat: {}", path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return make_error("{}: not a regular file", path);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return make_error("{}: {} bytes, more than the {} byte limit", path, st.st_size, max_bytes);
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t n = bytes.empty() ? 0 : fread(bytes.data(), 1, bytes.size(), f.get());
  if (n != bytes.size())
    return make_error("{}: short read ({} of {} bytes)", path, n, bytes.size());
  return bytes;
}

Result<std::string> gzip(const std::string& path, const std::string& raw) {
  if (raw.size() > UINT32_MAX) return make_error("{}: profile too large to compress", path);
  z_stream z{};
  // windowBits 15 + 16: a gzip wrapper rather than zlib's, which is what pprof expects.
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return make_error("{}: deflateInit2 failed", path);
  }
  std::string out(deflateBound(&z, raw.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&z, Z_FINISH);
  size_t produced = out.size() - z.avail_out;
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return make_error("{}: gzip compression failed (zlib {})", path, rc);
  out.resize(produced);
  return out;
}

Result<std::string> gunzip(const std::string& path, const std::string& in, uint64_t max_bytes) {
  // zlib counts input in 32 bits; read_capped()'s limit keeps files below that by default.
  if (in.size() > UINT32_MAX) return make_error("{}: file too large to decompress", path);
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return make_error("{}: inflateInit2 failed", path);
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&z, inflateEnd);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  std::string out;
  char buf[1 << 16];
  for (;;) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    int rc = inflate(&z, Z_NO_FLUSH);
    size_t got = sizeof(buf) - z.avail_out;
    // Checked before appending: the cap bounds memory, not just the final answer.
    if (out.size() + got > max_bytes) {
      return make_error("{}: decompresses to more than the {} byte limit", path, max_bytes);
    }
    out.append(buf, got);
    if (rc == Z_STREAM_END) {
      if (z.avail_in == 0) return out;
      // gzip allows concatenated members (what `cat a.gz b.gz` makes); anything else after
      // the end of the stream is not a profile.
      if (z.avail_in >= 2 && z.next_in[0] == 0x1f && z.next_in[1] == 0x8b) {
        if (inflateReset(&z) != Z_OK) return make_error("{}: inflateReset failed", path);
        continue;
      }
      return make_error("{}: {} bytes of trailing garbage after the gzip stream", path, z.avail_in);
    }
    if ((rc == Z_BUF_ERROR || (rc == Z_OK && got == 0)) && z.avail_in == 0) {
      return make_error("{}: truncated gzip stream (ends after {} decompressed bytes)", path,
                        out.size());
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return make_error("{}: corrupt gzip stream: {}", path, z.msg ? z.msg : "zlib error");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Writing

// The pprof name of what the samples' time value measures (period type and second sample type).
const char* value_type_name(profile::ValueType type) {
  switch (type) {
    case profile::ValueType::Wall:
      return "wall";
    // Pyroscope names a profile by its sample types: one containing "cpu" would file the stalls
    // under process_cpu (pkg/og/convert/pprof/profile.go metricName); this one is its own type.
    case profile::ValueType::LoopStall:
      return "loop_stall";
    case profile::ValueType::Cpu:
    case profile::ValueType::Heap:  // its own sample types (write_header)
      break;
  }
  return "cpu";
}

int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
  return r;
}

class StringTable {
 public:
  explicit StringTable(pp::Profile* p) : p_(p) { index(""); }  // pprof: string_table[0] == ""
  // proto3 strings must be UTF-8: protobuf (ours and Go's strict readers) rejects the whole
  // file otherwise. Frames from the walk are printable text already; the same rule here keeps
  // a profile from any other producer writable.
  int64_t index(const std::string& s) {
    auto [it, inserted] = ids_.try_emplace(s, static_cast<int64_t>(ids_.size()));
    if (inserted) p_->add_string_table(printable_text(s));
    return it->second;
  }

 private:
  pp::Profile* p_;
  std::unordered_map<std::string, int64_t> ids_;
};

bool has_mapping(const profile::Frame& f) {
  return !f.module.empty() || !f.build_id.empty();
}

bool is_bare_pc(const profile::Frame& f) {
  return f.kind == profile::FrameKind::Native && f.function.empty() && f.file.empty() &&
         f.line == 0 && f.start_line == 0;
}

// module, build_id, load bias (address - module_offset, modulo 2^64)
using MappingKey = std::tuple<std::string, std::string, uint64_t>;
MappingKey mapping_key(const profile::Frame& f) {
  return {f.module, f.build_id, f.address - f.module_offset};
}

using FunctionKey = std::tuple<profile::FrameKind, std::string, std::string, int64_t>;

// Writes one Profile as a pprof message. The string table takes each string when it is first
// written, so the steps run in this order: header, mappings, samples, counters.
class Writer {
 public:
  Writer(const profile::Profile& profile, const std::string& path, FiberLabels fibers)
      : profile_(profile), path_(path), fibers_(fibers) {}

  Result<std::string> serialize() {
    std::vector<profile::Sample> samples = aggregate_samples(profile_.samples);
    // A stall profile's off-CPU time is part of its one time value (write_sample).
    off_cpu_ = !stall() && std::any_of(samples.begin(), samples.end(),
                                       [](const auto& s) { return s.off_cpu_ns > 0; });
    write_header();
    write_mappings(samples);
    for (const profile::Sample& s : samples) write_sample(s);
    write_counters();
    std::string bytes;
    if (!out_.SerializeToString(&bytes)) {
      return make_error("{}: protobuf serialization failed", path_);
    }
    return bytes;
  }

 private:
  void add_type(pp::ValueType* vt, const char* type, const char* unit) {
    vt->set_type(strings_.index(type));
    vt->set_unit(strings_.index(unit));
  }

  void write_header() {
    if (profile_.value_type == profile::ValueType::Heap) {
      add_type(out_.add_sample_type(), "inuse_objects", "count");
      add_type(out_.add_sample_type(), "inuse_space", "bytes");
      add_type(out_.mutable_period_type(), "space", "bytes");
      out_.set_time_nanos(profile_.start_time_ns);
      return;
    }
    const char* value = value_type_name(profile_.value_type);
    add_type(out_.add_sample_type(), "samples", "count");
    add_type(out_.add_sample_type(), value, "nanoseconds");
    if (off_cpu_) add_type(out_.add_sample_type(), "off_cpu", "nanoseconds");
    add_type(out_.mutable_period_type(), value, "nanoseconds");
    out_.set_period(profile_.period_ns);
    out_.set_time_nanos(profile_.start_time_ns);
    out_.set_duration_nanos(profile_.duration_ns);
  }

  // Mappings first: their bounds need every pc seen in the module.
  void write_mappings(const std::vector<profile::Sample>& samples) {
    struct Range {
      uint64_t lo = UINT64_MAX, hi = 0;
    };
    std::map<MappingKey, Range> ranges;
    for (const profile::Sample& s : samples) {
      for (const profile::Frame& f : s.frames) {
        if (!has_mapping(f)) continue;
        Range& r = ranges[mapping_key(f)];
        r.lo = std::min(r.lo, f.address);
        r.hi = std::max(r.hi, f.address);
      }
    }
    for (const auto& [key, range] : ranges) {
      pp::Mapping* m = out_.add_mapping();
      uint64_t id = static_cast<uint64_t>(out_.mapping_size());
      m->set_id(id);
      m->set_memory_start(range.lo);
      m->set_memory_limit(range.hi == UINT64_MAX ? range.hi : range.hi + 1);
      m->set_file_offset(range.lo - std::get<2>(key));
      m->set_filename(strings_.index(std::get<0>(key)));
      m->set_build_id(strings_.index(std::get<1>(key)));
      m->set_has_functions(true);
      m->set_has_filenames(true);
      m->set_has_line_numbers(true);
      mapping_ids_[key] = id;
    }
  }

  uint64_t function_id(const profile::Frame& f) {
    FunctionKey key{f.kind, f.function, f.file, f.start_line};
    auto it = function_ids_.find(key);
    if (it != function_ids_.end()) return it->second;
    pp::Function* fn = out_.add_function();
    uint64_t id = static_cast<uint64_t>(out_.function_size());
    fn->set_id(id);
    fn->set_name(strings_.index(f.function));
    fn->set_system_name(
        strings_.index(fmt::format("{}:{}", profile::frame_kind_name(f.kind), f.function)));
    fn->set_filename(strings_.index(f.file));
    fn->set_start_line(f.start_line);
    function_ids_.emplace(key, id);
    return id;
  }

  uint64_t location_id(const profile::Frame& f) {
    auto it = location_ids_.find(f);
    if (it != location_ids_.end()) return it->second;
    pp::Location* loc = out_.add_location();
    uint64_t id = static_cast<uint64_t>(out_.location_size());
    loc->set_id(id);
    loc->set_address(f.address);
    if (has_mapping(f)) loc->set_mapping_id(mapping_ids_.at(mapping_key(f)));
    // An unsymbolized native pc is a Location without Lines, pprof's own form for it (shown
    // as its address), rather than a Function with an empty name; read_pprof() turns it back
    // into the same Frame.
    if (is_bare_pc(f)) {
      location_ids_.emplace(f, id);
      return id;
    }
    pp::Line* line = loc->add_line();
    line->set_function_id(function_id(f));
    line->set_line(f.line);
    location_ids_.emplace(f, id);
    return id;
  }

  void add_label(pp::Sample* ps, const char* key, uint32_t value) {
    if (value == 0) return;
    pp::Label* l = ps->add_label();
    l->set_key(strings_.index(key));
    l->set_num(value);
  }

  // The fiber a sample ran on: string label "fiber" (its name, when it has one) and numeric
  // label "fiber_id" (when known and wanted); nothing for a sample without a fiber.
  void write_fiber(pp::Sample* ps, const profile::SampleFiber& fiber) {
    if (!fiber.present()) return;
    if (!fiber.name.empty()) {
      pp::Label* name = ps->add_label();
      name->set_key(strings_.index("fiber"));
      name->set_str(strings_.index(fiber.name));
    }
    if (fibers_ == FiberLabels::NameOnly || fiber.id == 0) return;
    pp::Label* id = ps->add_label();
    id->set_key(strings_.index("fiber_id"));
    id->set_num(static_cast<int64_t>(fiber.id));  // read back as the same 64 bits
  }

  void write_sample(const profile::Sample& s) {
    pp::Sample* ps = out_.add_sample();
    for (const profile::Frame& f : s.frames) ps->add_location_id(location_id(f));
    ps->add_value(s.count);
    if (profile_.value_type == profile::ValueType::Heap) {
      ps->add_value(s.bytes);
    } else {
      ps->add_value(stall() && s.off_cpu_ns > 0 ? s.off_cpu_ns
                                                : saturating_mul(s.count, profile_.period_ns));
    }
    if (off_cpu_) ps->add_value(s.off_cpu_ns);
    add_label(ps, "pid", s.pid);
    add_label(ps, "tid", s.tid);
    write_fiber(ps, s.fiber);
    for (const auto& [key, value] : {std::pair{"state", &s.state}, {"cord", &s.fiber.cord}}) {
      if (value->empty()) continue;
      pp::Label* label = ps->add_label();
      label->set_key(strings_.index(key));
      label->set_str(strings_.index(*value));
    }
    // One "trace" label per JIT-compiled frame, leaf first: which trace ran it.
    for (const profile::Frame& f : s.frames) {
      if (f.kind != profile::FrameKind::Trace) continue;
      pp::Label* l = ps->add_label();
      l->set_key(strings_.index("trace"));
      l->set_num(f.trace);
    }
  }

  void write_counters() {
    for (const auto& [name, value] : profile_.counters) {
      out_.add_comment(strings_.index(fmt::format("counter {}={}", name, value)));
    }
  }

  const profile::Profile& profile_;
  const std::string& path_;
  FiberLabels fibers_;
  bool stall() const { return profile_.value_type == profile::ValueType::LoopStall; }

  bool off_cpu_ = false;  // a third sample type, off_cpu/nanoseconds
  pp::Profile out_;
  StringTable strings_{&out_};
  std::map<MappingKey, uint64_t> mapping_ids_;
  std::map<FunctionKey, uint64_t> function_ids_;
  std::map<profile::Frame, uint64_t> location_ids_;
};

// ---------------------------------------------------------------------------------------------
// Reading

class Reader {
 public:
  Reader(const std::string& path, const pp::Profile& in, const PprofReadLimits& limits)
      : path_(path), in_(in), limits_(limits) {}

  Result<profile::Profile> convert() {
    if (in_.string_table_size() == 0 || !in_.string_table(0).empty()) {
      return err("string_table[0] must be the empty string (not a pprof profile?)");
    }
    if (static_cast<uint64_t>(in_.sample_size()) > limits_.max_samples) {
      return err(fmt::format("{} samples, more than the limit of {}", in_.sample_size(),
                             limits_.max_samples));
    }
    if (static_cast<uint64_t>(in_.location_size()) > limits_.max_locations) {
      return err(fmt::format("{} locations, more than the limit of {}", in_.location_size(),
                             limits_.max_locations));
    }
    profile::Profile out;
    LJ_ASSIGN_OR_RETURN(int value_index, count_index());
    LJ_ASSIGN_OR_RETURN(std::string period_unit, str(in_.period_type().unit(), "period_type.unit"));
    LJ_ASSIGN_OR_RETURN(std::string period_type, str(in_.period_type().type(), "period_type.type"));
    if (period_type == "wall") out.value_type = profile::ValueType::Wall;
    if (period_type == "loop_stall") out.value_type = profile::ValueType::LoopStall;
    if (space_index() >= 0) out.value_type = profile::ValueType::Heap;
    LJ_TRY(str(in_.drop_frames(), "drop_frames"));
    LJ_TRY(str(in_.keep_frames(), "keep_frames"));
    LJ_TRY(str(in_.default_sample_type(), "default_sample_type"));
    if (period_unit == "nanoseconds") out.period_ns = in_.period();
    out.start_time_ns = in_.time_nanos();
    out.duration_ns = in_.duration_nanos();
    LJ_TRY(read_mappings());
    LJ_TRY(read_functions());
    LJ_TRY(read_locations());
    LJ_TRY(read_samples(value_index, &out));
    for (int i = 0; i < in_.comment_size(); ++i) {
      LJ_ASSIGN_OR_RETURN(std::string c, str(in_.comment(i), "comment"));
      parse_counter(c, &out);
    }
    return out;
  }

 private:
  struct MappingInfo {
    std::string filename, build_id;
    uint64_t start = 0, file_offset = 0;
  };
  struct FunctionInfo {
    profile::FrameKind kind = profile::FrameKind::Native;
    std::string name, filename;
    int64_t start_line = 0;
  };

  Error err(const std::string& what) const { return make_error("{}: {}", path_, what); }

  // Every string of the file goes through here: a profile's names are another program's bytes
  // (protobuf has checked they are UTF-8, not that they are printable), so they enter the
  // report model as printable text, like the walk's (common/printable.h).
  Result<std::string> str(int64_t index, const char* what) const {
    if (index < 0 || index >= in_.string_table_size()) {
      return err(fmt::format("{} string index {} out of range (string_table has {} entries)", what,
                             index, in_.string_table_size()));
    }
    return printable_text(in_.string_table(static_cast<int>(index)));
  }

  // The value that becomes Sample::count: "samples" if present (what write_pprof puts first
  // and what CPU profiles carry), else the last type, which pprof itself shows by default.
  Result<int> count_index() const {
    int found = -1;
    for (int i = 0; i < in_.sample_type_size(); ++i) {
      LJ_ASSIGN_OR_RETURN(std::string type, str(in_.sample_type(i).type(), "sample_type.type"));
      LJ_TRY(str(in_.sample_type(i).unit(), "sample_type.unit"));
      if ((type == "samples" || type == "inuse_objects") && found < 0) found = i;
    }
    if (in_.sample_type_size() == 0) {
      if (in_.sample_size() > 0) return err("samples but no sample_type");
      return 0;
    }
    return found >= 0 ? found : in_.sample_type_size() - 1;
  }

  Status read_mappings() {
    for (const pp::Mapping& m : in_.mapping()) {
      MappingInfo info;
      LJ_ASSIGN_OR_RETURN(info.filename, str(m.filename(), "mapping.filename"));
      LJ_ASSIGN_OR_RETURN(info.build_id, str(m.build_id(), "mapping.build_id"));
      info.start = m.memory_start();
      info.file_offset = m.file_offset();
      if (m.id() == 0) return err("mapping with id 0");
      if (!mappings_.emplace(m.id(), std::move(info)).second) {
        return err(fmt::format("duplicate mapping id {}", m.id()));
      }
    }
    return Ok{};
  }

  Status read_functions() {
    for (const pp::Function& f : in_.function()) {
      FunctionInfo info;
      LJ_ASSIGN_OR_RETURN(info.name, str(f.name(), "function.name"));
      LJ_ASSIGN_OR_RETURN(info.filename, str(f.filename(), "function.filename"));
      LJ_ASSIGN_OR_RETURN(std::string system_name, str(f.system_name(), "function.system_name"));
      info.start_line = f.start_line();
      // "KIND:NAME" is ours (write_pprof); any other system name (a mangled C++ symbol, a Go
      // package path) is a native function of some other profiler.
      size_t colon = system_name.find(':');
      if (colon != std::string::npos &&
          system_name.compare(colon + 1, std::string::npos, info.name) == 0) {
        if (auto kind =
                profile::frame_kind_from_name(std::string_view(system_name).substr(0, colon))) {
          info.kind = *kind;
        }
      }
      if (f.id() == 0) return err("function with id 0");
      if (!functions_.emplace(f.id(), std::move(info)).second) {
        return err(fmt::format("duplicate function id {}", f.id()));
      }
    }
    return Ok{};
  }

  Status read_locations() {
    for (const pp::Location& loc : in_.location()) {
      if (loc.id() == 0) return err("location with id 0");
      profile::Frame base;
      base.address = loc.address();
      if (loc.mapping_id() != 0) {
        auto m = mappings_.find(loc.mapping_id());
        if (m == mappings_.end()) {
          return err(
              fmt::format("location {} references unknown mapping {}", loc.id(), loc.mapping_id()));
        }
        base.module = m->second.filename;
        base.build_id = m->second.build_id;
        base.module_offset = loc.address() - m->second.start + m->second.file_offset;
      }
      std::vector<profile::Frame> frames;
      if (loc.line_size() == 0) frames.push_back(base);  // unsymbolized: module+offset only
      // pprof lists inlined functions innermost first, the caller last: already leaf first.
      for (const pp::Line& line : loc.line()) {
        auto fn = functions_.find(line.function_id());
        if (fn == functions_.end()) {
          return err(fmt::format("location {} references unknown function {}", loc.id(),
                                 line.function_id()));
        }
        profile::Frame f = base;
        f.kind = fn->second.kind;
        f.function = fn->second.name;
        f.file = fn->second.filename;
        f.start_line = fn->second.start_line;
        f.line = line.line();
        frames.push_back(std::move(f));
      }
      if (!locations_.emplace(loc.id(), std::move(frames)).second) {
        return err(fmt::format("duplicate location id {}", loc.id()));
      }
    }
    return Ok{};
  }

  // The index of sample type `name` (off_cpu: record --off-cpu; loop_stall: the agent's stall
  // profile; inuse_space: a heap profile), or -1.
  int type_index(std::string_view name) const {
    for (int i = 0; i < in_.sample_type_size(); ++i) {
      const int64_t type = in_.sample_type(i).type();
      if (type >= 0 && type < in_.string_table_size() && in_.string_table(type) == name) {
        return i;
      }
    }
    return -1;
  }
  int off_cpu_index() const { return type_index("off_cpu"); }
  int space_index() const { return type_index("inuse_space"); }

  Status read_samples(int value_index, profile::Profile* out) {
    uint64_t total_frames = 0;
    const int off_cpu = off_cpu_index();
    const int space = space_index();
    // A stall profile's off-CPU samples (those with a state) weigh their time, not a period.
    const int stall_ns =
        out->value_type == profile::ValueType::LoopStall ? type_index("loop_stall") : -1;
    out->samples.reserve(static_cast<size_t>(in_.sample_size()));
    for (int i = 0; i < in_.sample_size(); ++i) {
      const pp::Sample& s = in_.sample(i);
      if (s.value_size() != in_.sample_type_size()) {
        return err(fmt::format("sample {} has {} values for {} sample types", i, s.value_size(),
                               in_.sample_type_size()));
      }
      profile::Sample sample;
      sample.count = s.value(value_index);
      if (off_cpu >= 0) sample.off_cpu_ns = s.value(off_cpu);
      if (space >= 0) sample.bytes = s.value(space);
      for (uint64_t id : s.location_id()) {
        auto loc = locations_.find(id);
        if (loc == locations_.end()) {
          return err(fmt::format("sample {} references unknown location {}", i, id));
        }
        total_frames += loc->second.size();
        if (total_frames > limits_.max_total_frames) {
          return err(fmt::format("more than {} frames in all samples", limits_.max_total_frames));
        }
        sample.frames.insert(sample.frames.end(), loc->second.begin(), loc->second.end());
      }
      size_t trace_frame = 0;
      for (const pp::Label& l : s.label()) {
        LJ_ASSIGN_OR_RETURN(std::string key, str(l.key(), "label.key"));
        LJ_ASSIGN_OR_RETURN(std::string value, str(l.str(), "label.str"));
        LJ_TRY(str(l.num_unit(), "label.num_unit"));
        if (key == "fiber") sample.fiber.name = std::move(value);
        if (key == "fiber_id") sample.fiber.id = static_cast<uint64_t>(l.num());
        if (key == "state") sample.state = std::move(value);
        if (key == "cord") sample.fiber.cord = std::move(value);
        if (l.num() >= 0 && l.num() <= UINT32_MAX) {
          if (key == "pid") sample.pid = static_cast<uint32_t>(l.num());
          if (key == "tid") sample.tid = static_cast<uint32_t>(l.num());
          if (key == "trace")
            assign_trace(sample.frames, trace_frame, static_cast<uint32_t>(l.num()));
        }
      }
      if (stall_ns >= 0 && !sample.state.empty()) sample.off_cpu_ns = s.value(stall_ns);
      out->samples.push_back(std::move(sample));
    }
    return Ok{};
  }

  // The n-th "trace" label names the trace of the n-th JIT-compiled frame (write_pprof).
  static void assign_trace(std::vector<profile::Frame>& frames, size_t& next, uint32_t trace) {
    for (; next < frames.size(); ++next) {
      if (frames[next].kind == profile::FrameKind::Trace) {
        frames[next++].trace = trace;
        return;
      }
    }
  }

  static void parse_counter(const std::string& comment, profile::Profile* out) {
    static constexpr std::string_view kPrefix = "counter ";
    if (!comment.starts_with(kPrefix)) return;  // someone else's comment: not a counter
    size_t eq = comment.rfind('=');
    if (eq == std::string::npos || eq < kPrefix.size() || eq + 1 == comment.size()) return;
    const char* digits = comment.c_str() + eq + 1;
    char* end = nullptr;
    errno = 0;
    unsigned long long v = strtoull(digits, &end, 10);
    if (errno != 0 || *end != '\0' || *digits == '-') return;
    out->counters[comment.substr(kPrefix.size(), eq - kPrefix.size())] = v;
  }

  const std::string& path_;
  const pp::Profile& in_;
  const PprofReadLimits& limits_;
  std::unordered_map<uint64_t, MappingInfo> mappings_;
  std::unordered_map<uint64_t, FunctionInfo> functions_;
  std::unordered_map<uint64_t, std::vector<profile::Frame>> locations_;
};

// The one encoder behind write_pprof() and pprof_gzip_bytes(); `what` starts its error messages
// (the file's path, or a word saying what is being encoded).
Result<std::string> encode_gzip(const profile::Profile& profile, const std::string& what,
                                FiberLabels fibers = FiberLabels::NameAndId) {
  LJ_ASSIGN_OR_RETURN(std::string raw, Writer(profile, what, fibers).serialize());
  return gzip(what, raw);
}

}  // namespace

Result<std::string> pprof_gzip_bytes(const profile::Profile& profile, FiberLabels fibers) {
  // protobuf and the allocator may throw (bad_alloc); nothing may escape this module.
  try {
    return encode_gzip(profile, "pprof profile", fibers);
  } catch (const std::exception& e) {
    return make_error("encoding the pprof profile failed: {}", e.what());
  }
}

Status write_pprof(const profile::Profile& profile, const std::string& path) {
  // protobuf and the allocator may throw (bad_alloc); nothing may escape this module.
  try {
    LJ_ASSIGN_OR_RETURN(std::string compressed, encode_gzip(profile, path));
    return write_file(path, compressed);
  } catch (const std::exception& e) {
    return make_error("{}: writing the pprof profile failed: {}", path, e.what());
  }
}

Result<profile::Profile> read_pprof(const std::string& path, const PprofReadLimits& limits) {
  try {
    LJ_ASSIGN_OR_RETURN(std::string bytes, read_capped(path, limits.max_file_bytes));
    if (bytes.size() >= 2 && static_cast<uint8_t>(bytes[0]) == 0x1f &&
        static_cast<uint8_t>(bytes[1]) == 0x8b) {
      LJ_ASSIGN_OR_RETURN(bytes, gunzip(path, bytes, limits.max_decompressed_bytes));
    } else if (bytes.size() > limits.max_decompressed_bytes) {
      // pprof also accepts an uncompressed profile.proto; the same cap applies to it.
      return make_error("{}: more than the {} byte limit", path, limits.max_decompressed_bytes);
    }
    pp::Profile in;
    bool parsed;
    {
      // protobuf logs its own complaint to stderr; the error returned here says it instead.
      google::protobuf::LogSilencer quiet;
      parsed = in.ParseFromString(bytes);
    }
    if (!parsed) {
      return make_error(
          "{}: not a pprof profile (profile.proto does not parse: bad wire format or a "
          "string that is not UTF-8)",
          path);
    }
    return Reader(path, in, limits).convert();
  } catch (const std::exception& e) {
    return make_error("{}: reading the pprof profile failed: {}", path, e.what());
  }
}

}  // namespace ljprof::report
