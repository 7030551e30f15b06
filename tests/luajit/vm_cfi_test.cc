// The LuaJIT VM's CFI: the interpreter FDE, the VM C-frame rule and the corrected sub-ranges
// (the overlays luajit/ gives cfi::build_unwind_table).
// Oracles: readelf (the "zPR" FDE and its CFA/ra/fp columns), nm (symbols), objdump (the
// instructions whose stack effect the corrected rows must follow).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "cfi/cfi.h"
#include "disasm/disasm.h"
#include "elf/elf_file.h"
#include "luajit/vm_cfi.h"
#include "support/test_support.h"

namespace ljprof::luajit {
namespace {

using cfi::Overlay;
using cfi::UnwindTable;

// The table the walker gets: the file's CFI with the overlays of luajit::unwind_overlays.
Result<UnwindTable> vm_table(const elf::ElfFile& file) {
  return cfi::build_unwind_table(file, unwind_overlays(file).overlays);
}

struct VmOracle {
  uint64_t offset = 0, pc_begin = 0, pc_end = 0;
  std::string cfa, ra, fp;  // readelf columns of the FDE's first row
};

// The FDEs whose CIE has a personality ("zPR"), at least 4 KiB long, per readelf.
std::vector<VmOracle> readelf_vm_fdes(const std::string& readelf, const std::string& path,
                                      bool arm64) {
  auto r = test::run({readelf, "-wN", "--debug-dump=frames-interp", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(r.out);
  std::string line;
  std::set<std::string> zpr_cies;
  std::vector<VmOracle> out;
  std::regex cie_re(R"(^([0-9a-f]{8}) [0-9a-f]+ [0-9a-f]{8} CIE \"zPR\")");
  std::regex fde_re(
      R"(^([0-9a-f]{8}) [0-9a-f]+ [0-9a-f]{8} FDE cie=([0-9a-f]{8}) pc=([0-9a-f]+)\.\.([0-9a-f]+))");
  std::smatch m;
  bool in_eh = false;
  while (std::getline(in, line)) {
    if (line.rfind("Contents of the ", 0) == 0)
      in_eh = line.find(".eh_frame section") != std::string::npos;
    if (!in_eh) continue;
    if (std::regex_search(line, m, cie_re)) zpr_cies.insert(m[1]);
    if (std::regex_search(line, m, fde_re) && zpr_cies.count(m[2])) {
      VmOracle o;
      o.offset = std::stoull(m[1], nullptr, 16);
      o.pc_begin = std::stoull(m[3], nullptr, 16);
      o.pc_end = std::stoull(m[4], nullptr, 16);
      if (o.pc_end - o.pc_begin < kMinInterpreterBytes) continue;
      std::string header, row;
      std::getline(in, header);
      std::getline(in, row);
      std::istringstream hs(header), rs(row);
      std::vector<std::string> h, v;
      for (std::string t; hs >> t;) h.push_back(t);
      for (std::string t; rs >> t;) v.push_back(t);
      for (size_t i = 0; i < h.size() && i < v.size(); ++i) {
        if (h[i] == "CFA") o.cfa = v[i];
        if (h[i] == "ra") o.ra = v[i];
        if (h[i] == (arm64 ? "x29" : "rbp")) o.fp = v[i];
      }
      out.push_back(o);
    }
  }
  return out;
}

struct VmBinary {
  std::string path;
  std::string readelf;
  bool arm64;
  std::string label;
};

std::vector<VmBinary> vm_binaries() {
  return {
      {"/usr/bin/tarantool", "readelf", false, "tarantool_amd64"},
      {"/usr/bin/luajit", "readelf", false, "luajit_amd64"},
      {"/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2", "readelf", false, "libluajit_amd64"},
      {test::fixture("nginx-lua/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2"), "readelf", false,
       "libluajit2_openresty"},
      {test::fixture("arm64/usr/bin/luajit"), "aarch64-linux-gnu-readelf", true, "luajit_arm64"},
      {test::fixture("arm64/usr/lib/aarch64-linux-gnu/libluajit-5.1.so.2"),
       "aarch64-linux-gnu-readelf", true, "libluajit_arm64"},
  };
}

void PrintTo(const VmBinary& b, std::ostream* os) {
  *os << b.path;
}

class VmCfi : public ::testing::TestWithParam<VmBinary> {};

TEST_P(VmCfi, InterpreterFdeAndCframeMatchReadelf) {
  const VmBinary& b = GetParam();
  auto file = elf::ElfFile::open(b.path);
  ASSERT_TRUE(file.ok()) << file.message();
  auto oracle = readelf_vm_fdes(b.readelf, b.path, b.arm64);
  ASSERT_EQ(oracle.size(), 1u) << "readelf should show exactly one large zPR FDE";
  auto fde = find_interpreter_fde(**file);
  ASSERT_TRUE(fde.ok()) << fde.message();
  EXPECT_EQ(fde->section_offset, oracle[0].offset);
  EXPECT_EQ(fde->pc_begin, oracle[0].pc_begin);
  EXPECT_EQ(fde->pc_end, oracle[0].pc_end);
  ASSERT_TRUE(fde->personality.has_value());
  if (const elf::Symbol* p = (*file)->symbol_at(*fde->personality)) {
    EXPECT_EQ(p->name, "lj_err_unwind_dwarf");  // tarantool has .symtab
  }

  ASSERT_TRUE(unwind_overlays(**file).vm.has_value());
  auto table = vm_table(**file);
  ASSERT_TRUE(table.ok()) << table.message();
  auto cframe = derive_vm_cframe(*table, fde->pc_begin, fde->pc_end);
  ASSERT_TRUE(cframe.ok()) << cframe.message();
  auto j = to_json(*cframe);
  std::printf("[ vm_cframe ] %s: %s\n", b.path.c_str(), j.dump().c_str());
  // readelf prints the CFA as "rsp+80" / "x29+16" and the saved slots as "c-8" / "c-16".
  std::string base = b.arm64 ? (cframe->cfa_base == LJ_CFI_REG_FP ? "x29" : "sp")
                             : (cframe->cfa_base == LJ_CFI_REG_FP ? "rbp" : "rsp");
  EXPECT_EQ(base + "+" + std::to_string(cframe->cfa_offset), oracle[0].cfa);
  EXPECT_EQ("c" + std::to_string(cframe->ra_offset), oracle[0].ra);
  EXPECT_EQ(cframe->fp_rule, LJ_CFI_RULE_AT_CFA);
  EXPECT_EQ("c" + std::to_string(cframe->fp_offset), oracle[0].fp);
  EXPECT_EQ(cframe->cfa_base, b.arm64 ? LJ_CFI_REG_FP : LJ_CFI_REG_SP);
  EXPECT_EQ(j["cfa_base"], b.arm64 ? "fp" : "sp");
  EXPECT_EQ(cframe->fde_section_offset, oracle[0].offset);
  // Every VM row is Keep or Invalid, except inside a VM sub-range, whose hint it carries
  // (the sub-ranges are checked against objdump and nm by the VmSubRanges tests).
  for (size_t i = 0; i + 1 < table->rows().size(); ++i) {
    const lj_cfi_row& r = table->rows()[i];
    if (r.pc_start < fde->pc_begin || r.pc_start >= fde->pc_end) continue;
    bool from_subrange = false;
    for (const Overlay& s : table->overlays()) {
      from_subrange |= s.begin <= r.pc_start && r.pc_start < s.end && s.row.hint == r.hint;
    }
    EXPECT_TRUE(r.hint == LJ_CFI_KEEP || r.hint == LJ_CFI_INVALID || from_subrange)
        << std::hex << r.pc_start;
  }
  EXPECT_GT(cframe->covered_bytes * 10, (fde->pc_end - fde->pc_begin) * 9);
}

// What proc_info derives the VM C frame from: the table built over the VM interval only. Oracle:
// the whole file's table, which readelf and objdump check above and in VmSubRanges. Every pc of
// the interval where either table's rule changes gets the same row from both.
TEST_P(VmCfi, TableOverTheVmHasTheWholeTablesRowsThere) {
  auto file = elf::ElfFile::open(GetParam().path);
  ASSERT_TRUE(file.ok()) << file.message();
  const UnwindOverlays o = unwind_overlays(**file);
  ASSERT_TRUE(o.vm.has_value());
  auto whole = cfi::build_unwind_table(**file, o.overlays);
  ASSERT_TRUE(whole.ok()) << whole.message();
  auto vm_code = disasm::disassemble_range(**file, o.vm->begin, o.vm->end - o.vm->begin);
  ASSERT_TRUE(vm_code.ok()) << vm_code.message();
  auto over = cfi::build_unwind_table_over(**file, o.vm->begin, o.vm->end,
                                           unwind_overlays(**file, o.vm, *vm_code));
  ASSERT_TRUE(over.ok()) << over.message();
  EXPECT_LT(over->rows().size(), whole->rows().size());
  std::set<uint64_t> pcs = {o.vm->begin};
  for (const auto* t : {&*whole, &*over}) {
    for (const lj_cfi_row& r : t->rows()) {
      if (r.pc_start > o.vm->begin && r.pc_start < o.vm->end) pcs.insert(r.pc_start);
    }
  }
  size_t compared = 0;
  for (uint64_t pc : pcs) {
    const lj_cfi_row *a = whole->row_at(pc), *b = over->row_at(pc);
    ASSERT_TRUE(a != nullptr && b != nullptr) << std::hex << pc;
    EXPECT_EQ(cfi::describe_row(*a, whole->arch()), cfi::describe_row(*b, over->arch()))
        << std::hex << pc;
    ++compared;
  }
  EXPECT_GT(compared, 1u);
  auto from_whole = derive_vm_cframe(*whole, o.vm->begin, o.vm->end);
  auto from_over = derive_vm_cframe(*over, o.vm->begin, o.vm->end);
  ASSERT_TRUE(from_whole.ok() && from_over.ok());
  EXPECT_EQ(to_json(*from_whole).dump(), to_json(*from_over).dump());
}

INSTANTIATE_TEST_SUITE_P(RealBinaries, VmCfi, ::testing::ValuesIn(vm_binaries()),
                         [](const ::testing::TestParamInfo<VmBinary>& info) {
                           return info.param.label;
                         });

// objdump's view of [begin, end): address -> "mnemonic operands" (intel syntax for x86-64).
std::vector<std::pair<uint64_t, std::string>> objdump(const std::string& tool,
                                                      const std::string& path, uint64_t begin,
                                                      uint64_t end, bool intel) {
  std::vector<std::string> argv = {tool, "-d", "-w"};
  if (intel) argv.push_back("-M");
  if (intel) argv.push_back("intel");
  argv.push_back(fmt::format("--start-address={:#x}", begin));
  argv.push_back(fmt::format("--stop-address={:#x}", end));
  argv.push_back(path);
  auto r = test::run(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::pair<uint64_t, std::string>> out;
  std::istringstream in(r.out);
  std::string line;
  std::regex insn(R"(^\s*([0-9a-f]+):\t[0-9a-f ]+\t(.*)$)");
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, insn)) {
      std::string text = m[2];
      text = std::regex_replace(text, std::regex(R"(\s+)"), " ");
      auto comment = text.find(" //");
      if (comment != std::string::npos) text = text.substr(0, comment);
      out.emplace_back(std::stoull(m[1], nullptr, 16), text);
    }
  }
  return out;
}

// The x86-64 VM: at every instruction of a push/sub-rsp prologue, of the JLOOP trace entry,
// of an add-rsp/pop/ret epilogue and of the exit handler, the table follows the stack effect
// objdump shows, not the blanket rule.
void check_x86_vm(const std::string& path, uint64_t begin, uint64_t end, int64_t frame) {
  auto file = elf::ElfFile::open(path);
  ASSERT_TRUE(file.ok());
  auto table = vm_table(**file);
  ASSERT_TRUE(table.ok()) << table.message();
  auto code = objdump("objdump", path, begin, end, true);
  ASSERT_GT(code.size(), 1000u);
  auto row = [&](uint64_t pc) { return table->row_at(pc); };
  auto starts = [](const std::string& s, const char* p) { return s.rfind(p, 0) == 0; };
  int prologues = 0, epilogues = 0, jloops = 0, exit_handlers = 0, linked_windows = 0, restores = 0,
      returns_to_c = 0;
  for (size_t i = 0; i < code.size(); ++i) {
    // Prologue.
    size_t j = i;
    while (j < code.size() && starts(code[j].second, "push ")) ++j;
    if (j > i && j < code.size() && starts(code[j].second, "sub rsp,0x")) {
      int64_t imm = std::stoll(code[j].second.substr(10), nullptr, 16);
      int64_t d = frame - imm - 8 * static_cast<int64_t>(j - i);
      if (d == 8 || d == 16) {
        // Before the C frame exists the entry is plain native code (hint Ok).
        for (size_t k = i; k <= j; ++k, d += 8) {
          const lj_cfi_row* r = row(code[k].first);
          ASSERT_NE(r, nullptr);
          EXPECT_EQ(r->hint, LJ_CFI_OK) << std::hex << code[k].first;
          EXPECT_EQ(r->cfa_base, LJ_CFI_REG_SP);
          EXPECT_EQ(r->cfa_offset, d) << std::hex << code[k].first << " " << code[k].second;
        }
        EXPECT_EQ(row(code[j + 1].first)->cfa_offset, frame);
        // Until rsp (or rsp + a flag, via lea) is stored into the lua_State (L->cframe), or a
        // call, the frame is not linked: Ok rows with the full frame, then Keep.
        std::map<uint64_t, size_t> at;
        for (size_t q = 0; q < code.size(); ++q) at.emplace(code[q].first, q);
        std::string holder = "rsp";
        size_t q = j + 1;
        for (int n = 0; n < 64 && q < code.size(); ++n) {
          const std::string& text = code[q].second;
          const lj_cfi_row* r = row(code[q].first);
          EXPECT_EQ(r->hint, LJ_CFI_OK) << std::hex << code[q].first << " " << text;
          EXPECT_EQ(r->cfa_offset, frame) << std::hex << code[q].first << " " << text;
          std::smatch m;
          if (std::regex_match(text, m, std::regex(R"(lea (r\w+),\[rsp\+0x1\])"))) holder = m[1];
          if (std::regex_match(
                  text, std::regex(R"(mov QWORD PTR \[r(bp|bx|cx|dx|si|di|\d+)\+0x[0-9a-f]+\],)" +
                                   holder)) ||
              starts(text, "call ")) {
            // Linked by a store: up to the first branch (a call included) the frame holds no
            // Lua frame yet (VM_EMPTY), then Keep.
            // (vm_cpcall: through its call and the conditional branch after it).
            for (size_t e = q + 1; !starts(text, "call ") && e < code.size(); ++e) {
              const std::string& next = code[e].second;
              if (starts(next, "jmp") || starts(next, "ret")) {
                EXPECT_EQ(row(code[e].first)->hint, LJ_CFI_KEEP) << std::hex << code[e].first;
                break;
              }
              EXPECT_EQ(row(code[e].first)->hint, LJ_CFI_VM_EMPTY)
                  << std::hex << code[e].first << " " << next;
              if (starts(next, "j")) {
                if (e + 1 < code.size()) {
                  EXPECT_EQ(row(code[e + 1].first)->hint, LJ_CFI_KEEP)
                      << std::hex << code[e + 1].first;
                }
                break;
              }
            }
            ++linked_windows;
            break;
          }
          if (std::regex_match(text, m, std::regex(R"(jmp ([0-9a-f]+)( <.*>)?)")) &&
              at.count(std::stoull(m[1], nullptr, 16))) {
            q = at[std::stoull(m[1], nullptr, 16)];
            continue;
          }
          ++q;
        }
        ++prologues;
        i = j;
        continue;
      }
    }
    if (j - i >= 8) {
      // Exit handler: VM_EXIT through its last call (lj_trace_exit), VM_CUR_L from the call's
      // return address and, when a jmp after that call lands on a run of loads right before
      // `mov rsp,reg` (vm_exit_interp's `1:`), for those loads and vm_exit_interp's entry;
      // VM_CUR_L_SAVED from the return to the first jmp.
      size_t k = j, call = 0, label = 0;
      while (k < code.size() && !starts(code[k].second, "mov rsp,")) ++k;
      ASSERT_LT(k, code.size());
      for (size_t q = i; q < k; ++q) {
        if (starts(code[q].second, "call ")) call = q;
      }
      ASSERT_GT(call, i);
      for (size_t q = call + 1; q < k; ++q) {
        std::smatch m;
        if (!std::regex_match(code[q].second, m, std::regex(R"(jmp ([0-9a-f]+)( <.*>)?)")))
          continue;
        for (size_t t = q + 1; t <= k; ++t) {
          if (code[t].first == std::stoull(m[1], nullptr, 16)) label = t;
        }
      }
      for (size_t q = label; label != 0 && q < k; ++q) {
        if (!std::regex_match(code[q].second, std::regex(R"(mov r\w+,QWORD PTR \[r\w+(-0x8)?\])")))
          label = 0;
      }
      // GC64: vm_exit_interp's entry `lea rcx,[rsp+0xN]` right after that jmp, before the
      // label, is where traces jump to: VM_CUR_L, the C frame N bytes above rsp.
      std::smatch lea;
      const size_t entry = label >= 2 && starts(code[label - 2].second, "jmp ") &&
                                   std::regex_match(code[label - 1].second, lea,
                                                    std::regex(R"(lea rcx,\[rsp\+0x([0-9a-f]+)\])"))
                               ? label - 1
                               : 0;
      // From lj_trace_exit's return through the handler's first jmp after it, BASE and PC are
      // loaded from L->base and the C frame's saved PC: VM_CUR_L_SAVED (non-GC64: past the
      // `mov rsp,` too, up to that jmp).
      size_t jmp_after = call;
      while (jmp_after + 1 < code.size() && !starts(code[jmp_after].second, "jmp ")) ++jmp_after;
      for (size_t q = i; q <= std::max(k, jmp_after); ++q) {
        uint8_t want = LJ_CFI_INVALID;
        if (q <= call) {
          want = LJ_CFI_VM_EXIT;
        } else if (q <= jmp_after) {
          want = LJ_CFI_VM_CUR_L_SAVED;
        } else if (label != 0 && (q >= label || q == entry)) {
          want = LJ_CFI_VM_CUR_L;
        }
        EXPECT_EQ(row(code[q].first)->hint, want) << std::hex << code[q].first;
      }
      if (entry != 0) {
        EXPECT_EQ(row(code[entry].first)->cfa_offset, frame + std::stoll(lea[1], nullptr, 16));
      }
      EXPECT_EQ(row(code[call].first + 1)->hint, LJ_CFI_VM_CUR_L) << std::hex << code[call].first;
      std::printf(
          "[ vm ranges ] %s: exit handler %#lx, lj_trace_exit call %#lx, label %#lx, "
          "vm_exit_interp entry %#lx\n",
          path.c_str(), code[i].first, code[call].first, label ? code[label].first : 0,
          entry ? code[entry].first : 0);
      ++exit_handlers;
      i = k;
      continue;
    }
    if (starts(code[i].second, "add rsp,0x")) {
      size_t k = i + 1;
      while (k < code.size() && starts(code[k].second, "pop ")) ++k;
      int64_t imm = std::stoll(code[i].second.substr(10), nullptr, 16);
      if (k < code.size() && code[k].second == "ret" && frame - imm - 8 * int64_t(k - i - 1) == 8) {
        // vm_leave_unw: the C frame is unlinked from L->cframe before `add rsp`, so from
        // there on (and after vm_leave_cp's `mov [L+cframe], reg` right before) it is native.
        int64_t d = frame - imm;
        EXPECT_EQ(row(code[i].first)->hint, LJ_CFI_OK) << std::hex << code[i].first;
        for (size_t q = i + 1; q <= k; ++q, d -= 8) {
          EXPECT_EQ(row(code[q].first)->cfa_offset, d) << std::hex << code[q].first;
          EXPECT_EQ(row(code[q].first)->hint, LJ_CFI_OK) << std::hex << code[q].first;
        }
        if (i >= 3 && code[i - 1].second == "xor eax,eax" &&
            std::regex_match(code[i - 2].second,
                             std::regex(R"(mov QWORD PTR \[rbp\+0x[0-9a-f]+\],rcx)")) &&
            starts(code[i - 3].second, "mov rcx,QWORD PTR [rsp+0x")) {
          EXPECT_EQ(row(code[i - 1].first)->hint, LJ_CFI_OK) << std::hex << code[i - 1].first;
          EXPECT_EQ(row(code[i - 2].first)->hint, LJ_CFI_VM_EMPTY) << std::hex << code[i - 2].first;
          EXPECT_EQ(row(code[i - 3].first)->hint, LJ_CFI_VM_EMPTY) << std::hex << code[i - 3].first;
          ++restores;
        }
        ++epilogues;
        i = k;
        continue;
      }
    }
    // vm_return to C: `and PC,-8; sub; neg` (PC becomes the previous base): Invalid; through
    // the store of PC into L->base the results overwrite the frame and PC is the caller's
    // base: VM_RETURNED; then, up to vm_leave_cp, VM_EMPTY.
    if (i + 2 < code.size() &&
        std::regex_match(code[i].second,
                         std::regex(R"(and (rbx|ebx),0x(fffffffffffffff8|fffffff8))")) &&
        std::regex_match(code[i + 1].second, std::regex(R"(sub (rbx,rdx|ebx,edx))")) &&
        std::regex_match(code[i + 2].second, std::regex(R"(neg (rbx|ebx))"))) {
      size_t q = i;
      const std::regex base_store(R"(mov (QWORD|DWORD) PTR \[rbp\+0x[0-9a-f]+\],(rbx|ebx))");
      for (; q < code.size() && !std::regex_match(code[q].second, base_store); ++q) {
        EXPECT_EQ(row(code[q].first)->hint, q < i + 3 ? LJ_CFI_INVALID : LJ_CFI_VM_RETURNED)
            << std::hex << code[q].first;
      }
      ASSERT_LT(q, code.size());
      EXPECT_EQ(row(code[q].first)->hint, LJ_CFI_VM_RETURNED) << std::hex << code[q].first;
      for (++q; q < code.size() && !starts(code[q].second, "mov rcx,QWORD PTR [rsp+0x"); ++q)
        EXPECT_EQ(row(code[q].first)->hint, LJ_CFI_VM_EMPTY) << std::hex << code[q].first;
      ++returns_to_c;
    }
    if (starts(code[i].second, "sub rsp,0x")) {
      size_t k = i + 1;
      while (k < code.size() && k < i + 4 && starts(code[k].second, "mov QWORD PTR [rsp")) ++k;
      if (k < code.size() && starts(code[k].second, "jmp r")) {
        int64_t imm = std::stoll(code[i].second.substr(10), nullptr, 16);
        // BC_JLOOP below the C frame: the walker finds it as the running L's cframe.
        for (size_t q = i + 1; q <= k; ++q) {
          EXPECT_EQ(row(code[q].first)->cfa_offset, frame + imm) << std::hex << code[q].first;
          EXPECT_EQ(row(code[q].first)->hint, LJ_CFI_VM_CUR_L) << std::hex << code[q].first;
        }
        ++jloops;
      }
    }
  }
  // lj_vm_cpuid (by symbol, or in a stripped VM by its bytes): at objdump's only `cpuid`, a leaf
  // row one push (objdump's, since the `ret` before it) above the return address.
  int cpuids = 0;
  for (size_t i = 0; i < code.size(); ++i) {
    if (code[i].second != "cpuid") continue;
    ++cpuids;
    int64_t depth = 8;
    for (size_t k = i; k-- > 0 && code[k].second != "ret";) {
      depth += starts(code[k].second, "push ") ? 8 : 0;
    }
    EXPECT_EQ(row(code[i].first)->hint, LJ_CFI_OK) << std::hex << code[i].first;
    EXPECT_EQ(row(code[i].first)->cfa_offset, depth) << std::hex << code[i].first;
    EXPECT_EQ(depth, 16);
  }
  EXPECT_EQ(cpuids, 1);
  std::printf(
      "[ vm ranges ] %s: %d prologues (%d linked), %d epilogues (%d after vm_leave_cp), %d "
      "JLOOP, %d exit handler\n",
      path.c_str(), prologues, linked_windows, epilogues, restores, jloops, exit_handlers);
  EXPECT_GE(prologues, 4);  // vm_resume, vm_pcall, vm_call, vm_cpcall
  EXPECT_EQ(linked_windows, prologues);
  EXPECT_EQ(restores, 1);      // vm_leave_cp
  EXPECT_EQ(returns_to_c, 1);  // vm_return
  EXPECT_GE(epilogues, 1);
  EXPECT_EQ(jloops, 1);
  EXPECT_EQ(exit_handlers, 1);
}

TEST(VmSubRanges, TarantoolByObjdumpAndSymbols) {
  auto file = elf::ElfFile::open("/usr/bin/tarantool");
  ASSERT_TRUE(file.ok());
  auto fde = find_interpreter_fde(**file);
  ASSERT_TRUE(fde.ok()) << fde.message();
  check_x86_vm("/usr/bin/tarantool", fde->pc_begin, fde->pc_end, 80);
  // The named entry points from nm are each the start of a corrected prologue.
  auto nm = test::run({"nm", "/usr/bin/tarantool"});
  auto table = vm_table(**file);
  ASSERT_TRUE(table.ok());
  for (const char* name : {"lj_vm_resume", "lj_vm_pcall", "lj_vm_call", "lj_vm_cpcall"}) {
    std::smatch m;
    ASSERT_TRUE(
        std::regex_search(nm.out, m, std::regex(std::string("([0-9a-f]+) t ") + name + "\n")));
    uint64_t at = std::stoull(m[1], nullptr, 16);
    const lj_cfi_row* r = table->row_at(at);
    EXPECT_EQ(r->cfa_offset, 8) << name;  // only the return address is on the stack
    bool named = false;
    for (const Overlay& s : table->overlays()) named |= s.begin == at && s.how == "symbol";
    EXPECT_TRUE(named) << name;
  }
}

// A byte the disassembler cannot decode (x86-64 0x06) in place of the first byte of
// lj_vm_resume's `sub rsp, imm` is a Gap: the prologue pattern does not match across it, so the
// named entry gets no rule instead of the prologue's rows.
TEST(VmSubRanges, UndecodableByteBreaksThePrologue) {
  const std::vector<uint8_t> original = test::read_file("/usr/bin/tarantool");
  auto file = elf::ElfFile::from_memory(original, "tarantool");
  ASSERT_TRUE(file.ok()) << file.message();
  const elf::Symbol* resume = (*file)->find_symbol("lj_vm_resume");
  ASSERT_NE(resume, nullptr);
  auto prologue = disasm::disassemble_range(**file, resume->value, 32);
  ASSERT_TRUE(prologue.ok()) << prologue.message();
  auto sub = std::find_if(prologue->begin(), prologue->end(), [](const disasm::Insn& i) {
    return i.kind == disasm::InsnKind::Sub && i.ops[0].is_reg64(disasm::kX86Rsp);
  });
  ASSERT_NE(sub, prologue->end());
  auto at = (*file)->read(sub->address, 1);
  ASSERT_TRUE(at.ok()) << at.message();
  std::vector<uint8_t> patched = original;
  patched[at->data() - original.data()] = 0x06;
  auto broken = elf::ElfFile::from_memory(patched, "tarantool-patched");
  ASSERT_TRUE(broken.ok()) << broken.message();
  auto gap = disasm::disassemble_range(**broken, sub->address, 1);
  ASSERT_TRUE(gap.ok()) << gap.message();
  ASSERT_EQ(gap->front().kind, disasm::InsnKind::Gap);

  auto good = vm_table(**file);
  ASSERT_TRUE(good.ok()) << good.message();
  EXPECT_EQ(good->row_at(resume->value)->hint, LJ_CFI_OK);
  EXPECT_EQ(good->row_at(resume->value)->cfa_offset, 8);
  auto table = vm_table(**broken);
  ASSERT_TRUE(table.ok()) << table.message();
  EXPECT_EQ(table->row_at(resume->value)->hint, LJ_CFI_INVALID);
  EXPECT_EQ(table->row_at(sub->address)->hint, LJ_CFI_INVALID);
  bool not_found = false;
  for (const Overlay& o : table->overlays()) {
    not_found |= o.begin == resume->value &&
                 o.what == "lj_vm_resume: expected instruction pattern not found";
  }
  EXPECT_TRUE(not_found);
}

// C-callable helpers inside the VM FDE (nm names them): plain leaf-function rules that follow
// objdump's push/pop, hint Ok (not handed to the LuaJIT walk).
TEST(VmSubRanges, TarantoolLeafHelpersByObjdump) {
  auto file = elf::ElfFile::open("/usr/bin/tarantool");
  ASSERT_TRUE(file.ok());
  auto table = vm_table(**file);
  ASSERT_TRUE(table.ok());
  auto nm = test::run({"nm", "-S", "/usr/bin/tarantool"});
  int helpers = 0;
  for (const char* name :
       {"lj_vm_floor", "lj_vm_ceil", "lj_vm_trunc", "lj_vm_mod", "lj_vm_powi_sse", "lj_vm_cpuid"}) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        nm.out, m, std::regex(std::string("([0-9a-f]+) ([0-9a-f]+) t ") + name + "\n")))
        << name;
    uint64_t at = std::stoull(m[1], nullptr, 16), size = std::stoull(m[2], nullptr, 16);
    int64_t depth = 8;
    auto code = objdump("objdump", "/usr/bin/tarantool", at, at + size, true);
    // The interpreter's BASE (rdx) and PC (rbx) survive a helper that never writes them
    // (objdump's text: no such destination, no instruction that writes them implicitly).
    const std::regex writes_vm_regs(
        R"(^(cpuid|div|idiv|mul|cqo|cdq|cwd|rdtsc)( |$)|^\S+ (rdx|edx|dx|dl|dh|rbx|ebx|bx|bl|bh)(,|$))");
    bool keeps = true;
    for (const auto& [pc, text] : code) keeps &= !std::regex_search(text, writes_vm_regs);
    for (const auto& [pc, text] : code) {
      const lj_cfi_row* r = table->row_at(pc);
      EXPECT_EQ(r->hint, keeps ? LJ_CFI_VM_LEAF : LJ_CFI_OK) << name << " " << std::hex << pc;
      EXPECT_EQ(r->cfa_offset, depth) << name << " " << std::hex << pc;
      if (text.rfind("push ", 0) == 0) depth += 8;
      if (text.rfind("pop ", 0) == 0) depth -= 8;
    }
    ++helpers;
  }
  EXPECT_EQ(helpers, 6);
}

// Without symbols the helpers are found as call targets inside the VM; on a stripped copy of
// tarantool every such range must lie inside one of the helpers the unstripped symbol table
// names, and BC_MODVN's lj_vm_mod must be among them.
TEST(VmSubRanges, StrippedTarantoolHelpersMatchSymbols) {
  const std::string stripped =
      testing::TempDir() + "/tarantool-stripped-" + std::to_string(getpid());
  auto st = test::run({"strip", "-o", stripped, "/usr/bin/tarantool"});
  ASSERT_EQ(st.exit_code, 0) << st.err;
  auto file = elf::ElfFile::open(stripped);
  ASSERT_TRUE(file.ok());
  ASSERT_EQ((*file)->find_symbol("lj_vm_mod"), nullptr);
  auto fde = find_interpreter_fde(**file);
  ASSERT_TRUE(fde.ok()) << fde.message();
  auto table = vm_table(**file);
  ASSERT_TRUE(table.ok());
  auto nm = test::run({"nm", "-S", "/usr/bin/tarantool"});
  std::map<std::string, std::pair<uint64_t, uint64_t>> named;
  for (const char* name : {"lj_vm_floor", "lj_vm_ceil", "lj_vm_trunc", "lj_vm_floor_sse",
                           "lj_vm_ceil_sse", "lj_vm_trunc_sse", "lj_vm_mod", "lj_vm_powi_sse"}) {
    std::smatch m;
    if (std::regex_search(nm.out, m,
                          std::regex(std::string("([0-9a-f]+) ([0-9a-f]+) t ") + name + "\n"))) {
      uint64_t at = std::stoull(m[1], nullptr, 16);
      named[name] = {at, at + std::stoull(m[2], nullptr, 16)};
    }
  }
  ASSERT_TRUE(named.count("lj_vm_mod"));
  std::set<std::string> found;
  for (const Overlay& s : table->overlays()) {
    if (s.what.rfind("leaf helper called from the VM", 0) != 0) continue;
    std::string inside;
    for (const auto& [name, range] : named) {
      if (range.first <= s.begin && s.end <= range.second) inside = name;
    }
    EXPECT_FALSE(inside.empty()) << std::hex << s.begin << ".." << s.end << " is in no helper";
    found.insert(inside);
    EXPECT_EQ(s.row.hint, LJ_CFI_VM_LEAF) << s.what;
  }
  EXPECT_TRUE(found.count("lj_vm_mod"));
  std::remove(stripped.c_str());
}

// lj_vm_cpuid, which C code calls at start-up (its `cpuid` traps to a hypervisor and draws
// samples), gets the same leaf rows from its bytes as from its symbol: in a stripped copy of
// tarantool at every instruction of nm's range (Debian's stripped luajit and libluajit: in
// check_x86_vm).
TEST(VmSubRanges, StrippedCpuidHelperByItsBytes) {
  const std::string stripped =
      testing::TempDir() + "/tarantool-stripped-cpuid-" + std::to_string(getpid());
  ASSERT_EQ(test::run({"strip", "-o", stripped, "/usr/bin/tarantool"}).exit_code, 0);
  auto named = elf::ElfFile::open("/usr/bin/tarantool");
  auto bare = elf::ElfFile::open(stripped);
  ASSERT_TRUE(named.ok() && bare.ok());
  ASSERT_EQ((*bare)->find_symbol("lj_vm_cpuid"), nullptr);
  auto named_table = vm_table(**named);
  auto bare_table = vm_table(**bare);
  ASSERT_TRUE(named_table.ok() && bare_table.ok());
  std::smatch m;
  const std::string nm = test::run({"nm", "-S", "/usr/bin/tarantool"}).out;
  ASSERT_TRUE(std::regex_search(nm, m, std::regex("([0-9a-f]+) ([0-9a-f]+) t lj_vm_cpuid\n")));
  const uint64_t at = std::stoull(m[1], nullptr, 16), size = std::stoull(m[2], nullptr, 16);
  const auto code = objdump("objdump", "/usr/bin/tarantool", at, at + size, true);
  ASSERT_FALSE(code.empty());
  for (const auto& [pc, text] : code) {
    const lj_cfi_row *a = named_table->row_at(pc), *b = bare_table->row_at(pc);
    ASSERT_TRUE(a != nullptr && b != nullptr);
    EXPECT_EQ(b->hint, a->hint) << std::hex << pc << " " << text;
    EXPECT_EQ(b->cfa_offset, a->cfa_offset) << std::hex << pc << " " << text;
  }
  std::remove(stripped.c_str());
}

TEST(VmSubRanges, StrippedLuajitByObjdumpPatterns) {
  for (const std::string path :
       {"/usr/bin/luajit", "/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2"}) {
    auto file = elf::ElfFile::open(path);
    ASSERT_TRUE(file.ok());
    auto fde = find_interpreter_fde(**file);
    ASSERT_TRUE(fde.ok()) << fde.message();
    check_x86_vm(path, fde->pc_begin, fde->pc_end, 80);
  }
}

// An AArch64 VM as the tests below read it: the walker's table, and objdump's instructions over
// the interpreter FDE. nullopt (with the reason recorded as a failure) when it is not one.
struct Arm64Vm {
  UnwindTable table;
  std::vector<std::pair<uint64_t, std::string>> code;
};
std::optional<Arm64Vm> read_arm64_vm(const std::string& path) {
  auto file = elf::ElfFile::open(path);
  if (!file.ok()) {
    ADD_FAILURE() << file.message();
    return std::nullopt;
  }
  auto fde = find_interpreter_fde(**file);
  if (!fde.ok()) {
    ADD_FAILURE() << fde.message();
    return std::nullopt;
  }
  auto table = vm_table(**file);
  if (!table.ok()) {
    ADD_FAILURE() << table.message();
    return std::nullopt;
  }
  return Arm64Vm{std::move(*table),
                 objdump("aarch64-linux-gnu-objdump", path, fde->pc_begin, fde->pc_end, false)};
}

// AArch64: before `add x29, sp, #N` of a VM entry the blanket x29+16 rule is wrong.
TEST(VmSubRanges, Arm64PrologueByObjdump) {
  const std::string path = test::fixture("arm64/usr/lib/aarch64-linux-gnu/libluajit-5.1.so.2");
  std::optional<Arm64Vm> vm = read_arm64_vm(path);
  ASSERT_TRUE(vm);
  const UnwindTable* table = &vm->table;
  const auto& code = vm->code;
  int prologues = 0;
  for (size_t i = 0; i + 2 < code.size(); ++i) {
    if (code[i].second.rfind("sub sp, sp, #0x", 0) == 0 &&
        code[i + 1].second.rfind("stp x29, x30, [sp, #", 0) == 0 &&
        code[i + 2].second.rfind("add x29, sp, #", 0) == 0) {
      int64_t size = std::stoll(code[i].second.substr(15), nullptr, 16);
      const lj_cfi_row* at_sub = table->row_at(code[i].first);
      const lj_cfi_row* at_stp = table->row_at(code[i + 1].first);
      const lj_cfi_row* at_add = table->row_at(code[i + 2].first);
      const lj_cfi_row* after = table->row_at(code[i + 2].first + 4);
      EXPECT_EQ(at_sub->cfa_base, LJ_CFI_REG_SP);
      EXPECT_EQ(at_sub->cfa_offset, 0);
      EXPECT_EQ(at_sub->ra_rule, LJ_CFI_RULE_SAME);
      EXPECT_EQ(at_stp->cfa_offset, size);
      EXPECT_EQ(at_add->ra_rule, LJ_CFI_RULE_AT_CFA);
      EXPECT_EQ(after->cfa_base, LJ_CFI_REG_FP);
      EXPECT_EQ(after->cfa_offset, 16);
      ++prologues;
    }
  }
  EXPECT_GE(prologues, 4);
}

// The arm64 VMs at hand (Debian's luajit and libluajit, and
// Tarantool's fork built by the LuaJIT matrix), each with objdump as the oracle below.
std::vector<std::string> arm64_vms() {
  return {test::fixture("arm64/usr/bin/luajit"),
          test::fixture("arm64/usr/lib/aarch64-linux-gnu/libluajit-5.1.so.2"),
          test::fixture("matrix/tarantool-arm64-gcc-O2/luajit")};
}

// Runs `check` on each of arm64_vms() with its table and objdump's code (a missing VM fails).
void for_each_arm64_vm(const std::function<void(const std::string&, const Arm64Vm&)>& check) {
  for (const std::string& path : arm64_vms()) {
    SCOPED_TRACE(path);
    if (!test::file_exists(path)) GTEST_FAIL() << path << " missing: run scripts/bootstrap";
    std::optional<Arm64Vm> vm = read_arm64_vm(path);
    ASSERT_TRUE(vm);
    check(path, *vm);
  }
}

// AArch64 ins_call (`str PC, [BASE, FRAME_PC]`): every such store in the VM, found by objdump,
// takes its frame link from PC (hint VM_LINK_PENDING), and no other instruction does.
TEST(VmSubRanges, Arm64CallStoresTakeTheLinkFromPc) {
  for_each_arm64_vm([](const std::string&, const Arm64Vm& vm) {
    int stores = 0;
    for (const auto& [pc, text] : vm.code) {
      // objdump prints code after a data mapping symbol ($d) as words: the same encoding.
      const bool call_store = text == "stur x21, [x19, #-8]" || text == ".word 0xf81f8275";
      stores += call_store ? 1 : 0;
      EXPECT_EQ(vm.table.row_at(pc)->hint == LJ_CFI_VM_LINK_PENDING, call_store)
          << std::hex << pc << " " << text;
    }
    // BC_CALL, BC_CALLM, vm_call_dispatch_f, vmeta_call (vm_arm64.dasc ins_call).
    EXPECT_GE(stores, 3);
  });
}

// vm_arm64.dasc vm_cpcall after its C function returned, found by objdump: `blr x3; mov x19, x0;
// mov w21, #5; cbnz x19, <vm_call>; b <vm_leave_cp>`. With nothing to call the `b` still runs
// on the linked C frame, which holds no Lua frame: VM_EMPTY there as over the whole sequence
// (L->base is the caller's, not a frame of this C frame: a walk from it would put the caller's
// Lua frames inside whatever called lj_vm_cpcall).
TEST(VmSubRanges, Arm64CpcallReturnHoldsNoLuaFrame) {
  for_each_arm64_vm([](const std::string&, const Arm64Vm& vm) {
    const auto& code = vm.code;
    int found = 0;
    for (size_t i = 0; i + 4 < code.size(); ++i) {
      if (code[i].second != "blr x3" || code[i + 1].second != "mov x19, x0" ||
          code[i + 2].second != "mov w21, #0x5" || code[i + 3].second.rfind("cbnz x19, ", 0) != 0 ||
          code[i + 4].second.rfind("b ", 0) != 0) {
        continue;
      }
      for (size_t q = i + 1; q <= i + 4; ++q) {
        EXPECT_EQ(vm.table.row_at(code[q].first)->hint, LJ_CFI_VM_EMPTY)
            << std::hex << code[q].first << " " << code[q].second;
      }
      ++found;
    }
    EXPECT_EQ(found, 1);
  });
}

// The AArch64 trace exit handler (vm_arm64.dasc vm_exit_handler), found by objdump: `sub sp, sp,
// #0x200` and a run of 31 `stp` (x0..x29, d0..d31), then the first `bl` (lj_trace_exit) and the
// first `b` after it. VM_EXIT from the sub through the bl's first byte, VM_CUR_L for the rest of
// the bl (its return address), VM_CUR_L_SAVED from the return through the `b`. (objdump prints the
// code after a data mapping symbol as .word: `b` is 0x14000000 | imm26.)
TEST(VmSubRanges, Arm64ExitHandlerByObjdump) {
  for_each_arm64_vm([](const std::string& path, const Arm64Vm& vm) {
    const auto& code = vm.code;
    auto starts = [](const std::string& s, const char* p) { return s.rfind(p, 0) == 0; };
    auto is_b = [&](const std::string& s) {
      return starts(s, "b ") ||
             (starts(s, ".word 0x") && (std::stoul(s.substr(6), nullptr, 16) >> 26) == 0x5);
    };
    int handlers = 0;
    for (size_t i = 0; i + 33 < code.size(); ++i) {
      if (code[i].second != "sub sp, sp, #0x200") continue;
      size_t k = i + 1;
      while (k < code.size() && starts(code[k].second, "stp ")) ++k;
      if (k - i - 1 < 31) continue;
      size_t call = k;
      while (call < code.size() && !starts(code[call].second, "bl ")) ++call;
      size_t jmp = call + 1;
      while (jmp < code.size() && !is_b(code[jmp].second)) ++jmp;
      ASSERT_LT(jmp, code.size());
      ASSERT_LE(jmp, call + 8);
      for (size_t q = i; q <= jmp; ++q) {
        const uint8_t want = q <= call ? LJ_CFI_VM_EXIT : LJ_CFI_VM_CUR_L_SAVED;
        EXPECT_EQ(vm.table.row_at(code[q].first)->hint, want)
            << std::hex << code[q].first << " " << code[q].second;
      }
      EXPECT_EQ(vm.table.row_at(code[call].first + 1)->hint, LJ_CFI_VM_CUR_L);
      std::printf("[ vm ranges ] %s: exit handler %#lx, lj_trace_exit call %#lx, b %#lx\n",
                  path.c_str(), code[i].first, code[call].first, code[jmp].first);
      ++handlers;
      i = jmp;
    }
    EXPECT_EQ(handlers, 1);
  });
}

// x86-64 ins_call (`mov [BASE-8], PC` with LJ_FR2, `mov [BASE-4], PC` without): every such
// store in the VM, found by objdump, takes its frame link from PC (hint VM_LINK_PENDING), and no
// other instruction does. Debian's luajit (LJ_FR2), OpenResty's luajit2 and Debian's tarantool
// (without).
TEST(VmSubRanges, X86CallStoresTakeTheLinkFromPc) {
  for (const std::string& path :
       {std::string("/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2"),
        test::fixture("nginx-lua/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2"),
        std::string("/usr/bin/tarantool")}) {
    SCOPED_TRACE(path);
    auto file = elf::ElfFile::open(path);
    ASSERT_TRUE(file.ok()) << file.message();
    auto fde = find_interpreter_fde(**file);
    ASSERT_TRUE(fde.ok()) << fde.message();
    auto table = vm_table(**file);
    ASSERT_TRUE(table.ok()) << table.message();
    int stores = 0;
    for (const auto& [pc, text] : objdump("objdump", path, fde->pc_begin, fde->pc_end, true)) {
      const bool call_store =
          text == "mov QWORD PTR [rdx-0x8],rbx" || text == "mov DWORD PTR [rdx-0x4],ebx";
      stores += call_store ? 1 : 0;
      EXPECT_EQ(table->row_at(pc)->hint == LJ_CFI_VM_LINK_PENDING, call_store)
          << std::hex << pc << " " << text;
    }
    // BC_CALL, BC_CALLM, vm_call_dispatch_f, vmeta_call (vm_x64.dasc / vm_x86.dasc ins_call).
    EXPECT_GE(stores, 3);
  }
}

// AArch64 writeback prologue and epilogue (Tarantool's fork): `stp x29, x30, [sp, #-S]!` starts
// at CFA = sp with the return address in x30; after it CFA = sp + S with x30 saved at CFA - S +
// 8; `ldp x29, x30, [sp], #S` has the same rule and its `ret` the first one. S and the shape
// come from objdump.
TEST(VmSubRanges, Arm64WritebackPrologueByObjdump) {
  const std::string path = test::fixture("matrix/tarantool-arm64-gcc-O2/luajit");
  ASSERT_TRUE(test::file_exists(path)) << path << " missing: run scripts/luajit-matrix";
  std::optional<Arm64Vm> vm = read_arm64_vm(path);
  ASSERT_TRUE(vm);
  const UnwindTable* table = &vm->table;
  const auto& code = vm->code;
  const std::regex push(R"(^stp x29, x30, \[sp, #-(\d+)\]!$)");
  const std::regex pop(R"(^ldp x29, x30, \[sp\], #(\d+)$)");
  int prologues = 0, epilogues = 0;
  std::smatch m;
  for (size_t i = 0; i + 1 < code.size(); ++i) {
    if (std::regex_match(code[i].second, m, push) && code[i + 1].second == "mov x29, sp") {
      const int32_t size = std::stoi(m[1]);
      const lj_cfi_row* at_stp = table->row_at(code[i].first);
      const lj_cfi_row* at_mov = table->row_at(code[i + 1].first);
      EXPECT_EQ(at_stp->cfa_base, LJ_CFI_REG_SP);
      EXPECT_EQ(at_stp->cfa_offset, 0);
      EXPECT_EQ(at_stp->ra_rule, LJ_CFI_RULE_SAME);
      EXPECT_EQ(at_stp->hint, LJ_CFI_OK);
      EXPECT_EQ(at_mov->cfa_base, LJ_CFI_REG_SP);
      EXPECT_EQ(at_mov->cfa_offset, size);
      EXPECT_EQ(at_mov->ra_rule, LJ_CFI_RULE_AT_CFA);
      EXPECT_EQ(at_mov->ra_offset, 8 - size);
      EXPECT_EQ(at_mov->fp_offset, -size);
      ++prologues;
    }
    if (std::regex_match(code[i].second, m, pop) && code[i + 1].second == "ret") {
      const int32_t size = std::stoi(m[1]);
      const lj_cfi_row* at_ldp = table->row_at(code[i].first);
      const lj_cfi_row* at_ret = table->row_at(code[i + 1].first);
      EXPECT_EQ(at_ldp->cfa_offset, size);
      EXPECT_EQ(at_ldp->ra_offset, 8 - size);
      EXPECT_EQ(at_ret->cfa_offset, 0);
      EXPECT_EQ(at_ret->ra_rule, LJ_CFI_RULE_SAME);
      ++epilogues;
    }
  }
  // lj_vm_resume, _pcall, _call, _cpcall, _ffi_callback, _ffi_call; vm_leave_cp's epilogue
  // (lj_vm_ffi_call's lies where objdump shows words).
  EXPECT_GE(prologues, 5);
  EXPECT_GE(epilogues, 1);
}

// AArch64 leaf helpers called from the VM and from traces: lj_vm_modi (by symbol in
// Tarantool's fork, whose build keeps .symtab; per nm) gets the leaf rule, CFA = sp with the
// return address in x30, over its whole body.
TEST(VmSubRanges, Arm64ModuloHelperIsALeaf) {
  const std::string path = test::fixture("matrix/tarantool-arm64-gcc-O2/luajit");
  ASSERT_TRUE(test::file_exists(path)) << path << " missing: run scripts/luajit-matrix";
  auto r = test::run({"aarch64-linux-gnu-nm", "-S", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(([0-9a-f]+) ([0-9a-f]+) t lj_vm_modi\n)")))
      << "nm: no lj_vm_modi";
  const uint64_t begin = std::stoull(m[1], nullptr, 16), size = std::stoull(m[2], nullptr, 16);
  auto file = elf::ElfFile::open(path);
  ASSERT_TRUE(file.ok());
  auto table = vm_table(**file);
  ASSERT_TRUE(table.ok());
  for (uint64_t pc = begin; pc < begin + size; pc += 4) {
    const lj_cfi_row* row = table->row_at(pc);
    EXPECT_EQ(row->hint, LJ_CFI_VM_LEAF) << std::hex << pc;
    EXPECT_EQ(row->cfa_base, LJ_CFI_REG_SP) << std::hex << pc;
    EXPECT_EQ(row->cfa_offset, 0) << std::hex << pc;
    EXPECT_EQ(row->ra_rule, LJ_CFI_RULE_SAME) << std::hex << pc;
  }
}

// AArch64 .plt (no CFI from the linker): readelf gives the section; PLT0 saves x16/x30 with
// `stp x16, x30, [sp, #-16]!` (objdump), the entries after it leave sp and x30 alone.
TEST(Arm64Plt, EntriesReturnThroughX30) {
  const std::string path = test::fixture("arm64/usr/lib/aarch64-linux-gnu/libluajit-5.1.so.2");
  auto r = test::run({"aarch64-linux-gnu-readelf", "-SW", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.out, m, std::regex(R"(\] \.plt\s+PROGBITS\s+([0-9a-f]+) [0-9a-f]+ ([0-9a-f]+))")));
  const uint64_t plt = std::stoull(m[1], nullptr, 16), size = std::stoull(m[2], nullptr, 16);
  auto code = objdump("aarch64-linux-gnu-objdump", path, plt, plt + 8, false);
  ASSERT_FALSE(code.empty());
  ASSERT_EQ(code[0].second, "stp x16, x30, [sp, #-16]!");
  auto file = elf::ElfFile::open(path);
  ASSERT_TRUE(file.ok());
  auto table = cfi::build_unwind_table(**file);
  ASSERT_TRUE(table.ok()) << table.message();
  const lj_cfi_row* plt0 = table->row_at(plt);
  EXPECT_EQ(plt0->cfa_offset, 0);
  EXPECT_EQ(plt0->ra_rule, LJ_CFI_RULE_SAME);
  const lj_cfi_row* after_stp = table->row_at(plt + 4);
  EXPECT_EQ(after_stp->cfa_offset, 16);
  EXPECT_EQ(after_stp->ra_rule, LJ_CFI_RULE_AT_CFA);
  EXPECT_EQ(after_stp->ra_offset, -8);
  for (uint64_t pc = plt + 32; pc < plt + size; pc += 4) {
    const lj_cfi_row* row = table->row_at(pc);
    ASSERT_EQ(row->hint, LJ_CFI_OK) << std::hex << pc;
    ASSERT_EQ(row->cfa_base, LJ_CFI_REG_SP) << std::hex << pc;
    ASSERT_EQ(row->cfa_offset, 0) << std::hex << pc;
    ASSERT_EQ(row->ra_rule, LJ_CFI_RULE_SAME) << std::hex << pc;
  }
}

}  // namespace
}  // namespace ljprof::luajit
