#include "record/process_context.h"

#include <elf.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <set>
#include <string_view>

#include "luajit/runtime.h"
#include "luajit/vm_cfi.h"
#include "record/process_identity.h"

namespace ljprof::record {

namespace {

// The fiber layout of a Tarantool executable, or why there is none (said once per file, in
// `record --stats`' warnings through fiber_error).
void read_fibers(MappedObject& obj) {
  auto layout = luajit::read_fiber_label_layout(*obj.elf);
  if (layout.ok()) {
    obj.fibers = *layout;
  } else {
    // Opened through /proc/PID/map_files/START-END: the message names the file by its path.
    std::string why = layout.message();
    const std::string& opened = obj.elf->path();
    for (size_t at = why.find(opened); at != std::string::npos; at = why.find(opened, at)) {
      why.replace(at, opened.size(), obj.path);
      at += obj.path.size();
    }
    obj.fiber_error = std::move(why);
  }
}

// Opens the mapping's file through `pid` and analyses it into `obj`: ELF, LuaJIT layout, unwind
// table. A file that cannot be opened leaves `obj` without an ELF and says why in `error`.
void analyse_mapped_file(MappedObject& obj, uint32_t pid, const proc::MapEntry& map,
                         cfi::TableCache* tables) {
  obj.opened_through = pid;
  obj.opened_start = map.start;
  obj.opened_end = map.end;
  auto elf = elf::ElfFile::open(proc::map_files_path(pid, map));
  if (!elf.ok()) {
    obj.error = elf.message();
    return;
  }
  obj.error.clear();
  obj.elf = std::move(*elf);
  // Named by the mapped path: the map_files link's basename is "START-END".
  luajit::RuntimeInfo rt = luajit::detect_runtime(*obj.elf, {}, map.path);
  if (rt.source == luajit::LuaJITSource::LinkedIn) {
    auto info = luajit::extract_proc_info(*obj.elf, rt.runtime);
    auto walker_info = info.ok() ? luajit::to_walker_info(*info) : info.error();
    if (walker_info.ok()) {
      obj.luajit = std::move(*info);
      obj.info = *walker_info;
      if (rt.runtime == luajit::Runtime::Tarantool) read_fibers(obj);
    } else {
      obj.luajit_error = walker_info.message();
    }
  }
  auto table = luajit::walker_table(*obj.elf, tables);
  if (table.ok()) {
    obj.table = std::move(*table);
  } else {
    obj.error = table.message();
  }
}

}  // namespace

uint64_t MappedObject::held_bytes() const {
  uint64_t bytes = sizeof(MappedObject) + path.capacity() + image.capacity() + error.capacity() +
                   luajit_error.capacity() + fiber_error.capacity();
  if (elf) bytes += elf->heap_bytes();
  bytes += debug.heap_bytes();
  if (table) bytes += table->heap_bytes();
  if (luajit) bytes += sizeof(*luajit) + luajit->fields.capacity() * sizeof(luajit->fields[0]);
  return bytes;
}

void ObjectCache::analyse(MappedObject& obj, uint32_t pid, const proc::MapEntry& map) {
  const uint64_t hits_before = tables_ != nullptr ? tables_->counts().hits : 0;
  analyse_mapped_file(obj, pid, map, tables_);
  if (obj.table && (tables_ == nullptr || tables_->counts().hits == hits_before)) ++tables_built_;
  if (obj.table && on_table_) on_table_(obj);
  // Analysed: from here on the file is read only for the names of the symbols samples hit. The
  // pages the analysis read (CFI, the VM's code, symbol and string tables) need not stay
  // resident in the agent: one tarantool's 48 files held some 12 MiB of its RSS.
  if (obj.elf) obj.elf->release_resident_pages();
}

MappedObject* ObjectCache::get(uint32_t pid, const proc::MapEntry& map) {
  auto key = std::make_tuple(map.dev, map.inode, map.path);
  if (auto it = objects_.find(key); it != objects_.end()) {
    MappedObject* obj = it->second.get();
    // The process it was first opened through had exited (its map_files gone), or the mapping
    // was replaced before the open: another process or another mapping of the same file tries
    // again, into the same object (contexts may point at it).
    if (!obj->elf && (obj->opened_through != pid || obj->opened_start != map.start ||
                      obj->opened_end != map.end)) {
      analyse(*obj, pid, map);
    }
    return used(obj);
  }
  auto obj = std::make_unique<MappedObject>();
  obj->path = map.path;
  analyse(*obj, pid, map);
  MappedObject* raw = obj.get();
  objects_.emplace(std::move(key), std::move(obj));
  return used(raw);
}

bool ObjectCache::links_luajit(uint32_t pid, const proc::MapEntry& map) {
  auto key = std::make_tuple(map.dev, map.inode, map.path);
  if (auto it = links_luajit_.find(key); it != links_luajit_.end()) return it->second;
  auto elf = elf::ElfFile::open(proc::map_files_path(pid, map));
  if (!elf.ok()) return false;  // the process is gone, most likely: ask again next time
  const bool links =
      luajit::detect_runtime(**elf, {}, map.path).source == luajit::LuaJITSource::LinkedIn;
  if (links_luajit_.size() >= kMaxLinksLuajit) links_luajit_.clear();
  links_luajit_.emplace(std::move(key), links);
  return links;
}

void ObjectCache::for_each(const std::function<void(MappedObject&)>& f) {
  for (auto& [key, obj] : objects_) f(*obj);
  for (auto& obj : uncached_) f(*obj);
}

Status ObjectCache::reload_rows(MappedObject& obj) {
  if (!obj.elf) return make_error("{}: not open", obj.path);
  // As analyse_mapped_file and get_vdso built it (a vDSO's bytes are kept in `image`).
  auto table = obj.image.empty() ? luajit::walker_table(*obj.elf, tables_)
                                 : cfi::build_vdso_unwind_table(*obj.elf);
  if (!table.ok()) return make_error("{}: {}", obj.path, table.message());
  if (table->rows().empty()) return make_error("{}: no unwind rows", obj.path);
  obj.table = std::move(*table);
  obj.elf->release_resident_pages();
  return Ok{};
}

size_t ObjectCache::prune(size_t max_idle, uint64_t max_idle_bytes) {
  auto idle = [](const MappedObject& obj) { return obj.contexts == 0 && !obj.uploaded; };
  // An uncached object (a vDSO whose content hash collided) is found by no one again.
  size_t dropped = std::erase_if(uncached_, [&](const auto& obj) { return idle(*obj); });
  struct Idle {
    uint64_t last_used, bytes;
    std::map<Key, std::unique_ptr<MappedObject>>::iterator at;
  };
  std::vector<Idle> lru;
  uint64_t bytes = 0;
  for (auto it = objects_.begin(); it != objects_.end(); ++it) {
    if (!idle(*it->second)) continue;
    lru.push_back({it->second->last_used, it->second->held_bytes(), it});
    bytes += lru.back().bytes;
  }
  std::sort(lru.begin(), lru.end(),
            [](const Idle& a, const Idle& b) { return a.last_used < b.last_used; });
  for (size_t i = 0; i < lru.size() && (lru.size() - i > max_idle || bytes > max_idle_bytes); ++i) {
    bytes -= lru[i].bytes;
    objects_.erase(lru[i].at);
    ++dropped;
  }
  return dropped;
}

uint64_t ObjectCache::held_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [key, obj] : objects_) bytes += obj->held_bytes();
  for (const auto& obj : uncached_) bytes += obj->held_bytes();
  return bytes;
}

MappedObject* ObjectCache::get_vdso(const proc::MapEntry& map, const proc::ProcessMemory& mem) {
  auto obj = std::make_unique<MappedObject>();
  obj->path = map.path;
  const uint64_t size = map.end - map.start;
  if (map.end <= map.start || size > kMaxVdsoBytes) {
    obj->error = fmt::format("{} mapping {:#x}-{:#x} is larger than {} bytes", map.path, map.start,
                             map.end, kMaxVdsoBytes);
  } else {
    obj->image.resize(size);
    if (mem.read(map.start, obj->image.data(), static_cast<uint32_t>(size)) != 0) {
      obj->error = fmt::format("cannot read {} at {:#x}", map.path, map.start);
      obj->image.clear();
    }
  }
  // The same kernel maps the same vDSO into every process: share one analysis per content.
  const std::string_view content(reinterpret_cast<const char*>(obj->image.data()),
                                 obj->image.size());
  auto key = std::make_tuple(map.path, std::hash<std::string_view>{}(content), std::string("vdso"));
  auto it = objects_.find(key);
  if (it != objects_.end() && it->second->image == obj->image) return used(it->second.get());
  if (obj->error.empty()) {
    auto elf = elf::ElfFile::from_memory(obj->image, map.path);
    if (!elf.ok()) {
      obj->error = elf.message();
    } else {
      obj->elf = std::move(*elf);
      auto table = cfi::build_vdso_unwind_table(*obj->elf);
      if (table.ok()) {
        obj->table = std::move(*table);
      } else {
        obj->error = table.message();
      }
    }
  }
  MappedObject* raw = obj.get();
  if (it == objects_.end()) {
    objects_.emplace(std::move(key), std::move(obj));
  } else {
    uncached_.push_back(std::move(obj));  // a hash collision: never replace a live object
  }
  return used(raw);
}

ProcessContext::~ProcessContext() {
  for (const ModuleView& m : modules) --m.object->contexts;
}

const ModuleView* ProcessContext::module_at(uint64_t pc) const {
  auto it = std::upper_bound(modules.begin(), modules.end(), pc,
                             [](uint64_t v, const ModuleView& m) { return v < m.start; });
  if (it == modules.begin()) return nullptr;
  --it;
  return pc < it->end ? &*it : nullptr;
}

namespace {

// One executable file mapping, or the vDSO, of a signature ("" for any other mapping). The vDSO
// is the last code an exec maps (after the executable and its interpreter): maps read in the
// middle of an exec lack it.
std::string signature_entry(const proc::MapEntry& m) {
  if (!m.executable || (!m.file_backed() && m.path != "[vdso]")) return {};
  return fmt::format("{:x}-{:x}:{}:{};", m.start, m.end, m.inode, m.offset);
}

}  // namespace

std::string executable_signature(const std::vector<proc::MapEntry>& maps) {
  std::string sig;
  for (const proc::MapEntry& m : maps) sig += signature_entry(m);
  return sig;
}

bool still_mapped(std::string_view signature, const std::vector<proc::MapEntry>& maps) {
  std::set<std::string> now;
  for (const proc::MapEntry& m : maps) now.insert(signature_entry(m));
  for (size_t at = 0, end; (end = signature.find(';', at)) != std::string_view::npos;
       at = end + 1) {
    if (!now.count(std::string(signature.substr(at, end - at + 1)))) return false;
  }
  return true;
}

Result<uint64_t> mapping_bias(const elf::ElfFile& elf, const proc::MapEntry& map) {
  for (const elf::Segment& seg : elf.segments()) {
    if (seg.type != PT_LOAD || seg.offset < map.offset ||
        seg.offset - map.offset >= map.end - map.start) {
      continue;
    }
    return map.start + (seg.offset - map.offset) - seg.vaddr;
  }
  return make_error("{}: no PT_LOAD segment starts in the mapping {:#x}-{:#x} (offset {:#x})",
                    elf.path(), map.start, map.end, map.offset);
}

namespace {

// Tarantool keeps its main lua_State in the exported `tarantool_L` (src/lua/init.c); L->glref
// is G. The walker re-proves any hint (G->cur_L->glref == G) before use.
uint64_t tarantool_g(const ProcessContext& ctx) {
  const ModuleView* m = ctx.luajit;
  if (m == nullptr || !ctx.mem) return 0;
  const elf::Symbol* anchor = m->object->elf->find_symbol("tarantool_L");
  if (anchor == nullptr) return 0;
  uint64_t L = 0, g = 0;
  if (ctx.mem->read(anchor->value + m->bias, &L, 8) != 0 || L == 0) return 0;
  const lj_luajit_info& info = m->object->info;
  if (ctx.mem->read(L + info.L_glref, &g, info.ref_size) != 0) return 0;
  return g;
}

}  // namespace

Result<std::unique_ptr<ProcessContext>> build_process_context(uint32_t pid, ObjectCache& cache) {
  LJ_ASSIGN_OR_RETURN(std::vector<proc::MapEntry> maps, proc::read_proc_maps(pid));
  static std::atomic<uint64_t> generations{0};
  auto ctx = std::make_unique<ProcessContext>();
  ctx->generation = ++generations;
  ctx->pid = pid;
  ctx->comm = proc::read_comm(pid);
  ctx->signature = executable_signature(maps);
  auto mem = proc::ProcessMemory::open(pid);
  if (mem.ok()) {
    ctx->mem = std::move(*mem);
  } else {
    ctx->warnings.push_back(mem.message());
  }
  for (const proc::MapEntry& m : maps) {
    const bool vdso = m.executable && m.path == "[vdso]" && ctx->mem;
    if (!vdso && (!m.executable || !m.file_backed())) continue;
    MappedObject* obj = vdso ? cache.get_vdso(m, *ctx->mem) : cache.get(pid, m);
    if (!obj->elf) {
      ctx->warnings.push_back(fmt::format("{}: {}", m.path, obj->error));
      ++ctx->unread_modules;
      continue;
    }
    auto bias = mapping_bias(*obj->elf, m);
    if (!bias.ok()) {
      ctx->warnings.push_back(bias.message());
      continue;
    }
    ctx->modules.push_back(ModuleView{m.start, m.end, *bias, obj, vdso ? 0 : m.inode,
                                      vdso ? 0 : m.kernel_dev(), m.offset});
    ++obj->contexts;
  }
  std::sort(ctx->modules.begin(), ctx->modules.end(),
            [](const ModuleView& a, const ModuleView& b) { return a.start < b.start; });
  // The VM's file: the main executable first (tarantool, luajit), else a library (libluajit).
  for (const ModuleView& m : ctx->modules) {
    if (m.object->luajit && (ctx->luajit == nullptr || m.object->elf->type() == ET_EXEC)) {
      ctx->luajit = &m;
    }
  }
  if (ctx->luajit != nullptr && !ctx->luajit->object->fiber_error.empty()) {
    ctx->warnings.push_back("samples carry no fiber labels: " + ctx->luajit->object->fiber_error);
  }
  ctx->g_hint = tarantool_g(*ctx);
  return ctx;
}

bool maps_luajit(uint32_t pid, ObjectCache& cache) {
  auto maps = proc::read_proc_maps(pid);
  if (!maps.ok()) return false;
  for (const proc::MapEntry& m : *maps) {
    if (!m.executable || !m.file_backed()) continue;
    if (cache.links_luajit(pid, m) && cache.get(pid, m)->luajit) return true;
  }
  return false;
}

}  // namespace ljprof::record
