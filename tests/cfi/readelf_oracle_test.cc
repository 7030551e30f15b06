// Oracle: binutils. For every FDE of the real binaries, the CFA, return-address and (x86-64)
// rbx rules of every row equal what `readelf --debug-dump=frames-interp` (aarch64-linux-gnu-readelf
// for AArch64) prints, in both directions (each of our row starts checked against readelf's rule in
// effect there, each readelf row start against ours). Stop rows must be exactly the FDEs whose raw
// CFI (`--debug-dump=frames`) has DW_CFA_undefined for the return address column.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "cfi/cfi.h"
#include "elf/elf_file.h"
#include "support/test_support.h"

namespace ljprof::cfi {
namespace {

struct OracleRow {
  uint64_t loc = 0;
  std::string cfa;
  std::string ra;  // "" when readelf prints no ra column (never referenced)
  std::string bx;  // x86-64 rbx, likewise
};

struct OracleEntry {
  uint64_t offset = 0;
  bool is_cie = false;
  uint64_t cie = 0;
  uint64_t pc_begin = 0, pc_end = 0;
  std::vector<OracleRow> rows;
};

std::vector<std::string> split_ws(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  std::string tok;
  while (in >> tok) {
    // readelf prints a register-held rule as "r10 (r10)": one value, two words.
    if (!out.empty() && tok.front() == '(' && tok.back() == ')') {
      out.back() += " " + tok;
    } else {
      out.push_back(tok);
    }
  }
  return out;
}

bool is_hex(const std::string& s, size_t len) {
  return s.size() == len && std::all_of(s.begin(), s.end(), [](char c) { return isxdigit(c); });
}

// Parses one section's part of readelf's frames-interp output.
std::map<uint64_t, OracleEntry> parse_frames_interp(const std::string& text,
                                                    const std::string& section) {
  std::map<uint64_t, OracleEntry> entries;
  std::istringstream in(text);
  std::string line;
  bool inside = false;
  OracleEntry* cur = nullptr;
  std::vector<std::string> header;
  while (std::getline(in, line)) {
    if (line.rfind("Contents of the ", 0) == 0) {
      inside = line.find(section + " section") != std::string::npos;
      cur = nullptr;
      continue;
    }
    if (!inside) continue;
    auto t = split_ws(line);
    if (t.empty()) continue;
    if (t.size() >= 4 && is_hex(t[0], 8) && (t[3] == "CIE" || t[3] == "FDE")) {
      OracleEntry e;
      e.offset = std::stoull(t[0], nullptr, 16);
      e.is_cie = t[3] == "CIE";
      if (!e.is_cie) {
        for (const std::string& tok : t) {
          if (tok.rfind("cie=", 0) == 0) e.cie = std::stoull(tok.substr(4), nullptr, 16);
          if (tok.rfind("pc=", 0) == 0) {
            auto dots = tok.find("..");
            e.pc_begin = std::stoull(tok.substr(3, dots - 3), nullptr, 16);
            e.pc_end = std::stoull(tok.substr(dots + 2), nullptr, 16);
          }
        }
      }
      cur = &(entries[e.offset] = e);
      header.clear();
      continue;
    }
    if (cur == nullptr) continue;
    if (t[0] == "LOC") {
      header = t;
      continue;
    }
    if (is_hex(t[0], 16) && !header.empty()) {
      OracleRow row;
      row.loc = std::stoull(t[0], nullptr, 16);
      for (size_t i = 1; i < header.size() && i < t.size(); ++i) {
        if (header[i] == "CFA") row.cfa = t[i];
        if (header[i] == "ra") row.ra = t[i];
        if (header[i] == "rbx") row.bx = t[i];
      }
      if (!cur->rows.empty() && cur->rows.back().loc == row.loc) cur->rows.pop_back();
      cur->rows.push_back(row);
    }
  }
  return entries;
}

std::string reg_name(uint32_t reg, elf::Arch arch) {
  if (arch == elf::Arch::AArch64) {
    if (reg <= 30) return "x" + std::to_string(reg);
    if (reg == 31) return "sp";
    return "r" + std::to_string(reg);
  }
  static const char* const names[] = {"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8",
                                      "r9",  "r10", "r11", "r12", "r13", "r14", "r15", "rip"};
  if (reg < 17) return names[reg];
  return "r" + std::to_string(reg);
}

std::string cfa_text(const CfaRule& cfa, elf::Arch arch) {
  if (cfa.kind != CfaRule::Kind::RegOffset) return "exp";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%+lld", reg_name(cfa.reg, arch).c_str(),
                static_cast<long long>(cfa.offset));
  return buf;
}

// readelf prints "u" both for DW_CFA_undefined and for a never-mentioned column (or no column
// at all), and "s" for an explicit DW_CFA_same_value; libdw folds never-mentioned into
// same-value. So SameValue matches "", "u", "s"; Undefined matches "u" (the raw-CFI check
// below pins the Undefined ones exactly).
bool ra_matches(const RegisterRule& ra, const std::string& text, elf::Arch arch) {
  char buf[64];
  switch (ra.kind) {
    case RegisterRule::Kind::SameValue:
      return text.empty() || text == "u" || text == "s";
    case RegisterRule::Kind::Undefined:
      return text == "u";
    case RegisterRule::Kind::AtCfa:
      std::snprintf(buf, sizeof buf, "c%+lld", static_cast<long long>(ra.offset));
      return text == buf;
    case RegisterRule::Kind::ValCfa:
      std::snprintf(buf, sizeof buf, "v%+lld", static_cast<long long>(ra.offset));
      return text == buf;
    case RegisterRule::Kind::InRegister:
      return text == reg_name(ra.reg, arch) ||
             text.rfind("r" + std::to_string(ra.reg) + " (", 0) == 0;
    case RegisterRule::Kind::Expression:
      return text == "exp";
    case RegisterRule::Kind::ValExpression:
      return text == "vexp";
  }
  return false;
}

// FDE offsets whose raw CFI (their own instructions or their CIE's initial instructions) sets
// the return address column undefined.
std::set<uint64_t> fdes_with_undefined_ra(const std::string& raw, const std::string& section,
                                          const std::string& ra_reg_text) {
  std::set<uint64_t> out, cies;
  std::map<uint64_t, uint64_t> fde_cie;
  std::istringstream in(raw);
  std::string line;
  bool inside = false;
  uint64_t cur = 0;
  bool has_cur = false;
  bool cur_is_cie = false;
  while (std::getline(in, line)) {
    if (line.rfind("Contents of the ", 0) == 0) {
      inside = line.find(section + " section") != std::string::npos;
      has_cur = false;
      continue;
    }
    if (!inside) continue;
    auto t = split_ws(line);
    if (t.size() >= 4 && is_hex(t[0], 8) && (t[3] == "CIE" || t[3] == "FDE")) {
      cur = std::stoull(t[0], nullptr, 16);
      has_cur = true;
      cur_is_cie = t[3] == "CIE";
      if (!cur_is_cie && t.size() >= 5 && t[4].rfind("cie=", 0) == 0) {
        fde_cie[cur] = std::stoull(t[4].substr(4), nullptr, 16);
      }
      continue;
    }
    if (has_cur && line.find("DW_CFA_undefined: " + ra_reg_text) != std::string::npos) {
      (cur_is_cie ? cies : out).insert(cur);
    }
  }
  for (const auto& [fde, cie] : fde_cie) {
    if (cies.count(cie)) out.insert(fde);
  }
  return out;
}

// A CFA expression as readelf's raw dump prints it, with the pc range it governs: from the
// location it is set at to the next CFA change or the end of the FDE.
struct RawCfaExpression {
  uint64_t fde = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
  std::vector<std::string> ops;  // "DW_OP_breg7 (rsp): 8", "DW_OP_lit15", ...
};

std::vector<RawCfaExpression> raw_cfa_expressions(const std::string& raw,
                                                  const std::string& section) {
  std::vector<RawCfaExpression> out;
  std::istringstream in(raw);
  std::string line;
  bool inside = false, in_fde = false;
  uint64_t fde = 0, loc = 0, fde_end = 0;
  auto close_open = [&](uint64_t at) {
    if (!out.empty() && out.back().end == 0) out.back().end = at;
  };
  while (std::getline(in, line)) {
    if (line.rfind("Contents of the ", 0) == 0) {
      inside = line.find(section + " section") != std::string::npos;
      continue;
    }
    if (!inside) continue;
    auto t = split_ws(line);
    if (t.size() >= 4 && is_hex(t[0], 8) && (t[3] == "CIE" || t[3] == "FDE")) {
      if (in_fde) close_open(fde_end);
      in_fde = t[3] == "FDE";
      fde = std::stoull(t[0], nullptr, 16);
      for (const std::string& w : t) {
        if (w.rfind("pc=", 0) == 0) {
          loc = std::stoull(w.substr(3), nullptr, 16);
          fde_end = std::stoull(w.substr(w.find("..") + 2), nullptr, 16);
        }
      }
      continue;
    }
    if (!in_fde) continue;
    if (auto at = line.find(" to ");
        line.find("DW_CFA_advance_loc") != std::string::npos && at != std::string::npos) {
      loc = std::stoull(line.substr(at + 4), nullptr, 16);
    } else if (auto e = line.find("DW_CFA_def_cfa_expression ("); e != std::string::npos) {
      close_open(loc);
      RawCfaExpression x{fde, loc, 0, {}};
      std::string body = line.substr(e + 27);
      body = body.substr(0, body.rfind(')'));
      std::istringstream ops(body);
      std::string op;
      while (std::getline(ops, op, ';')) {
        op.erase(0, op.find_first_not_of(' '));
        x.ops.push_back(op);
      }
      out.push_back(x);
    } else if (line.find("DW_CFA_def_cfa") != std::string::npos) {
      close_open(loc);
    }
  }
  if (in_fde) close_open(fde_end);
  return out;
}

// Evaluates readelf's text of a CFA expression over rsp = 0 and rip = pc, i.e. returns the CFA
// offset from rsp; nullopt for an operation outside the few the PLT rule uses.
std::optional<int64_t> eval_rsp_relative(const std::vector<std::string>& ops, uint64_t pc) {
  std::vector<int64_t> st;
  for (const std::string& op : ops) {
    auto colon = op.find(": ");
    if (op.rfind("DW_OP_breg7 (rsp)", 0) == 0 && colon != std::string::npos) {
      st.push_back(std::stoll(op.substr(colon + 2)));
    } else if (op.rfind("DW_OP_breg16 (rip)", 0) == 0 && colon != std::string::npos) {
      st.push_back(static_cast<int64_t>(pc) + std::stoll(op.substr(colon + 2)));
    } else if (op.rfind("DW_OP_lit", 0) == 0) {
      st.push_back(std::stoll(op.substr(9)));
    } else if (st.size() >= 2 &&
               (op == "DW_OP_and" || op == "DW_OP_ge" || op == "DW_OP_shl" || op == "DW_OP_plus")) {
      const int64_t b = st.back();
      st.pop_back();
      const int64_t a = st.back();
      st.back() = op == "DW_OP_and"   ? (a & b)
                  : op == "DW_OP_ge"  ? (a >= b ? 1 : 0)
                  : op == "DW_OP_shl" ? (a << b)
                                      : a + b;
    } else {
      return std::nullopt;
    }
  }
  if (st.size() != 1) return std::nullopt;
  return st.back();
}

struct Target {
  std::string path;
  std::string readelf;
  std::string label;
};

std::vector<Target> targets() {
  const std::string a64 = "aarch64-linux-gnu-readelf";
  return {
      {"/usr/bin/tarantool", "readelf", "tarantool_amd64"},
      {"/usr/lib/x86_64-linux-gnu/libc.so.6", "readelf", "libc_amd64"},
      {"/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2", "readelf", "libluajit_amd64"},
      {test::fixture("arm64/usr/lib/aarch64-linux-gnu/libluajit-5.1.so.2"), a64, "libluajit_arm64"},
      {"/lib64/ld-linux-x86-64.so.2", "readelf", "ld_linux_amd64"},
      {"/usr/sbin/nginx", "readelf", "nginx_amd64"},
      {"/usr/bin/luajit", "readelf", "luajit_amd64"},
      {test::fixture("arm64/usr/bin/luajit"), a64, "luajit_arm64"},
      {test::fixture("nginx-lua/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2"), "readelf",
       "libluajit2_openresty"},
  };
}

void PrintTo(const Target& b, std::ostream* os) {
  *os << b.path;
}

class ReadelfOracle : public ::testing::TestWithParam<Target> {};

TEST_P(ReadelfOracle, EveryFdeRowMatchesFramesInterp) {
  const Target& target = GetParam();
  auto file = elf::ElfFile::open(target.path);
  ASSERT_TRUE(file.ok()) << file.message();
  const elf::Arch arch = (*file)->arch();
  // -wN: only this file's sections (readelf otherwise follows .gnu_debuglink and exits 1).
  auto interp = test::run({target.readelf, "-wN", "--debug-dump=frames-interp", target.path});
  ASSERT_EQ(interp.exit_code, 0) << interp.err;
  auto raw = test::run({target.readelf, "-wN", "--debug-dump=frames", target.path});
  ASSERT_EQ(raw.exit_code, 0) << raw.err;

  auto table = build_unwind_table(**file);
  ASSERT_TRUE(table.ok()) << table.message();
  EXPECT_TRUE(table->fde_errors().empty()) << table->fde_errors().front().message;

  uint64_t compared = 0, rows_compared = 0, mismatches = 0, rbx_rows = 0, rbx_saves = 0;
  for (CfiSection section : {CfiSection::EhFrame, CfiSection::DebugFrame}) {
    const std::string name = cfi_section_name(section);
    auto scan = scan_cfi(**file, section, false);
    ASSERT_TRUE(scan.ok()) << scan.message();
    if (scan->fdes.empty()) continue;
    EXPECT_TRUE(scan->errors.empty()) << scan->errors.front().message;
    auto oracle = parse_frames_interp(interp.out, name);
    uint64_t oracle_fdes = std::count_if(oracle.begin(), oracle.end(),
                                         [](const auto& kv) { return !kv.second.is_cie; });
    EXPECT_EQ(scan->fdes.size(), oracle_fdes) << name;
    auto reader = FdeRowReader::open(**file, section);
    ASSERT_TRUE(reader.ok()) << reader.message();
    for (const FdeSummary& fde : scan->fdes) {
      auto it = oracle.find(fde.section_offset);
      if (it == oracle.end() || it->second.is_cie) {
        ADD_FAILURE() << name << "+" << std::hex << fde.section_offset << " unknown to readelf";
        ++mismatches;
        continue;
      }
      const OracleEntry& o = it->second;
      EXPECT_EQ(o.pc_begin, fde.pc_begin) << std::hex << fde.section_offset;
      EXPECT_EQ(o.pc_end, fde.pc_end) << std::hex << fde.section_offset;
      if (fde.pc_end == fde.pc_begin) {
        ++compared;
        continue;
      }
      auto rows = reader->rows(fde);
      if (!rows.ok()) {
        ADD_FAILURE() << rows.message();
        ++mismatches;
        continue;
      }
      // readelf prints no table for an FDE without instructions: the CIE's row applies.
      std::vector<OracleRow> orows = o.rows;
      if (orows.empty()) {
        auto cie = oracle.find(o.cie);
        ASSERT_NE(cie, oracle.end());
        ASSERT_FALSE(cie->second.rows.empty()) << "CIE " << std::hex << o.cie;
        orows = {cie->second.rows.back()};
        orows.front().loc = fde.pc_begin;
      }
      auto oracle_at = [&](uint64_t pc) -> const OracleRow* {
        const OracleRow* best = nullptr;
        for (const OracleRow& r : orows) {
          if (r.loc <= pc) best = &r;
        }
        return best;
      };
      auto ours_at = [&](uint64_t pc) -> const CfiRow* {
        for (const CfiRow& r : *rows) {
          if (r.pc_begin <= pc && pc < r.pc_end) return &r;
        }
        return nullptr;
      };
      auto check = [&](const CfiRow* ours, const OracleRow* theirs, uint64_t pc) {
        ++rows_compared;
        if (ours == nullptr || theirs == nullptr || cfa_text(ours->cfa, arch) != theirs->cfa ||
            !ra_matches(ours->ra, theirs->ra, arch) ||
            (arch == elf::Arch::X86_64 && !ra_matches(ours->bx, theirs->bx, arch))) {
          ++mismatches;
          ADD_FAILURE() << target.path << " " << name << "+0x" << std::hex << fde.section_offset
                        << " pc 0x" << pc << ": ours "
                        << (ours ? cfa_text(ours->cfa, arch) : "none") << " ra kind "
                        << (ours ? static_cast<int>(ours->ra.kind) : -1) << " off "
                        << (ours ? ours->ra.offset : 0) << " rbx kind "
                        << (ours ? static_cast<int>(ours->bx.kind) : -1) << " off "
                        << (ours ? ours->bx.offset : 0) << " readelf "
                        << (theirs ? theirs->cfa + " ra " + theirs->ra + " rbx " + theirs->bx
                                   : "none");
        }
      };
      for (const CfiRow& r : *rows) check(&r, oracle_at(r.pc_begin), r.pc_begin);
      for (const OracleRow& r : orows) {
        if (r.loc < fde.pc_end) check(ours_at(r.loc), &r, r.loc);
      }
      ++compared;
      // The walker table without overlays takes every row as it is (an explicitly undefined
      // RA aside).
      if (section == table->section()) {
        for (const CfiRow& r : *rows) {
          const lj_cfi_row* t = table->row_at(r.pc_begin);
          ASSERT_NE(t, nullptr);
          bool simple =
              r.cfa.kind == CfaRule::Kind::RegOffset && r.ra.kind == RegisterRule::Kind::AtCfa;
          if (simple && (r.cfa.reg == 7 || r.cfa.reg == 6 || r.cfa.reg == 31 || r.cfa.reg == 29)) {
            EXPECT_EQ(t->hint, LJ_CFI_OK) << std::hex << r.pc_begin;
            EXPECT_EQ(t->cfa_offset, r.cfa.offset) << std::hex << r.pc_begin;
            EXPECT_EQ(t->ra_offset, r.ra.offset) << std::hex << r.pc_begin;
            // rbx as readelf has it (checked above), for a caller's rbx-based CFA.
            if (arch == elf::Arch::X86_64 && r.bx.kind == RegisterRule::Kind::AtCfa) {
              EXPECT_EQ(t->bx_rule, LJ_CFI_BX_AT_CFA) << std::hex << r.pc_begin;
              EXPECT_EQ(t->bx_offset, r.bx.offset) << std::hex << r.pc_begin;
              ++rbx_saves;
            } else if (arch == elf::Arch::X86_64 && r.bx.kind == RegisterRule::Kind::SameValue) {
              EXPECT_EQ(t->bx_rule, LJ_CFI_BX_SAME) << std::hex << r.pc_begin;
            } else {
              EXPECT_EQ(t->bx_rule, LJ_CFI_BX_UNKNOWN) << std::hex << r.pc_begin;
            }
          }
          // x86-64 rbx (glibc's lazy-binding trampoline): the walker evaluates it at the leaf.
          if (simple && arch == elf::Arch::X86_64 && r.cfa.reg == 3) {
            EXPECT_EQ(t->hint, LJ_CFI_OK) << std::hex << r.pc_begin;
            EXPECT_EQ(t->cfa_base, LJ_CFI_REG_BX) << std::hex << r.pc_begin;
            EXPECT_EQ(t->cfa_offset, r.cfa.offset) << std::hex << r.pc_begin;
            ++rbx_rows;
          }
          // A signal trampoline's expressions (checked against readelf's below) get a signal
          // row; any other expression no rule.
          if (r.cfa.kind == CfaRule::Kind::Expression && t->hint != LJ_CFI_SIGNAL) {
            EXPECT_EQ(t->hint, LJ_CFI_INVALID) << std::hex << r.pc_begin;
          }
        }
      }
    }
  }
  // CFA expressions the walker table evaluates per pc (the x86-64 PLT rule) agree with
  // readelf's expression at every pc they cover; any other expression leaves no rule.
  uint64_t expression_pcs = 0, signal_pcs = 0;
  for (const RawCfaExpression& x :
       raw_cfa_expressions(raw.out, cfi_section_name(table->section()))) {
    for (uint64_t pc = x.begin; pc < x.end; ++pc) {
      const lj_cfi_row* t = table->row_at(pc);
      ASSERT_NE(t, nullptr);
      // glibc's __restore_rt (a signal-frame FDE): CFA = *(rsp + K), the interrupted rsp saved
      // in the kernel's sigcontext, which the signal row places at rsp + cfa_offset.
      if (t->hint == LJ_CFI_SIGNAL) {
        ASSERT_EQ(x.ops.size(), 2u) << std::hex << pc;
        EXPECT_EQ(x.ops[1], "DW_OP_deref") << std::hex << pc;
        EXPECT_EQ(x.ops[0],
                  fmt::format("DW_OP_breg7 (rsp): {}", t->cfa_offset + LJ_SIGCONTEXT_X86_RSP))
            << std::hex << pc;
        EXPECT_EQ(t->ra_rule, LJ_CFI_SIGCONTEXT_X86_64) << std::hex << pc;
        ++signal_pcs;
        continue;
      }
      const std::optional<int64_t> cfa = eval_rsp_relative(x.ops, pc);
      if (!cfa || arch != elf::Arch::X86_64) {
        EXPECT_EQ(t->hint, LJ_CFI_INVALID) << std::hex << pc;
        continue;
      }
      ++expression_pcs;
      ASSERT_EQ(t->hint, LJ_CFI_OK) << target.path << std::hex << " pc 0x" << pc;
      EXPECT_EQ(t->cfa_base, LJ_CFI_REG_SP) << std::hex << pc;
      EXPECT_EQ(t->cfa_offset, *cfa) << target.path << std::hex << " pc 0x" << pc;
      EXPECT_EQ(t->ra_rule, LJ_CFI_RULE_AT_CFA) << std::hex << pc;
      EXPECT_EQ(t->ra_offset, -8) << std::hex << pc;
    }
  }
  // glibc's __restore_rt is the one x86-64 libc trampoline (sysdeps/unix/sysv/linux/x86_64).
  if (target.label == "libc_amd64") {
    EXPECT_GT(signal_pcs, 0u);
  }
  std::printf(
      "[ readelf ] %s: %llu pcs under a CFA expression evaluated, %llu in a signal "
      "trampoline\n",
      target.path.c_str(), static_cast<unsigned long long>(expression_pcs),
      static_cast<unsigned long long>(signal_pcs));

  // Stop rows come exactly from FDEs with DW_CFA_undefined on the RA column.
  const std::string ra_text = arch == elf::Arch::AArch64 ? "r30 (x30)" : "r16 (rip)";
  std::set<uint64_t> undefined_ra =
      fdes_with_undefined_ra(raw.out, cfi_section_name(table->section()), ra_text);
  std::set<uint64_t> stop_fdes;
  auto rows = table->rows();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].hint == LJ_CFI_STOP && table->row_fde_offsets()[i] != UINT64_MAX) {
      stop_fdes.insert(table->row_fde_offsets()[i]);
    }
  }
  EXPECT_EQ(stop_fdes, undefined_ra);
  std::printf(
      "[ readelf ] %s: %llu FDEs compared, %llu row checks, %llu mismatches, %zu Stop "
      "FDEs, %llu rows with the CFA in rbx, %llu with rbx saved\n",
      target.path.c_str(), static_cast<unsigned long long>(compared),
      static_cast<unsigned long long>(rows_compared), static_cast<unsigned long long>(mismatches),
      stop_fdes.size(), static_cast<unsigned long long>(rbx_rows),
      static_cast<unsigned long long>(rbx_saves));
  if (arch == elf::Arch::X86_64) {
    EXPECT_GT(rbx_saves, 0u);
  }
  RecordProperty("fdes_compared", static_cast<int>(compared));
  EXPECT_GT(compared, 0u);
  EXPECT_EQ(mismatches, 0u);
}

INSTANTIATE_TEST_SUITE_P(RealBinaries, ReadelfOracle, ::testing::ValuesIn(targets()),
                         [](const ::testing::TestParamInfo<Target>& info) {
                           return info.param.label;
                         });

// The dynamic loader starts every dynamically linked process at its ELF entry point, in code
// (glibc RTLD_START) no FDE describes: the table makes that code the stack's root, so a sample
// taken while ld.so loads a new process's libraries reaches a root instead of "no CFI". The
// entry point comes from readelf -h, and readelf's own FDE list must not cover it.
TEST(EntryRoot, TheLoadersEntryPointWithoutCfiIsARoot) {
  const std::string ld = "/lib64/ld-linux-x86-64.so.2";
  auto header = test::run({"readelf", "-h", ld});
  ASSERT_EQ(header.exit_code, 0) << header.err;
  const size_t at = header.out.find("Entry point address:");
  ASSERT_NE(at, std::string::npos) << header.out;
  const uint64_t entry = std::stoull(header.out.substr(at + 20), nullptr, 16);
  auto interp = test::run({"readelf", "-wN", "--debug-dump=frames-interp", ld});
  ASSERT_EQ(interp.exit_code, 0) << interp.err;
  const auto fdes = parse_frames_interp(interp.out, cfi_section_name(CfiSection::EhFrame));
  ASSERT_GT(fdes.size(), 100u);
  for (const auto& [offset, fde] : fdes) {
    if (!fde.is_cie) {
      ASSERT_FALSE(entry >= fde.pc_begin && entry < fde.pc_end) << offset;
    }
  }
  auto file = elf::ElfFile::open(ld);
  ASSERT_TRUE(file.ok()) << file.message();
  auto table = build_unwind_table(**file);
  ASSERT_TRUE(table.ok()) << table.message();
  const lj_cfi_row* row = table->row_at(entry);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->hint, LJ_CFI_STOP);
  // A file whose entry point has CFI keeps it: luajit's _start (DW_CFA_undefined RA) is a root
  // through its FDE, with the rule the FDE gives.
  auto luajit = elf::ElfFile::open("/usr/bin/luajit");
  ASSERT_TRUE(luajit.ok()) << luajit.message();
  auto luajit_table = build_unwind_table(**luajit);
  ASSERT_TRUE(luajit_table.ok());
  for (const Overlay& o : luajit_table->overlays()) EXPECT_NE(o.how, "ELF header") << o.what;
}

}  // namespace
}  // namespace ljprof::cfi
