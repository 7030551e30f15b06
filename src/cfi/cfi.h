// cfi: call frame information (.eh_frame / .debug_frame) -> the walker's compact rows.
//
// Two layers, and nothing about any particular runtime:
//  - list_fdes / fde_rows: every FDE of a file with its full-fidelity rows (what readelf's
//    --debug-dump=frames-interp shows: CFA rule, return-address and frame-pointer rules).
//  - build_unwind_table: one sorted table of `lj_cfi_row` (bpf/abi/cfi_row.h) for the
//    walker, with Invalid gaps, Stop roots, caller-computed overlays (luajit/ computes the
//    LuaJIT VM's) and delta compaction.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "disasm/disasm.h"
#include "elf/elf_file.h"

extern "C" {
#include "abi/cfi_row.h"
}

namespace ljprof::cfi {

// DWARF register numbers (x86-64 psABI §3.6.2; AArch64 DWARF ABI "DWARF register names") and
// names of the registers the walker's rows use.
struct ArchRegs {
  uint32_t sp;
  uint32_t fp;
  uint32_t ra;
  const char* sp_name;
  const char* fp_name;
  const char* ra_name;
};
ArchRegs arch_regs(elf::Arch arch);
inline constexpr uint32_t kX86DwarfRbx = 3;  // a CFA the walker evaluates at the leaf only

// Caps on the work one file can cost. Exceeding one fails that FDE (or the table, for the
// per-binary caps) with a message naming the cap.
struct CfiLimits {
  static constexpr uint64_t kMaxEntryLength = 1u << 20;  // one CIE/FDE, bytes
  static constexpr uint64_t kMaxFdes = 1u << 20;         // per section
  // Rows (advance_loc steps) per FDE. libdw runs an FDE's program from its start for every
  // row (dwarf_cfi_addrframe), so one FDE costs rows^2 / 2 CFI steps. Debian 12's largest FDE
  // among tarantool, nginx, libc and libluajit has 208 rows (libluajit's VM).
  static constexpr uint32_t kMaxRowsPerFde = 1u << 12;
  static constexpr uint64_t kMaxRows = 1u << 23;  // rows of one UnwindTable
};

// Which section an FDE comes from.
enum class CfiSection : uint8_t { EhFrame, DebugFrame };
const char* cfi_section_name(CfiSection section);  // ".eh_frame", ".debug_frame"

// The CFA rule of one row.
struct CfaRule {
  // PltEntry: the expression GNU ld and lld emit for x86-64 .plt (bfd elf_x86_64_eh_frame_plt):
  // CFA = rsp + 8 + ((rip & 15) >= N ? 8 : 0), i.e. 16-byte entries whose `push` has run from
  // byte N on. It is exact per pc, so the table expands it into plain rows.
  enum class Kind : uint8_t { RegOffset, Expression, PltEntry };
  Kind kind = Kind::RegOffset;
  uint32_t reg = 0;    // DWARF register number (RegOffset)
  int64_t offset = 0;  // bytes (RegOffset); PltEntry: N, the entry offset where +8 starts
  bool operator==(const CfaRule&) const = default;
};

// Where the caller's value of one register is (DWARF register rules).
struct RegisterRule {
  enum class Kind : uint8_t {
    SameValue,      // unchanged (also: never mentioned by the CIE/FDE)
    Undefined,      // DW_CFA_undefined
    AtCfa,          // offset(N): saved at CFA + offset
    ValCfa,         // val_offset(N): value is CFA + offset
    InRegister,     // register(R): in DWARF register `reg`
    Expression,     // expression(E)
    ValExpression,  // val_expression(E)
  };
  Kind kind = Kind::SameValue;
  int64_t offset = 0;
  uint32_t reg = 0;
  bool operator==(const RegisterRule&) const = default;
};

// One full-fidelity row of one FDE: valid for [pc_begin, pc_end).
struct CfiRow {
  uint64_t pc_begin = 0;
  uint64_t pc_end = 0;
  CfaRule cfa;
  RegisterRule ra;  // the CIE's return address register (x86-64 rip 16, AArch64 x30)
  RegisterRule fp;  // x86-64 rbp (6), AArch64 x29 (29)
  RegisterRule bx;  // x86-64 rbx (3); AArch64: not read (SameValue)
};

struct FdeSummary {
  CfiSection section = CfiSection::EhFrame;
  uint64_t section_offset = 0;  // of the FDE's length field
  uint64_t cie_offset = 0;      // section offset of its CIE
  uint64_t pc_begin = 0;        // link-time
  uint64_t pc_end = 0;
  std::string augmentation;              // the CIE's augmentation string, e.g. "zPR"
  std::optional<uint64_t> personality;   // 'P': the personality routine's address
  std::optional<uint64_t> lsda;          // 'L': this FDE's language-specific data area
  uint32_t return_address_register = 0;  // the CIE's RA column
  bool signal_frame = false;             // 'S'
  // The CFA rule in effect at pc_begin (CIE initial instructions + FDE rules at pc_begin).
  std::optional<CfaRule> initial_cfa;
};

// Why one FDE contributed no rows (its range is Invalid in the table).
struct FdeError {
  CfiSection section = CfiSection::EhFrame;
  uint64_t section_offset = 0;
  uint64_t pc_begin = 0;  // 0/0 when the range itself could not be decoded
  uint64_t pc_end = 0;
  std::string message;
};

// One section scanned: the FDEs that decoded, and the entries that did not (a CIE with a bad
// augmentation fails every FDE that uses it, not the section).
struct CfiScan {
  std::vector<FdeSummary> fdes;
  std::vector<FdeError> errors;
  uint64_t cie_count = 0;
};
// Fails only when the section's structure is broken (entry lengths, a cap); an empty scan
// when the file has no such section. `with_initial_cfa` also runs each FDE's CFI program to
// fill FdeSummary::initial_cfa (an FDE whose program fails moves to `errors`).
Result<CfiScan> scan_cfi(const elf::ElfFile& file, CfiSection section, bool with_initial_cfa);

// Every FDE of .eh_frame, then of .debug_frame, in section order. Fails when a section's
// structure is broken (a length runs past the section, a CIE pointer is wrong, a pointer
// encoding is unknown, a cap is exceeded); the message names section, offset and rule.
Result<std::vector<FdeSummary>> list_fdes(const elf::ElfFile& file);
// Only one section's FDEs (empty when the file has no such section).
Result<std::vector<FdeSummary>> list_fdes(const elf::ElfFile& file, CfiSection section);
// One section's FDEs that `keep` accepts, judged on what the section itself says (range,
// personality, CIE), each with its initial CFA: running the CFI program of only those FDEs
// (Debian's tarantool has ~14k; the LuaJIT interpreter search wants the few big ones).
Result<std::vector<FdeSummary>> list_fdes_with_initial_cfa(
    const elf::ElfFile& file, CfiSection section,
    const std::function<bool(const FdeSummary&)>& keep);

// Runs FDE programs of one section through libdw. Open once per file and section (opening
// indexes the section), then ask for the rows of each FDE that scan_cfi listed.
class FdeRowReader {
 public:
  static Result<FdeRowReader> open(const elf::ElfFile& file, CfiSection section);
  FdeRowReader(FdeRowReader&&) noexcept;
  FdeRowReader& operator=(FdeRowReader&&) noexcept;
  ~FdeRowReader();
  // One row per distinct location where the program advances, covering [pc_begin, pc_end)
  // without gaps. Fails (naming the FDE offset) on a libdw error, a row outside the FDE
  // (advance_loc past its end), or more than CfiLimits::kMaxRowsPerFde rows.
  Result<std::vector<CfiRow>> rows(const FdeSummary& fde) const;

  struct State;

 private:
  explicit FdeRowReader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// The rows of one FDE (as listed by list_fdes of the same file); opens a reader per call.
Result<std::vector<CfiRow>> fde_rows(const elf::ElfFile& file, const FdeSummary& fde);

// A range whose walker rows the caller knows better than the file's CFI does. cfi/ knows no
// runtime: luajit/ computes the LuaJIT VM's overlays (luajit/vm_cfi.h). build_unwind_table
// applies them in order after the FDE rows, before delta compaction.
struct Overlay {
  enum class Kind : uint8_t {
    Replace,  // [begin, end) gets `row` (its pc_start is ignored); the rule at `end` is kept
    Hint,     // rows in [begin, end) whose hint is Ok keep their rule and take row.hint
  };
  uint64_t begin = 0;
  uint64_t end = 0;
  std::string what;  // e.g. "lj_vm_resume prologue before sub rsp,0x28"
  std::string how;   // how the caller proved it, e.g. "symbol" or "pattern"
  lj_cfi_row row{};
  Kind kind = Kind::Replace;
};

// Rows for overlays (pc_start is set where they are placed): no usable rule (hint Invalid), and
// CFA = sp + `cfa` with the return address at CFA - 8 (x86-64 code that has moved rsp since the
// call only by pushes and constant adjustments) and the caller's frame pointer per
// fp_rule/fp_off.
lj_cfi_row invalid_row(uint64_t pc);
lj_cfi_row sp_row(int32_t cfa, uint8_t fp_rule, int16_t fp_off, uint8_t hint);

// The walker row the table takes for `pc` from the file's CFI alone (no overlays), and the range
// of the FDE it comes from; nullopt when no FDE covers pc. Fails like build_unwind_table when
// the section's structure is broken.
struct FdeRowAt {
  uint64_t fde_begin = 0;
  uint64_t fde_end = 0;
  lj_cfi_row row{};
};
Result<std::optional<FdeRowAt>> fde_row_at(const elf::ElfFile& file, uint64_t pc);

class UnwindTable {
 public:
  elf::Arch arch() const { return arch_; }
  std::span<const lj_cfi_row> rows() const { return rows_; }
  // The row covering `pc` (link-time), or nullptr when pc is before the first row. A pc at
  // or past the end of the last FDE gets the final Invalid row.
  const lj_cfi_row* row_at(uint64_t pc) const;
  // Section offset of the FDE each row came from (parallel to rows(); UINT64_MAX for gap and
  // Replace overlay rows).
  std::span<const uint64_t> row_fde_offsets() const { return row_fde_offsets_; }
  std::span<const FdeError> fde_errors() const { return fde_errors_; }
  std::span<const Overlay> overlays() const { return overlays_; }  // as applied
  uint64_t fde_count() const { return fde_count_; }
  CfiSection section() const { return section_; }
  // The link-time start of the FDE covering `pc` (the function it describes, for naming code in
  // stripped files that have no symbol for it), or nullopt when no placed FDE covers pc.
  std::optional<uint64_t> function_start(uint64_t pc) const;
  // The end of that FDE's range, likewise.
  std::optional<uint64_t> function_end(uint64_t pc) const;

  // The table as bytes, for the on-disk cache (cfi/table_cache.h), and back. A table read back
  // has every row, FDE origin, FDE error and function range, but lists no overlays (they are
  // applied in its rows). from_bytes checks what the walker and the lookups rely on (rows
  // strictly increasing and ending Invalid, every rule and hint known, function ranges sorted
  // and disjoint, every count within the caps and the bytes) and fails naming the rule.
  std::vector<uint8_t> to_bytes() const;
  static Result<UnwindTable> from_bytes(std::span<const uint8_t> bytes);

  // Frees the rows and their FDE origins, keeping the function ranges and FDE errors: the
  // recorder's copy once the rows are in the kernel's row table (a Tarantool process's ~50
  // files hold ~16 MB of rows). rows() is empty and row_at() null afterwards.
  void release_rows();
  // What the table holds on the heap, in bytes (the recorder's object cache bound).
  uint64_t heap_bytes() const;

 private:
  friend Result<UnwindTable> build_unwind_table(const elf::ElfFile&, std::span<const Overlay>);
  friend Result<UnwindTable> build_unwind_table_over(const elf::ElfFile&, uint64_t, uint64_t,
                                                     std::span<const Overlay>);
  // Both: the FDEs placed that reach into [begin, end), then (whole file only) the file-wide
  // overlays, then `overlays`.
  static Result<UnwindTable> build(const elf::ElfFile& file, std::span<const Overlay> overlays,
                                   uint64_t begin, uint64_t end, bool whole_file);
  elf::Arch arch_ = elf::Arch::X86_64;
  CfiSection section_ = CfiSection::EhFrame;
  std::vector<lj_cfi_row> rows_;
  std::vector<uint64_t> row_fde_offsets_;
  std::vector<FdeError> fde_errors_;
  std::vector<Overlay> overlays_;
  uint64_t fde_count_ = 0;
  struct FunctionRange {
    uint64_t begin = 0;
    uint64_t end = 0;
  };
  std::vector<FunctionRange> functions_;  // placed FDEs, sorted, not overlapping
  const FunctionRange* function_at(uint64_t pc) const;
};

// Builds the walker table from .eh_frame (from .debug_frame when the file has no .eh_frame),
// then applies `overlays` in order.
Result<UnwindTable> build_unwind_table(const elf::ElfFile& file,
                                       std::span<const Overlay> overlays = {});

// The walker table's rows over [begin, end) only, as build_unwind_table has them there, for a
// caller that reads one range's rules (luajit::derive_vm_cframe over the VM interval): only the
// FDEs the whole table places that reach into the range run their CFI programs, and the
// file-wide overlays (entry root, AArch64 PLT, x86-64 glue code) are left out, so its rows
// outside the range are not the file's. Fails like build_unwind_table.
Result<UnwindTable> build_unwind_table_over(const elf::ElfFile& file, uint64_t begin, uint64_t end,
                                            std::span<const Overlay> overlays = {});

// Code without CFI, proven by its instructions (leaf_code.cc). An AArch64 function none of whose
// instructions calls, writes sp, x29 or x30 (beyond x30's pointer-authentication bits), or
// names them in an instruction whose effect is not modelled keeps its return address in x30 and
// its caller's sp and x29 for its whole range: CFA = sp, RA = x30, FP unchanged. The first
// instruction that breaks this, as "ADDRESS `TEXT`: why", or nullopt for a leaf.
std::optional<std::string> aarch64_leaf_violation(std::span<const disasm::Insn> code);

// Replace overlays with that leaf rule for every defined FUNC symbol of an AArch64 file whose
// code is a proven leaf; `rejected` says why each other function got none. Empty for x86-64.
struct LeafOverlays {
  std::vector<Overlay> overlays;
  std::vector<std::string> rejected;
};
Result<LeafOverlays> aarch64_leaf_overlays(const elf::ElfFile& file);

// Code without CFI whose frame is proven by its instructions (glue_code.cc): the x86-64 _init,
// _fini and crtstuff functions (.init, .fini, the .init_array/.fini_array entries and what they
// call directly). x86_glue_frames follows every path from `entry` through `code` (decoded from
// the entry to where CFI starts again) and gives, for each instruction reached, the bytes pushed
// below the return address and where the caller's rbp is saved (offset from the CFA, 0: still
// in rbp), or the first instruction it cannot account for; `calls` collects direct call targets.
struct GlueFrame {
  int64_t height = 0;
  int32_t fp_off = 0;
};
Result<std::map<uint64_t, GlueFrame>> x86_glue_frames(std::span<const disasm::Insn> code,
                                                      uint64_t entry, std::set<uint64_t>* calls);
struct FunctionSpan {
  uint64_t begin = 0;
  uint64_t end = 0;
};
struct GlueOverlays {
  std::vector<Overlay> overlays;
  std::vector<std::string> rejected;
};
// Replace overlays with those frames for a file's glue that no FDE (`fdes`: sorted, disjoint)
// covers; `rejected` says why each other entry got none. Empty for AArch64.
GlueOverlays x86_glue_overlays(const elf::ElfFile& file, std::span<const FunctionSpan> fdes);

// Replace overlays with LJ_CFI_SIGNAL rows (cfi_row.h) for the signal trampolines among `fdes`:
// a signal-frame FDE (augmentation 'S') around the rt_sigreturn system call (x86-64 glibc
// __restore_rt: the FDE starts one byte before the call and ends with it; the AArch64 vDSO's
// covers only no-ops, the call follows it), or in an AArch64 vDSO without unwind tables the
// __kernel_rt_sigreturn symbol at that call. Every build_unwind_table of a whole file applies
// them.
std::vector<Overlay> signal_trampoline_overlays(const elf::ElfFile& file,
                                                std::span<const FdeSummary> fdes);

// The kernel's vDSO: its CFI when it has any (x86-64, newer arm64 kernels), else the proven
// leaf functions of an AArch64 vDSO built without unwind tables (Debian 12's 6.1 arm64 kernel);
// any other pc has no rule. One table for `record` and `core`.
Result<UnwindTable> build_vdso_unwind_table(const elf::ElfFile& file);

// Human-readable forms used by `ljprof cfi` and error messages.
std::string describe_row(const lj_cfi_row& row, elf::Arch arch);  // "rsp+80 ra=cfa-8 fp=cfa-16"
const char* hint_name(uint8_t hint);                              // "ok", "invalid", ...
// One register rule: "[cfa-8]" (saved at), "cfa+16" (value), `reg` (same value), "undefined".
std::string rule_text(uint8_t rule, int32_t offset, const char* reg);

}  // namespace ljprof::cfi
